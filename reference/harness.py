"""Certification harness of the reference store (``--cortex-store reference``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cortex_spec
from cortex_spec.clock import Clock
from cortex_spec.harness import Harness

from . import MemoryMedium, MemoryStore
from . import gateway as gw


class ReferenceHarness(Harness):
    """Each location is a :class:`MemoryMedium`; reopening it is a restart.

    Gateway locations are names in the process-wide registry of
    :mod:`.gateway`; its crash hook stands in for the death of the holding
    process.  They live in one process, so the harness has no
    ``cross-process`` feature.
    """

    name = "reference"
    reopenable = True

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "implementation": "cortex_spec.reference.MemoryStore",
                "version": cortex_spec.__version__}

    def new_location(self) -> MemoryMedium:
        return MemoryMedium()

    def open(self, location: MemoryMedium, clock: Clock) -> MemoryStore:
        return MemoryStore(clock, medium=location)

    # -- class gateway ------------------------------------------------------------------

    def new_gateway_location(self) -> str:
        return gw.new_location_name("cortex-spec-gw")

    def discard_gateway_location(self, location: str) -> None:
        gw.discard_location(location)

    def crash_gateway(self, gateway: Any) -> None:
        gw.crash(gateway)

    def unusable_gateway_location(self) -> tuple[str, Callable[[], None]]:
        name = gw.new_location_name("cortex-spec-gw-broken")
        gw.break_location(name)
        return name, lambda: gw.repair_location(name)

    # -- class admin ----------------------------------------------------------------------

    def corrupt_scope(self, location: MemoryMedium, kind: str, key: str, problem: str) -> bool:
        """Replace the row's scope in the medium's table: the zero scope, or
        text that is not a scope (a stored value of the wrong type).  A
        reference row keeps one form of its scope: it cannot be inconsistent."""
        import attrs

        from .admin import scoped_tables

        if problem == "inconsistent":
            return False
        table = scoped_tables(location).get(kind, {})
        found = [k for k, row in table.items() if getattr(row, "id", k) == key]
        if len(found) != 1:
            return False
        stored = cortex_spec.Scope() if problem == "zero" else "ws=w1/=not-a-scope"
        with location.lock:
            table[found[0]] = attrs.evolve(table[found[0]], scope=stored)
        return True

    def plant_schema_version(self, location: MemoryMedium, version: int) -> bool:
        """The reference has had one layout: version 0 (a medium from before
        versions were kept) holds the same tables."""
        with location.lock:
            location.schema["version"] = version
        return True
