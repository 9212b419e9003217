"""``cortex-spec``: certify a store from the command line.

    cortex-spec certify reference
    cortex-spec certify mypkg.store:make_store --profile full
    cortex-spec clauses --class suspensions
    cortex-spec show cortex-reports/reference-quick.json

``certify`` runs the clause suite and the state machines in-process under
pytest with a live progress display, writes the JSON report (default
``cortex-reports/<store>-<profile>.json``) and a log with every failure's
full traceback next to it, prints a summary table, and exits with

* 0 — certified;
* 1 — not certified (a clause failed, or was not tested);
* 2 — usage error (unknown store, bad option);
* 3 — the backend could not start (not certified).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Sequence, TextIO

import pytest

from .clauses import catalogue
from .profiles import PROFILES, profile_from_env

__all__ = ["main", "SUITES"]

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
        left = elapsed / self.done * (self.total - self.done) if self.done and self.total else None
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


def default_workers() -> int:
    """pytest-xdist workers of a certification: one per core, at most four
    (0, one process, on a single core: a worker would only add start-up)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 0 if cores < 2 else min(cores, 4)


def certify(args: argparse.Namespace) -> int:
    from .reports import read_report, render_summary

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
        "--pyargs", *suites,
        "--cortex-store", args.store,
        "--cortex-profile", profile,
        "--cortex-report", str(report_path),
    ]
    workers = default_workers() if args.workers is None else args.workers
    if workers > 0:
        pytest_args += ["-n", str(workers)]
    if args.keyword:
        pytest_args += ["-k", args.keyword]
    if args.exitfirst:
        pytest_args.append("-x")
    pytest_args += args.pytest_args or []
    progress = Progress(sys.stderr, log_path)
    sys.stderr.write(f"cortex-spec: certifying {args.store!r} (profile {profile})\n")
    try:
        status = int(pytest.main(pytest_args, plugins=[progress]))
    finally:
        progress.close()
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
    if status == 3:
        return 3
    if status in (2, 4):
        return 2
    return 0 if report["certified"] else 1


def clauses(args: argparse.Namespace) -> int:
    cat = catalogue()
    for clause in cat:
        if args.cls and clause.cls != args.cls:
            continue
        print(f"{clause.id:<16} [{clause.cls}] {clause.text}")
    return 0


def show(args: argparse.Namespace) -> int:
    from .reports import read_report, render_summary

    print(render_summary(read_report(args.report)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cortex-spec", description="Certify durable agent-runtime stores."
    )
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
                   help="pytest-xdist worker processes (default: one per core, at most 4; 0: one process)")
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments after --")
    p.set_defaults(func=certify)

    p = sub.add_parser("clauses", help="list the clause catalogue")
    p.add_argument("--class", dest="cls", default=None, help="only this class")
    p.set_defaults(func=clauses)

    p = sub.add_parser("show", help="print the summary of a JSON report")
    p.add_argument("report")
    p.set_defaults(func=show)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
