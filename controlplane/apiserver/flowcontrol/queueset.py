"""One priority level's seats and queues (upstream's fairqueuing/queueset, simplified).

A level has `seats` (its share of the server's concurrency). A request that finds a free seat and no
one waiting runs at once. Otherwise, with limitResponse Reject, it is refused ("concurrency-limit");
with Queue, shuffle sharding deals its flow a hand of `hand_size` of the level's queues and it joins the
shortest of them, unless that queue already holds `queue_length_limit` requests ("queue-full"). A
waiting request that gets no seat within the wait limit is refused ("time-out"); one whose client goes
away is dropped ("cancelled").

The fair queuing is simplified: each request costs one seat and a freed seat goes to the head of the
next non-empty queue in round-robin order (upstream orders queues by virtual finish time, which with
equal costs and equal-length requests comes to the same); seats are not borrowed between levels
(upstream's lendablePercent / borrowingLimitPercent).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field


class Rejected(Exception):
    """The level refused the request; `reason` is upstream's metric label."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def deal(hash_value: int, deck: int, hand: int) -> list[int]:
    """Shuffle sharding: `hand` distinct cards of a deck of `deck`, drawn from the hash's digits in
    mixed radix (deck, deck-1, ...), each remainder then shifted past the cards already drawn."""
    picks: list[int] = []
    for i in range(hand):
        hash_value, remainder = divmod(hash_value, deck - i)
        picks.append(remainder)
    cards: list[int] = []
    for i, card in enumerate(picks):
        for earlier in sorted(cards[:i]):
            if card >= earlier:
                card += 1
        cards.append(card)
    return cards


@dataclass(eq=False)
class Seat:
    """A held seat; `release` is idempotent (a watch gives its seat back once initialized)."""

    level: Level
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.level.finish()


@dataclass(eq=False)
class Level:
    name: str
    uid: str
    seats: int
    queues: int = 0  # 0: limitResponse Reject
    hand_size: int = 1
    queue_length_limit: int = 0
    wait_limit: float = 15.0
    executing: int = 0
    waiting: int = 0
    dispatched: int = 0
    rejected: int = 0
    timed_out: int = 0
    cancelled: int = 0
    _queues: list[deque[asyncio.Future[None]]] = field(default_factory=list)
    _next: int = 0

    def __post_init__(self) -> None:
        self._queues = [deque() for _ in range(self.queues)]

    def reconfigure(self, uid: str, seats: int, queues: int, hand_size: int, queue_length_limit: int) -> None:
        self.uid, self.seats, self.hand_size, self.queue_length_limit = (
            uid,
            seats,
            hand_size,
            queue_length_limit,
        )
        if queues != self.queues:
            old = [f for q in self._queues for f in q]
            self.queues = queues
            # Who waits keeps waiting (with Reject now, in one queue that drains and takes no one new).
            self._queues = [deque() for _ in range(max(queues, 1 if old else 0))]
            for i, waiter in enumerate(old):
                self._queues[i % len(self._queues)].append(waiter)
            self._next = 0
        self._dispatch()

    async def acquire(self, hash_value: int) -> tuple[Seat, float]:
        """A seat, and the seconds waited for it; raises Rejected."""
        if self.executing < self.seats and self.waiting == 0:
            self.executing += 1
            self.dispatched += 1
            return Seat(self), 0.0
        if not self.queues:
            self.rejected += 1
            raise Rejected("concurrency-limit")
        hand = deal(hash_value, self.queues, self.hand_size) if self.queues > 1 else [0]
        queue = min((self._queues[i] for i in hand), key=len)
        if len(queue) >= self.queue_length_limit:
            self.rejected += 1
            raise Rejected("queue-full")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(waiter)
        self.waiting += 1
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.wait_limit):
                await asyncio.shield(waiter)
        except TimeoutError:
            if not self._handed(waiter):
                self._abandon(waiter)
                self.timed_out += 1
                self.rejected += 1
                raise Rejected("time-out") from None
        except asyncio.CancelledError:
            if self._handed(waiter):
                self.finish()
            else:
                self._abandon(waiter)
                self.cancelled += 1
            raise
        return Seat(self), time.monotonic() - started

    @staticmethod
    def _handed(waiter: asyncio.Future[None]) -> bool:
        """Whether a seat reached the waiter just as it gave up."""
        return waiter.done() and not waiter.cancelled()

    def _abandon(self, waiter: asyncio.Future[None]) -> None:
        for queue in self._queues:
            if waiter in queue:
                queue.remove(waiter)
                self.waiting -= 1
                break
        waiter.cancel()

    def finish(self) -> None:
        self.executing -= 1
        self._dispatch()

    def _dispatch(self) -> None:
        while self.executing < self.seats and self.waiting > 0:
            for _ in range(len(self._queues)):
                queue = self._queues[self._next]
                self._next = (self._next + 1) % len(self._queues)
                if queue:
                    waiter = queue.popleft()
                    self.waiting -= 1
                    self.executing += 1
                    self.dispatched += 1
                    waiter.set_result(None)
                    break
            else:
                return

    @property
    def active_queues(self) -> int:
        return sum(1 for q in self._queues if q)
