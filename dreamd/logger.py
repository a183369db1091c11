"""The logger every layer takes: structlog's, configured once at the edge (runtime.log)."""

from __future__ import annotations

import logging

import structlog
from structlog.typing import FilteringBoundLogger as Logger

__all__ = ["Logger", "silent"]


def silent() -> Logger:
    """A logger that drops every event: what a pass logs when its caller gave none."""
    # Only `critical` passes the filter, and ReturnLogger prints nothing at all.
    filtered: Logger = structlog.wrap_logger(
        structlog.ReturnLogger(), processors=[],
        wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    return filtered
