"""Detection power: certification must reject every mutant of the zoo.

Each mutant (``tests/mutants.py``) is certified in its own process with the
full suite (clause suite and machines, quick profile).  The test asserts the
certification fails, that a clause the bug is expected to break is among
those that failed, and records which clause or machine caught it first and
how long that took.  The table is printed at the end of the session and
written to ``cortex-reports/zoo.md``.

These runs take a few minutes; deselect them with ``-m "not zoo"``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mutants import MUTANTS

TESTS = Path(__file__).resolve().parent
ZOO_ROWS: list[dict] = []

pytestmark = pytest.mark.zoo


def certify_mutant(mutant, workdir: Path) -> dict:
    report = workdir / f"{mutant.name}.json"
    env = dict(os.environ, PYTHONPATH=str(TESTS),
               CORTEX_SPEC_PROFILE="quick", CORTEX_SPEC_SHRINK="0")
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs",
         "cortex_spec.conformance", "cortex_spec.stateful",
         "--cortex-store", f"mutants:{mutant.harness.__name__}", "--cortex-report", str(report)],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=1800,
    )
    seconds = time.monotonic() - started
    data = json.loads(report.read_text()) if report.exists() else None
    return {"mutant": mutant, "returncode": proc.returncode, "report": data,
            "seconds": seconds, "output": proc.stdout[-3000:] + proc.stderr[-2000:]}


@pytest.fixture(scope="session")
def zoo_results(request, tmp_path_factory):
    """Certify the mutants whose tests were selected (``-k`` picks a few)."""
    workdir = tmp_path_factory.mktemp("zoo")
    selected = {
        item.callspec.params["mutant"].name
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_certification_rejects_mutant"
    }
    chosen = [m for m in MUTANTS if m.name in selected] or MUTANTS
    with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
        results = list(pool.map(lambda m: certify_mutant(m, workdir), chosen))
    return {r["mutant"].name: r for r in results}


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_certification_rejects_mutant(mutant, zoo_results):
    result = zoo_results[mutant.name]
    report = result["report"]
    assert report is not None, f"no report for {mutant.name}:\n{result['output']}"
    failed = sorted(c["id"] for c in report["clauses"] if c["outcome"] == "failed")
    first = report.get("first_failure") or {}
    ZOO_ROWS.append({
        "mutant": mutant.name,
        "bug": mutant.bug,
        "rejected": not report["certified"],
        "first caught by": ", ".join(first.get("clauses", [])) or "-",
        "after s": first.get("after_s", "-"),
        "failed clauses": len(failed),
        "expected among them": ", ".join(c for c in mutant.expected if c in failed) or "NONE",
    })
    assert result["returncode"] != 0
    assert not report["certified"], f"{mutant.name} was certified: the suite misses this bug"
    caught = [c for c in mutant.expected if c in failed]
    assert caught, (f"{mutant.name}: none of the expected clauses {mutant.expected} failed; "
                    f"failed: {failed}")
