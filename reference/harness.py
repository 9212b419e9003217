"""Certification harness of the reference store (``--cortex-store reference``)."""

from __future__ import annotations

import cortex_spec
from cortex_spec.harness import Harness

from . import MemoryMedium, MemoryStore


class ReferenceHarness(Harness):
    """Each location is a :class:`MemoryMedium`; reopening it is a restart."""

    name = "reference"
    reopenable = True

    def describe(self) -> dict:
        return {"name": self.name, "implementation": "cortex_spec.reference.MemoryStore",
                "version": cortex_spec.__version__}

    def new_location(self) -> MemoryMedium:
        return MemoryMedium()

    def open(self, location: MemoryMedium, clock) -> MemoryStore:
        return MemoryStore(clock, medium=location)
