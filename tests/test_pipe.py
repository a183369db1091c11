"""A reader that closes the pipe early (`dreamd sessions | head`) ends the command quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, big_file, built_once, dreamd_env


def build(where: Path) -> None:
    db = where / "memory.db"
    big_file(db, 1200, 1)
    run = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), "--force"], cwd=ROOT,
                         env=dreamd_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.fixture(scope="session")
def dreamed(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """1,200 one-turn sessions after one pass: `sessions` alone prints more than a pipe
    holds (64 KiB), so its writes meet the closed pipe while it runs. Built once for the
    run: every command here only reads it."""
    return built_once(tmp_path_factory, worker_id, "pipe", build) / "memory.db"


@pytest.mark.parametrize("command", [
    ["sessions"], ["users"], ["show"], ["status"], ["status", "--json"],
    ["export", "--user", "default"], ["recall", "a day out", "-k", "50"],
    ["context", "s00001"], ["--help"],
])
def test_a_closed_pipe_ends_quietly(dreamed: Path, command: list[str]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "dreamd", "--db", str(dreamed), *command],
                            cwd=ROOT, env=dreamd_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10)  # it printed, then the reader went away
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    proc.wait(timeout=300)
    assert proc.returncode in (0, 141), (proc.returncode, err)
    assert err == ""
