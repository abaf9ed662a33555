"""The test command's install path: chromium is installed when missing, and its absence fails the browser tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "install-system-deps.sh"


def _fake_commands(bin_dir: Path, log: Path, uid: int) -> dict[str, str]:
    """`id`, `sudo` and `apt-get` stand-ins that log how they were called; returns the environment to run with."""
    bin_dir.mkdir()
    scripts = {
        "id": f"#!/bin/sh\necho {uid}\n",
        "sudo": f'#!/bin/sh\necho "sudo $*" >> {log}\nexec "$@"\n',
        "apt-get": f'#!/bin/sh\necho "apt-get $*" >> {log}\n',
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_the_install_script_installs_chromium_through_sudo_when_missing_and_not_root(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    env = _fake_commands(tmp_path / "bin", log, uid=1000)
    env["CHROMIUM"] = str(tmp_path / "no-chromium")
    subprocess.run(["sh", str(SCRIPT)], env=env, check=True)
    calls = log.read_text().splitlines()
    assert calls[0] == "sudo apt-get update"
    assert calls[-1].startswith("apt-get install -y") and calls[-1].endswith(" chromium")
    assert any(call.startswith("sudo env DEBIAN_FRONTEND=noninteractive apt-get install") for call in calls)


def test_the_install_script_runs_apt_get_directly_as_root_and_does_nothing_when_chromium_is_there(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    env = _fake_commands(tmp_path / "bin", log, uid=0)
    env["CHROMIUM"] = str(tmp_path / "no-chromium")
    subprocess.run(["sh", str(SCRIPT)], env=env, check=True)
    assert [call.split()[:2] for call in log.read_text().splitlines()] == [["apt-get", "update"], ["apt-get", "install"]]
    log.unlink()
    env["CHROMIUM"] = str(tmp_path / "bin" / "id")  # any executable stands for an installed chromium
    subprocess.run(["sh", str(SCRIPT)], env=env, check=True)
    assert not log.exists()


def test_a_missing_chromium_fails_the_browser_test_naming_the_install_script_instead_of_skipping(tmp_path: Path) -> None:
    env = {**os.environ, "CHROMIUM": str(tmp_path / "no-chromium"), "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "tests/browser/test_chat_page.py"],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    assert result.returncode != 0
    assert "sh tests/install-system-deps.sh" in result.stdout
    assert "skipped" not in result.stdout
