"""The routes a person's word takes over HTTP: a user's facts a page at a time, and
adding, correcting, retracting, pinning and unpinning one, its history, and reverting a
correction (dreamd.memory.steering). A change carries the version it read; a fact that
moved since is a 412. Each needs the `write` scope; the history and the list, `read`."""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations.
from typing import Annotated

from fastapi import APIRouter, Body, FastAPI, Path, Query

from dreamd.memory.tokens import permit
from dreamd.models import Correction, Fact
from dreamd.serve.answers import GUARDED, Granted, answers
from dreamd.serve.memories import Memories
from dreamd.serve.schema import (
    ID,
    Change,
    Correcting,
    CorrectionOut,
    FactOut,
    Facts,
    History,
    NewFact,
    Reverting,
)

User = Annotated[str, Path(pattern=ID, max_length=200)]
FactId = Annotated[int, Path(ge=1, le=2**62)]
CHANGED = answers(*GUARDED, 404, 409, 412)


def fact_out(f: Fact) -> FactOut:
    return FactOut(id=f.id, subject=f.subject, about=f.about, statement=f.statement,
                   current=f.current, since=f.valid_from, learned_at=f.learned_at,
                   until=f.valid_to, replaced_by=f.replaced_by, from_turns=list(f.sources),
                   origin=f.origin, version=f.version, pinned=f.pinned,
                   withdrawn=f.withdrawn)


def correction_out(c: Correction) -> CorrectionOut:
    return CorrectionOut(id=c.id, fact_id=c.fact_id, action=c.action, made_by=c.made_by,
                         why=c.why, made_at=c.made_at, old=c.old, new=c.new,
                         new_fact=c.new_fact, reverts=c.reverts, reverted_by=c.reverted_by)


def add_routes(api: FastAPI, memories: Memories) -> None:
    """The routes, on the app itself (an included router would answer a 405 of its own,
    out of reach of the app's Allow)."""
    router = APIRouter(prefix="/v1/users", tags=["facts"])

    @router.get("/{user:path}/facts", response_model=Facts,
                responses=answers(*GUARDED, 404))
    def facts(grant: Granted, user: User,
              after: Annotated[int, Query(ge=0, le=2**62)] = 0,
              limit: Annotated[int, Query(ge=1, le=500)] = 100,
              history: bool = False) -> Facts:
        """The user's facts by id, `limit` after `after` (the answer's `next`, while there
        are more): current ones, or with `history` the replaced and withdrawn too."""
        permit(grant, "read", user)
        with memories.memory(user) as memory:
            page = memory.facts(user, after_id=after, limit=limit + 1, history=history)
        more = len(page) > limit
        return Facts(user=user, facts=[fact_out(f) for f in page[:limit]],
                     next=page[limit - 1].id if more else None)

    @router.post("/{user:path}/facts", status_code=201, response_model=FactOut,
                 responses=answers(*GUARDED, 404, 409))
    def add(grant: Granted, user: User, body: Annotated[NewFact, Body()]) -> FactOut:
        """A fact the person states, with no turn behind it: in the profile and the
        context block from now on, replaced only by a turn newer than it."""
        permit(grant, "write", user)
        with memories.memory(user) as memory:
            return fact_out(memory.add_fact(user, body.statement, subject=body.subject,
                                            about=body.about, by=grant.name, why=body.why))

    @router.put("/{user:path}/facts/{fact_id}", response_model=FactOut, responses=CHANGED)
    def correct(grant: Granted, user: User, fact_id: FactId,
                body: Annotated[Correcting, Body()]) -> FactOut:
        """New words for the fact (the answer is the new fact; the old one is history)."""
        permit(grant, "write", user)
        with memories.memory(user) as memory:
            return fact_out(memory.correct(user, fact_id, body.statement, by=grant.name,
                                           why=body.why, expected_version=body.version))

    @router.post("/{user:path}/facts/{fact_id}/retract", response_model=FactOut,
                 responses=CHANGED)
    def retract(grant: Granted, user: User, fact_id: FactId,
                body: Annotated[Change, Body()]) -> FactOut:
        """The fact is wrong: it leaves every tier and block, and no pass makes it again
        from the turns said so far."""
        permit(grant, "write", user)
        with memories.memory(user) as memory:
            return fact_out(memory.retract(user, fact_id, by=grant.name, why=body.why,
                                           expected_version=body.version))

    @router.post("/{user:path}/facts/{fact_id}/pin", response_model=FactOut,
                 responses=CHANGED)
    def pin(grant: Granted, user: User, fact_id: FactId,
            body: Annotated[Change, Body()]) -> FactOut:
        """The fact is in the profile and the context block whatever the ranking."""
        permit(grant, "write", user)
        with memories.memory(user) as memory:
            return fact_out(memory.pin(user, fact_id, by=grant.name, why=body.why,
                                       expected_version=body.version))

    @router.post("/{user:path}/facts/{fact_id}/unpin", response_model=FactOut,
                 responses=CHANGED)
    def unpin(grant: Granted, user: User, fact_id: FactId,
              body: Annotated[Change, Body()]) -> FactOut:
        permit(grant, "write", user)
        with memories.memory(user) as memory:
            return fact_out(memory.unpin(user, fact_id, by=grant.name, why=body.why,
                                         expected_version=body.version))

    @router.get("/{user:path}/facts/{fact_id}/history", response_model=History,
                responses=answers(*GUARDED, 404))
    def history(grant: Granted, user: User, fact_id: FactId) -> History:
        """Every correction of the fact, and of the facts it was corrected into or from."""
        permit(grant, "read", user)
        with memories.memory(user) as memory:
            rows = memory.history(user, fact_id)
        return History(user=user, fact_id=fact_id,
                       corrections=[correction_out(c) for c in rows])

    @router.post("/{user:path}/corrections/{correction_id}/revert", status_code=201,
                 response_model=CorrectionOut, responses=answers(*GUARDED, 404, 409))
    def revert(grant: Granted, user: User, correction_id: FactId,
               body: Annotated[Reverting, Body()]) -> CorrectionOut:
        """Undo one correction; the answer is the revert, itself a correction."""
        permit(grant, "write", user)
        with memories.memory(user) as memory:
            return correction_out(memory.revert(user, correction_id, by=grant.name,
                                                why=body.why))

    for route in router.routes:
        api.router.routes.append(route)
