"""The policy for asking a model: an answer's checks, asking once more, the extractive
fallback, and the counts of what became of the answers."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from dreamd.backends.llm_output import bounded
from dreamd.backends.protocols import Completer, Embedder
from dreamd.backends.validate import AGAIN, Refusal, refusal
from dreamd.config import Config
from dreamd.dream.extractive import ExtractiveCompleter
from dreamd.dream.jobs.topic import ON_TOPIC, topic_score
from dreamd.errors import OutputInvalid
from dreamd.logger import Logger
from dreamd.models import JSON_TASKS, Completion, JobSpec, Prompt

# Set on a thread while an item is built (or saved) by the extractive fallback: why the
# model's answer for it was rejected.
_FALLING_BACK: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "dreamd_falling_back", default=None)


@dataclass(frozen=True)
class FellBack:
    """An item's result built by the extractive producer after the model's answer was
    rejected twice; `why` says what was wrong with it."""

    value: Any
    why: str


@dataclass
class Ledger:
    """What became of the model's answers this pass, by job: counts under the names of
    ANSWER_COUNTS, and per check "refused_first:<check>" (an answer refused when first
    asked) and "dropped:<check>" (a fact dropped from an answer otherwise kept). One for
    the pass, shared by jobs side by side."""

    counts: dict[str, Counter[str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, job: str, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts.setdefault(job, Counter())[key] += n

    def of(self, job: str) -> Counter[str]:
        with self.lock:
            return Counter(self.counts.get(job, Counter()))


# asked: answers asked for the first time; kept_first: kept as first given; asked_again:
# asked once more after a refusal that a second request can mend; kept_again: kept then;
# refused: refused for good (twice, or once for what the same model would repeat);
# fell_back: items the extractive producer built instead; reask_tokens: tokens (in and
# out) the requests asked again cost.
ANSWER_COUNTS = ("asked", "kept_first", "asked_again", "kept_again", "refused", "fell_back",
                 "reask_tokens")

# Builds the request asked once more: from the request, why its answer was refused, and
# that answer.
Again = Callable[[Prompt, Refusal, str], Prompt]
# A job's own check of an answer's text: why it is refused, or None.
Check = Callable[[str], Refusal | None]
# One call of the model, as the pass makes it (within its budget and its slots).
Call = Callable[[Prompt], Completion]


class Unusable(OutputInvalid):
    """An answer refused for good; `check` names the check that refused it (see
    backends.validate.CHECKS, "off-topic", and the jobs' own)."""

    def __init__(self, why: str, check: str) -> None:
        super().__init__(why)
        self.check = check


@dataclass
class Asking:
    """How the pass's jobs ask the model, one for the pass (shared by jobs side by side):
    what each task's answer must pass, when it is asked once more, when the extractive
    producer builds an item instead, and what became of the answers."""

    completer: Completer
    embedder: Embedder
    config: Config
    log: Logger
    # Prompt task -> the job that sends it: its model key and output bound.
    tasks: Mapping[str, JobSpec] = field(default_factory=dict)
    # What became of the model's answers, by job (see Ledger).
    answers: Ledger = field(default_factory=Ledger)
    # Items built by the extractive fallback this pass: (job, item, why).
    fell_back: list[tuple[str, str, str]] = field(default_factory=list)
    _extractive: ExtractiveCompleter | None = None

    @property
    def llm(self) -> bool:
        return self.completer.name != "extractive"

    @property
    def asks_model(self) -> bool:
        """Whether answers on this thread come from the LLM: it is one, and the item is
        not being built by the extractive fallback (which builds what the offline
        default builds)."""
        return self.llm and _FALLING_BACK.get() is None

    @property
    def fallback(self) -> bool:
        """Whether an item the model keeps failing is built extractively instead."""
        return self.llm and self.config.jobs.fallback

    @property
    def calls_at_once(self) -> int:
        """Concurrent backend calls: an LLM waits on the network; extraction is CPU-bound."""
        return self.config.completer.workers if self.llm else 1

    @property
    def source(self) -> str:
        """How derived rows are marked: which kind of backend and model made them;
        "fallback:<model>" for the extractive producer's work in place of the model's."""
        kind = "llm" if self.asks_model else "fallback" if self.llm else "extractive"
        return f"{kind}:{getattr(self.completer, 'model', self.completer.name)}"

    @contextlib.contextmanager
    def falling_back(self, why: str) -> Iterator[None]:
        """On this thread: answers come from the extractive producer, and what is saved is
        marked as its work (source "fallback:<model>")."""
        token = _FALLING_BACK.set(why)
        try:
            yield
        finally:
            _FALLING_BACK.reset(token)

    def note_fallback(self, job: str, item: str, why: str) -> None:
        """Outside any write: an item the extractive fallback built, for the pass's notes
        and the log."""
        self.fell_back.append((job, item, why))
        self.answers.add(job, "fell_back")
        self.log.warning("fell_back", job=job, item=item, why=why[:200])

    def extractive(self) -> ExtractiveCompleter:
        if self._extractive is None:
            self._extractive = ExtractiveCompleter(self.embedder)
        return self._extractive

    def complete(self, prompt: Prompt, call: Call, check: Check | None = None,
                 again: Again | None = None) -> Completion:
        """The answer to `prompt`, `call` making each request, with the sending job's
        model and output bound. An LLM's answer that fails a check (see
        backends.validate, `off_topic`, and the job's own `check`) is asked for once more
        where that can mend it (with what was wrong said: `again` builds that request,
        else the instructions get the check's AGAIN), never for what the same model would
        write again; refused for good, it is an error, never memory. Each refusal is
        logged with its reason and counted (see Ledger)."""
        spec = self.tasks.get(prompt.task)
        if spec is not None:
            prompt = dataclasses.replace(prompt, model_key=spec.model_key,
                                         max_chars=spec.bounds[prompt.task])
        if self.llm and not self.asks_model:
            completion = self.extractive().complete(prompt)
            return dataclasses.replace(completion, text=bounded(
                completion.text, prompt.max_chars, prompt.task))
        completion = call(prompt)
        if not self.llm:
            return completion
        job = spec.name if spec is not None else prompt.task
        self.answers.add(job, "asked")
        first = self.judged(completion.text, prompt, check)
        if first is None:
            self.answers.add(job, "kept_first")
            return completion
        self.answers.add(job, f"refused_first:{first.check}")
        self.log.info("answer_refused", job=job, task=prompt.task, check=first.check,
                      why=first.why[:200], asked_again=first.mendable)
        if not first.mendable:
            self.answers.add(job, "refused")
            raise Unusable(f"{first.why} (not asked again: the same model would answer "
                           "the same)", first.check)
        retry = again(prompt, first, completion.text) if again is not None else \
            dataclasses.replace(prompt, system=f"{prompt.system} {AGAIN[first.check]}")
        self.answers.add(job, "asked_again")
        completion = call(retry)
        self.answers.add(job, "reask_tokens", completion.tokens_in + completion.tokens_out)
        second = self.judged(completion.text, prompt, check)
        if second is not None:
            self.answers.add(job, "refused")
            self.log.warning("answer_refused", job=job, task=prompt.task, check=second.check,
                             why=second.why[:200], asked_again=False)
            raise Unusable(f"{second.why} (asked twice; first: {first.why})", second.check)
        self.answers.add(job, "kept_again")
        return completion

    def judged(self, text: str, prompt: Prompt, check: Check | None = None) -> Refusal | None:
        """The first check an answer fails: the guards, off-topic, then the job's own."""
        found = refusal(text, prompt)
        if found is None:
            off = self.off_topic(text, prompt)
            found = Refusal("off-topic", off) if off else None
        if found is None and check is not None:
            found = check(text)
        return found

    def off_topic(self, answer: str, prompt: Prompt) -> str | None:
        """Why a text answer is not about its material, by the embedder (the one model
        whose scale is measured, see ON_TOPIC), or None."""
        floor = ON_TOPIC.get(self.embedder.model)
        if floor is None or prompt.task in JSON_TASKS or not prompt.items:
            return None
        score = topic_score(self.embedder, answer, prompt.items)
        if score >= floor:
            return None
        return f"the answer is not about its input (score {score:.2f}, under {floor})"
