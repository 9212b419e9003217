"""The world the exactly-once a2a suites share (test_a2a_resolutions,
test_a2a_replies, test_a2a_held, test_a2a_discovery): the home scope, the
callers that must not see a row stored there, a conversation to put rows
on, and the per-caller reads a state view adds.  Not a test module: the
suites import it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, Iterable

from cortex_spec import Context
from cortex_spec.testing import ctx
from cortex_spec.a2a import make_conversation

HOME = "ws=w1/proj=p1"
#: callers that must not see a row stored at HOME in partition "": an
#: ancestor, a descendant, a sibling, look-alike scopes (a longer segment,
#: a shared prefix) and other partitions (another name, another case)
OUTSIDERS = [ctx("ws=w1"), ctx("ws=w1/proj=p1/env=e1"), ctx("ws=w1/proj=p2"), ctx("ws=w10/proj=p1"),
             ctx("ws=w1/proj=p10"), ctx(HOME, "orch-1"), ctx(HOME, "ORCH")]
MS = timedelta(milliseconds=1)


def view_places(c: Context) -> list[Context]:
    """Where a state view reads: the caller, an ancestor, the other partition."""
    return [c, ctx("ws=w1"), ctx(HOME, "orch-1")]


def place(c: Context) -> str:
    """A caller as a view key: ``scope#partition``."""
    return f"{c.scope.canonical()}#{c.partition}"


def read_each(view: dict, name: str, places: Iterable[Context], keys: Iterable[str],
              get: Callable[[Context, str], Any], missing: type[BaseException]) -> dict:
    """Adds ``name[key]@place`` to ``view`` for each caller and key: what
    ``get`` returns there, or ``<none>`` where it raises ``missing``."""
    keys = list(keys)
    for c in places:
        for key in keys:
            try:
                view[f"{name}[{key}]@{place(c)}"] = get(c, key)
            except missing:
                view[f"{name}[{key}]@{place(c)}"] = "<none>"
    return view


class ConversationWorld:
    """A store, a caller at ``where`` (HOME by default) and a conversation
    created there with ``conversation`` fields."""

    def __init__(self, store: Any, where: str | Context = HOME, **conversation: Any) -> None:
        self.s = store
        self.c = where if isinstance(where, Context) else ctx(where)
        self.conv = store.create_conversation(self.c, make_conversation(**conversation)).id


__all__ = ["HOME", "MS", "OUTSIDERS", "ConversationWorld", "place", "read_each", "view_places"]
