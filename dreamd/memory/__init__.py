"""The library a chat app imports: Memory (remember, recall, context, forget, export),
with the importers and the read path behind it.

    from dreamd.memory import Memory

Memory is loaded when it is first asked for: a module of this package (the API tokens,
the importers) costs its importer no model, no numpy (the daemon at rest imports none).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dreamd.memory.api import Memory

__all__ = ["Memory"]


def __getattr__(name: str) -> Any:
    if name == "Memory":
        from dreamd.memory.api import Memory

        return Memory
    raise AttributeError(f"module 'dreamd.memory' has no attribute {name!r}")
