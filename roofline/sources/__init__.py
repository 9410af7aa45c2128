"""Where an inventory comes from: safetensors headers (local or hub), config.json alone
(transformers on the meta device), a vLLM capture file. The I/O edge; builds roofline.model objects."""
