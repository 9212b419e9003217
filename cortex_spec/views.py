"""What a class shows of a store's state, for the proof that a refused call
wrote nothing (:func:`cortex_spec.testing.state_view`).

Each class that has hand-written reads says in its own module what is
observable through it — ``view(store, contexts, refs)``: everything one
caller sees, for each of ``contexts``; ``view_across(store, contexts)``:
what its across-scope reads show — and registers both on its
:class:`~cortex_spec.classes.ConformanceClass`.  ``refs`` holds the ids a
view reads one by one, by kind (``run_ids``, ``step_ids``, ``delivery_ids``,
``reply_withs``, ``conversation_ids``); a view reads the kinds it knows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

__all__ = ["FAR_FUTURE", "Refs", "attempt"]

#: An instant after every deadline a test sets: "every expired row".
FAR_FUTURE = datetime(2999, 1, 1, tzinfo=UTC)

#: The ids a view reads one by one, by kind.
Refs = Mapping[str, Sequence[str]]


def attempt(fn: Callable[..., Any], *args: Any) -> Any:
    """The call's result, or the name of the error it raised (the error's
    class is the observation)."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - the error class is the observation
        return f"<{type(exc).__name__}>"
