"""Certifying one mutant of the zoo: the command and its verdict.

Shared by ``tests/test_zoo.py`` (which asserts every mutant is rejected) and
``benchmarks/certify_time.py`` (which times them).  Two modes:

* ``quick`` (the default): the mutant is certified against the classes it
  breaks (``Mutant.classes``, with the classes they require) and the run
  stops at its first failing test (``-x``) — the time to verdict;
* ``full`` (``CORTEX_SPEC_ZOO=full``): every class and the whole suite, as
  a backend author's certification would run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent


def zoo_mode() -> str:
    mode = os.environ.get("CORTEX_SPEC_ZOO", "quick")
    if mode not in ("quick", "full"):
        raise ValueError(f"CORTEX_SPEC_ZOO must be quick or full, not {mode!r}")
    return mode


def certify_mutant(mutant: Any, workdir: Path, mode: str | None = None) -> dict[str, Any]:
    """Certify ``mutant`` in its own process; returns the report, the exit
    status, the seconds to verdict and the tail of the output."""
    mode = mode or zoo_mode()
    report = workdir / f"{mutant.name}.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
               CORTEX_SPEC_PROFILE="quick", CORTEX_SPEC_SHRINK="0")
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_XDIST_TESTRUNUID", None)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--assert=plain",
               "--pyargs", "cortex_spec.conformance", "cortex_spec.stateful",
               "--cortex-store", f"mutants:{mutant.harness.__name__}", "--cortex-report", str(report)]
    if mode == "quick":
        command += ["--cortex-classes", ",".join(mutant.classes), "-x"]
    started = time.monotonic()
    proc = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=1800)
    seconds = time.monotonic() - started
    data = json.loads(report.read_text()) if report.exists() else None
    return {"mutant": mutant, "mode": mode, "returncode": proc.returncode, "report": data,
            "seconds": seconds, "output": proc.stdout[-3000:] + proc.stderr[-2000:]}


def failed_clauses(report: dict[str, Any]) -> list[str]:
    return sorted(c["id"] for c in report["clauses"] if c["outcome"] == "failed")
