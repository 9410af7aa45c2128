"""vLLM's scheduler as a deployment configures it (pure): the step's token budget, the most requests
running, chunked prefill, prefix caching, async scheduling and the KV block, with vLLM's defaults where
the serve line is silent (data/serving.toml [batch_defaults], [platform.*]) and vLLM's own refusals of the
combination (SchedulerConfig.verify_max_model_len). The load model (predict/load.py) schedules with it;
preflight and capacity refuse what vLLM refuses with it."""
from __future__ import annotations

from dataclasses import dataclass

from roofline.data import load_table

from .drafting import draft_method_run
from .hardware import Hardware

GIB = 2 ** 30


@dataclass(frozen=True)
class SchedulerSettings:
    max_num_batched_tokens: int
    max_num_seqs: int
    max_num_active_seqs: int
    chunked_prefill: bool
    prefix_caching: bool
    async_scheduling: bool
    long_prefill_token_threshold: int  # 0: none
    block_size: int
    defaults_source: str  # where the budget's defaults came from (when the line did not give them)

    def to_json(self) -> dict:
        return dict(self.__dict__)


def batch_defaults(hardware: Hardware, entry: str = "serve", world_size: int = 1) -> tuple[int, int, str]:
    """(max_num_batched_tokens, max_num_seqs, why) vLLM takes on `hardware` when neither is given, for `vllm
    serve` ("serve") or the offline LLM class ("offline")."""
    table = load_table("serving")["batch_defaults"]
    if hardware.host == "cpu":
        chosen = table["cpu"][entry]
        return (chosen["max_num_batched_tokens"] * world_size, chosen["max_num_seqs"] * world_size,
                f"vLLM-CPU's {entry} default x {world_size} rank(s) ({table['source']})")
    reported = 0.0 if hardware.key in table["nvml_reports_no_memory"] or \
        getattr(hardware, "derived_from", "") in table["nvml_reports_no_memory"] else hardware.memory_gb * 1e9 / GIB
    name = f"{hardware.key} {hardware.name}".lower()
    for tier in table["tier"]:
        if reported >= tier["min_gib"] and not any(word in name for word in tier.get("not_named", ())):
            chosen = tier[entry]
            why = (f"NVML reports no memory on {hardware.name}" if reported == 0.0 and hardware.memory_gb else
                   f"{reported:.0f} GiB as NVML reports it")
            return chosen["max_num_batched_tokens"], chosen["max_num_seqs"], f"vLLM's {entry} default ({why})"
    raise AssertionError("serving.toml [batch_defaults]: the last tier must take every device")


def block_size(hardware: Hardware, given: int | None = None) -> int:
    platform = load_table("serving")["platform"]["cpu" if hardware.host == "cpu" else "cuda"]
    return given or platform["default_block_size"]


@dataclass(frozen=True)
class AsyncScheduling:
    on: bool
    why: str  # what decided it: the line's flag or the default vLLM takes, and why it is off


def async_scheduling(hardware: Hardware, given: bool | None, draft_method: str | None = None,
                     boxes: int = 1) -> AsyncScheduling:
    """Whether vLLM forms the next step while this one runs (serving.toml [async_scheduling]): the line's
    --[no-]async-scheduling, else vLLM's default for the speculation (`draft_method`, None without) and the
    executor (Ray's, over several boxes). A combination vLLM refuses when given is async_refusal's."""
    table = load_table("serving")["async_scheduling"]
    if hardware.host == "cpu":
        return AsyncScheduling(False, "vLLM-CPU turns async scheduling off (vllm/platforms/cpu.py)")
    if given is not None:
        return AsyncScheduling(given, "--async-scheduling" if given else "--no-async-scheduling")
    if draft_method is not None and draft_method not in table["default_methods"]:
        return AsyncScheduling(False, f"vLLM 0.26 runs {draft_method} speculation without it ('Async scheduling "
                                      "not supported with ...-based speculative decoding')")
    if boxes > 1 and "ray" in table["executors_without"]:
        return AsyncScheduling(False, f"vLLM's Ray executor ({boxes} boxes) does not support it")
    return AsyncScheduling(True, "vLLM's default")


def async_refusal(hardware: Hardware, given: bool | None, draft_method: str | None = None,
                  boxes: int = 1) -> str | None:
    """vLLM's refusal of --async-scheduling given with what cannot run it (VllmConfig.__post_init__), or None."""
    table = load_table("serving")["async_scheduling"]
    if not given or hardware.host == "cpu":
        return None
    if draft_method is not None and draft_method not in table["accepted_methods"]:
        return ("--async-scheduling: Currently, async scheduling is only supported with EAGLE/MTP/Draft Model/NGram "
                f"GPU/DSpark kind of speculative decoding (the line's method: {draft_method})")
    if boxes > 1 and "ray" in table["executors_without"]:
        return f"--async-scheduling: `ray` does not support async scheduling yet ({boxes} boxes run under Ray)"
    return None


def max_concurrent_batches(async_on: bool, runner: str, pp: int = 1) -> int:
    """Batches scheduled but not yet settled (VllmConfig.max_concurrent_batches): one per pipeline stage, one
    more with async scheduling under the V2 model runner; the V1 runner overlaps two only at one stage."""
    if async_on:
        if runner == "v2":
            return pp + 1
        if pp <= 1:
            return 2
    return pp


def scheduler_settings(deployment, hardware: Hardware, entry: str = "serve", boxes: int = 1) -> SchedulerSettings:
    """The scheduler a Deployment (predict/deployment.py) runs on `hardware` (over `boxes` boxes): its flags,
    vLLM's defaults."""
    world = deployment.tp * deployment.pp
    tokens, seqs, why = batch_defaults(hardware, entry, world if hardware.host == "cpu" else 1)
    budget = deployment.max_num_batched_tokens or tokens
    max_seqs = deployment.max_num_seqs or seqs
    overlap = async_scheduling(hardware, deployment.async_scheduling,
                               draft_method_run(deployment.draft_method, deployment.speculative_tokens), boxes)
    return SchedulerSettings(
        max_num_batched_tokens=budget, max_num_seqs=max_seqs,
        max_num_active_seqs=deployment.max_num_active_seqs or max_seqs,
        chunked_prefill=deployment.chunked_prefill is not False,
        prefix_caching=deployment.prefix_caching is not False,
        async_scheduling=overlap.on,
        long_prefill_token_threshold=deployment.long_prefill_token_threshold or 0,
        block_size=block_size(hardware, deployment.block_size),
        defaults_source="" if deployment.max_num_batched_tokens and deployment.max_num_seqs else why)


def scheduler_refusals(settings: SchedulerSettings, max_model_len: int | None) -> list[str]:
    """vLLM's SchedulerConfig.verify_max_model_len, in its words."""
    out = []
    budget, seqs = settings.max_num_batched_tokens, settings.max_num_seqs
    if max_model_len is not None and budget < max_model_len and not settings.chunked_prefill:
        out.append(f"max_num_batched_tokens ({budget}) is smaller than max_model_len ({max_model_len}). This "
                   "effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject "
                   "longer sequences. Please increase max_num_batched_tokens or decrease max_model_len.")
    if budget < seqs:
        out.append(f"max_num_batched_tokens ({budget}) must be greater than or equal to max_num_seqs ({seqs}).")
    if settings.max_num_active_seqs > seqs:
        out.append(f"max_num_active_seqs ({settings.max_num_active_seqs}) cannot be greater than max_num_seqs "
                   f"({seqs}).")
    if max_model_len is not None and settings.long_prefill_token_threshold > max_model_len:
        out.append(f"long_prefill_token_threshold ({settings.long_prefill_token_threshold}) cannot be greater "
                   f"than the max_model_len ({max_model_len}).")
    return out
