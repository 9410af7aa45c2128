"""A deployment in vLLM's own words: the serve flags and environment switches that move bytes,
kernels, memory or time (roofline/data/vllm_args.toml), parsed once into one Deployment, and what the
step model makes of it (pure: no file, network or process).

Every command that prices a deployment reads its vLLM options through `from_values` (the CLI's
options are made from the same table), `preflight` reads a whole serve line through `parse_serve_line`;
both end in the same Deployment, checked against the checkpoint and the device as vLLM would
(`refusals`), and turned into the one StepConfig the step model prices (`step_config`).
"""
from __future__ import annotations

import functools
import json
import math
import re
import shlex
from dataclasses import dataclass, field, fields, replace
from typing import Iterable, Mapping

from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.model.inventory import Inventory
from roofline.untrusted import printable, redact_args, secret_flags

from .backends import Backend, backend_named, backends, backends_for, default_backend, weight_family
from .drafting import draft_method_run
from .hardware import Hardware
from .topology import Topology, refusal
from .traffic import KV_SPELLINGS

def _mechanisms() -> dict[str, frozenset[str]]:
    table = load_table("vllm_args")["speculative"]["mechanism"]
    return {kind: frozenset(names) for kind, names in table.items() if isinstance(names, list)}


# vLLM's speculative methods by what they draft with (data/vllm_args.toml [speculative.mechanism]); every
# model-specific MTP name (deepseek_mtp, qwen3_next_mtp, ...) is "mtp", as SpeculativeConfig normalises it
DRAFT_METHODS = _mechanisms()["draft"]  # a draft checkpoint of its own
NO_WEIGHT_METHODS = _mechanisms()["no_weights"]  # drafted on the host from the text: no weights read


@dataclass(frozen=True)
class Speculation:
    """--speculative-config as vLLM reads it."""

    method: str  # mtp | eagle | eagle3 | draft_model | ngram | suffix | medusa | mlp_speculator | ...
    tokens: int  # num_speculative_tokens
    model: str | None = None  # the draft checkpoint (eagle / draft_model)
    fields: tuple[tuple[str, object], ...] = ()  # every other SpeculativeConfig field given, checked

    @property
    def reads_draft_checkpoint(self) -> bool:
        return self.method in DRAFT_METHODS

    def get(self, name: str, default=None):
        return dict(self.fields).get(name, default)

    def to_json(self) -> dict:
        return {"method": self.method, "num_speculative_tokens": self.tokens, "model": self.model} | dict(self.fields)


@dataclass(frozen=True)
class Deployment:
    """What a `vllm serve` line says about bytes, kernels, memory and time (None: vLLM's default)."""

    model: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    linear_backend: str | None = None
    moe_backend: str | None = None
    attention_backend: str | None = None
    enforce_eager: bool = False
    speculative: Speculation | None = None
    tp: int = 1
    pp: int = 1
    dp: int = 1
    expert_parallel: bool = False
    max_model_len: int | None = None
    auto_max_model_len: bool = False  # --max-model-len auto / -1: the model's limit, fitted to the KV cache
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    block_size: int | None = None
    prefix_caching: bool | None = None
    max_cudagraph_capture_size: int | None = None
    # vLLM's CUDA-graph mode (--compilation-config's cudagraph_mode, -O0 / -O1): None is vLLM's default,
    # full_and_piecewise; "none" runs every step eager, as --enforce-eager
    cudagraph_mode: str | None = None
    chunked_prefill: bool | None = None
    async_scheduling: bool | None = None
    long_prefill_token_threshold: int | None = None
    max_num_active_seqs: int | None = None
    fp8_marlin: bool = False  # VLLM_TEST_FORCE_FP8_MARLIN=1
    cpu_kvcache_space_gib: int | None = None  # VLLM_CPU_KVCACHE_SPACE
    # what the line said, in its own spelling, per field: {"enforce_eager": "--enforce-eager", ...}
    spelled: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # the switches read (name, value), ours only
    not_modelled: tuple[str, ...] = ()  # flags read that the tool does not price (with their values)
    ignored: tuple[str, ...] = ()  # flags that move nothing priced (--port, --host, ...)
    notes: tuple[str, ...] = ()  # what the reading assumed (a switch vLLM 0.32 no longer reads)
    # the draft checkpoint of --speculative-config's `model` (EAGLE heads, draft models), read at the edge
    # (audit.attach_draft); not a flag, not compared
    draft_inventory: Inventory | None = field(default=None, compare=False, hash=False, repr=False)

    @property
    def topology(self) -> Topology:
        return Topology(self.tp, self.pp, self.dp, self.expert_parallel)

    @property
    def eager(self) -> bool:
        """No CUDA graph at all: --enforce-eager, -O0 or cudagraph_mode NONE."""
        return self.enforce_eager or self.cudagraph_mode == "none"

    @property
    def speculative_tokens(self) -> int:
        return self.speculative.tokens if self.speculative else 0

    @property
    def draft_method(self) -> str:
        return self.speculative.method if self.speculative else "mtp"

    def without(self, name: str) -> "Deployment":
        """This deployment with field `name` back at vLLM's default (what a flag costs or buys)."""
        default = Deployment()
        values = {name: getattr(default, name)}
        if name == "speculative":
            values["speculative"] = None
        if name == "max_model_len":
            values["auto_max_model_len"] = False
        return replace(self, **values, spelled=tuple((k, v) for k, v in self.spelled if k != name))

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in ("spelled", "env", "not_modelled", "ignored", "speculative", "notes",
                                 "draft_inventory")}
        out["speculative_config"] = self.speculative.to_json() if self.speculative else None
        out["flags"] = [{"field": k, "given": v} for k, v in self.spelled]
        out["env"] = dict(self.env)
        out["not_modelled"] = list(self.not_modelled)
        out["ignored"] = list(self.ignored)
        out["notes"] = list(self.notes)
        return out


# ----------------------------------------------------------------------------- the table

@dataclass(frozen=True)
class Flag:
    field: str
    names: tuple[str, ...]
    value: str
    meaning: str
    source: str
    choices: tuple[str, ...] = ()
    negative: str | None = None
    kind: str | None = None  # backend: linear | moe
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    # a choice measured slower than the step model prices it: (choice, what was measured), said beside the figures
    slower_than_priced: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return self.names[0]


@dataclass(frozen=True)
class EnvSwitch:
    name: str
    sets: str
    meaning: str
    source: str
    values: Mapping[str, str] = field(default_factory=dict)
    applies_to: tuple[str, ...] = ()
    removed: str = ""  # gone from vLLM 0.32: what to use there instead (read as the pinned images read it)


@functools.lru_cache(maxsize=1)
def flags() -> tuple[Flag, ...]:
    out = []
    for entry in load_table("vllm_args")["flag"]:
        entry = dict(entry)
        entry["names"] = tuple(entry["names"])
        entry["choices"] = tuple(entry.get("choices", ()))
        entry["slower_than_priced"] = tuple(entry.get("slower_than_priced", {}).items())
        out.append(Flag(**entry))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def env_switches() -> tuple[EnvSwitch, ...]:
    return tuple(EnvSwitch(**{**e, "applies_to": tuple(e.get("applies_to", ()))})
                 for e in load_table("vllm_args")["env"])


@functools.lru_cache(maxsize=1)
def _by_spelling() -> dict[str, Flag]:
    out = {}
    for flag in flags():
        for name in flag.names + ((flag.negative,) if flag.negative else ()):
            out[name] = flag
    return out


def _ignored() -> tuple[set[str], set[str]]:
    table = load_table("vllm_args")["ignored"]
    return set(table["with_value"]), set(table["without_value"])


# ----------------------------------------------------------------------------- one value

def convert(flag: Flag, raw, spelled: str | None = None):
    """One flag's value as vLLM reads it, checked: a wrong one is one line naming the flag."""
    where = spelled or flag.name
    kind = flag.value
    if kind == "bool":
        return True if raw in (None, True) else _boolean(where, raw)
    if kind == "negatable":
        if spelled == flag.negative:
            return False
        return True if raw in (None, True) else _boolean(where, raw)
    if raw is None:
        raise RooflineError(f"{where}: needs a value")
    text = str(raw).strip()
    if kind == "tokens_or_auto" and (text == "-1" or text.lower() == "auto"):
        return AUTO_MAX_MODEL_LEN
    if kind in ("int", "tokens", "tokens_or_auto"):
        number = _whole(where, text) if kind == "int" else human_readable_int(where, text)
        return _bounded(flag, where, number)
    if kind == "float":
        if len(text) > 64:
            raise RooflineError(f"{where}: {_shown(text)} is not a number vLLM takes")
        try:
            number = float(text)
        except ValueError:
            raise RooflineError(f"{where}: {_shown(text)} is not a number") from None
        if not math.isfinite(number):
            raise RooflineError(f"{where}: {_shown(text)} is not a finite number")
        return _bounded(flag, where, number)
    if kind == "compilation":
        # a digit is -O's optimization level (click hands -O0 over as "0"), anything else a compilation config
        mode, _ = compilation_setting("-O" if re.fullmatch(r"[0-3]", text) else
                                      where if where in COMPILATION_FLAGS else flag.name, text)
        if mode is None:
            raise RooflineError(f"{where}: {_shown(text)} sets no cudagraph_mode (the part of a compilation config "
                                "roofline prices)")
        return mode
    if kind == "kv_dtype":
        resolved = KV_SPELLINGS.get(text.lower())
        if resolved is None:
            raise RooflineError(f"{where}: {text!r} is not a KV cache dtype vLLM takes here "
                                f"({', '.join(KV_SPELLINGS)})")
        return resolved
    if kind == "backend":
        table = load_table("serving")["backends"]
        known = table[flag.kind]
        if text.lower() not in known:
            raise RooflineError(f"{where}: {text!r} is not one of vLLM's {flag.kind} backends ({', '.join(known)})")
        return text.lower()
    if kind == "choice":
        wanted = {c.lower(): c for c in flag.choices}
        if flag.field == "quantization":
            return text.lower()  # checked against the checkpoint (refusals): its own method is fine too
        if text.lower() not in wanted:
            raise RooflineError(f"{where}: {text!r} is not one of {', '.join(flag.choices)}")
        return wanted[text.lower()]
    if kind == "json":
        return speculation_from_json(text, where)
    raise RooflineError(f"vllm_args.toml: {flag.name} has unknown value kind {kind!r}")


def _boolean(where: str, raw) -> bool:
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise RooflineError(f"{where}: {raw!r} is not true or false")


AUTO_MAX_MODEL_LEN = -1  # --max-model-len auto / -1: the model's own limit, fitted to the KV cache (vLLM's auto-fit)

# the longest whole number read from a flag, a recipe or an environment: 10^18 is beyond every count,
# length and byte size vLLM takes, and a cap keeps 400- or 5000-digit strings out of int() and float()
MAX_DIGITS = 18


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _whole(where: str, text: str) -> int:
    """A whole number as written on a command line: ASCII digits only (str.isdigit takes '²' and int()
    then fails), at most MAX_DIGITS of them."""
    if not re.fullmatch(r"[+]?[0-9]+", text, re.ASCII):
        raise RooflineError(f"{where}: {_shown(text)} is not a whole number")
    if len(text.lstrip("+").lstrip("0")) > MAX_DIGITS:
        raise RooflineError(f"{where}: {_shown(text)} is larger than any value vLLM takes")
    return int(text)


TOKEN_SUFFIX = re.compile(r"([0-9]+(?:\.[0-9]+)?)([kKmMgGtT])", re.ASCII)


def human_readable_int(where: str, text: str) -> int:
    """vLLM's human_readable_int: 32k = 32,000 (lower case decimal), 32K = 32,768 (upper case binary)."""
    found = TOKEN_SUFFIX.fullmatch(text)
    if not found:
        return _whole(where, text)
    number, suffix = found.groups()
    if len(number.split(".")[0].lstrip("0")) > MAX_DIGITS or len(number) > 2 * MAX_DIGITS:
        raise RooflineError(f"{where}: {_shown(text)} is larger than any value vLLM takes")
    if suffix.isupper():
        if "." in number:
            raise RooflineError(f"{where}: {text!r}: no decimals with a binary suffix")
        return int(number) * 1024 ** " KMGT".index(suffix)
    return int(float(number) * 1000 ** " kmgt".index(suffix))


def _bounded(flag: Flag, where: str, number):
    low_ok = flag.low is None or (number > flag.low if flag.low_open else number >= flag.low)
    high_ok = flag.high is None or number <= flag.high
    if not (low_ok and high_ok):
        low = "" if flag.low is None else f"{flag.low:g} {'<' if flag.low_open else '<='} "
        high = "" if flag.high is None else f" <= {flag.high:g}"
        raise RooflineError(f"{where}: {number:g} is out of range ({low}x{high})")
    return number


MAX_DRAFT_TOKENS = 1024  # num_speculative_tokens: vLLM bounds it below only (gt=0); no drafter proposes more


def speculation_from_json(text: str, where: str = "--speculative-config") -> Speculation:
    """--speculative-config as vLLM 0.32 takes it: a JSON object of SpeculativeConfig's fields, each checked
    against its type and bounds (predict/speculation_config.py; an unknown key is refused, as vLLM's
    extra='forbid' refuses it), the method inferred and normalised as vLLM's __post_init__ does."""
    from .speculation_config import checked_fields

    if len(text) > 64 << 10:
        raise RooflineError(f"{where}: {len(text):,} characters is not a speculative config")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise RooflineError(f"{where}: not JSON ({text[:80]!r})") from None
    if not isinstance(value, dict):
        raise RooflineError(f"{where}: give a JSON object such as "
                            "'{\"method\": \"mtp\", \"num_speculative_tokens\": 2}'")
    fields = checked_fields(value, where)
    method, model = fields.pop("method", None), fields.pop("model", None)
    tokens = fields.pop("num_speculative_tokens", None)
    mechanisms = _mechanisms()
    if method is None:  # vLLM infers the method from the draft model's name, else a draft model
        method = "custom_class" if model and _custom_proposer(model) else \
            "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    if method.endswith(load_table("vllm_args")["speculative"]["mechanism"]["mtp_suffix"]):
        method = "mtp"  # vLLM: "method `X_mtp` is deprecated and replaced with mtp"
    if method in mechanisms["unpriced"]:
        raise RooflineError(f"{where}: method {method}: vLLM takes it, roofline does not price it (it prices "
                            "mtp, eagle / eagle3 / draft_model, ngram / suffix)")
    if model is None and tokens is not None and method in mechanisms["draft"]:
        raise RooflineError(f"{where}: num_speculative_tokens was provided but without speculative model.")
    if tokens is None:
        raise RooflineError(f"{where}: give num_speculative_tokens (vLLM takes an MTP checkpoint's "
                            "num_nextn_predict_layers when it is absent; roofline prices the number stated)")
    if tokens > MAX_DRAFT_TOKENS:
        raise RooflineError(f"{where}: num_speculative_tokens {tokens} is more than any drafter proposes "
                            f"(at most {MAX_DRAFT_TOKENS})")
    if method in ("ngram", "ngram_gpu"):
        low, high = fields.get("prompt_lookup_min"), fields.get("prompt_lookup_max")
        low, high = low or high or 5, high or low or 5
        if low > high:
            raise RooflineError(f"{where}: prompt_lookup_min={low} must be <= prompt_lookup_max={high}")
    if method == "suffix":
        _suffix_bounds(fields, where)
    return Speculation(method, tokens, model if method in mechanisms["draft"] else None,
                       tuple(sorted(fields.items())))


def _custom_proposer(model: str) -> bool:
    """vLLM's SpeculativeConfig._is_custom_proposer_path: a dotted import path, not a URL or a hub id."""
    if model.startswith(("http://", "https://", "file://")) or "/" in model:
        return False
    parts = model.split(".")
    return len(parts) >= 2 and all(part.isidentifier() for part in parts)


def _suffix_bounds(fields: dict, where: str) -> None:
    """vLLM's SpeculativeConfig._validate_suffix_decoding."""
    checks = (("suffix_decoding_max_tree_depth", lambda v: v >= 1, "must be >= 1"),
              ("suffix_decoding_max_cached_requests", lambda v: v >= 0, "must be >= 0"),
              ("suffix_decoding_max_spec_factor", lambda v: v >= 0, "must be >= 0"),
              ("suffix_decoding_min_token_prob", lambda v: 0 <= v <= 1, "must be in [0, 1]"))
    for name, ok, words in checks:
        if name in fields and not ok(fields[name]):
            raise RooflineError(f"{where}: {name}={fields[name]} {words}")


# ----------------------------------------------------------------------------- building one

def from_values(values: Mapping[str, object], env: Mapping[str, str] | None = None, *,
                spelled: Mapping[str, str] | None = None, model: str | None = None) -> Deployment:
    """A Deployment from option values already read (`convert`) by the table's field names (None or
    False: not given) and an environment. `spelled`: how each was written (default: the flag's name)."""
    known = {f.field: f for f in flags()}
    settings: dict = {}
    said: list[tuple[str, str]] = []
    for name, value in values.items():
        if value is None or (value is False and known[name].value == "bool"):
            continue
        target = "speculative" if name == "speculative_config" else name
        if name == "max_model_len" and value == AUTO_MAX_MODEL_LEN:
            settings["auto_max_model_len"] = True
            said.append(("max_model_len", (spelled or {}).get(name) or "--max-model-len auto"))
            continue
        settings[target] = value
        said.append((target, (spelled or {}).get(name) or _describe(known[name], value)))
    env_settings, env_read = read_env(env or {})
    for name, value in env_settings.items():
        if name in ("linear_backend", "moe_backend") and settings.get(name):
            continue  # the flag wins over the deprecated switch
        settings[name] = value
        said.append((name, next(f"{k}={v}" for k, v in env_read if _switch(k).sets == name)))
    notes = tuple(f"{name}={value}: read as the vLLM 0.22-0.26 images the GB10 recipes pin read it; vLLM 0.32 "
                  f"no longer reads it ({_switch(name).removed})" for name, value in env_read if _switch(name).removed)
    return Deployment(model=model, **settings, spelled=tuple(said), env=tuple(env_read), notes=notes)


DEFAULT_ACCEPTANCE_RATE = 0.5  # vLLM's accepted / drafted, when speculation is on and no figure is given


def with_acceptance(values: Mapping[str, object], env: Mapping[str, str] | None = None, *, model: str | None = None,
                    speculative_tokens: int = 0, acceptance_rate: float | None = None,
                    mean_acceptance_length: float | None = None) -> tuple[Deployment, float]:
    """(the Deployment, the per-token acceptance the step model takes) from option values, the
    environment, the short form of an MTP draft (`speculative_tokens`) and speculation's acceptance in
    vLLM's terms, converted once (roofline.predict.speculation). Every command and the Python API."""
    values = dict(values)
    if speculative_tokens:
        if values.get("speculative_config") is not None:
            raise RooflineError("--speculative and --speculative-config do not go together: give one")
        values["speculative_config"] = Speculation("mtp", speculative_tokens)
    deployment = from_values(values, env, model=model)
    return deployment, acceptance_for(deployment, acceptance_rate, mean_acceptance_length)


def acceptance_for(deployment: Deployment, acceptance_rate: float | None = None,
                   mean_acceptance_length: float | None = None) -> float:
    """The per-token acceptance of this deployment's speculation, from vLLM's accepted / drafted or its
    mean acceptance length (one of them; DEFAULT_ACCEPTANCE_RATE when neither is given)."""
    from .speculation import per_token_acceptance

    if not deployment.speculative:
        if acceptance_rate is not None or mean_acceptance_length is not None:
            raise RooflineError("--acceptance-rate / --mean-acceptance-length need speculative decoding "
                                "(--speculative-config or --speculative N)")
        return 0.7
    if acceptance_rate is None and mean_acceptance_length is None:
        acceptance_rate = DEFAULT_ACCEPTANCE_RATE
    return per_token_acceptance(draft_tokens=deployment.speculative_tokens, acceptance_rate=acceptance_rate,
                                mean_acceptance_length=mean_acceptance_length)


def python_values(args: Mapping[str, object]) -> dict[str, object]:
    """vLLM's Python argument names (EngineArgs / LLM(...): tensor_parallel_size, enforce_eager,
    speculative_config as a dict, ...) or the table's field names -> checked values by field."""
    by_name = {}
    for flag in flags():
        by_name[flag.field] = flag
        for name in flag.names:
            if name.startswith("--"):
                by_name[name[2:].replace("-", "_")] = flag
    out: dict[str, object] = {}
    for name, value in args.items():
        flag = by_name.get(name)
        if flag is None:
            raise RooflineError(f"{name}: not a vLLM argument roofline prices (roofline/data/vllm_args.toml)")
        if value is None:
            continue
        if flag.value in ("bool", "negatable"):
            if not isinstance(value, bool):
                raise RooflineError(f"{name}: give True or False")
            out[flag.field] = value
            continue
        if isinstance(value, dict):
            try:
                value = json.dumps(value, allow_nan=False)
            except (TypeError, ValueError, RecursionError):
                raise RooflineError(f"{name}: a dict of JSON values (strings, numbers, booleans, lists, dicts)") from None
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise RooflineError(f"{name}: {value!r} is not a value vLLM takes")
        out[flag.field] = convert(flag, str(value), name)
    return out


def _describe(flag: Flag, value) -> str:
    if flag.value == "bool":
        return flag.name
    if flag.value == "negatable":
        return flag.name if value else flag.negative
    if isinstance(value, Speculation):
        return f"{flag.name} " + json.dumps({"method": value.method, "num_speculative_tokens": value.tokens}
                                            | ({"model": value.model} if value.model else {}))
    return f"{flag.name} {value:g}" if isinstance(value, float) else f"{flag.name} {value}"


def _switch(name: str) -> EnvSwitch:
    return next(s for s in env_switches() if s.name == name)


def read_env(env: Mapping[str, str]) -> tuple[dict, list[tuple[str, str]]]:
    """The switches of the table found in `env`: {field: setting}, [(name, value)] (others ignored)."""
    settings, read = {}, []
    for switch in env_switches():
        raw = env.get(switch.name)
        if raw is None or str(raw).strip() == "":
            continue
        value = str(raw).strip()
        if switch.sets == "cpu_kvcache_space_gib":
            settings[switch.sets] = _whole(f"{switch.name}={_shown(value)}", value)
            if not 0 < settings[switch.sets] <= 1 << 20:
                raise RooflineError(f"{switch.name}={_shown(value)}: give a whole number of GiB from 1")
        else:
            wanted = {k.lower(): v for k, v in switch.values.items()}
            if value.lower() not in wanted:
                raise RooflineError(f"{switch.name}={value!r}: vLLM takes {', '.join(switch.values)}")
            setting = wanted[value.lower()]
            if switch.sets == "fp8_marlin":
                settings["fp8_marlin"] = setting == "marlin"
            else:
                settings[switch.sets] = setting
        read.append((switch.name, value))
    return settings, read


def parse_env_assignments(items: Iterable[str], option: str = "--env") -> dict[str, str]:
    """`--env KEY=VALUE` (or `--set KEY=VALUE`, named by `option`) -> {KEY: VALUE}."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise RooflineError(f"{option} {printable(item, 60)!r}: give KEY=VALUE")
        out[key] = value
    return out


_ENTRYPOINTS = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")


def split_serve_line(words: list[str]) -> tuple[dict[str, str], list[str], list[str]]:
    """`[KEY=VALUE ...] (vllm serve MODEL | python -m vllm.entrypoints.openai.api_server) ARGS`, or a container
    started with one (`docker run ...`, `docker compose ...`: predict/container.py) -> (environment
    assignments, the arguments after the program, MODEL first when positional; notes on the reading)."""
    from .container import container_serve_words, is_container_line

    notes: list[str] = []
    if is_container_line(list(words)):
        container_env, words, notes = container_serve_words(list(words))
        env, args, _ = split_serve_line(words)
        return {**container_env, **env}, args, notes
    env: dict[str, str] = {}
    rest, start = list(words), 0
    while start < len(rest):  # KEY=VALUE assignments, and `env` before them (`env K=V vllm serve ...`)
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", rest[start], re.S):
            key, _, value = rest[start].partition("=")
            env[key] = value
        elif rest[start] != "env":
            break
        start += 1
    rest = rest[start:]
    if len(rest) >= 2 and rest[0].rsplit("/", 1)[-1] == "vllm" and rest[1] == "serve":
        return env, rest[2:], notes
    if (len(rest) >= 3 and re.fullmatch(r"python[0-9.]*", rest[0].rsplit("/", 1)[-1]) and rest[1] == "-m"
            and rest[2] in _ENTRYPOINTS):
        return env, rest[3:], notes
    raise RooflineError("not a vLLM serve line: give `vllm serve MODEL ...`, "
                        "`python -m vllm.entrypoints.openai.api_server --model MODEL ...` or the `docker run ...` "
                        "line that starts one")


# vLLM's compilation flags (vllm/engine/arg_utils.py): -O N (the optimization level), -cc / --compilation-config
# JSON, and their dotted forms (-O.cudagraph_mode=NONE, -cc.cudagraph_mode=PIECEWISE)
COMPILATION_FLAGS = ("-O", "-cc", "--compilation-config")
COMPILATION_PREFIXES = ("-O.", "-cc.", "--compilation-config.")
# vllm/config/compilation.py CUDAGraphMode
CUDAGRAPH_MODES = ("none", "piecewise", "full", "full_decode_only", "full_and_piecewise")
# vllm/config/vllm.py OptimizationLevel: O0 no compilation and no CUDA graphs, O1 piecewise graphs, O2 / O3 full
# and piecewise (vLLM's default)
OPTIMIZATION_LEVEL_GRAPHS = {"0": "none", "1": "piecewise", "2": "full_and_piecewise", "3": "full_and_piecewise"}


def compilation_setting(name: str, value: str | None) -> tuple[str | None, list[str]]:
    """(the CUDA-graph mode a compilation flag sets, or None; what of it is read but not priced)."""
    level = re.fullmatch(r"-O([0-3])", name)
    if level or (name == "-O" and value is not None and re.fullmatch(r"[0-3]", value)):
        digit = level.group(1) if level else value
        return OPTIMIZATION_LEVEL_GRAPHS[digit], ([f"{name}{'' if level else ' ' + digit}: torch.compile off (its "
                                                   "fused kernels not priced)"] if digit == "0" else [])
    if name.startswith(COMPILATION_PREFIXES):
        key = name.split(".", 1)[1]
        if key == "cudagraph_mode":
            return _cudagraph_mode(value, name), []
        return None, [f"{name}={value}"]
    if name == "-O" and value is not None and not value.lstrip().startswith("{"):
        raise RooflineError(f"-O {printable(value, 40)!r}: vLLM takes an optimization level 0-3 or a compilation "
                            "config JSON")
    if len(value or "") > 65536:
        raise RooflineError(f"{name}: the compilation config is longer than 64 KiB")
    try:
        config = json.loads(value or "")
    except ValueError:
        raise RooflineError(f"{name}: not a JSON object: {printable(value or '', 80)}") from None
    if not isinstance(config, dict):
        raise RooflineError(f"{name}: not a JSON object")
    mode = _cudagraph_mode(config["cudagraph_mode"], f"{name} cudagraph_mode") if "cudagraph_mode" in config \
        else None
    rest = sorted(k for k in config if k != "cudagraph_mode")
    return mode, ([f"{name} {{{', '.join(printable(str(k), 40) for k in rest)}}}"] if rest else [])


def _cudagraph_mode(value, where: str) -> str:
    text = str(value).strip().lower() if isinstance(value, str) else ""
    if text not in CUDAGRAPH_MODES:
        raise RooflineError(f"{where}: {printable(str(value), 40)!s} is not a CUDA-graph mode vLLM takes "
                            f"({', '.join(m.upper() for m in CUDAGRAPH_MODES)})")
    return text


def parse_serve_line(words: list[str] | str, env: Mapping[str, str] | None = None) -> Deployment:
    """A whole `vllm serve` line (words, or one string as a shell would split it) -> Deployment.
    Flags of the table are read and checked; flags that move nothing priced are skipped with their
    value; any other flag is kept as `not_modelled` (with its value), never silently dropped."""
    if isinstance(words, str):
        try:
            words = shlex.split(words.replace("\\\n", " "))
        except ValueError as exc:
            raise RooflineError(f"the serve line does not parse as a shell command: {exc}") from None
    line_env, args, line_notes = split_serve_line(words)
    args = redact_args(args)  # a credential's value never enters the Deployment (nor what it prints)
    env = {**(env or {}), **line_env}
    with_value, without_value = _ignored()
    by_spelling = _by_spelling()
    values: dict[str, object] = {}
    spelled: dict[str, str] = {}
    model = flag_model = None  # vLLM's serve: a positional model_tag wins over --model
    not_modelled, ignored = [], []
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if not word.startswith("-") or word == "-":
            if model is None:
                model = word
                continue
            raise RooflineError(f"unexpected argument {word!r} in the serve line (MODEL was {model!r})")
        name, eq, inline = word.partition("=")
        if name.startswith("--") and "_" in name and "." not in name:  # a dotted config key keeps its own
            name = name.replace("_", "-")  # vLLM's argparse takes --max_model_len as --max-model-len
        nargs = secret_flags().get(name)
        if nargs is not None:  # a credential (its values already ***): moves nothing priced
            while not eq and i < len(args) and not args[i].startswith("-"):
                i += 1
                if nargs != "+":
                    break
            ignored.append(name)
            continue
        if name in COMPILATION_FLAGS or name.startswith(COMPILATION_PREFIXES) or re.fullmatch(r"-O[0-3]", name):
            value = inline if eq else None
            if value is None and not re.fullmatch(r"-O[0-3]", name):
                if i >= len(args):
                    raise RooflineError(f"{name}: needs a value")
                value, i = args[i], i + 1
            mode, unpriced = compilation_setting(name, value)
            if mode is not None:
                values["cudagraph_mode"] = mode
                spelled["cudagraph_mode"] = name + (f" {value}" if value is not None and not eq else
                                                    f"={value}" if eq else "")
            not_modelled += unpriced
            continue
        flag = by_spelling.get(name)
        takes_value = flag is not None and flag.value not in ("bool", "negatable")
        if flag is None:
            takes_value = name in with_value or (name not in without_value and not eq and i < len(args)
                                                 and not args[i].startswith("-"))
        value = inline if eq else None
        if takes_value and not eq:
            if i >= len(args):
                raise RooflineError(f"{name}: needs a value")
            value = args[i]
            i += 1
        if flag is None:
            if name == "--model":
                flag_model = value
            elif name in with_value or name in without_value:
                ignored.append(name)
            else:
                not_modelled.append(name + (f" {value}" if value is not None else ""))
            continue
        values[flag.field] = convert(flag, value, name)
        spelled[flag.field] = name + (f" {value}" if value is not None else "")
    model = model if model is not None else flag_model
    if model is None:
        raise RooflineError("the serve line names no model (`vllm serve MODEL` or --model MODEL)")
    deployment = from_values(values, env, spelled=spelled, model=model)
    return replace(deployment, not_modelled=tuple(not_modelled), ignored=tuple(ignored),
                   notes=tuple(printable(n, 300) for n in line_notes) + deployment.notes)


# ----------------------------------------------------------------------------- vLLM's refusals

def _quant_method(inventory: Inventory) -> str:
    return (inventory.quant.method or "none").lower()


# what vLLM-CPU's fp8 KV cache needs of the host's CPU (vllm/v1/attention/backends/cpu_attn.py:
# "FP8 KV cache on CPU requires x86 with AVX-512 or AMX.")
CPU_FP8_KV_FLAGS = frozenset({"avx512f", "amx_tile"})


def refusals(deployment: Deployment, inventory: Inventory, hardware: Hardware,
             host_cpu_flags: frozenset[str] | None = None) -> list[str]:
    """What vLLM would refuse of this deployment on this checkpoint and device, each as one line
    naming why (empty: vLLM starts it). `host_cpu_flags`: the CPU's flags where a CPU entry stands for
    this host (None: not known, nothing refused for them)."""
    out = []
    if (hardware.host == "cpu" and host_cpu_flags is not None and deployment.kv_cache_dtype.startswith("fp8")
            and not CPU_FP8_KV_FLAGS & host_cpu_flags):
        out.append(f"--kv-cache-dtype {deployment.kv_cache_dtype}: FP8 KV cache on CPU requires x86 with AVX-512 or "
                   "AMX (this host's CPU has neither)")
    method, main = _quant_method(inventory), inventory.main_format()
    if deployment.quantization:
        if deployment.quantization in ("fp8",) and method in ("none", ""):
            if float(hardware.compute_capability or 0) < 8.0 and hardware.host != "cpu":
                out.append(f"--quantization fp8: needs compute capability 8.0 or newer ({hardware.name}: "
                           f"{hardware.compute_capability})")
        elif claimed_quantization(inventory) is not None:
            pass  # a method claims the checkpoint: vLLM runs it whatever the flag says (checkpoint_notes)
        elif deployment.quantization != method and not method.startswith(deployment.quantization):
            out.append(f"--quantization {deployment.quantization}: Quantization method specified in the model "
                       f"config ({method}) does not match the quantization method specified in the "
                       f"`quantization` argument ({deployment.quantization})")
    fmt = "fp8" if deployment.quantization == "fp8" and method in ("none", "") else main
    for kind in ("linear", "moe"):
        name = getattr(deployment, f"{kind}_backend")
        if name is None or fmt in ("bf16", "fp16", "fp32"):
            continue
        # a backend set by a deprecated switch is read as the 0.22-0.26 images that read it ran it; vLLM 0.32's
        # activation-scheme check applies to the flag
        by_flag = dict(deployment.spelled).get(f"{kind}_backend", "").startswith("-")
        reason = _backend_refusal(fmt, name, kind, hardware) or (
            _scheme_refusal(inventory, name, kind) if by_flag else None)
        if reason:
            out.append(reason)
    if deployment.attention_backend:
        from .attention import refusal as attention_refusal
        from .traffic import Scenario, kv_dtype_and_bytes

        kv_dtype, _ = kv_dtype_and_bytes(inventory, Scenario(kv_cache_dtype=deployment.kv_cache_dtype))
        reason = attention_refusal(inventory, hardware, kv_dtype, deployment.attention_backend)
        if reason:
            out.append(reason)
    from roofline.model.limits import max_positions

    from .scheduler_config import async_refusal, scheduler_refusals, scheduler_settings

    out += scheduler_refusals(scheduler_settings(deployment, hardware),
                              deployment.max_model_len or max_positions(inventory.config))
    reason = async_refusal(hardware, deployment.async_scheduling,
                           draft_method_run(deployment.draft_method, deployment.speculative_tokens))
    if reason:
        out.append(reason)
    if deployment.max_model_len is not None:
        limit = max_positions(inventory.config)
        if limit is not None and deployment.max_model_len > limit:
            out.append(f"--max-model-len {deployment.max_model_len}: User-specified max_model_len "
                       f"({deployment.max_model_len}) is greater than the derived max_model_len "
                       f"(max_position_embeddings={limit} in the model's config.json)")
    topology = deployment.topology
    if topology.expert_parallel and not inventory.shape.num_experts:
        out.append("--enable-expert-parallel: the model has no MoE experts to split")
    reason = refusal(inventory.config or {}, topology)
    if reason:
        out.append(reason)
    spec = deployment.speculative
    if spec and spec.method == "mtp" and not any(m.role == "mtp" for m in inventory.modules):
        out.append(f"--speculative-config method mtp: {inventory.model_id} has no MTP layers "
                   "(num_nextn_predict_layers / mtp_num_hidden_layers is 0)")
    return out


def claimed_quantization(inventory: Inventory) -> str | None:
    """The method vLLM runs a checkpoint with whatever --quantization says (a method whose
    override_quantization_method claims its config: vllm_args.toml [[quantization_claim]]); None: none claims it."""
    method = _quant_method(inventory)
    algo = (inventory.quant.algo or "").upper()
    model_type = (inventory.config or {}).get("model_type")
    for claim in load_table("vllm_args")["quantization_claim"]:
        if not method.startswith(claim["quant_method"]):
            continue
        pattern = claim.get("algo")
        if pattern and not (algo == pattern[1:] if pattern[0] == "=" else pattern[1:] in algo):
            continue
        if claim.get("model_type") and claim["model_type"] != model_type:
            continue
        return claim["runs"]
    return None


def checkpoint_notes(deployment: Deployment, inventory: Inventory) -> tuple[str, ...]:
    """What vLLM makes of the deployment's flags on this checkpoint that the flags alone do not say."""
    notes = []
    claimed = claimed_quantization(inventory) if deployment.quantization else None
    if claimed is not None and claimed != deployment.quantization:
        notes.append(f"--quantization {deployment.quantization}: vLLM reads the checkpoint's {_quant_method(inventory)} "
                     f"config and runs {claimed} whatever the flag says (ModelConfig._verify_quantization)")
    for flag in flags():
        slower = dict(flag.slower_than_priced).get(str(getattr(deployment, flag.field, None)))
        if slower:
            notes.append(f"{flag.name} {getattr(deployment, flag.field)}: {slower}")
    return tuple(notes)


def _scheme_refusal(inventory: Inventory, name: str, kind: str) -> str | None:
    """vLLM's refusal of a backend that cannot run the activation scheme of the checkpoint's layers of
    this kind (weight-only NVFP4 on a W4A4 kernel: vllm_args.toml [[weight_only_kernels]])."""
    formats = {m.format for m in inventory.modules if (m.role == "moe_experts") == (kind == "moe")}
    for entry in load_table("vllm_args")["weight_only_kernels"]:
        if entry["kind"] == kind and entry["format"] in formats and name not in entry["backends"]:
            return (f"--{kind}-backend {name}: " + entry["refusal"].format(upper=name.upper(), name=name)
                    + f" (vLLM runs these layers on {', '.join(entry['backends'])})")
    return None


def _backend_refusal(fmt: str, name: str, kind: str, hardware: Hardware) -> str | None:
    """vLLM's refusal of --linear-backend / --moe-backend NAME for `fmt` here: a kernel that needs a
    newer (or older) GPU, or any kernel on vLLM-CPU. A backend no table rates for the format is not
    refused (vLLM has more than the tool rates): the step prices it as the default and says so."""
    if hardware.host == "cpu":
        return f"--{kind}-backend {name}: vLLM-CPU has no {name} kernels"
    family = [b for b in backends()
              if weight_family(b.format) == weight_family(fmt) and name in (b.linear_backend, b.moe_backend)]
    if not family or any(b in backends_for(b.format, hardware) for b in family):
        return None
    need = family[0]
    bound = f"{need.min_cc:g} or newer" + (f" and below {need.max_cc:g}" if need.max_cc else "")
    return (f"--{kind}-backend {name}: {need.name} needs compute capability {bound}; {hardware.name} is "
            f"{hardware.compute_capability}")


def checked(deployment: Deployment, inventory: Inventory, hardware: Hardware,
            host_cpu_flags: frozenset[str] | None = None) -> Deployment:
    """The deployment, or one line with vLLM's first refusal (the commands that price one scenario)."""
    found = refusals(deployment, inventory, hardware, host_cpu_flags)
    if found:
        raise RooflineError(found[0] + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))
    return deployment


# ----------------------------------------------------------------------------- what it prices

def online_format(deployment: Deployment, inventory: Inventory) -> str | None:
    """The format vLLM quantizes a BF16 / FP16 checkpoint to at load (None: none)."""
    if deployment.quantization == "fp8" and _quant_method(inventory) in ("none", ""):
        return "fp8"
    return None


def backend(deployment: Deployment, inventory: Inventory, hardware: Hardware) -> Backend | None:
    """The GEMM / MoE backend of the main format the deployment runs (None: vLLM's default)."""
    fmt = inventory.main_format()
    if deployment.fp8_marlin and fmt in ("fp8", "fp8-block"):
        return backend_named(fmt, "marlin", hardware)
    wanted = [deployment.moe_backend, deployment.linear_backend] if inventory.shape.num_experts else \
        [deployment.linear_backend, deployment.moe_backend]
    names = [n for n in wanted if n]
    if not names or fmt in ("bf16", "fp16", "fp32"):
        return None
    # a backend that rates this format (or its family: NVFP4 W4A4 and W4A16 are the same weights) here
    # wins; else the first named, priced as the default (the step says it is unrated)
    siblings = sorted({b.format for b in backends() if weight_family(b.format) == weight_family(fmt)},
                      key=lambda f: f != fmt)
    for name in names:
        for entry in (e for sibling in siblings for e in backends_for(sibling, hardware)):
            if name in (entry.linear_backend, entry.moe_backend):
                return entry
    return backend_named(fmt, names[0], hardware) if names[0] != default_backend(fmt, hardware).linear_backend \
        else None


def step_config(deployment: Deployment, inventory: Inventory, hardware: Hardware, *, batch: int, context: int,
                acceptance_rate: float, routing: str = "uniform") -> "StepConfig":
    """The serving configuration the step model prices for this deployment: its KV dtype, graph mode,
    backend, topology and speculation at `batch` streams of `context` tokens (`acceptance_rate`: the
    per-token chance, roofline.predict.speculation converts vLLM's figures to it)."""
    from .step import StepConfig

    spec = deployment.speculative
    return StepConfig(batch=batch, context=context, kv_cache_dtype=deployment.kv_cache_dtype,
                      graphs=not deployment.eager, backend=backend(deployment, inventory, hardware),
                      topology=deployment.topology, speculative_tokens=spec.tokens if spec else 0,
                      acceptance_rate=acceptance_rate if spec else 0.7, routing=routing,
                      draft_method=spec.method if spec else "mtp", drafter=drafter_of(deployment, inventory),
                      capture_tokens=capture_tokens(deployment, hardware, inventory.shape.architecture),
                      full_decode_tokens=full_decode_limit(deployment, hardware, inventory.shape.architecture),
                      cudagraph_mode=deployment.cudagraph_mode or "full_and_piecewise",
                      async_scheduling=deployment.async_scheduling,
                      attention_backend=deployment.attention_backend)


def drafter_of(deployment: Deployment, inventory: Inventory):
    """What this deployment's draft checkpoint reads a forward (None: no draft checkpoint given or read; an
    MTP head is read from the target itself by the step model)."""
    from .drafting import checkpoint_reads

    spec = deployment.speculative
    if spec is None or deployment.draft_inventory is None or not spec.reads_draft_checkpoint:
        return None
    ranks = dict(spec.fields).get("draft_tensor_parallel_size") or deployment.tp
    return checkpoint_reads(deployment.draft_inventory, spec.method, inventory, ranks, deployment.kv_cache_dtype)


def capture_tokens(deployment: Deployment, hardware: Hardware, architecture: str = "") -> int:
    """The largest step vLLM captures a CUDA graph of: --max-cudagraph-capture-size, else vLLM's default
    min(2 x max_num_seqs x (1 + draft tokens), the ceiling, max_num_batched_tokens) (default_capture_tokens)."""
    from .scheduler_config import scheduler_settings

    if deployment.max_cudagraph_capture_size is not None:
        return deployment.max_cudagraph_capture_size
    settings = scheduler_settings(deployment, hardware)
    return default_capture_tokens(settings.max_num_seqs, settings.max_num_batched_tokens,
                                  deployment.speculative_tokens, architecture, hardware)


def full_decode_limit(deployment: Deployment, hardware: Hardware, architecture: str = "") -> int:
    """The largest decode step (tokens) this deployment's vLLM replays a FULL graph of (cuda_graphs.full_decode_tokens:
    its capture sizes within --max-num-seqs requests)."""
    from .cuda_graphs import full_decode_tokens
    from .scheduler_config import scheduler_settings

    settings = scheduler_settings(deployment, hardware)
    return full_decode_tokens(settings.max_num_seqs, deployment.speculative_tokens,
                              capture_tokens(deployment, hardware, architecture), settings.max_num_batched_tokens)


def graph_notes(deployment: Deployment, hardware: Hardware, architecture: str = "") -> tuple[str, ...]:
    """What vLLM's CUDA graphs make of --max-num-seqs that the flag alone does not say (cuda_graphs.past_full_note)."""
    from .cuda_graphs import past_full_note
    from .scheduler_config import scheduler_settings

    if deployment.eager or deployment.cudagraph_mode in ("none", "piecewise", "full"):
        return ()
    per_request = 1 + deployment.speculative_tokens
    note = past_full_note(scheduler_settings(deployment, hardware).max_num_seqs,
                          full_decode_limit(deployment, hardware, architecture) // per_request,
                          capture_tokens(deployment, hardware, architecture) // per_request)
    return (note,) if note else ()


def default_capture_tokens(seqs: int, batched_tokens: int, draft_tokens: int, architecture: str,
                           hardware: Hardware) -> int:
    """vLLM's default largest captured step: min(2 x max_num_seqs x (1 + draft tokens), the ceiling (512; 1024 on
    data-center Blackwell), max_num_batched_tokens); an architecture whose config hook sets it (gpt-oss: 1024) takes
    that, bounded by max_num_batched_tokens only (serving.toml [cuda_graph_capture])."""
    table = load_table("serving")["cuda_graph_capture"]
    if architecture in table["ceiling_1024_architectures"]:
        return max(1, min(1024, batched_tokens))
    ceiling = table["ceiling_by_compute_major"].get((hardware.compute_capability or "").split(".")[0], table["ceiling"])
    return max(1, min(2 * seqs * (1 + draft_tokens), ceiling, batched_tokens))
