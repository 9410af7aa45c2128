"""A bounded memo for pure functions of an inventory: one plan, capacity curve or doctor diagnosis
prices the same (simulated) inventory under the same scenario many times. Keyed by the object's
identity (an Inventory is a mutable dataclass, unhashable) plus hashable arguments; the entry holds
the object itself, so its id cannot be reused by another while the entry lives. Results are shared:
callers treat them as read-only, as every pure result in this package."""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Hashable, TypeVar

T = TypeVar("T")


class IdentityMemo:
    def __init__(self, size: int):
        self._size = size
        self._entries: OrderedDict[tuple[int, Hashable], tuple[object, object]] = OrderedDict()

    def get(self, obj: object, key: Hashable, compute: Callable[[], T]) -> T:
        slot = (id(obj), key)
        hit = self._entries.get(slot)
        if hit is not None and hit[0] is obj:
            self._entries.move_to_end(slot)
            return hit[1]  # type: ignore[return-value]
        value = compute()
        self._entries[slot] = (obj, value)
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return value
