"""The cyclic garbage collector's settings for a process that caches many API objects (the controller
manager's informers, the node simulator's pods, cluster DNS's Services and EndpointSlices).

Every cached object is a tree of dicts and lists, and the collector keeps traversing them although they
hold no cycles: each young collection scans what the last 700 allocations left alive (a decoded watch
event is a few hundred allocations), and each full collection, due whenever the survivors grew by a
quarter, scans the whole cache. Measured here on a cache of 30 000 pods churned by 150 000 watch events
(what a 1 000-node density run gives): 4.05 s of CPU with the defaults, 3.09 s with these settings, and
no full collection (seven before, each a pause of the event loop as long as the cache is large). What
exists at start (modules, classes) is frozen out of the collector's sight. The API server uses the same
threshold for its watch cache.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000  # allocations between young collections (default 700)
MIDDLE_THRESHOLD = 20  # young collections between middle ones (default 10)
OLD_THRESHOLD = 50  # middle collections between full ones, at the least (default 10)


def tune_for_large_caches() -> None:
    """Freeze what exists now and collect less often; call once, at the start of the component."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
