"""The CLI: one clear line and exit 2 for bad input, nothing written; status and show."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from dreamd.cli.commands import main
from dreamd.text.keys import space
from tests.helpers import add_turns, chat_texts, make_chat_file

ROOT = Path(__file__).parent.parent


def files_digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def invoke(*args: str, env: dict[str, str] | None = None):
    base = {"DREAMD_EMBED__BACKEND": "hashing"}
    return CliRunner().invoke(main, list(args), env={**base, **(env or {})})


def test_non_sqlite_db_is_one_line_and_untouched(tmp_path: Path) -> None:
    db = tmp_path / "notes.txt"
    db.write_text("shopping list\n")
    before = files_digest(tmp_path)
    result = invoke("--db", str(db), "--force")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"Error: {db} is not an SQLite database file"]
    assert files_digest(tmp_path) == before


def test_missing_directory_is_refused(tmp_path: Path) -> None:
    result = invoke("--db", str(tmp_path / "no" / "m.db"), "--force")
    assert result.exit_code == 2 and "does not exist" in result.output
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize(
    ("config_text", "env", "message"),
    [
        ("[summarize]\nafte = 3\n", {}, "summarize.afte is not a known configuration key"),
        ("[summarize]\nafter = 0\n", {}, "summarize.after must be at least 1, got 0"),
        ("", {"DREAMD_SUMMARIZE__AFTER": "-1"}, "summarize.after must be at least 1"),
    ],
)
def test_bad_config_is_named_and_the_file_unchanged(
    tmp_path: Path, config_text: str, env: dict[str, str], message: str
) -> None:
    db = tmp_path / "memory.db"
    conn = make_chat_file(db)
    add_turns(conn, "s", chat_texts(0, 4))
    conn.close()
    config = tmp_path / "dreamd.toml"
    config.write_text(config_text)
    before = files_digest(tmp_path)
    result = invoke("--db", str(db), "--config", str(config), "--force", env=env)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
    assert files_digest(tmp_path) == before


def test_status_without_a_file_does_not_create_one(tmp_path: Path) -> None:
    result = invoke("--db", str(tmp_path / "m.db"), "status")
    assert result.exit_code == 2 and "does not exist" in result.output
    assert list(tmp_path.iterdir()) == []


def test_force_then_status_and_show(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    assert invoke("--db", str(db), "demo").exit_code == 0
    forced = invoke("--db", str(db), "--force")
    assert forced.exit_code == 0, forced.output
    status = invoke("--db", str(db), "status", "--json")
    data = json.loads(status.output)
    assert data["backlog"]["dirty"] == 0 and data["drives"]["stability"] == 1.0
    run = data["runs"][0]
    assert run["outcome"] == "ok" and {j["job"] for j in run["jobs"] if j["ran"]} == {
        "embed", "facts", "summarize", "profile", "eras", "narrative", "reflect"}
    text = invoke("--db", str(db), "status").output
    assert "summarize  ran" in text and "forced:" in text
    shown = invoke("--db", str(db), "show").output
    assert "== profile" in shown and "Recent arc" in shown and "self_narrative" in shown


def test_subcommand_with_force_is_refused(tmp_path: Path) -> None:
    result = invoke("--db", str(tmp_path / "m.db"), "--force", "status")
    assert result.exit_code == 2 and "do not go with a subcommand" in result.output


def test_read_only_file_is_refused(tmp_path: Path) -> None:
    """A file the user may read but not write: one line, exit 2, nothing changed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMD_")}
    env.update(PYTHONPATH=str(ROOT), DREAMD_EMBED__BACKEND="hashing", HOME=str(tmp_path))
    command = [sys.executable, "-m", "dreamd"]
    where = tmp_path
    if os.geteuid() == 0:
        # Root writes anyway: run as nobody, in a directory of the test's own that
        # nobody may enter (pytest's own base directory is 0700).
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root cannot be dropped without setpriv (util-linux)")
        command = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *command]
        probe = subprocess.run([*command, "--version"], capture_output=True, env=env,
                               cwd="/", timeout=300)
        if probe.returncode != 0:
            pytest.skip("the unprivileged user cannot run dreamd from this checkout (a "
                        "directory above it is closed to others); run as a non-root user")
        where = Path(tempfile.mkdtemp(prefix="dreamd-ro-"))
        where.chmod(0o755)
    try:
        db = where / "memory.db"
        conn = make_chat_file(db)
        add_turns(conn, "s", chat_texts(0, 4))
        conn.close()
        db.chmod(0o444)
        before = files_digest(where)
        run = subprocess.run([*command, "--db", str(db), "--force"], capture_output=True,
                             text=True, env=env, cwd=ROOT, timeout=300)
        assert run.returncode == 2, run.stderr
        assert run.stderr.strip().splitlines()[-1] == \
            f"Error: {db} is read-only: dreamd needs to write its derived memory"
        assert files_digest(where) == before
    finally:
        if where != tmp_path:
            shutil.rmtree(where)


def test_demo_pass_with_the_real_local_embedder(tmp_path: Path) -> None:
    """The quick start's path: the embedded default model, no network, no key."""
    db = tmp_path / "m.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMD_")}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), "demo"], check=True,
                   env=env, cwd=ROOT, capture_output=True)
    run = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), "--force"],
                         env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert '"event": "sqlite_library"' in run.stdout  # pass logs are JSON lines on stdout
    assert all(json.loads(line) for line in run.stdout.splitlines())
    status = subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), "status", "--json"],
                            env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    data = json.loads(status.stdout)
    assert data["backlog"]["unembedded_turns"] == 0 and data["backlog"]["dirty"] == 0
    import sqlite3

    conn = sqlite3.connect(db)
    models = {r[0] for r in conn.execute("SELECT DISTINCT model FROM dreamd_exchange_vectors")}
    assert models == {space("all-MiniLM-L6-v2-int8")}
    dims = {r[0] for r in conn.execute("SELECT DISTINCT length(vector) FROM dreamd_vectors")}
    assert dims == {384 * 4}


def test_recall_and_context_commands(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    assert invoke("--db", str(db), "demo").exit_code == 0
    assert invoke("--db", str(db), "--force").exit_code == 0
    found = invoke("--db", str(db), "recall", "Biscuit terrier shelter", "-k", "2", "--json")
    hits = json.loads(found.output)
    assert len(hits) == 2 and "Biscuit" in hits[0]["content"]
    block = invoke("--db", str(db), "context", "s12", "--budget", "300", "--json")
    data = json.loads(block.output)
    assert data["tokens"] <= 300 and "## This conversation" in data["text"]
    missing = invoke("--db", str(tmp_path / "none.db"), "recall", "x")
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_the_demo_never_destroys_a_real_memory_file(tmp_path: Path) -> None:
    """--replace only replaces a file the demo made, never the default path, never a file
    a dreamd is working on."""
    real = tmp_path / "memory.db"
    conn = make_chat_file(real)
    add_turns(conn, "s", chat_texts(0, 4))
    conn.close()
    before = real.read_bytes()
    refused = invoke("--db", str(real), "demo", "--replace")
    assert refused.exit_code == 2
    assert "was not made by `dreamd demo`" in refused.output
    assert real.read_bytes() == before
    no_db = CliRunner().invoke(main, ["demo", "--replace"], env={"HOME": str(tmp_path)})
    assert no_db.exit_code == 2 and "give --db PATH" in no_db.output
    assert not (tmp_path / ".local").exists()

    demo = tmp_path / "demo.db"
    assert invoke("--db", str(demo), "demo").exit_code == 0
    assert invoke("--db", str(demo), "demo", "--replace").exit_code == 0  # its own file
    from dreamd.runtime.lock import InstanceLock

    held = InstanceLock(demo)
    held.acquire()  # as a daemon working on the demo file would
    try:
        busy = invoke("--db", str(demo), "demo", "--replace")
    finally:
        held.release()
    assert busy.exit_code == 3, busy.output
    assert demo.exists()
