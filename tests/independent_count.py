"""An independent byte count of a checkpoint, for tests to compare roofline's numbers with.

It asks the `safetensors` library itself (safe_open) for every tensor's dtype and shape, and
torch for the byte size of the tensor the library hands back: no header parsing and no dtype
table of ours, so a mistake in roofline's own reading cannot hide in here too.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from safetensors import safe_open


@dataclass(frozen=True)
class TensorCount:
    dtype: str             # the safetensors dtype string, e.g. "BF16", "F8_E4M3", "U8"
    shape: tuple[int, ...]
    nbytes: int
    file: str              # the shard it lives in


@dataclass(frozen=True)
class CheckpointCount:
    tensors: dict[str, TensorCount]

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def as_tuples(self) -> dict[str, tuple[str, tuple[int, ...], int]]:
        """{tensor_name: (dtype_str, shape, nbytes)}"""
        return {name: (t.dtype, t.shape, t.nbytes) for name, t in self.tensors.items()}

    def bytes_under(self, prefix: str) -> int:
        """Bytes of the tensors of one module, e.g. "model.layers.0.mlp.down_proj"."""
        return sum(t.nbytes for name, t in self.tensors.items()
                   if name.startswith(prefix + "."))


def count_checkpoint(directory: str | Path) -> CheckpointCount:
    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors files in {directory}")
    tensors: dict[str, TensorCount] = {}
    for path in files:
        with safe_open(path, framework="pt") as handle:
            for name in handle.keys():
                if name in tensors:
                    raise ValueError(f"tensor {name} is in both {tensors[name].file} and {path.name}")
                tensor_slice = handle.get_slice(name)
                tensor = handle.get_tensor(name)
                shape = tuple(tensor_slice.get_shape())
                if tuple(tensor.shape) != shape:
                    raise ValueError(f"{name}: header shape {shape} but tensor {tuple(tensor.shape)}")
                tensors[name] = TensorCount(dtype=tensor_slice.get_dtype(), shape=shape,
                                            nbytes=tensor.numel() * tensor.element_size(),
                                            file=path.name)
    return CheckpointCount(tensors)


def independent_count(directory: str | Path) -> tuple[dict[str, tuple[str, tuple[int, ...], int]], int]:
    """({tensor_name: (dtype_str, shape, nbytes)}, total bytes) of a checkpoint directory."""
    count = count_checkpoint(directory)
    return count.as_tuples(), count.total_bytes
