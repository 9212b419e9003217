"""A backend author's own test run: star-importing a suite, subclassing a
suite class, the ini options, generator factories, skipped and replaced
tests, backend names from entry points, and the suite-class route and the
CLI agreeing clause by clause on the example store (in a fresh project, in
subprocesses)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


def outcomes(report):
    return {c["id"]: c["outcome"] for c in report["clauses"]}


@pytest.fixture
def session(pytester, monkeypatch):
    """Run an author's test module in process; returns (result, report)."""
    monkeypatch.syspath_prepend(str(REPO))
    monkeypatch.syspath_prepend(str(TESTS))

    def run(source, *args, ini=None):
        if ini is not None:
            pytester.makepyprojecttoml("[tool.pytest.ini_options]\n" + textwrap.dedent(ini))
        pytester.makepyfile(test_author=textwrap.dedent(source))
        report = pytester.path / "report.json"
        result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs", "--cortex-report", str(report), *args)
        return result, (json.loads(report.read_text()) if report.exists() else None)

    return run


def test_a_star_imported_suite_runs_with_the_store_named_in_the_ini_file(session):
    result, report = session(
        "from cortex_spec.conformance.test_checkpoints import *\n",
        ini='cortex_store = "examples.checkpoint_store:make_store"\n',
    )
    assert "fixture 'store' not found" not in result.stdout.str()
    counts = result.parseoutcomes()
    assert counts.get("passed", 0) > 100 and "error" not in counts and "failed" not in counts
    assert report["store"]["spec"] == "examples.checkpoint_store:make_store"
    assert outcomes(report)["CP-RESOLVE-3"] == "passed"
    # the classes the store does not declare stay not claimed
    assert outcomes(report)["CP-RESOLVE-6"] == "not claimed"


SUITE_CLASS = """
    import json, os
    import pytest
    from cortex_spec.suite import CheckpointsSuite

    from examples.checkpoint_store import make_store

    CLEANUPS = []

    def yielding(clock):
        store = make_store(clock)
        yield store
        CLEANUPS.append(store)

    class TestMine(CheckpointsSuite):
        factory = yielding
        skip_tests = {"test_checkpoint_state_enumeration": "enumeration not written yet (#7)"}

        def test_count_pending_zero_on_an_empty_store(self, store):
            from cortex_spec.testing import ctx
            from cortex_spec.checkpoints import CheckpointFilter
            assert store.count_pending(ctx("ws=w1"), CheckpointFilter()) == 0

    def test_every_store_was_cleaned_up_after_its_yield():
        # runs last in the module: every store the suite opened was closed
        # and its factory resumed after the yield
        assert len(CLEANUPS) > 100
"""


def test_a_suite_class_certifies_its_factory_skips_what_it_names_and_cleans_up(session):
    result, report = session(SUITE_CLASS)
    counts = result.parseoutcomes()
    # the cleanup check (after the class) passed too: nothing failed
    assert counts.get("failed", 0) == 0 and counts.get("error", 0) == 0 and counts["passed"] > 100
    assert result.ret == 1  # the other classes' clauses are untested: not a certification
    got = outcomes(report)
    assert report["store"]["name"] == "test_author:yielding"
    assert report["store"]["declared"] == ["checkpoints"]
    # a skip named by skip_tests is reported skipped with its reason, never passed
    assert got["CP-CREATE-2"] == "skipped"
    result.stdout.fnmatch_lines(["*enumeration not written yet (#7)*"])
    assert got["CP-RESOLVE-3"] == "passed"


def test_a_replaced_test_keeps_the_clauses_of_the_one_it_replaces(session):
    source = """
        from cortex_spec.suite import CheckpointsSuite
        from examples.checkpoint_store import make_store

        class TestMine(CheckpointsSuite):
            factory = make_store

            def test_checkpoint_state_enumeration(self, store):
                assert False, "my own check of the enumeration"
    """
    result, report = session(source)
    # the failure is charged to the replaced test's first clause
    assert outcomes(report)["RSC-GEN-10"] == "failed"
    failed = next(c for c in report["clauses"] if c["id"] == "RSC-GEN-10")
    assert "my own check of the enumeration" in failed["failures"][0]["message"]
    # the replay command runs the test in the suite class, which names its store
    assert "test_author.py::TestMine::test_checkpoint_state_enumeration" in failed["failures"][0]["replay"]


def test_a_suite_class_without_a_store_is_a_clear_error(session):
    result, _ = session("""
        from cortex_spec.suite import CheckpointsSuite

        class TestMine(CheckpointsSuite):
            pass
    """, "-x")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*TestMine: a suite class names its store: set factory = make_store*"])


def test_a_store_without_close_is_refused_in_one_clear_line(session):
    result, report = session("""
        from cortex_spec.suite import CheckpointsSuite
        from examples.checkpoint_store import DictCheckpointStore

        class NoClose(DictCheckpointStore):
            close = None

        class TestMine(CheckpointsSuite):
            factory = NoClose
    """)
    assert result.ret == 3
    shown = result.stdout.str() + result.stderr.str()
    assert "NoClose has no close() method" in shown
    assert "AttributeError" not in shown
    assert report["verdict"].startswith("NOT CERTIFIED: backend could not start")


def test_hypothesis_profile_selects_the_certification_profile(session):
    from hypothesis import settings

    previous = settings.get_current_profile_name()
    try:
        result, report = session("from cortex_spec.conformance.test_checkpoints import *\n",
                                 "--hypothesis-profile", "cortex-full", "-k", "state_enumeration",
                                 ini='cortex_store = "examples.checkpoint_store:make_store"\n')
    finally:
        settings.load_profile(previous)  # the in-process run loaded cortex-full globally
    assert report["profile"] == "full"

    assert settings.get_profile("cortex-full").print_blob is True
    assert settings.get_profile("cortex-full").deadline is None


def test_machine_settings_derive_from_the_registered_profile(monkeypatch, tmp_path):
    from cortex_spec.profiles import PROFILES, examples_directory
    from cortex_spec.stateful.differential import machine_settings

    monkeypatch.setenv("CORTEX_SPEC_EXAMPLES_DB", str(tmp_path / "db"))
    assert examples_directory() == str(tmp_path / "db")
    made = machine_settings(7, 9, PROFILES["full"])
    assert (made.max_examples, made.stateful_step_count, made.print_blob, made.deadline) == (7, 9, True, None)


# -- the example store certified both ways, in a fresh project -----------------------


def _project(tmp_path: Path) -> Path:
    """A new repository holding the example store and the suite-class test
    of examples/, registering the store's name through the entry-point group."""
    root = tmp_path / "author"
    shutil.copytree(REPO / "examples", root / "examples",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "pyproject.toml").write_text(textwrap.dedent("""
        [tool.pytest.ini_options]
        cortex_report_dir = "suite-reports"
    """))
    dist = root / "example_store-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: example-store\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[cortex_spec.stores]\nexample-dict = examples.checkpoint_store:make_store\n")
    return root


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORTEX_SPEC_", "PYTEST_"))}
    # the checkout's cortex_spec first (this worktree), the author's project for its dist-info
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(root)])
    env["CORTEX_SPEC_SEED"] = "12345"
    return env


def test_the_example_store_gets_one_verdict_from_the_suite_class_and_from_the_cli(tmp_path):
    root = _project(tmp_path)
    env = _env(root)
    workers = ["-n", "2"]
    by_class = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *workers,
         "examples/test_checkpoint_store.py"],
        cwd=root, env=env, capture_output=True, text=True, timeout=900)
    reports = list((root / "suite-reports").glob("*.json"))
    assert len(reports) == 1, by_class.stdout[-3000:] + by_class.stderr[-3000:]
    by_cli = subprocess.run(
        [sys.executable, "-m", "cortex_spec.cli", "certify", "example-dict", "--report", "cli.json",
         "--workers", "2"],
        cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert (root / "cli.json").exists(), by_cli.stdout[-3000:] + by_cli.stderr[-3000:]
    a = json.loads(reports[0].read_text())
    b = json.loads((root / "cli.json").read_text())
    assert a["store"]["spec"] == "examples.checkpoint_store:make_store"
    assert b["store"]["spec"] == "example-dict"  # the name the entry point registers
    assert a["verdict"] == b["verdict"]
    assert a["gate"] == b["gate"]
    assert outcomes(a) == outcomes(b)
    assert a["counts"] == b["counts"]
    assert outcomes(a)["CP-RESOLVE-3"] == "passed"
    assert outcomes(a)["MACH-DIFF-1"] == "passed"
    # and both exit as the verdict says
    assert by_class.returncode == (0 if a["gate"] == "pass" else 1)
    assert by_cli.returncode == by_class.returncode


def test_a_machine_failure_carries_its_reproduce_failure_blob(failing_report):
    lin = next(c for c in failing_report["clauses"] if c["id"] == "MACH-LIN-1")
    assert lin["outcome"] == "failed"
    message = lin["failures"][0]["message"]
    assert "@reproduce_failure('" in message, message[-800:]
    assert "Seed 12345" in message  # beside the seed that replays the run


def test_skip_tests_naming_no_test_is_refused_when_the_class_is_made():
    from cortex_spec.suite import CheckpointsSuite, StoreSuite

    with pytest.raises(TypeError, match="skip_tests names no test of the suite: test_no_such_thing"):
        type("TestTypo", (CheckpointsSuite,), {"skip_tests": {"test_no_such_thing": "why"}})
    # a nested module's test, by name or module::name, is known to StoreSuite
    type("TestFine", (StoreSuite,), {"skip_tests": {
        "test_checkpoint_state_enumeration": "r", "test_suspensions::test_create_refuses_invalid_field": "r"}})
    with pytest.raises(TypeError, match="test_runs::test_checkpoint_state_enumeration"):
        type("TestWrongModule", (StoreSuite,), {"skip_tests": {"test_runs::test_checkpoint_state_enumeration": "r"}})
