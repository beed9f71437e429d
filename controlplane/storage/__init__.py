"""Storage for the control plane: one revisioned key-value interface and the backends behind it.

The API server only ever talks to `Store` (interface.py); SQLite is the default backend, etcd (etcd.py)
the one for a control plane that outlives a machine; neither touches the REST layer. `WatchCache`
(cache.py) sits in front of a store so that watches and cheap lists never reach the backend.
"""

from controlplane.storage.interface import (
    CompactedError,
    ConflictError,
    Event,
    FutureRevisionError,
    KeyExistsError,
    KeyValue,
    NotFoundError,
    Store,
    StoreError,
    StoreRefusedError,
    StoreTooLargeError,
    StoreUnavailableError,
)

__all__ = [
    "CompactedError",
    "ConflictError",
    "Event",
    "FutureRevisionError",
    "KeyExistsError",
    "KeyValue",
    "NotFoundError",
    "Store",
    "StoreError",
    "StoreRefusedError",
    "StoreTooLargeError",
    "StoreUnavailableError",
]
