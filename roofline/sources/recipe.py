"""A deployment recipe as the DGX Spark community writes them (eugr/spark-vllm-docker `recipes/*.yaml`,
read by its run-recipe.py): `model`, `defaults` (tensor_parallel, gpu_memory_utilization,
max_model_len, ...), `env`, and a `command` template whose `{placeholders}` are filled from the
defaults with one str.format pass; `--set KEY=VALUE` overrides a default as the runner's own
options do, and extra arguments are appended after the command, as the runner's `-- ARGS` are.

Read with a YAML library (safe loading: no tags, no code), checked against the schema of the fields
read, bounded in size. The result is the serve line it would run and the environment it sets."""
from __future__ import annotations

import os
import string
from dataclasses import dataclass

import msgspec

from roofline.errors import RooflineError
from roofline.schema import checked
from roofline.untrusted import printable

MAX_RECIPE_BYTES = 1 << 20  # the largest published recipe is a few kB
Scalar = str | int | float | bool | None


class RecipeFile(msgspec.Struct, forbid_unknown_fields=False):
    command: str
    name: str | None = None
    description: str | None = None
    model: str | None = None
    defaults: dict[str, Scalar] = {}
    env: dict[str, Scalar] = {}
    solo_only: bool | None = None
    cluster_only: bool | None = None


@dataclass(frozen=True)
class Recipe:
    path: str
    name: str
    model: str | None
    serve_line: str  # the command with its placeholders filled (and the extra arguments)
    env: dict[str, str]
    defaults: dict[str, str]
    cluster_only: bool = False

    def to_json(self) -> dict:
        return {"path": self.path, "name": self.name, "model": self.model, "serve_line": self.serve_line,
                "env": self.env, "defaults": self.defaults, "cluster_only": self.cluster_only}


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def read_recipe(path: str, overrides: dict[str, str] | None = None, extra_args: list[str] | None = None) -> Recipe:
    """The serve line and environment a recipe runs, `overrides` applied to its defaults."""
    import yaml

    try:
        if os.path.getsize(path) > MAX_RECIPE_BYTES:
            raise RooflineError(f"{path}: {os.path.getsize(path):,} bytes is not a recipe (at most "
                                f"{MAX_RECIPE_BYTES:,})")
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise RooflineError(f"{path}: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        raise RooflineError(f"{path}: not a YAML recipe ({printable(str(exc).splitlines()[0], 200)})") from None
    if not isinstance(data, dict):
        raise RooflineError(f"{path}: a recipe is a YAML mapping with a `command` (eugr/spark-vllm-docker recipes/)")
    recipe = checked(data, RecipeFile, path)
    defaults = {key: _text(value) for key, value in recipe.defaults.items()}
    for key, value in (overrides or {}).items():
        defaults[key] = value
    names = [field for _, field, _, _ in string.Formatter().parse(recipe.command) if field]
    missing = sorted({n for n in names if n not in defaults})
    if missing:
        raise RooflineError(f"{path}: the command's {{{missing[0]}}} has no value in defaults (give --set "
                            f"{missing[0]}=VALUE)")
    try:
        line = recipe.command.format_map(defaults)
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        raise RooflineError(f"{path}: the command template does not fill ({printable(str(exc), 120)})") from None
    line = " ".join(line.replace("\\\n", " ").split())
    if extra_args:
        import shlex

        line += " " + " ".join(shlex.quote(a) for a in extra_args)
    env = {key: _text(value) for key, value in recipe.env.items()}
    return Recipe(path=path, name=recipe.name or os.path.basename(path), model=recipe.model, serve_line=line,
                  env=env, defaults=defaults, cluster_only=bool(recipe.cluster_only))
