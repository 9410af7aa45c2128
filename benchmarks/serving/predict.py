"""roofline's prices of the measured points, through the commands' own path: the deployment as its serve line
says (predict/deployment.parse_serve_line), its KV cache (advise/capacity), the load model's server
(advise/load: the step model kept, vLLM's scheduler, the host's time per request)."""
from __future__ import annotations

import functools
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from roofline.advise.capacity import capacity, load_server  # noqa: E402
from roofline.advise.deploy import capacity_request, deployed_inventory  # noqa: E402
from roofline.audit import load_inventory  # noqa: E402
from roofline.predict.deployment import acceptance_for, parse_serve_line  # noqa: E402
from roofline.predict.hardware import get_hardware  # noqa: E402


@functools.lru_cache(maxsize=None)
def server(device: str, config: str, flags: str, max_model_len: int = 20480, gpu_memory_utilization: float = 0.9):
    """The load model's server of a measured case (cached: the fits re-price it many times)."""
    hardware = get_hardware(device)
    line = f"vllm serve {REPO / config} --max-model-len {max_model_len} " \
           f"--gpu-memory-utilization {gpu_memory_utilization} {flags}"
    deployment = parse_serve_line(line)
    inventory = load_inventory(str(REPO / config), config_only=True)
    deployed = deployed_inventory(inventory, deployment)
    request = capacity_request(deployment, inventory, hardware, acceptance_for(deployment), levels=(1,),
                               prompt_len=1024, output_len=256)
    sized = capacity(deployed, hardware, request)
    from roofline.advise.capacity import _parallel  # the curve's StepConfig fields, as capacity made them

    parallel, _ = _parallel(deployed, hardware, request, sized.context)
    return load_server(deployed, hardware, request, sized.kv, sized.context, parallel)
