from __future__ import annotations

import subprocess

from pykubelet.rig import install
from pykubelet.rig.containerd import oom_score_adj_restricted


def test_everything_the_rig_drives_is_installed() -> None:
    """`./dev test` ran the install step first: nothing may be missing, and a second run installs nothing."""
    assert install.missing_packages() == []
    assert install.ensure_packages() == []


def test_oom_score_adj_detection_matches_the_machine() -> None:
    wrote = subprocess.run(["sh", "-c", "echo -5 > /proc/self/oom_score_adj"], check=False).returncode == 0
    assert oom_score_adj_restricted() is (not wrote)
