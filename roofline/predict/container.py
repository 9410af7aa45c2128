"""A vLLM server started in a container, read as the serve line it runs: `docker run` / `podman run` lines
(options, -e / --env-file, -v, --entrypoint, the image and the words after it) and compose files (a
service's image, entrypoint, command, environment, env_file and volumes). The table is
roofline/data/containers.toml: Docker's options, the images whose entrypoint is vLLM's server, and the
variables community images' entrypoint scripts turn into serve flags (a convention, said as one).

The result is the environment, the words of a `vllm serve` (or api_server) line, and notes saying what
was read how; a container whose command is not vLLM's server is one line naming what it runs."""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import PurePosixPath

import msgspec

from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.files import read_regular
from roofline.untrusted import printable

MAX_ENV_FILE_BYTES = 1 << 20
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.S)


@lru_cache(maxsize=1)
def _table() -> dict:
    return load_table("containers")


@dataclass
class Container:
    """What a container line or compose service says: the image, its entrypoint override, the words after
    the image, the environment and the volumes (host path, container path)."""
    image: str
    command: list[str]
    entrypoint: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    volumes: list[tuple[str, str]] = field(default_factory=list)


def is_container_line(words: list[str]) -> bool:
    rest = words[1:] if words[:1] == ["sudo"] else words
    return bool(rest) and (PurePosixPath(rest[0]).name in _table()["run"]["programs"]
                           or PurePosixPath(rest[0]).name == "docker-compose")


def container_serve_words(words: list[str]) -> tuple[dict[str, str], list[str], list[str]]:
    """A `docker run ...` / `podman run ...` / `docker compose -f FILE up|run SERVICE` line ->
    (the container's environment, the serve line's words, notes)."""
    rest = list(words[1:] if words[:1] == ["sudo"] else words)
    program = PurePosixPath(rest[0]).name
    rest = rest[1:]
    if program == "docker-compose":
        return serve_words(_compose_line(rest))
    if rest[:1] == ["container"]:
        rest = rest[1:]
    if rest[:1] == ["compose"]:
        return serve_words(_compose_line(rest[1:]))
    if rest[:1] != ["run"]:
        raise RooflineError(f"{program} {printable(' '.join(rest[:1]), 40)}: not a container start (give "
                            f"`{program} run ... IMAGE ...` or `{program} compose -f FILE up`)")
    return serve_words(_run_options(rest[1:]))


def _run_options(args: list[str]) -> Container:
    """`docker run`'s options up to the image, then the image and the words after it."""
    run = _table()["run"]
    bare = set(run["flags"])
    env: dict[str, str] = {}
    volumes: list[tuple[str, str]] = []
    entrypoint = None
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        i += 1
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if name in bare:
                continue
        else:  # -e X, -eX, or bundled flags (-dit), the last of which may take the value (-itp 80:80)
            letters = word[1:]
            name, value, eq = word, "", ""
            for k, letter in enumerate(letters):
                if f"-{letter}" not in bare:
                    name, value = f"-{letter}", letters[k + 1:]
                    eq = "=" if value else ""
                    break
            else:
                continue
        if not eq:
            if i >= len(args):
                raise RooflineError(f"{name}: needs a value (docker run)")
            value, i = args[i], i + 1
        if name in run["env"]:
            key, has, val = value.partition("=")
            if has:
                env[key] = val
            elif key in os.environ:  # `-e NAME` passes the caller's value, as Docker does
                env[key] = os.environ[key]
        elif name in run["env_file"]:
            env.update(read_env_file(value))
        elif name in run["entrypoint"]:
            entrypoint = shlex.split(value) or None
        elif name in ("-v", "--volume", "--mount"):
            volume = _volume(name, value)
            if volume:
                volumes.append(volume)
    if i >= len(args):
        raise RooflineError("docker run: no image after the options")
    return Container(image=args[i], command=args[i + 1:], entrypoint=entrypoint, env=env, volumes=volumes)


def _volume(name: str, value: str) -> tuple[str, str] | None:
    """(host path, container path) of a bind mount; None for a named volume or tmpfs."""
    if name == "--mount":
        parts = dict(p.partition("=")[::2] for p in value.split(","))
        host, inside = parts.get("source") or parts.get("src"), (parts.get("target") or parts.get("destination")
                                                                 or parts.get("dst"))
    else:
        pieces = value.split(":")
        host, inside = (pieces[0], pieces[1]) if len(pieces) >= 2 else (None, None)
    if not host or not inside or not (host.startswith(("/", "~", ".")) and inside.startswith("/")):
        return None
    return os.path.expanduser(host), inside


def read_env_file(path: str) -> dict[str, str]:
    """Docker's env file: KEY=VALUE lines, # comments and blank lines skipped, the value taken as written."""
    text = read_regular(path, f"--env-file {path}", MAX_ENV_FILE_BYTES).decode("utf-8", "replace")
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, has, value = line.partition("=")
        if has:
            env[key.strip()] = value
        elif key in os.environ:
            env[key] = os.environ[key]
    return env


def _compose_line(args: list[str]) -> Container:
    """`docker compose [-f FILE] [-p NAME] (up [SERVICE] | run [OPTIONS] SERVICE [COMMAND])`."""
    files, i = [], 0
    while i < len(args) and args[i].startswith("-"):
        name, eq, value = args[i].partition("=")
        i += 1
        if name in ("-f", "--file", "-p", "--project-name", "--env-file", "--profile", "--project-directory"):
            if not eq:
                if i >= len(args):
                    raise RooflineError(f"docker compose {name}: needs a value")
                value, i = args[i], i + 1
            if name in ("-f", "--file"):
                files.append(value)
    if i >= len(args) or args[i] not in ("up", "run", "create", "start"):
        raise RooflineError("docker compose: give `docker compose -f FILE up [SERVICE]` or `... run SERVICE`")
    verb, tail = args[i], args[i + 1:]
    positional = [w for w in tail if not w.startswith("-")]
    service = positional[0] if positional else None
    command = positional[1:] if verb == "run" else []
    path = files[0] if files else "compose.yaml" if os.path.exists("compose.yaml") else "docker-compose.yml"
    container = compose_service(read_compose(path), path, service)
    if command:
        container.command = command
    return container


def read_compose(path: str) -> dict:
    from roofline.files import read_yaml

    data = read_yaml(path, f"compose file {path}", MAX_ENV_FILE_BYTES, "compose file")
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict):
        raise RooflineError(f"{path}: a compose file has a `services` mapping")
    return data


Scalar = str | int | float | bool | None


class ComposeService(msgspec.Struct, forbid_unknown_fields=False):
    """The fields of a compose service read here (the Compose specification's names)."""
    image: str | None = None
    command: str | list[str | int | float] | None = None
    entrypoint: str | list[str | int | float] | None = None
    environment: dict[str, Scalar] | list[str] | None = None
    env_file: str | list[str | dict[str, Scalar]] | None = None
    volumes: list[str | dict[str, Scalar]] = []


def _words(value) -> list[str]:
    if value is None:
        return []
    return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]


def compose_service(data: dict, path: str, service: str | None) -> Container:
    """The service that runs vLLM (the one named; else the only one, or the only one whose image or
    command is vLLM's server)."""
    from roofline.schema import checked

    services = data["services"]
    if service is None:
        vllm = [name for name, s in services.items() if isinstance(s, dict)
                and "vllm" in (str(s.get("image", "")) + " " + str(s.get("command", ""))).lower()]
        names = list(services) if len(services) == 1 else vllm
        if len(names) != 1:
            raise RooflineError(f"{path}: services {', '.join(map(str, services))}: name the one that runs vLLM "
                                "(--set service=NAME, or `docker compose run SERVICE`)")
        service = names[0]
    if not isinstance(services.get(service), dict):
        raise RooflineError(f"{path}: no service {printable(str(service), 60)!r} (it has {', '.join(map(str, services))})")
    spec = checked(services[service], ComposeService, f"{path}: services.{service}")
    here = os.path.dirname(path)
    env: dict[str, str] = {}
    files = [spec.env_file] if isinstance(spec.env_file, str) else spec.env_file or []
    for file in files:
        name = file if isinstance(file, str) else str(file.get("path") or "")
        if name:
            env.update(read_env_file(os.path.join(here, name)))
    if isinstance(spec.environment, dict):
        env.update({k: "" if v is None else str(v) for k, v in spec.environment.items()})
    else:
        env.update(dict(item.partition("=")[::2] for item in spec.environment or [] if "=" in item))
    volumes = []
    for item in spec.volumes:
        volume = _volume("-v", item) if isinstance(item, str) else \
            _volume("--mount", f"source={item.get('source') or ''},target={item.get('target') or ''}")
        if volume:
            host = volume[0] if os.path.isabs(volume[0]) else os.path.normpath(os.path.join(here, volume[0]))
            volumes.append((host, volume[1]))
    return Container(image=spec.image or "", command=_words(spec.command), entrypoint=_words(spec.entrypoint) or None,
                     env=env, volumes=volumes)


def _is_serve(words: list[str]) -> bool:
    name = PurePosixPath(words[0]).name if words else ""
    return (name == "vllm" and words[1:2] == ["serve"]) or (
        bool(re.fullmatch(r"python[0-9.]*", name)) and words[1:2] == ["-m"] and words[2:3] != []
        and words[2].startswith("vllm."))


def _unwrap_shell(words: list[str]) -> list[str]:
    """`bash -c "... && vllm serve ..."`: the serve command inside (after `exec`, its assignments kept)."""
    if len(words) >= 3 and PurePosixPath(words[0]).name in ("sh", "bash") and words[1] in ("-c", "-lc", "-ec"):
        lexer = shlex.shlex(words[2].replace("\\\n", " "), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            tokens = list(lexer)
        except ValueError as exc:
            raise RooflineError(f"the container's shell command does not parse: {exc}") from None
        parts, current = [], []
        for token in tokens:
            if token in ("&&", ";", "||", "|", "&"):
                parts.append(current)
                current = []
            else:
                current.append(token)
        parts.append(current)
        for part in parts:
            candidate = [w for w in part if w != "exec"]
            start = 0
            while start < len(candidate) and _ASSIGNMENT.fullmatch(candidate[start]):
                start += 1
            if _is_serve(candidate[start:]):
                return candidate
    return words


def serve_words(container: Container) -> tuple[dict[str, str], list[str], list[str]]:
    """(environment, serve words, notes) of what the container runs."""
    table = _table()
    env = dict(container.env)
    notes: list[str] = []
    command = _unwrap_shell((container.entrypoint or []) + container.command)
    start = 0
    while start < len(command) and _ASSIGNMENT.fullmatch(command[start]):
        key, _, value = command[start].partition("=")
        env[key] = value
        start += 1
    command = command[start:]
    image_entry = next((e for e in table["image"] if container.image.split("@")[0].split(":")[0] in e["prefix"]
                        or any(container.image.startswith(p + ":") for p in e["prefix"])), None)
    if _is_serve(command):
        words = command
    elif image_entry is not None and container.entrypoint is None:
        words = list(image_entry["entrypoint"]) + command
        notes.append(f"{container.image}: its entrypoint is `{' '.join(image_entry['entrypoint'])}`; the words "
                     "after the image are its arguments")
    elif (not command or command[0] in table["variables"]["serve_words"]) and _mapped(env):
        words, env = _from_variables(container, command[1:], env, notes)
    else:
        runs = f"runs `{printable(' '.join(command[:3]), 80)}`" if command else "runs its image's own command"
        raise RooflineError(f"the container ({printable(container.image, 80)}) {runs}, not a vLLM serve line roofline "
                            "can read: give the `vllm serve ...` line it starts")
    return env, _host_paths(words, container.volumes, notes), notes


def _mapped(env: dict[str, str]) -> bool:
    names = {name for entry in _table()["variable"] for name in entry["names"]}
    return any(key in names for key in env)


def _from_variables(container: Container, extra: list[str], env: dict[str, str],
                    notes: list[str]) -> tuple[list[str], dict[str, str]]:
    """The serve line an image's entrypoint script builds from its variables (the convention of
    containers.toml [[variable]]); variables that are neither mapped nor vLLM's own listed as the image's."""
    by_name = {name: entry["sets"] for entry in _table()["variable"] for name in entry["names"]}
    model, flags, appended, used = None, [], [], []
    rest_env = {}
    for key, value in env.items():
        sets = by_name.get(key)
        if sets is None:
            rest_env[key] = value
        elif sets == "model":
            model = model or value
            used.append(key)
        elif sets == "args":
            appended += shlex.split(value)
            used.append(key)
        elif value != "":
            flags += [sets, value]
            used.append(key)
    if model is None and not any(w == "--model" or w.startswith("--model=") for w in appended + extra):
        raise RooflineError(f"the container ({printable(container.image, 80)}) names no model: its serve line is "
                            "built by the image's own script; give MODEL=... or the `vllm serve ...` line it runs")
    notes.append(f"{', '.join(used)}: read as community vLLM images' entrypoint scripts read them (model, serve "
                 "flags, extra arguments); a convention, not vLLM's: check your image's script")
    unread = sorted(k for k in rest_env if not k.startswith("VLLM_") and k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"))
    if unread:
        notes.append(f"the image's own variables, not read: {', '.join(unread)}")
    words = ["vllm", "serve"] + ([model] if model else []) + flags + appended + extra
    return words, rest_env


def _host_paths(words: list[str], volumes: list[tuple[str, str]], notes: list[str]) -> list[str]:
    """Absolute paths inside the container read where they are on the host (a bind mount's source)."""
    out = []
    for word in words:
        mapped = word
        if word.startswith("/"):
            for host, inside in sorted(volumes, key=lambda v: -len(v[1])):
                inside = inside.rstrip("/") or "/"
                if word == inside or word.startswith(inside + "/"):
                    mapped = host.rstrip("/") + word[len(inside):]
                    notes.append(f"{word}: read at {mapped} on this machine (the container's mount of it)")
                    break
        out.append(mapped)
    return out
