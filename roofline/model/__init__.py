"""What a checkpoint is: the Inventory (tensors, modules, roles, formats) and the pure rules that
build it from tensor lists and quantization configs. No I/O; imports only roofline.data and errors."""
