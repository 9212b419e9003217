"""Reference semantics of class ``runs`` (spec: runs.md): the class's
methods (:class:`cortex_spec.runs.RunsMethods`) on the reference storage;
runs stay in the medium's ``runs`` dict (:data:`.kinds.LAID_OUT`)."""

from __future__ import annotations

from cortex_spec.runs import RunsMethods

from .store import StoreBase

__all__ = ["RunsMixin"]


class RunsMixin(RunsMethods, StoreBase):
    """Runs, steps and tool calls: the generated methods of
    :data:`cortex_spec.runs.TABLES` and the shared ``update_run``."""
