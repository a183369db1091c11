"""The library a chat app imports: Memory (remember, recall, context, forget, export),
with the importers and the read path behind it.

    from dreamd.memory import Memory
"""

from dreamd.memory.api import Memory

__all__ = ["Memory"]
