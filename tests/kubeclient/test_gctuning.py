"""tune_for_large_caches: what exists is frozen, and young collections come after 20 000 allocations, not
700 (a process that decodes watch events into a large cache spent a quarter of its CPU in the collector)."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import gc
from kubeclient.gctuning import tune_for_large_caches
before = gc.get_freeze_count()
tune_for_large_caches()
print(gc.get_threshold(), before == 0 and gc.get_freeze_count() > 0)
"""


def test_freezes_what_exists_and_raises_the_thresholds() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["(20000,", "20,", "50)", "True"]
