"""`pykubelet completion bash|zsh`: scripts the shells accept, naming every subcommand and its flags."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from pykubelet.cli import SUBCOMMANDS


def script(shell: str) -> str:
    proc = subprocess.run(["pykubelet", "completion", shell], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_bash_script_parses_and_completes(tmp_path) -> None:
    text = script("bash")
    path = tmp_path / "pykubelet.bash"
    path.write_text(text)
    subprocess.run(["bash", "-n", str(path)], check=True)
    for name in SUBCOMMANDS:
        assert name in text
    # drive the completion function as bash would: `pykubelet ser<TAB>` and `pykubelet server --anon<TAB>`
    probe = (
        f"source {path}; COMP_WORDS=(pykubelet ser); COMP_CWORD=1; _pykubelet; echo ${{COMPREPLY[@]}}; "
        "COMP_WORDS=(pykubelet server --anon); COMP_CWORD=2; _pykubelet; echo ${COMPREPLY[@]}; "
        "COMP_WORDS=(pykubelet scheduler --leader-elect-l); COMP_CWORD=2; _pykubelet; echo ${COMPREPLY[@]}"
    )
    out = subprocess.run(
        ["bash", "-c", probe], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == ["server", "--anonymous-auth", "--leader-elect-lease-duration"]


def test_zsh_script() -> None:
    text = script("zsh")
    assert text.startswith("#compdef pykubelet")
    for name in SUBCOMMANDS:
        assert f"'{name}:" in text or f"{name}:" in text
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed: its syntax check needs it")
    subprocess.run(["zsh", "-n"], input=text, text=True, check=True)


def test_unknown_shell_refused() -> None:
    proc = subprocess.run(["pykubelet", "completion", "fish"], capture_output=True, text=True)
    assert proc.returncode == 2 and "invalid choice: 'fish'" in proc.stderr
