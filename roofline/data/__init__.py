"""Loads the data tables shipped in roofline/data (TOML, read once per process)."""
from __future__ import annotations

import functools
import tomllib
from importlib import resources


@functools.lru_cache(maxsize=None)
def load_table(name: str) -> dict:
    text = resources.files("roofline.data").joinpath(f"{name}.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)
