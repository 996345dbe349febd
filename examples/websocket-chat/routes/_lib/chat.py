"""A chat room in the project's kv store, shared by the room's connections and its event stream.

Each connection runs in a sandbox instance of its own, so connections share nothing in memory.
A message is stored under the room's next number (`kv.incr`); readers poll for numbers they have
not seen. Messages expire after ten minutes.
"""

import json

from filerouter import kv

KEEP_S = 600
POLL_S = 0.1


def last(room: str) -> int:
    """The number of the room's latest message (0 before any)."""
    return kv.get(f"chat:{room}:last", 0)


def post(room: str, message: dict) -> None:
    """Add `message` to the room."""
    number = kv.incr(f"chat:{room}:last", ttl=KEEP_S)
    kv.set(f"chat:{room}:{number}", json.dumps(message), ttl=KEEP_S)


def unseen(room: str, seen: int) -> list:
    """The room's messages (JSON text) after number `seen`, in order, up to the first one not
    stored yet: its number is taken but its text is a moment behind, and the next poll finds
    it. A number still empty after 20 polls is given up as None (its writer stopped between
    the two steps of `post`)."""
    found = []
    for number in range(seen + 1, last(room) + 1):
        stored = kv.get(f"chat:{room}:{number}")
        if stored is None and kv.incr(f"chat:{room}:{number}:misses", ttl=KEEP_S) < 20:
            break
        found.append(stored)
    return found
