"""Detection power: certification must reject every mutant of the zoo.

Each mutant (``tests/mutants.py``) is certified in its own process
(``tests/zoo.py``): by default against the classes it breaks, stopping at
the first failing test; with ``CORTEX_SPEC_ZOO=full`` with every class and
the whole suite.  The test asserts the certification fails and that a clause
the bug is expected to break is among those that failed, and records which
clause caught it and the time to verdict.  The table is printed at the end
of the session and written to ``cortex-reports/zoo.md``.

The mutants are independent tests, so pytest-xdist spreads them over its
workers; deselect them with ``-m "not zoo"``.
"""

from __future__ import annotations

import pytest

from mutants import MUTANTS
from zoo import certify_mutant, failed_clauses

pytestmark = pytest.mark.zoo


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_certification_rejects_mutant(mutant, tmp_path, record_property):
    result = certify_mutant(mutant, tmp_path)
    report = result["report"]
    assert report is not None, f"no report for {mutant.name}:\n{result['output']}"
    failed = failed_clauses(report)
    first = report.get("first_failure") or {}
    caught = [c for c in mutant.expected if c in failed]
    record_property("zoo", {
        "mutant": mutant.name,
        "classes": ",".join(mutant.classes) if result["mode"] == "quick" else "all",
        "bug": mutant.bug,
        "rejected": not report["certified"],
        "caught by": ", ".join(first.get("clauses", [])) or "-",
        "first failure s": first.get("after_s", "-"),
        "verdict s": round(result["seconds"], 1),
        "expected among failed": ", ".join(caught) or "NONE",
    })
    assert result["returncode"] != 0, f"{mutant.name}: the certification exited 0"
    assert not report["certified"], f"{mutant.name} was certified: the suite misses this bug"
    assert caught, (f"{mutant.name}: none of the expected clauses {mutant.expected} failed; "
                    f"failed: {failed}\n{result['output']}")
