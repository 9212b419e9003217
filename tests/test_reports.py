"""The reports a CI system and a person read: schema, Markdown, JUnit,
annotations, diff, waivers, attribution and the CLI's conventions.

One failing certification of a small broken store (class ``checkpoints``,
a resolve that overwrites the first decision) is made once per session and
read by most tests; ``failing_report`` is its JSON report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from cortex_spec.reports import (
    FORMATS,
    OUTCOMES,
    TEST_OUTCOMES,
    ReportError,
    TestRecord,
    WaiverError,
    build_report,
    diff_reports,
    parse_waivers,
    read_report,
    render_annotations,
    render_junit,
    render_markdown,
    report_schema,
    validate_report,
    write_report,
)
from failing_run import BROKEN, REPO, certify_in_subprocess

from cortex_spec import cli
from cortex_spec.clauses import catalogue
from cortex_spec.words import clip


def by_id(report):
    return {c["id"]: c for c in report["clauses"]}


# -- one definition of the vocabulary -------------------------------------------------


def test_the_outcomes_come_from_the_schema():
    defs = report_schema()["$defs"]
    assert OUTCOMES == tuple(defs["clause_outcome"]["enum"])
    assert TEST_OUTCOMES == tuple(defs["test_outcome"]["enum"])
    from cortex_spec.pytest_plugin import _RANK

    assert set(_RANK) == set(TEST_OUTCOMES), "the plugin ranks exactly the schema's test outcomes"


def test_the_schema_ships_in_the_package():
    text = Path(REPO / "pyproject.toml").read_text()
    assert '"cortex_spec.reports" = ["*.json"' in text


def test_every_report_the_suite_writes_follows_the_schema(failing_report, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")  # declared in the test extra
    validator = jsonschema.Draft202012Validator(report_schema())
    assert not list(validator.iter_errors(failing_report))
    validate_report(failing_report)
    # and a report built from nothing at all (a backend that never started)
    empty = build_report(catalogue(), [], store={"name": "x", "spec": "x"}, declared=None, profile="quick",
                         started_at="now", duration_s=0, unavailable="refused")
    assert not list(validator.iter_errors(empty))
    empty["counts"]["bogus"] = 1
    with pytest.raises(ReportError, match="counts"):
        validate_report(empty)


def test_the_report_carries_versions_seed_profile_and_command(failing_report):
    env = failing_report["environment"]
    for key in ("cortex_spec", "python", "pytest", "hypothesis", "platform"):
        assert env[key], key
    assert failing_report["profile"] == "quick"
    run = failing_report["run"]
    assert run["seed"] == 12345 and run["seed_source"] == "--hypothesis-seed"
    assert "--cortex-store" in run["command"] and BROKEN in run["command"]
    assert failing_report["store"]["spec"] == BROKEN


# -- messages and attribution ---------------------------------------------------------------


def test_a_failure_names_the_broken_clause_with_rule_expected_and_observed(failing_report):
    clauses = by_id(failing_report)
    assert clauses["CP-RESOLVE-3"]["outcome"] == "failed"
    failure = clauses["CP-RESOLVE-3"]["failures"][0]
    assert failure["message"].startswith("CP-RESOLVE-3 broken: When the checkpoint is already resolved")
    assert failure["expected"] == "raises InvalidState"
    assert failure["observed"].lower().startswith("did not raise invalidstate")
    assert failure["where"].startswith("test_checkpoints.py:")
    # the entity shape was never broken: not charged to CP-ENT-1
    assert clauses["CP-ENT-1"]["outcome"] != "failed"


def test_replay_is_one_complete_command(failing_report):
    for clause in failing_report["clauses"]:
        for failure in clause.get("failures", []):
            replay = failure["replay"]
            assert replay.startswith("pytest ") and "<store>" not in replay
            assert f"--cortex-store {BROKEN}" in replay
            assert "--cortex-profile quick" in replay and "--hypothesis-seed=12345" in replay
            assert "cortex_spec." in replay and "::" in replay  # the one test, by id


def test_a_machine_violation_reads_as_sentences(failing_report):
    lin = by_id(failing_report)["MACH-LIN-1"]
    assert lin["outcome"] == "failed"
    failure = lin["failures"][0]
    assert failure["summary"].startswith("MACH-LIN-1: no order of the calls explains")
    assert "the reference would give" in failure["expected"]
    assert "observed" in failure["observed"]
    picture = failing_report["machines"]["concurrent"]["violation"]
    assert sum(c["unexplained"] for c in picture["calls"]) == 1, "one racing resolve is unexplained, not both"


def test_the_terminal_leads_with_the_message(failing_run):
    _, result = failing_run
    text = result.stdout
    block = text[text.index("test_second_resolve_is_invalid_state"):]
    first_lines = block.splitlines()[1:4]
    assert any(line.startswith("CP-RESOLVE-3 broken:") for line in first_lines), first_lines
    assert "FAILED CP-RESOLVE-3 (checkpoints)" in text  # the cortex-spec summary
    assert "{'clauses'" not in text and "'calls': [" not in text  # no raw dict


@pytest.mark.parametrize("text, limit", [("alpha beta gamma delta " * 20, 50), ("x" * 300, 100),
                                         ("a, b, c, d, e, f, g, h", 12)])
def test_clipping_never_cuts_a_word(text, limit):
    got = clip(text, limit)
    kept = got.split(" … (")[0]
    assert text.startswith(kept)
    rest = text[len(kept):]
    assert not rest or not (kept[-1:].isalnum() and rest[:1].isalnum()) or "x" * 60 in kept


def test_attribution_by_comment_words_and_subject(pytester, monkeypatch):
    """A bare assert is charged to a clause a comment names, else to the test's
    clauses whose rules name the checked call or error, else to the first."""
    monkeypatch.syspath_prepend(str(REPO))
    pytester.makepyfile(test_attr='''
import pytest
from cortex_spec.errors import InvalidState

@pytest.mark.clause("RSC-GEN-4", "CP-RESOLVE-3")
def test_words():
    with pytest.raises(InvalidState):
        pass

@pytest.mark.clause("CP-CREATE-1", "CP-ENT-1")
def test_comment():
    assert 1 == 2  # CP-ENT-1

@pytest.mark.clause("CP-CREATE-1", "CP-ENT-1")
def test_subject():
    assert [1] == [2]
''')
    report = pytester.path / "r.json"
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--cortex-store", "examples.checkpoint_store:make_store",
                                 "--cortex-report", str(report))
    clauses = by_id(json.loads(report.read_text()))
    got = {cid: [(f["test"].split("::")[1], f["attribution"]) for f in c.get("failures", [])]
           for cid, c in clauses.items() if c.get("failures")}
    assert got["CP-RESOLVE-3"] == [("test_words", "words")]
    assert "RSC-GEN-4" not in got
    assert got["CP-ENT-1"] == [("test_comment", "comment")]
    assert got["CP-CREATE-1"] == [("test_subject", "subject")]
    subject = clauses["CP-CREATE-1"]["failures"][0]
    assert subject["expected"] == "that [1] == [2] holds"


def test_a_failure_hypothesis_could_not_replay_reports_the_check_that_failed(pytester, monkeypatch):
    """A machine's check that failed once and not on Hypothesis' replay (a
    timing-dependent finding) surfaces as Hypothesis' ``FlakyFailure``; the
    report shows the check's own failure and clause, marked not replayed,
    not "raised FlakyFailure"."""
    monkeypatch.syspath_prepend(str(REPO))
    pytester.makepyfile(test_flaky='''
import pytest
from hypothesis import given, settings, strategies as st

class Mismatch(AssertionError):
    def __init__(self, text, *clauses):
        super().__init__(text)
        self.cortex_clauses = clauses

runs = []

@pytest.mark.clause("CP-CREATE-1", "CP-ENT-1")
@settings(database=None, derandomize=True)
@given(st.integers())
def test_once(n):
    runs.append(n)
    if len(runs) == 1:
        raise Mismatch("view differs from the reference (CP-ENT-1):\\n  backend: 1\\n  reference: 2", "CP-ENT-1")
''')
    report = pytester.path / "r.json"
    pytester.runpytest_inprocess("-p", "no:cacheprovider", "--cortex-store", "examples.checkpoint_store:make_store",
                                 "--cortex-report", str(report))
    clauses = by_id(json.loads(report.read_text()))
    failure = clauses["CP-ENT-1"]["failures"][0]
    assert failure["attribution"] == "check" and failure["replayed"] is False
    assert failure["summary"].startswith("view differs from the reference (CP-ENT-1):")
    assert "backend: 1" in failure["message"] and "FlakyFailure" not in failure["message"]
    lines = failure["message"].splitlines()
    # after the check's own text; Hypothesis' @reproduce_failure blob may follow (print_blob, on in CI)
    assert any("did not fail the same way" in line for line in lines[lines.index("  reference: 2") + 1:])
    assert clauses["CP-CREATE-1"]["outcome"] != "failed"  # charged to the clause the check named


# -- JUnit, Markdown, annotations ----------------------------------------------------------------


def test_junit_has_one_small_test_case_per_clause(failing_run, failing_report):
    out, _ = failing_run
    xml = (out / "clauses.xml").read_text()
    assert xml == render_junit(failing_report)
    root = ET.fromstring(xml)
    cases = root.findall(".//testcase")
    assert sorted(c.get("name") for c in cases) == sorted(c.id for c in catalogue())
    # small: a few hundred bytes a clause (pytest's --junitxml of a whole
    # certification is a case per test, each with its properties: megabytes)
    assert len(xml) < 300 * len(cases), len(xml)
    assert "cortex_backend" not in xml and "cortex_clauses" not in xml
    case = next(c for c in cases if c.get("name") == "CP-RESOLVE-3")
    failure = case.find("failure")
    assert failure is not None and "DID NOT RAISE" in failure.text and "replay:" in failure.text
    unclaimed = next(c for c in cases if c.get("name") == "RUN-GET-1").find("skipped")
    assert unclaimed is not None and unclaimed.get("message").startswith("not claimed")
    passed = next(c for c in cases if by_id(failing_report)[c.get("name")]["outcome"] == "passed")
    assert list(passed) == []
    assert int(root.get("tests")) == len(cases)


def test_markdown_summary_goes_to_the_step_summary(failing_run, failing_report):
    out, _ = failing_run
    md = (out / "summary.md").read_text()
    assert md == render_markdown(failing_report)
    assert (out / "step-summary.md").read_text().strip() == md.strip()
    assert md.startswith("## ❌ cortex-spec")
    assert "| checkpoints | claimed |" in md
    assert "#### `CP-RESOLVE-3` (checkpoints)" in md
    assert "- expected: `raises InvalidState`" in md and "pytest -p no:cacheprovider" in md


def test_annotations_name_the_failed_clauses(failing_run, failing_report):
    _, result = failing_run
    lines = render_annotations(failing_report).splitlines()
    errors = [ln for ln in lines if ln.startswith("::error ") and "title=cortex-spec" not in ln]
    failed = [c["id"] for c in failing_report["clauses"] if c["outcome"] == "failed"]
    assert [ln.split("title=")[1].split(" ")[0] for ln in errors] == failed
    assert all("\n" not in ln for ln in lines)
    assert lines[0] in result.stdout  # printed under GITHUB_ACTIONS


def test_every_format_renders_from_the_cli(failing_run, capsys):
    out, _ = failing_run
    for fmt in FORMATS:
        assert cli.main(["report", str(out / "report.json"), "--format", fmt]) == 0
        assert capsys.readouterr().out.strip(), fmt


# -- waivers --------------------------------------------------------------------------------------


def _records(failed=("CP-RESOLVE-3",), passed=("CP-CREATE-1",)):
    recs = [TestRecord(f"t::{c}", "failed", (c,), "boom", failed_clauses=(c,)) for c in failed]
    recs += [TestRecord(f"t::{c}", "passed", (c,)) for c in passed]
    return recs


def _build(waivers, today=date(2026, 1, 1), **kw):
    return build_report(catalogue(), _records(**kw), store={"name": "s", "spec": "s"},
                        declared=frozenset({"checkpoints"}), profile="quick", started_at="t", duration_s=1,
                        waivers=waivers, today=today)


WAIVERS = """
[[waiver]]
clause = "CP-RESOLVE-3"
reason = "resolve is unconditional until #42"
expires = 2026-03-01

[[waiver]]
clause = "CP-CREATE-1"
reason = "fixed already"
expires = 2026-03-01
"""


def test_a_waived_clause_is_waived_never_passed():
    report = _build(parse_waivers(WAIVERS, catalogue()))
    clauses = by_id(report)
    assert clauses["CP-RESOLVE-3"]["outcome"] == "waived"
    assert clauses["CP-RESOLVE-3"]["failures"]  # the failure is still shown
    assert report["certified"] is False
    assert [w["clause"] for w in report["waivers"]["applied"]] == ["CP-RESOLVE-3"]
    # a waiver of a clause that passes is reported so it can be removed
    assert [w["clause"] for w in report["waivers"]["stale"]] == ["CP-CREATE-1"]
    assert clauses["CP-CREATE-1"]["outcome"] == "passed"


def test_an_expired_waiver_fails_the_run():
    fresh = _build(parse_waivers(WAIVERS, catalogue()), passed=(), today=date(2026, 3, 1))
    expired = _build(parse_waivers(WAIVERS, catalogue()), passed=(), today=date(2026, 3, 2))
    assert by_id(fresh)["CP-RESOLVE-3"]["outcome"] == "waived"
    assert by_id(expired)["CP-RESOLVE-3"]["outcome"] == "failed"
    assert expired["gate"] == "fail" and "expired" in expired["verdict"]
    assert "CP-RESOLVE-3" in [w["clause"] for w in expired["waivers"]["expired"]]
    assert not fresh["waivers"]["expired"] and fresh["gate"] == "fail"  # CP-CREATE-1 is untested


@pytest.mark.parametrize("text, problem", [
    ("[[waiver]]\nclause = 'NOPE-1'\nreason = 'x'\nexpires = 2026-01-01\n", "not a clause id"),
    ("[[waiver]]\nclause = 'CP-ENT-1'\nexpires = 2026-01-01\n", "lacks reason"),
    ("[[waiver]]\nclause = 'CP-ENT-1'\nreason = 'x'\nexpires = '2026-01-01'\n", "TOML date"),
    ("[[waiver]\n", "not valid TOML"),
    ("[waivers]\n", "unknown key"),
])
def test_a_malformed_waiver_file_says_why(text, problem):
    with pytest.raises(WaiverError, match=problem):
        parse_waivers(text, catalogue())


def test_waivers_through_the_plugin_pass_the_gate(tmp_path, failing_report):
    """Every failed clause of the broken store waived: exit 0, verdict not certified."""
    bad = [c["id"] for c in failing_report["clauses"] if c["outcome"] in ("failed", "skipped", "untested")]
    waivers = tmp_path / "waivers.toml"
    waivers.write_text("".join(f'[[waiver]]\nclause = "{c}"\nreason = "known"\nexpires = 2999-01-01\n\n'
                               for c in bad + ["CP-CREATE-1"]))
    result = certify_in_subprocess(tmp_path, "--cortex-waivers", str(waivers), "--hypothesis-seed=12345")
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["gate"] == "pass" and report["certified"] is False, report["verdict"]
    assert result.returncode == 0, result.stdout[-2000:]
    assert by_id(report)["CP-RESOLVE-3"]["outcome"] == "waived"
    assert "CP-CREATE-1" in [w["clause"] for w in report["waivers"]["stale"]]
    # a failure of a test that checks no clause is never waived away
    plain = tmp_path / "test_plain.py"
    plain.write_text("def test_plain():\n    assert False\n")
    result = certify_in_subprocess(tmp_path, "--cortex-waivers", str(waivers), "--hypothesis-seed=12345", str(plain))
    assert json.loads((tmp_path / "report.json").read_text())["gate"] == "pass"
    assert result.returncode == 1, result.stdout[-2000:]


# -- diff -----------------------------------------------------------------------------------------


def test_diff_passes_on_an_unchanged_report_and_fails_on_a_regression(tmp_path, failing_report, capsys):
    base = json.loads(json.dumps(failing_report))
    for clause in base["clauses"]:
        if clause["id"] == "CP-RESOLVE-3":
            clause["outcome"] = "passed"
        if clause["id"] == "RUN-GET-1":
            clause["outcome"] = "passed"  # main claimed runs; the pull request does not
    write_report(base, tmp_path / "base.json")
    write_report(failing_report, tmp_path / "new.json")
    assert cli.main(["diff", str(tmp_path / "new.json"), str(tmp_path / "new.json")]) == 0
    assert "no regression" in capsys.readouterr().out
    assert cli.main(["diff", str(tmp_path / "base.json"), str(tmp_path / "new.json"), "-f", "markdown"]) == 1
    out = capsys.readouterr().out
    assert "`CP-RESOLVE-3` (checkpoints): passed → failed" in out
    diff = diff_reports(base, failing_report)
    assert [r["clause"] for r in diff["regressions"]] == ["CP-RESOLVE-3"]
    assert [r["clause"] for r in diff["newly_unclaimed"]] == ["RUN-GET-1"]
    # the other way round: newly passing, not a failure
    assert cli.main(["diff", str(tmp_path / "new.json"), str(tmp_path / "base.json")]) == 0
    assert "newly passing (2)" in capsys.readouterr().out


# -- the CLI's conventions -----------------------------------------------------------------------


@pytest.mark.parametrize("argv, says", [
    (["show", "/nonexistent/report.json"], "No such file"),
    (["show", "{empty}"], "not a cortex-spec report"),
    (["show", "{notjson}"], "not JSON"),
    (["clauses", "--class", "nope"], "unknown class 'nope'"),
    (["certify", "no_such_module:factory"], "cannot import"),
    (["certify", "reference", "--waivers", "/nonexistent.toml"], "does not exist"),
    (["diff", "/nonexistent/a.json", "/nonexistent/b.json"], "No such file"),
    (["clauses", "--", "-x"], "only 'certify'"),
    (["frobnicate"], "invalid choice"),
])
def test_every_usage_error_exits_2_with_one_line(argv, says, tmp_path, capsys):
    (tmp_path / "empty.json").write_text("{}")
    (tmp_path / "bad.json").write_text("nope")
    argv = [a.replace("{empty}", str(tmp_path / "empty.json")).replace("{notjson}", str(tmp_path / "bad.json"))
            for a in argv]
    try:
        status = cli.main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2
    assert says in err
    assert "Traceback" not in err
    assert len([ln for ln in err.splitlines() if ln.startswith("cortex-spec: error")]) == 1


def test_version_and_json_listings(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("cortex-spec ")
    assert cli.main(["clauses", "--json", "--class", "checkpoints"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {c["id"] for c in listed} == {c.id for c in catalogue().of_class("checkpoints")}


def test_show_json_prints_the_validated_report(failing_run, capsys):
    out, _ = failing_run
    assert cli.main(["show", str(out / "report.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == read_report(out / "report.json")


def test_a_closed_pipe_ends_quietly():
    code = ("import sys; from cortex_spec import cli; sys.exit(cli.main(['clauses']))")
    proc = subprocess.run(f"{sys.executable} -c \"{code}\" | head -1", shell=True, cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.stdout.count("\n") == 1


def test_certify_passes_arguments_after_the_store_to_pytest(tmp_path, monkeypatch):
    """Options after the store, and pytest's own after --."""
    seen = {}

    def fake_main(args, plugins=()):
        seen["args"] = list(args)
        return 4  # pytest's usage error

    monkeypatch.setattr(cli.pytest, "main", fake_main)
    status = cli.main(["certify", "reference", "--report-dir", str(tmp_path), "--classes", "checkpoints",
                       "--", "-n", "2", "--maxfail", "3"])
    assert status == 2  # pytest's usage error is the CLI's
    args = seen["args"]
    assert args[-4:] == ["-n", "2", "--maxfail", "3"]
    assert args[args.index("--cortex-classes") + 1] == "checkpoints"
    assert str(tmp_path) in args[args.index("--cortex-report") + 1]


def test_progress_counts_are_right_under_xdist(capsys):
    """The progress total comes from the workers' collection: never [n/0]."""
    import io

    stream = io.StringIO()
    progress = cli.Progress(stream, Path(os.devnull))

    class Session:
        class config:
            class option:
                dist = "load"
        items = ()

    progress.pytest_collection_finish(Session())
    progress.pytest_xdist_node_collection_finished(node=None, ids=["a", "b", "c"])
    progress.pytest_xdist_node_collection_finished(node=None, ids=["a", "b", "c"])
    for nodeid in ("a", "b", "c"):
        progress.pytest_runtest_logfinish(nodeid, None)
    text = stream.getvalue()
    assert "3 tests collected" in text and text.count("tests collected") == 1
    assert "[   3/3] 100%" in text and "/0]" not in text
