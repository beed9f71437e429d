"""The READMEs' maps stay true: a module table names only files that exist and misses none.

A newcomer reads a package's README before its code; a table that names a module deleted two sessions
ago, or leaves out the three added since, sends them the wrong way. A README "has a module table" when a
table row's first cell is a backticked file or folder name (`client.py`, `filters/`); for such a README
every name in a first cell must exist beside it, and every Python module of its folder (not
`__init__.py`) must be named, in backticks, somewhere in the README. The top README's layout table
must list every top-level package of the distribution.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROW_NAME = re.compile(r"^\|\s*`([^`]+)`")
SKIP = {".git", ".venv", "node_modules", "build", "dist"}


def _readmes() -> list[Path]:
    found = []
    for path in ROOT.rglob("README.md"):
        rel = path.relative_to(ROOT)
        if any(part in SKIP or part.startswith(".venv") for part in rel.parts):
            continue
        found.append(path)
    return sorted(found)


def _first_cells(text: str) -> list[str]:
    names = []
    for line in text.splitlines():
        match = ROW_NAME.match(line)
        if match and (match.group(1).endswith(".py") or match.group(1).endswith("/")):
            names.append(match.group(1))
    return names


def _module_tables() -> list[Path]:
    return [p for p in _readmes() if p.parent != ROOT and _first_cells(p.read_text())]


@pytest.mark.parametrize("readme", _module_tables(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_table_names_only_what_exists(readme: Path) -> None:
    missing = [name for name in _first_cells(readme.read_text()) if not (readme.parent / name).exists()]
    assert not missing, f"{readme.relative_to(ROOT)} names files that do not exist: {missing}"


@pytest.mark.parametrize("readme", _module_tables(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_table_misses_no_module(readme: Path) -> None:
    text = readme.read_text()
    unnamed = sorted(
        module.name
        for module in readme.parent.glob("*.py")
        if module.name != "__init__.py" and f"`{module.name}`" not in text
    )
    assert not unnamed, f"{readme.relative_to(ROOT)} does not name these modules of its folder: {unnamed}"


def _top_level_packages() -> list[str]:
    pyproject = (ROOT / "pyproject.toml").read_text()
    include = re.search(r"\[tool\.setuptools\.packages\.find\]\s*include\s*=\s*\[([^\]]*)\]", pyproject)
    assert include, "pyproject.toml lists no packages"
    return sorted(name.strip().strip('"').rstrip("*") for name in include.group(1).split(",") if name.strip())


def test_the_top_readme_lists_every_package() -> None:
    cells = set(_first_cells((ROOT / "README.md").read_text()))
    missing = [name for name in _top_level_packages() if f"{name}/" not in cells]
    assert not missing, f"README.md's layout table does not list these packages: {missing}"


def test_the_architecture_map_names_every_package() -> None:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    missing = [name for name in _top_level_packages() if f"`{name}/`" not in text]
    assert not missing, f"ARCHITECTURE.md does not name these packages: {missing}"


def test_the_controllers_identity_table_is_the_registry() -> None:
    from controlplane.controllers.registry import CONTROLLERS

    text = (ROOT / "controlplane/controllers/README.md").read_text()
    rows = set(re.findall(r"^\| `([a-z-]+)` \| `([a-z-]+)` \|$", text, re.MULTILINE))
    expected = {(name, cls.account_name()) for name, cls in CONTROLLERS.items()}
    assert rows == expected, f"README rows not in the registry: {rows - expected}; missing: {expected - rows}"
