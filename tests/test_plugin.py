"""The pytest plugin and the certification path, end to end (pytester)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cortex_spec.clauses import catalogue

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


@pytest.fixture
def certify(pytester, monkeypatch):
    """Run a certification session in process; returns (result, report)."""
    monkeypatch.syspath_prepend(str(REPO))
    monkeypatch.syspath_prepend(str(TESTS))

    def run(store, *suites, extra=()):
        report = pytester.path / "report.json"
        args = ["-p", "no:cacheprovider", "--pyargs", *suites, "--cortex-store", store,
                "--cortex-report", str(report), *extra]
        result = pytester.runpytest_inprocess(*args)
        data = json.loads(report.read_text()) if report.exists() else None
        return result, data

    return run


def outcomes(report):
    return {c["id"]: c["outcome"] for c in report["clauses"]}


def test_read_then_write_claim_fails_with_the_race_clause(certify):
    result, report = certify("broken_stores:read_then_write", "cortex_spec.conformance.test_suspensions")
    assert result.ret != 0
    assert report["certified"] is False
    got = outcomes(report)
    assert got["SUSP-CLAIM-10"] == "failed"
    failed = next(c for c in report["clauses"] if c["id"] == "SUSP-CLAIM-10")
    assert failed["failures"], "a failed clause carries its failures"
    assert failed["failures"][0]["message"].startswith("SUSP-CLAIM-10 broken:")


def test_deadline_on_the_wrong_side_fails_the_partition_clause(certify):
    result, report = certify("broken_stores:deadline_on_resume_side",
                             "cortex_spec.conformance.test_suspensions")
    assert result.ret != 0
    got = outcomes(report)
    assert got["SUSP-PART-2"] == "failed"
    assert got["SUSP-CLAIM-6"] == "failed"
    # rules the bug does not touch still pass
    assert got["SUSP-CREATE-2"] == "passed"


def test_undeclared_classes_are_not_claimed(certify):
    result, report = certify("examples.checkpoint_store:make_store", "cortex_spec.conformance",
                             "cortex_spec.stateful")
    got = outcomes(report)
    cat = catalogue()
    from cortex_spec import CLASSES

    for clause in cat:
        if clause.cls in CLASSES and clause.cls != "checkpoints":
            assert got[clause.id] == "not claimed", clause.id
        if clause.cls == "checkpoints" and clause.id != "CP-RESOLVE-6":
            assert got[clause.id] == "passed", (clause.id, got[clause.id])
    assert report["classes"] == {name: "claimed" if name == "checkpoints" else "not claimed" for name in CLASSES}
    # CP-RESOLVE-6 needs runs and suspensions too: not claimed, never passed
    assert got["CP-RESOLVE-6"] == "not claimed"
    # a plain factory cannot reopen storage: durability is not claimed
    assert got["MACH-DUR-1"] == "not claimed"
    assert report["tests"]["not claimed"] > 0
    assert report["certified"] is True, report["verdict"]
    assert result.ret == 0


def test_a_backend_that_cannot_start_is_not_certified(certify):
    result, report = certify("broken_stores:ServerThatWontStart", "cortex_spec.conformance.test_runs")
    assert result.ret == 3
    assert report["certified"] is False
    assert report["verdict"].startswith("NOT CERTIFIED: backend could not start")
    assert "connection refused" in report["verdict"]
    shown = result.stdout.str() + result.stderr.str()
    assert "could not start" in shown and "NOT CERTIFIED" in shown


def test_unknown_store_name_is_a_usage_error(certify):
    result, report = certify("no-such-backend", "cortex_spec.conformance.test_runs")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown store 'no-such-backend'*"])


def test_report_lists_every_clause_with_counts(certify):
    result, report = certify("reference", "cortex_spec.conformance.test_runs")
    ids = [c["id"] for c in report["clauses"]]
    assert sorted(ids) == sorted(c.id for c in catalogue())
    assert sum(report["counts"].values()) == len(ids)
    assert report["store"]["name"] == "reference"
    assert report["profile"] == "quick"
    assert report["duration_s"] >= 0
    # only test_runs ran: the other classes' clauses are untested, so the run
    # is not a certification
    assert report["certified"] is False
    assert report["counts"]["untested"] > 0
    assert outcomes(report)["RUN-UPD-6"] == "passed"


def test_machines_catch_a_read_then_write_claim_with_a_readable_counterexample(certify):
    result, report = certify("broken_stores:ReadThenWriteHarness", "cortex_spec.stateful",
                             extra=["-k", "test_concurrent"])
    assert result.ret == 1
    assert outcomes(report)["MACH-LIN-1"] == "failed"
    text = result.stdout.str()
    assert "Minimal scenario (runnable):" in text
    assert "claim_suspension" in text
    assert "Results no order explains:" in text
    assert report["machines"]["concurrent"]["violations"] >= 1


def test_cli_certify_prints_progress_and_summary(tmp_path, monkeypatch, capsys):
    from cortex_spec import cli

    monkeypatch.chdir(REPO)
    report = tmp_path / "r.json"
    status = cli.main(["certify", "examples.checkpoint_store:make_store", "--report", str(report)])
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert "tests collected" in err and "passed" in err
    assert "checkpoints" in out and "CERTIFIED for checkpoints" in out
    assert json.loads(report.read_text())["certified"] is True


def test_cli_exit_status_for_a_dead_backend(tmp_path, monkeypatch, capsys):
    from cortex_spec import cli

    monkeypatch.syspath_prepend(str(TESTS))
    status = cli.main(["certify", "broken_stores:ServerThatWontStart", "--no-machines",
                       "--report", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    assert status == 3
    assert "NOT CERTIFIED" in out + err


def test_cli_lists_clauses(capsys):
    from cortex_spec import cli

    assert cli.main(["clauses", "--class", "suspensions"]) == 0
    out = capsys.readouterr().out
    assert "SUSP-CLAIM-9" in out and "RUN-GET-1" not in out


def test_every_clause_is_named_by_some_test(pytester, monkeypatch):
    """A clause no conformance test or machine names would report 'untested'
    for every store: the suite must name each one."""
    monkeypatch.syspath_prepend(str(REPO))
    items, _ = pytester.inline_genitems("-p", "no:cacheprovider", "--pyargs",
                                        "cortex_spec.conformance", "cortex_spec.stateful")
    named = {cid for item in items for mark in item.iter_markers("clause") for cid in mark.args}
    missing = sorted(c.id for c in catalogue() if c.id not in named)
    assert not missing, f"clauses no test names: {missing}"


def test_plugin_is_inert_for_unrelated_tests(pytester):
    pytester.makepyfile("def test_plain():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    text = result.stdout.str()
    assert "CERTIFIED" not in text and "report:" not in text


def test_auto_workers_are_one_per_core_and_one_more():
    """One worker per core (at most four) and one more; none on one core."""
    from cortex_spec.harness import auto_workers

    got = {cores: auto_workers(cores) for cores in (1, 2, 3, 4, 16)}
    assert got == {1: 0, 2: 3, 3: 4, 4: 5, 16: 5}, f"workers by cores: {got}"


@pytest.mark.parametrize("store", ["postgres", "sqlite", "reference"])
def test_n_auto_of_a_certification_is_the_plugin_worker_count(pytester, monkeypatch, store):
    """``-n auto`` asks the plugin (pytest-xdist's hook): a certification gets
    :func:`auto_workers`, a run without ``--cortex-store`` pytest-xdist's own
    count, and so does one where ``PYTEST_XDIST_AUTO_NUM_WORKERS`` is set."""
    from xdist.plugin import pytest_xdist_auto_num_workers as xdist_count

    from cortex_spec.harness import auto_workers

    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    config = pytester.parseconfig("-p", "no:cacheprovider", "--cortex-store", store)
    got = config.hook.pytest_xdist_auto_num_workers(config=config)
    assert got == auto_workers(), f"-n auto of a {store} certification: {got}"
    plain = pytester.parseconfig("-p", "no:cacheprovider")
    assert plain.hook.pytest_xdist_auto_num_workers(config=plain) == xdist_count(plain), \
        "a run without --cortex-store gets pytest-xdist's count"
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "7")
    assert config.hook.pytest_xdist_auto_num_workers(config=config) == 7, \
        "PYTEST_XDIST_AUTO_NUM_WORKERS still sets the count"
