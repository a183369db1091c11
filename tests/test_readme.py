"""The chat-app examples, run as written (only the file's path differs): the full one in
the docs (docs/how-to/python-app.md, moved there from the README) and the README's short
one."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT, dreamd_env


def block(path: Path, heading: str, language: str = "python") -> str:
    """The first `language` block after `heading` in a Markdown file."""
    text = path.read_text(encoding="utf-8")
    section = text[text.index(heading):]
    match = re.search(rf"```{language}\n(.*?)```", section, flags=re.S)
    assert match, f"no {language} block under {heading!r} in {path.name}"
    return match.group(1)


def readme_block(heading: str) -> str:
    return block(ROOT / "README.md", heading)


def dreamed_with_alice(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The demo file dreamed once, with a second user of a multi-user app, as the
    examples have."""
    db = tmp_path / "memory.db"
    env = dreamd_env(DREAMD_CONFIG=str(ROOT / "examples" / "demo.toml"))
    for args in (["demo"], ["--force"]):
        subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), *args], cwd=ROOT,
                       env=env, check=True, capture_output=True)
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO sessions (id, name, created_at, user_id) "
                 "VALUES ('a-1', 'alice', '2024-06-01T10:00:00+00:00', 'alice')")
    conn.executemany("INSERT INTO exchanges (session_id, role, content, created_at) "
                     "VALUES ('a-1', 'user', ?, ?)",
                     [("My cat is called Miso", "2024-06-01T10:00:00+00:00"),
                      ("Miso is ten now", "2025-03-01T10:00:00+00:00")])
    conn.commit()
    conn.close()
    return db, env


def run(code: str, tmp_path: Path, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_chat_app_example_runs_and_reads_the_daemons_config(tmp_path: Path) -> None:
    db, env = dreamed_with_alice(tmp_path)
    code = block(ROOT / "docs" / "how-to" / "python-app.md",
                 "# Integrate a Python chat app").replace("/var/lib/chat/memory.db", str(db))
    code += ("\nassert memory.config.agent.id == 'wren', memory.config.agent\n"
             "print('SELF', 'How I am' in block.text)\n"
             "print('EXPORT', document['format'])\n")
    out = run(code, tmp_path, env)
    assert "SELF True" in out, out
    assert "EXPORT dreamd-export/1" in out


def test_the_readmes_short_example_runs(tmp_path: Path) -> None:
    db, env = dreamed_with_alice(tmp_path)
    code = readme_block("## Using it from a chat app").replace("/var/lib/chat/memory.db",
                                                               str(db))
    code += "\nprint('BLOCK', block.tokens <= 1500, 'Biscuit' in system_prompt)\n"
    out = run(code, tmp_path, env)
    assert "BLOCK True True" in out, out
