"""What a pass's process loads to start: an idle daemon starts one every interval, most
of them with nothing to do, so what such a pass imports is paid again and again."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from dreamd import config as cfg
from dreamd.models import PassResult
from dreamd.runtime.health import Health
from dreamd.runtime.pass_process import PassProcess, PassRequest
from tests.helpers import big_file, dreamd_env


def imported(stderr: str) -> set[str]:
    """The modules a process imported, from its `-X importtime` lines."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def test_a_pass_with_nothing_to_do_loads_no_model_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The pass's own process, as the daemon starts it, on a file it has caught up with:
    no job runs, and it never imports the model's runtime, the tokenizer, the OpenAI
    client, the local model's module or pydantic (the models of a model's answers, loaded
    once a prompt or an answer needs them)."""
    db = tmp_path / "memory.db"
    big_file(db, 5, 6)
    config = cfg.load(environ=dreamd_env(), db=str(db))

    def one_pass(trigger: str, force: bool) -> tuple[PassResult, set[str]]:
        capfd.readouterr()
        result = PassProcess(PassRequest(config, trigger, force, os.getpid()), Health(),
                             threading.Event()).run()
        return result, imported(capfd.readouterr().err)

    first, _ = one_pass("force", True)  # catches up
    assert first.outcome == "ok" and first.jobs[0].done == 30  # every turn embedded
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # the pass's process reports them
    idle, modules = one_pass("schedule", False)
    assert idle.outcome == "ok"
    assert [r.job for r in idle.jobs if r.ran] == []
    assert "dreamd.dream.cycle" in modules  # the report is the pass's own
    loaded = sorted(name for name in ("onnxruntime", "tokenizers", "openai", "pydantic",
                                      "dreamd.backends.local", "dreamd.dream.answers")
                    if name in modules)
    assert loaded == [], loaded
