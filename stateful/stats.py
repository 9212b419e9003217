"""Figures the machines report (they land in the certification report)."""

from __future__ import annotations

import collections
from typing import Any

import attrs

__all__ = ["MachineStats"]


@attrs.define
class MachineStats:
    machine: str
    examples: int = 0
    histories: int = 0
    operations: int = 0
    longest_history: int = 0
    check_seconds: float = 0.0
    violations: int = 0
    unknown_verdicts: int = 0
    #: runs started again after Hypothesis found the draws inconsistent (a
    #: machine whose steps depend on timing, see runner.run_machine)
    regenerated: int = 0
    rules: collections.Counter = attrs.field(factory=collections.Counter)
    #: the first violation's picture data (see reports/html.py), if any
    violation: dict[str, Any] | None = None

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "machine": self.machine,
            "examples": self.examples,
            "histories": self.histories,
            "operations": self.operations,
            "longest_history": self.longest_history,
            "check_seconds": round(self.check_seconds, 3),
            "violations": self.violations,
        }
        if self.unknown_verdicts:
            out["unknown_verdicts"] = self.unknown_verdicts
        if self.regenerated:
            out["regenerated"] = self.regenerated
        if self.violation is not None:
            out["violation"] = self.violation
        return out
