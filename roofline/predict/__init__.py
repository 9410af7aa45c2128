"""Pure arithmetic on an inventory: bytes per token (traffic), the ceiling, kernels, the
CUDA-graph time model, tensor parallelism, and the hardware catalogue they run against."""
