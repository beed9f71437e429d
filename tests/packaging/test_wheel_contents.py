"""The wheel built from the repository holds every module of the project's packages and every file the
code reads at run time, and the code reads those files through importlib.resources (so they are found
in a wheel, a zip or a checkout alike), never by a path next to its own source file."""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

import pytest

from tests.packaging.wheel import CHECKOUT, build_wheel, checkout_files, wheel_files

PACKAGES = (
    "agent",
    "controlplane",
    "clusterdns",
    "journey",
    "kubeclient",
    "metricsserver",
    "nodesim",
    "serviceproxy",
    "pykubelet",
)

# Modules that may name their own file: the generators run by hand in a checkout (they read protos/ and
# the official client, and write into the source tree), and the CNI plugin's installer, which bakes the
# import root (site-packages in a wheel install) into the fallback command, a search path and no file read.
BY_PATH_ALLOWED = {
    "agent/cri/regen.py",
    "controlplane/storage/etcdregen.py",
    "controlplane/apiserver/gen_fields.py",
    "controlplane/apiserver/gen_mergemarkers.py",  # writes mergemarkers.json from upstream's definitions
    "controlplane/apiserver/protobuf/derive.py",  # derives tables.py from the fixtures, in a checkout
    "agent/cni/install.py",
    # the loop-stall watch strips the import root from the paths of the stacks it samples: no file read
    "controlplane/apiserver/loopstall.py",
}


def _sources() -> dict[str, ast.Module]:
    return {
        name: ast.parse((CHECKOUT / name).read_text(), name)
        for name in checkout_files()
        if name.endswith(".py") and name.split("/")[0] in PACKAGES
    }


def _files_call_package(node: ast.AST) -> str | None:
    """'pkg' for `resources.files("pkg")` / `importlib.resources.files("pkg")`, else None."""
    if not (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "files"
    ):
        return None
    owner = node.func.value
    named = (isinstance(owner, ast.Name) and owner.id == "resources") or (
        isinstance(owner, ast.Attribute) and owner.attr == "resources"
    )
    if named and len(node.args) == 1 and isinstance(node.args[0], ast.Constant):
        return str(node.args[0].value)
    return None


def resource_reads(tree: ast.Module) -> set[str]:
    """The files a module reads through importlib.resources, as wheel paths ("pkg/sub/name")."""
    found = set()
    for node in ast.walk(tree):
        # files("pkg") / "name" [/ "more"] and files("pkg").joinpath("name")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts, left = [], node
            while isinstance(left, ast.BinOp) and isinstance(left.op, ast.Div):
                if not isinstance(left.right, ast.Constant):
                    break
                parts.insert(0, str(left.right.value))
                left = left.left
            package = _files_call_package(left)
            if package and parts:
                found.add("/".join([*package.split("."), *parts]))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "joinpath"
        ):
            package = _files_call_package(node.func.value)
            if package and all(isinstance(a, ast.Constant) for a in node.args):
                found.add("/".join([*package.split("."), *(str(a.value) for a in node.args)]))
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_no_module_reads_a_file_next_to_its_source() -> None:
    offenders = sorted(
        f"{name}:{node.lineno}"
        for name, tree in _sources().items()
        if name not in BY_PATH_ALLOWED
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and node.id == "__file__"
    )
    assert not offenders, f"read these through importlib.resources: {offenders}"


def test_the_scan_finds_the_resources_the_code_reads() -> None:
    """The scanner below sees the reads it must see (else the wheel check would pass on nothing)."""
    reads = set().union(*(resource_reads(tree) for tree in _sources().values()))
    assert {
        "pykubelet/sample-pod.yaml",
        "pykubelet/rig/grpchealth.c",
        "agent/cni/shim.c",
        "controlplane/apiserver/fields.json",
        "controlplane/apiserver/fielddocs.json",
    } <= reads


def test_the_wheel_holds_every_resource_the_code_reads(wheel: Path) -> None:
    files = wheel_files(wheel)
    reads = set().union(*(resource_reads(tree) for tree in _sources().values()))
    assert reads, "no resource read found"
    assert not reads - files, f"read at run time but not in the wheel: {sorted(reads - files)}"


def test_the_wheel_holds_every_module_of_the_packages(wheel: Path) -> None:
    files = wheel_files(wheel)
    modules = {name for name in _sources()}
    assert not modules - files, f"modules missing from the wheel: {sorted(modules - files)}"
    # and nothing of the tests, benchmarks or e2e scenarios
    assert not {f for f in files if f.split("/")[0] in ("tests", "e2e", "bench")}


def test_the_wheel_declares_the_commands_and_the_licence(wheel: Path) -> None:
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        info = next(n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt"))
        entry_points = configparser.ConfigParser()
        entry_points.read_string(archive.read(info).decode())
        metadata = archive.read(info.replace("entry_points.txt", "METADATA")).decode()
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in archive.namelist())
    assert dict(entry_points["console_scripts"]) == {
        "pykubelet": "pykubelet.cli:main",
        "pykubelet-cni": "agent.cni.client:main",
    }
    assert "Requires-Python: >=3.11" in metadata
