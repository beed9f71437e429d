"""Small integer ids for hashable values the hot loops would otherwise hash again and again.

A frozen dataclass (a selector, an affinity term, a node selector term) recomputes its hash on every
dict lookup; per-node memos keyed by such values pay that for every node of every decision. Each
distinct value gets a number once per pod instead; the least recently used are forgotten beyond
`size`, and a forgotten value comes back with a new number (numbers are never reused), so a memo keyed
by an old number is merely never hit again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable


class SmallIds:
    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._ids: OrderedDict[Hashable, int] = OrderedDict()
        self._next = 0

    def __call__(self, value: Hashable) -> int:
        found = self._ids.get(value)
        if found is not None:
            self._ids.move_to_end(value)
            return found
        self._next += 1
        self._ids[value] = self._next
        if len(self._ids) > self.size:
            self._ids.popitem(last=False)
        return self._next
