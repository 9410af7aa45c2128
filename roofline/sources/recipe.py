"""A deployment recipe as the DGX Spark community writes them (eugr/spark-vllm-docker `recipes/*.yaml`,
read by its run-recipe.py): `model`, `defaults` (tensor_parallel, gpu_memory_utilization,
max_model_len, ...), `env`, and a `command` template whose `{placeholders}` are filled from the
defaults with one str.format pass; `--set KEY=VALUE` overrides a default as the runner's own
options do, and extra arguments are appended after the command, as the runner's `-- ARGS` are.

Read with a YAML library (safe loading: no tags, no code), checked against the schema of the fields
read, bounded in size. The result is the serve line it would run and the environment it sets."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import msgspec

from roofline.errors import RooflineError
from roofline.files import read_yaml
from roofline.schema import checked
from roofline.untrusted import printable, redact_command, redact_env

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
    # what a vLLM recipe was read for (variant, hardware profile, strategy, features, modes), each settable
    # with --set; empty for the other kinds
    chosen: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"path": self.path, "name": self.name, "model": self.model,
                "serve_line": redact_command(self.serve_line), "env": redact_env(self.env),
                "defaults": redact_env(self.defaults), "chosen": dict(self.chosen), "cluster_only": self.cluster_only}


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


MAX_COMMAND_CHARS = 64 << 10  # a filled serve line: a few hundred characters in every published recipe
# the template's parts: an escaped brace ({{ or }}), a plain {name}, or any other brace (a format spec, an
# attribute or index, a lone brace), refused
_TEMPLATE = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|[{}]")


def fill_template(command: str, values: dict[str, str], path: str) -> str:
    """The recipe's command with its plain {name} placeholders filled from `values` ({{ and }} are braces), as
    one line: the runner's str.format on the templates recipes use, without what a hostile one could do
    with format specs ({x:>9999999999}), attributes or indexes; the filled line is bounded before it is made."""
    parts, size = [], 0
    position = 0
    for found in _TEMPLATE.finditer(command):
        text = found.group(0)
        if text in ("{{", "}}"):
            piece = text[0]
        elif found.group(1) is not None:
            name = found.group(1)
            if name not in values:
                raise RooflineError(f"{path}: the command's {{{name}}} has no value in defaults (give --set "
                                    f"{name}=VALUE)")
            piece = values[name]
        else:
            tail = command[found.start():found.start() + 24]
            raise RooflineError(f"{path}: the command template has {printable(tail, 30)!r}: only plain {{name}} "
                                "placeholders are filled ({{ and }} for a brace)")
        size += found.start() - position + len(piece)
        if size > MAX_COMMAND_CHARS:
            raise RooflineError(f"{path}: the filled command would be longer than {MAX_COMMAND_CHARS:,} characters")
        parts += [command[position:found.start()], piece]
        position = found.end()
    parts.append(command[position:])
    if size + len(command) - position > MAX_COMMAND_CHARS:
        raise RooflineError(f"{path}: the filled command would be longer than {MAX_COMMAND_CHARS:,} characters")
    return " ".join("".join(parts).replace("\\\n", " ").split())


def read_recipe(path: str, overrides: dict[str, str] | None = None, extra_args: list[str] | None = None,
                hardware: str | None = None) -> Recipe:
    """The serve line and environment a recipe runs, `overrides` applied to its defaults. Three kinds are
    read: the Spark community's (a `command` template), vLLM's own recipes (a `model` mapping, variants
    and features: sources/vllm_recipe.py, for the profile of `hardware`) and a compose file (`services`:
    the service that runs vLLM, read as `docker compose up` runs it)."""
    data = read_yaml(path, f"--recipe {path}", MAX_RECIPE_BYTES, "recipe")
    if not isinstance(data, dict):
        raise RooflineError(f"{path}: a recipe is a YAML mapping with a `command` (eugr/spark-vllm-docker recipes/), "
                            "vLLM's recipe format (a `model` mapping) or a compose file (`services`)")
    from .vllm_recipe import is_vllm_recipe, read_vllm_recipe

    if is_vllm_recipe(data):
        return read_vllm_recipe(data, path, dict(overrides or {}), hardware, extra_args)
    if isinstance(data.get("services"), dict) and "command" not in data:
        return _compose(data, path, dict(overrides or {}), extra_args)
    recipe = checked(data, RecipeFile, path)
    defaults = {key: _text(value) for key, value in recipe.defaults.items()}
    for key, value in (overrides or {}).items():
        defaults[key] = value
    line = fill_template(recipe.command, defaults, path)
    if extra_args:
        import shlex

        line += " " + " ".join(shlex.quote(a) for a in extra_args)
    env = {key: _text(value) for key, value in recipe.env.items()}
    return Recipe(path=path, name=recipe.name or os.path.basename(path), model=recipe.model, serve_line=line,
                  env=env, defaults=defaults, cluster_only=bool(recipe.cluster_only))


def _compose(data: dict, path: str, overrides: dict[str, str], extra_args: list[str] | None) -> Recipe:
    """A compose file: the line `docker compose -f FILE up SERVICE` (read by roofline/predict/container.py as
    Docker runs the service: image, entrypoint, command, environment, env_file, volumes)."""
    import shlex

    unknown = sorted(set(overrides) - {"service"})
    if unknown:
        raise RooflineError(f"{path}: --set {unknown[0]}: a compose file takes --set service=NAME")
    if extra_args:
        raise RooflineError(f"{path}: a compose file's serve line is its service's command; add the flags there")
    service = overrides.get("service")
    if service is not None and service not in data["services"]:
        raise RooflineError(f"{path}: no service {printable(service, 60)!r} (it has "
                            f"{', '.join(map(str, data['services']))})")
    line = ["docker", "compose", "-f", path, "up"] + ([service] if service else [])
    return Recipe(path=path, name=service or os.path.basename(path), model=None, serve_line=shlex.join(line),
                  env={}, defaults={"service": service} if service else {})
