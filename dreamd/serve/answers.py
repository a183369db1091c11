"""What the API's routes share: the grant a request carries (what its token may do),
the refusals a route may answer, each with the one error model, and how a refusal of
dreamd's maps to its status code."""

# No `from __future__ import annotations`: FastAPI reads `Granted` when a route is defined.
from typing import Annotated, Any

from fastapi import Depends, Request

from dreamd.errors import (
    DreamdError,
    NotCorrectable,
    NotPermitted,
    SessionTaken,
    StaleVersion,
    StoreBusy,
    StoreError,
    UnknownCorrection,
    UnknownFact,
    UnknownUser,
)
from dreamd.memory.tokens import Grant
from dreamd.serve.schema import Problem


def grant_of(request: Request) -> Grant:
    """What the request's token may do (the guard put it there)."""
    grant: Grant = request.state.grant
    return grant


Granted = Annotated[Grant, Depends(grant_of)]

GUARDED = (400, 401, 403, 503)  # what any route behind the guard may answer
REFUSALS = {400: "Bad input: one line says which.",
            401: "No token, or not one this server knows.",
            403: "A Host or Origin this server does not serve, or what the token may not do.",
            404: "No such user (or one beyond the token's users), session, fact or "
                 "correction.",
            409: "The session belongs to another user, or the fact can no longer take "
                 "this change (it was withdrawn or replaced).",
            412: "The fact changed since the version sent: read it again.",
            413: "The body or the batch is too large.",
            503: "The store is busy or down: try again."}
STATUS: tuple[tuple[type[DreamdError], int], ...] = (
    (UnknownUser, 404), (UnknownFact, 404), (UnknownCorrection, 404), (NotPermitted, 403),
    (SessionTaken, 409), (NotCorrectable, 409), (StaleVersion, 412), (StoreBusy, 503),
    (StoreError, 503))


def answers(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The refusals a route may answer, each with the one error model."""
    return {code: {"model": Problem, "description": REFUSALS[code]} for code in codes}


def status_of(exc: DreamdError) -> int:
    """The status code a refusal of dreamd's answers (400: bad input)."""
    return next((code for kind, code in STATUS if isinstance(exc, kind)), 400)
