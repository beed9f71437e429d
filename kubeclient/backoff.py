"""Exponential backoff with jitter, for API retries, informer reconnects and heartbeat loops.

Jitter keeps many clients (or many watches) that failed at the same moment from retrying in lockstep.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    initial: float = 0.1
    maximum: float = 7.0
    factor: float = 2.0
    jitter: float = 0.2
    _current: float = field(default=0.0, init=False)

    def next(self) -> float:
        """The delay before the next attempt; grows until `maximum`."""
        self._current = self.initial if self._current == 0 else min(self._current * self.factor, self.maximum)
        return self._current * (1 + random.uniform(0, self.jitter))

    def reset(self) -> None:
        self._current = 0.0
