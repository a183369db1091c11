"""Frozen dataclasses the layers hand each other."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

DRIVE_NAMES = ("continuity", "coherence", "curiosity", "stability")
DEFAULT_BOUND = 4000  # characters a model's answer may keep when its job names none


@dataclass(frozen=True)
class Turn:
    id: int
    session_id: str
    role: str
    content: str
    created_at: str


@dataclass(frozen=True)
class Gist:
    session_id: str
    content: str
    last_exchange_id: int
    month: str
    seq: int


# Tasks whose answer is one JSON object, checked against its schema by its job (not for
# echoes or copies, and bounded field by field).
JSON_TASKS = frozenset({"reflect", "facts"})


@dataclass(frozen=True)
class Fact:
    """One statement about a person, with when it held and where it came from."""

    id: int
    user_id: str
    subject: str
    about: str | None  # what a newer fact of the subject replaces ("job", "home", ...)
    statement: str
    valid_from: str | None  # ISO date it became true, when the conversation says
    learned_at: str  # when it was said
    valid_to: str | None = None  # when a newer fact replaced it
    replaced_by: int | None = None
    sources: tuple[int, ...] = ()  # the turns it came from
    # A person's word on it (dreamd.memory.corrections): who made it ("llm:…",
    # "extractive:…", "person:<who>" for one a person stated or corrected into it), its
    # version (each change adds one), pinned, withdrawn ("retracted", "corrected",
    # "reverted": kept as history, in no tier) and when a person last spoke on it.
    origin: str = ""
    version: int = 1
    pinned: bool = False
    withdrawn: str | None = None
    word_at: str | None = None

    @property
    def current(self) -> bool:
        return self.replaced_by is None and self.withdrawn is None

    @property
    def by_person(self) -> bool:
        """Stated or corrected into these words by a person, or pinned: shown to a model as
        known, replaced only by a turn newer than the person's word."""
        return self.pinned or self.origin.startswith("person:")


@dataclass(frozen=True)
class Correction:
    """A person's word on one fact, as its own row: who, when, what and why.

    `action` is correct, retract, pin, unpin, add or revert; `old`/`new` the statement
    before and after (correct, add); `new_fact` the fact a correction or an addition made;
    `reverts` the correction a revert undid, `reverted_by` the revert that undid this."""

    id: int
    user_id: str
    fact_id: int
    action: str
    made_by: str
    why: str | None
    made_at: str
    old: str | None = None
    new: str | None = None
    new_fact: int | None = None
    reverts: int | None = None
    reverted_by: int | None = None
    seq: int = 0


@dataclass(frozen=True)
class DiaryLine:
    """What one pass changed for one user, one line at a time: `kind` is fact_added,
    fact_replaced, honoured, profile_added, profile_dropped or gist; `detail` its ids and
    words."""

    run_id: int
    user_id: str
    job: str
    kind: str
    detail: dict[str, Any]
    made_at: str


@dataclass(frozen=True)
class BacklogStats:
    """What sensing saw: how much memory is waiting to be consolidated."""

    sessions: int = 0
    dirty: int = 0
    ripe: int = 0
    idle_ripe: int = 0
    unsummarized_turns: int = 0
    idle_ripe_turns: int = 0
    unembedded_turns: int = 0
    unindexed_turns: int = 0  # turns not in the words index yet (a vector may be)
    turns_without_facts: int = 0
    gists_newer_than_profile: int = 0
    stale_months: int = 0
    narrative_stale: bool = False
    turns_since_reflection: int = 0
    gists_since_reflection: int = 0
    last_reflection_at: str | None = None
    max_exchange_id: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Drives:
    continuity: float = 0.0
    coherence: float = 0.0
    curiosity: float = 0.0
    stability: float = 1.0

    def as_dict(self) -> dict[str, float]:
        return {name: round(getattr(self, name), 3) for name in DRIVE_NAMES}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Drives:
        data = data or {}
        values = {}
        for name in DRIVE_NAMES:
            raw = data.get(name)
            if isinstance(raw, int | float) and 0.0 <= float(raw) <= 1.0:
                values[name] = float(raw)
        return cls(**values)


@dataclass(frozen=True)
class JobDecision:
    """Whether one job runs in this pass, and the reason in words."""

    job: str
    due: bool
    reason: str


@dataclass(frozen=True)
class Decision:
    drives: Drives
    jobs: tuple[JobDecision, ...]

    def job(self, name: str) -> JobDecision:
        return next(j for j in self.jobs if j.job == name)


@dataclass(frozen=True)
class JobSpec:
    """A job as the pass sees it, declared by the job's own module and registered in
    dreamd.dream.jobs.registry: the job order, the drive map and the backends' per-task model
    and size tables are all built from these.

    `work(stats, force, config)` is pure: whether the backlog snapshot holds work for the
    job, and what, in words. `run(ctx, reason)` does it. `model_key` names the
    `[completer]` key of the job's own model; `bounds` maps each prompt task the job
    sends to the characters its answer may keep. `needs` names the jobs whose work it
    reads: with an LLM taking several calls at once, a job starts as soon as those are
    done, beside the others (dreamd.dream.lanes); None, every job before it."""

    name: str
    drive: str
    work: Callable[[BacklogStats, bool, Any], tuple[bool, str]]
    run: Callable[[Any, str], JobResult]
    model_key: str = ""
    bounds: Mapping[str, int] = field(default_factory=dict)
    needs: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Prompt:
    """One request to a Completer.

    `system` and `user` are the rendered prompt an LLM reads; `items` is the same
    material as separate pieces, which an extractive backend selects from. Content
    that came from conversations is in `items`/`user` as data, never instructions.
    """

    task: str
    system: str
    user: str
    items: tuple[str, ...] = ()
    max_items: int = 8
    vectors: Any = None  # optional float32 matrix, one row per item, from the store
    context: dict[str, Any] = field(default_factory=dict)
    # Set from the job's spec when the call is made: the [completer] key naming the
    # model for this task ("" = completer.model) and the characters the answer may keep.
    model_key: str = ""
    max_chars: int = DEFAULT_BOUND
    # A JSON schema the answer must follow, sent as `response_format` where the server
    # honours one (OpenAI structured outputs; llama.cpp, vLLM and Ollama make a grammar
    # of it); None for a text answer.
    schema: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Completion:
    text: str
    backend: str
    model: str
    tokens_in: int = 0
    tokens_out: int = 0
    extractive: bool = False


@dataclass(frozen=True)
class JobResult:
    job: str
    ran: bool
    reason: str
    done: int = 0
    failed: int = 0
    skipped: int = 0
    remaining: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    errors: tuple[str, ...] = ()
    seconds: float = 0.0
    # What became of the model's answers (see dreamd.dream.jobs.asking.Ledger); empty
    # without an LLM.
    answers: Mapping[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3),
            "job": self.job,
            "ran": self.ran,
            "reason": self.reason,
            "done": self.done,
            "failed": self.failed,
            "skipped": self.skipped,
            "remaining": self.remaining,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "errors": list(self.errors),
            **({"answers": dict(self.answers)} if self.answers else {}),
        }


@dataclass(frozen=True)
class PassResult:
    run_id: int
    outcome: str
    drives_before: Drives
    drives_after: Drives
    stats_before: BacklogStats
    stats_after: BacklogStats
    jobs: tuple[JobResult, ...]
    notes: tuple[str, ...] = ()
    tokens_in: int = 0
    tokens_out: int = 0
    write_lock: dict[str, float] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(j.failed for j in self.jobs)
