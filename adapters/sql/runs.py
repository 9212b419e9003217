"""Class ``runs`` on SQL: the class's methods (:class:`cortex_spec.runs.RunsMethods`)
on the SQL storage of :mod:`.kinds` (spec: runs.md).

Runs keep ``cortex_runs`` (:data:`.schema.LAID_OUT`; the lease spread over
``lease_owner`` and ``lease_expires_at``), steps and tool calls their own
tables.  :func:`run_from_row` is the generated codec, for the classes that
claim runs with their own statements (suspensions, leases, a2a).
"""

from __future__ import annotations

from typing import Any

from cortex_spec.runs import RUNS, Run, RunsMethods

from .kinds import entity_of
from .store import SqlStoreBase

__all__ = ["RunsMixin", "run_from_row"]


def run_from_row(row: Any) -> Run:
    """The run a ``cortex_runs`` row holds (``StoreError`` if it does not fit)."""
    run: Run = entity_of(RUNS, row)
    return run


class RunsMixin(RunsMethods, SqlStoreBase):
    """Runs, steps and tool calls: the generated methods of
    :data:`cortex_spec.runs.TABLES` and the shared ``update_run``."""
