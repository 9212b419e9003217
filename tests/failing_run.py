"""One failing certification of a small broken store, made once per session.

The store is the reference store with one bug (``resolve`` overwrites the
first decision: class ``checkpoints``); the run certifies the checkpoints
clause suite and the concurrent machine (which draws a timeline), with the
Markdown, JUnit and GitHub outputs on.  ``failing_report`` is its JSON
report; ``failing_run`` the output folder and the finished process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
#: the broken store and the tests certifying it (the clause suite of
#: checkpoints and the concurrent machine, which draws a timeline)
BROKEN = "mutants:ResolveOverwritesHarness"
SUITES = ("cortex_spec.conformance.test_checkpoints",
          "cortex_spec.stateful.test_machines::test_concurrent[checkpoints]")


def certify_in_subprocess(out: Path, *extra: str, store: str = BROKEN, env: dict | None = None) -> subprocess.CompletedProcess:
    """A certification run as CI runs it: a fresh pytest process."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    environ.update(PYTHONPATH=os.pathsep.join([str(TESTS), str(REPO)]), **(env or {}))
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--pyargs", *SUITES,
            "--cortex-store", store, "--cortex-classes", "checkpoints",
            "--cortex-report", str(out / "report.json"), *extra]
    return subprocess.run(args, cwd=REPO, env=environ, capture_output=True, text=True, timeout=900, check=False)


@pytest.fixture(scope="session")
def failing_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("failing")
    summary = out / "step-summary.md"
    result = certify_in_subprocess(
        out, "--cortex-output", f"junit={out / 'clauses.xml'}", "--cortex-output", f"markdown={out / 'summary.md'}",
        "--hypothesis-seed=12345", "--junitxml", str(out / "pytest-junit.xml"),
        env={"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_ACTIONS": "true"})
    return out, result


@pytest.fixture(scope="session")
def failing_report(failing_run):
    return failing_report_of(*failing_run)




def failing_report_of(out: Path, result: subprocess.CompletedProcess) -> dict:
    assert (out / "report.json").exists(), result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads((out / "report.json").read_text())
