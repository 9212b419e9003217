"""``cortex-spec``: certify a store from the command line.

    cortex-spec certify reference
    cortex-spec certify mypkg.store:make_store --profile full
    cortex-spec clauses --class suspensions
    cortex-spec show cortex-reports/reference-quick.json
    cortex-spec report cortex-reports/reference-quick.json --format markdown
    cortex-spec diff main-report.json cortex-reports/reference-quick.json

``certify`` runs the clause suite and the state machines in-process under
pytest with a live progress display, writes the JSON report (default
``cortex-reports/<store>-<profile>.json``) and a log with every failure's
full traceback next to it, prints a summary table, and exits with

* 0 — certified (or every clause not passed is covered by a waiver in force);
* 1 — not certified (a clause failed, or was not tested; an expired waiver);
* 2 — usage error (unknown store or class, bad option, missing or malformed
  file);
* 3 — the backend could not start (not certified).

Arguments after ``--`` go to pytest unchanged
(``cortex-spec certify reference --report-dir out -- -x --maxfail 3``).
``report`` renders a JSON report in another format (``markdown``, ``junit``,
``github``, ``html``, ``text``, ``json``); ``diff`` compares two reports and
exits 1 only when a clause is newly not passed (a regression).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import pytest

from .clauses import catalogue
from .profiles import PROFILES, profile_from_env

__all__ = ["SUITES", "main"]

#: The packages a certification runs, in order.
SUITES = ("cortex_spec.conformance", "cortex_spec.stateful")


_RANK = {"not claimed": 0, "skipped": 1, "passed": 2, "failed": 3}


class Progress:
    """A pytest plugin that shows certification progress on a terminal."""

    def __init__(self, stream: TextIO, log_path: Path) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.total = 0
        self.done = 0
        self.counts = {"passed": 0, "failed": 0, "not claimed": 0, "skipped": 0}
        self.log_path = log_path
        self.log: TextIO | None = None
        self.last_print = time.monotonic()
        self.started = time.monotonic()
        self.collect_errors = 0
        self.outcomes: dict[str, str] = {}

    def _log(self, text: str) -> None:
        if self.log is None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self.log = self.log_path.open("w", encoding="utf-8")
        self.log.write(text + "\n")
        self.log.flush()

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.collect_errors += 1
            self.stream.write(f"\ncollection error in {report.nodeid}:\n{report.longreprtext}\n")
            self._log(f"COLLECTION ERROR {report.nodeid}\n{report.longreprtext}\n")

    def pytest_collection_finish(self, session: Any) -> None:
        if getattr(session.config.option, "dist", "no") != "no":
            return  # the workers collect (see below)
        self.total = len(session.items)
        self.stream.write(f"cortex-spec: {self.total} tests collected\n")

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """Under pytest-xdist every worker collects the same tests."""
        if not self.total:
            self.total = len(ids)
            self.stream.write(f"cortex-spec: {self.total} tests collected\n")

    def pytest_runtest_logreport(self, report: Any) -> None:
        from .pytest_plugin import NOT_CLAIMED

        if report.failed:
            outcome = "failed"
            self._log(f"FAILED {report.nodeid} ({report.when})\n{report.longreprtext}\n")
        elif report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
            outcome = "not claimed" if NOT_CLAIMED in reason else "skipped"
        elif report.when == "call":
            outcome = "passed"
        else:
            return
        previous = self.outcomes.get(report.nodeid)
        if previous is None or _RANK[outcome] > _RANK[previous]:
            self.outcomes[report.nodeid] = outcome

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        outcome = self.outcomes.pop(nodeid, "passed")
        self.counts[outcome] += 1
        self.done += 1
        self._line(nodeid, "FAILED" if outcome == "failed" else "", force=outcome == "failed")

    def _line(self, nodeid: str, status: str, force: bool = False) -> None:
        now = time.monotonic()
        module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
        pct = 100 * self.done // self.total if self.total else 100
        elapsed = now - self.started
        # the estimate scales the time so far by the tests left; the state
        # machines run first under pytest-xdist, so it falls as they finish
        # (no estimate before a twentieth of the tests is done: the first
        # ones are the long machines, and their rate says nothing yet)
        left = (elapsed / self.done * (self.total - self.done)
                if self.total and self.done >= max(1, self.total // 20) else None)
        clock = f"{_mmss(elapsed)} elapsed" + (f", ~{_mmss(left)} left" if left is not None else "")
        summary = (
            f"[{self.done:>4}/{self.total}] {pct:>3}%  {clock}  passed {self.counts['passed']}"
            f"  failed {self.counts['failed']}  not claimed {self.counts['not claimed']}"
        )
        if self.counts["skipped"]:
            summary += f"  skipped {self.counts['skipped']}"
        if self.tty:
            if status:
                self.stream.write(f"\r\x1b[K{status} {nodeid}\n")
            self.stream.write(f"\r\x1b[K{summary}  {module}")
            self.stream.flush()
            return
        if status:
            self.stream.write(f"{status} {nodeid}\n")
        if force or now - self.last_print > 10 or self.done == self.total:
            self.last_print = now
            self.stream.write(f"{summary}  {module}\n")
            self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
        if self.log is not None:
            self.log.close()


def _mmss(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


class UsageError(Exception):
    """A misuse of the command line: one line on standard error, exit status 2."""


def certify(args: argparse.Namespace) -> int:
    from .harness import HarnessError, auto_workers, resolve_harness
    from .reports import read_report, render_annotations, render_summary

    try:
        resolve_harness(args.store)  # an unknown store is a usage error before pytest starts
    except HarnessError as exc:
        raise UsageError(str(exc)) from None
    if args.waivers and not Path(args.waivers).is_file():
        raise UsageError(f"waiver file {args.waivers!r} does not exist")
    profile = args.profile or profile_from_env()
    report_path = Path(
        args.report
        or os.path.join(args.report_dir or "cortex-reports", f"{_slug(args.store)}-{profile}.json")
    )
    log_path = report_path.with_suffix(".log")
    if report_path.exists():
        report_path.unlink()
    suites = list(SUITES) if not args.no_machines else [SUITES[0]]
    pytest_args = [
        "-p", "no:terminal",
        "-p", "no:cacheprovider",
        # no assertion rewriting: every check states its own expected and
        # observed values, and rewriting the suites and the plugin packages
        # (Hypothesis among them) at import cost each worker 1.5-2.5 s of
        # its collection (benchmarks/README.md)
        "--assert=plain",
        "--pyargs", *suites,
        "--cortex-store", args.store,
        "--cortex-profile", profile,
        "--cortex-report", str(report_path),
    ]
    workers = auto_workers() if args.workers is None else args.workers
    if workers > 0:
        pytest_args += ["-n", str(workers)]
    if args.keyword:
        pytest_args += ["-k", args.keyword]
    if args.exitfirst:
        pytest_args.append("-x")
    if args.classes:
        pytest_args += ["--cortex-classes", args.classes]
    if args.waivers:
        pytest_args += ["--cortex-waivers", args.waivers]
    for output in args.output or []:
        pytest_args += ["--cortex-output", output]
    pytest_args += args.pytest_args or []
    import shlex

    os.environ["CORTEX_SPEC_COMMAND"] = " ".join(shlex.quote(a) for a in ["cortex-spec", *args.argv])
    progress = Progress(sys.stderr, log_path)
    sys.stderr.write(f"cortex-spec: certifying {args.store!r} (profile {profile})\n")
    try:
        status = int(pytest.main(pytest_args, plugins=[progress]))
    finally:
        progress.close()
        os.environ.pop("CORTEX_SPEC_COMMAND", None)
    if status == 4:  # pytest's usage error (a bad option or class, a bad waiver file)
        return 2
    if not report_path.exists():
        sys.stderr.write(
            f"cortex-spec: no report was written (pytest exit status {status}); "
            f"see {log_path} for details\n"
        )
        return status or 1
    report = read_report(report_path)
    print(render_summary(report))
    print(f"report: {report_path}")
    if progress.log is not None:
        print(f"failure log: {log_path}")
    if os.environ.get("GITHUB_ACTIONS") == "true":
        print(render_annotations(report))
    if status == 3:
        return 3
    if status == 2:
        return 2
    return 0 if report["gate"] == "pass" else 1


def clauses(args: argparse.Namespace) -> int:
    import json

    cat = catalogue()
    if args.cls and args.cls not in cat.classes:
        raise UsageError(f"unknown class {args.cls!r}; the classes are {', '.join(cat.classes)}")
    chosen = [c for c in cat if not args.cls or c.cls == args.cls]
    if args.json:
        print(json.dumps([{"id": c.id, "class": c.cls, "section": c.section, "text": c.text} for c in chosen],
                         indent=2, ensure_ascii=False))
        return 0
    for clause in chosen:
        print(f"{clause.id:<16} [{clause.cls}] {clause.text}")
    return 0


def _read(path: str) -> dict[str, Any]:
    from .reports import ReportError, read_report

    try:
        return read_report(path)
    except ReportError as exc:
        raise UsageError(str(exc)) from None


def show(args: argparse.Namespace) -> int:
    from .reports import FORMATS

    report = _read(args.report)
    sys.stdout.write(FORMATS["json" if args.json else "text"](report))
    return 0


def report_cmd(args: argparse.Namespace) -> int:
    from .reports import FORMATS

    text = FORMATS[args.format](_read(args.report))
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def diff_cmd(args: argparse.Namespace) -> int:
    import json

    from .reports import diff_reports, render_diff

    diff = diff_reports(_read(args.base), _read(args.new))
    if args.format == "json":
        print(json.dumps(diff, indent=2, ensure_ascii=False))
    else:
        sys.stdout.write(render_diff(diff, args.format))
    return 1 if diff["regressions"] else 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    from .reports import FORMATS

    parser = argparse.ArgumentParser(
        prog="cortex-spec", description="Certify durable agent-runtime stores.",
        epilog="exit status: 0 certified (or only waived failures), 1 not certified or a regression, "
        "2 usage error, 3 the backend could not start",
    )
    parser.add_argument("--version", action="version", version=f"cortex-spec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("certify", help="run the certification suite against a store")
    p.add_argument("store", help="built-in backend name (reference, ...) or module:factory")
    p.add_argument("--profile", choices=sorted(PROFILES), default=None,
                   help="quick (default, env CORTEX_SPEC_PROFILE) or full")
    p.add_argument("--report", default=None, help="JSON report path")
    p.add_argument("--report-dir", default=None, help="directory of the JSON report")
    p.add_argument("--no-machines", action="store_true",
                   help="run only the clause suite, not the state machines (not a full certification)")
    p.add_argument("-k", dest="keyword", default=None, help="pytest -k expression (debugging)")
    p.add_argument("-x", dest="exitfirst", action="store_true", help="stop at the first failure")
    p.add_argument("--workers", "-n", dest="workers", type=int, default=None,
                   help="pytest-xdist worker processes (default: one per core, at most 4, and one more; "
                        "0: one process)")
    p.add_argument("--classes", default=None,
                   help="certify only these declared classes (comma-separated); the others are not claimed")
    p.add_argument("--waivers", default=None, help="TOML file of known failures (see the README)")
    p.add_argument("--output", action="append", default=[], metavar="FORMAT=PATH",
                   help=f"also write the report as FORMAT ({', '.join(sorted(FORMATS))}) to PATH; repeatable")
    p.set_defaults(func=certify, pytest_args=[])

    p = sub.add_parser("clauses", help="list the clause catalogue")
    p.add_argument("--class", dest="cls", default=None, help="only this class")
    p.add_argument("--json", action="store_true", help="as JSON")
    p.set_defaults(func=clauses)

    p = sub.add_parser("show", help="print the summary of a JSON report")
    p.add_argument("report")
    p.add_argument("--json", action="store_true", help="print the report itself (validated) as JSON")
    p.set_defaults(func=show)

    p = sub.add_parser("report", help="render a JSON report as Markdown, JUnit, GitHub annotations, HTML, ...")
    p.add_argument("report")
    p.add_argument("--format", "-f", choices=sorted(FORMATS), default="markdown")
    p.add_argument("--output", "-o", default=None, help="write here instead of standard output")
    p.set_defaults(func=report_cmd)

    p = sub.add_parser("diff", help="compare two reports; exit 1 only on regressions")
    p.add_argument("base", help="the report to compare with (e.g. the main branch's)")
    p.add_argument("new", help="the new report (e.g. the pull request's)")
    p.add_argument("--format", "-f", choices=("text", "markdown", "json"), default="text")
    p.set_defaults(func=diff_cmd)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, passthrough = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = build_parser()
    try:
        args = parser.parse_args(ours)  # exits 2 with one line on a bad option
        if passthrough and args.command != "certify":
            raise UsageError(f"arguments after -- go to pytest, which only 'certify' runs: {' '.join(passthrough)}")
        args.pytest_args = passthrough
        args.argv = argv
        status = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except UsageError as exc:
        sys.stderr.write(f"cortex-spec: error: {exc}\n")
        return 2
    except BrokenPipeError:
        # the reader went away (``cortex-spec clauses | head``): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
