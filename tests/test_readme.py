"""The README's chat-app example, run as written (only the file's path differs)."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT, dreamd_env


def readme_block(heading: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index(heading):]
    match = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert match, f"no python block under {heading!r}"
    return match.group(1)


def test_the_chat_app_example_runs_and_reads_the_daemons_config(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    env = dreamd_env(DREAMD_CONFIG=str(ROOT / "examples" / "demo.toml"))
    for args in (["demo"], ["--force"]):
        subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), *args], cwd=ROOT,
                       env=env, check=True, capture_output=True)
    conn = sqlite3.connect(db)  # a second user of a multi-user app, as the example has
    conn.execute("INSERT INTO sessions (id, name, created_at, user_id) "
                 "VALUES ('a-1', 'alice', '2024-06-01T10:00:00+00:00', 'alice')")
    conn.executemany("INSERT INTO exchanges (session_id, role, content, created_at) "
                     "VALUES ('a-1', 'user', ?, ?)",
                     [("My cat is called Miso", "2024-06-01T10:00:00+00:00"),
                      ("Miso is ten now", "2025-03-01T10:00:00+00:00")])
    conn.commit()
    conn.close()
    code = readme_block("## Using it from a chat app").replace("/var/lib/chat/memory.db",
                                                               str(db))
    code += ("\nassert memory.config.agent.id == 'wren', memory.config.agent\n"
             "print('SELF', 'How I am' in block.text)\n"
             "print('EXPORT', document['format'])\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "SELF True" in run.stdout, run.stdout
    assert "EXPORT dreamd-export/1" in run.stdout
