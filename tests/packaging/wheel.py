"""Building the project's wheel the way a user would, from this checkout's files, without touching the
checkout: the files git knows (tracked, or new and not ignored) are copied to a folder of their own and
the wheel is built there with the build backend of this environment (setuptools, pinned in
constraints.txt), so no build dependency is fetched and two builds never share a `build/` folder."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]


def checkout_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=CHECKOUT,
        capture_output=True,
        check=True,
    )
    names = [n for n in listed.stdout.decode().split("\0") if n]
    return [n for n in names if (CHECKOUT / n).is_file()]  # a file deleted but not yet staged is gone


def build_wheel(workdir: Path) -> Path:
    """The wheel, built from a copy of the checkout under workdir; returns its path."""
    source = workdir / "source"
    for name in checkout_files():
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(CHECKOUT / name, target)
    out = workdir / "dist"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = out.glob("pykubelet-*.whl")
    return wheel


def wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())
