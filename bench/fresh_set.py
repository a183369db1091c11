"""The fresh set: conversations written for evaluation only, in styles dreamd was not shaped
on (terse, long-winded, non-native English, two friends, a user and an assistant, a busy
month), each with the facts a careful reader would keep.

    python -m bench.quality fresh [DIR]   # facts, profile and the reader checks on it

Nothing in dreamd may learn from these files: they are not in dreamd/data, not in the
tests' fixtures, and no word list or rule may be grown from them (tests/test_layout.py
holds the first two). The text format, one file a conversation:

    # <sample id>: what it is
    speakers: A, B
    ## session 1: 2:05 pm on 3 March, 2024
    A: words [img: a caption] words      (an image the speaker shares, as LoCoMo's blip_caption)
    ### facts
    A | 3,5 | A statement a careful reader keeps, from turns 3 and 5 of this session

is read into LoCoMo's shape (`conversation`, `observation`), so bench.quality scores it
exactly as it scores LoCoMo's annotators.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent / "fresh"
_IMAGE = re.compile(r"\s*\[img:\s*([^\]]*)\]\s*")
_SESSION = re.compile(r"^## session (\d+): (.+)$")


def parse(text: str, name: str) -> dict[str, Any]:
    """One conversation file as a LoCoMo conversation with its observations."""
    conversation: dict[str, Any] = {}
    observation: dict[str, dict[str, list[list[Any]]]] = {}
    sample, session, in_facts = name, 0, False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("# "):
            sample = line[2:].split(":", 1)[0].strip()
        elif line.startswith("speakers:"):
            a, b = (s.strip() for s in line.split(":", 1)[1].split(","))
            conversation["speaker_a"], conversation["speaker_b"] = a, b
        elif m := _SESSION.match(line):
            session, in_facts = int(m.group(1)), False
            conversation[f"session_{session}_date_time"] = m.group(2).strip()
            conversation[f"session_{session}"] = []
        elif line == "### facts":
            in_facts = True
        elif in_facts:
            who, turns, statement = (part.strip() for part in line.split("|", 2))
            evidence = [f"D{session}:{int(n)}" for n in turns.split(",")]
            observation.setdefault(f"session_{session}_observation", {}).setdefault(
                who, []).append([statement, evidence])
        elif session and ":" in line and not line.startswith(("style:",)):
            speaker, said = line.split(":", 1)
            turns_so_far = conversation[f"session_{session}"]
            turn: dict[str, Any] = {"speaker": speaker.strip(),
                                    "dia_id": f"D{session}:{len(turns_so_far) + 1}"}
            image = _IMAGE.search(said)
            if image:
                turn["blip_caption"] = image.group(1).strip()
                said = _IMAGE.sub(" ", said)
            turn["text"] = said.strip()
            turns_so_far.append(turn)
    return {"sample_id": sample, "conversation": conversation, "observation": observation,
            "qa": []}


def load(folder: Path = HERE) -> list[dict[str, Any]]:
    """Every conversation of the set, in file-name order."""
    return [parse(path.read_text("utf-8"), path.stem) for path in sorted(folder.glob("*.txt"))]
