"""Measuring real engines and servers: bench, capture (starts vLLM), calibrate, validate,
the validation record, vLLM's profiler and its traces."""
