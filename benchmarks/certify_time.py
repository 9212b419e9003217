#!/usr/bin/env python3
"""Where a certification's time goes (a script, not a test).

    python benchmarks/certify_time.py                        # every built-in backend, 3 runs each, and the zoo
    python benchmarks/certify_time.py --backends sqlite --repeats 1 --no-zoo
    python benchmarks/certify_time.py --checkout /tmp/old    # the same for another checkout (before/after)

For each backend it runs ``cortex-spec certify BACKEND`` (quick profile, the
CLI's default pytest-xdist workers) ``--repeats`` times and prints, as
medians of the runs:

* the wall time against the target (60 s; 90 s for postgres, whose embedded
  server starts inside the run);
* its parts: collection and the backend's start (the slowest process's), the
  clause suite per class and each state machine per class, in seconds of
  work (under pytest-xdist the work of all workers adds up to more than the
  wall time);
* every class's share of the work against the per-class budget the quick
  profile holds to as classes are added: the target wall time times the
  workers, less collection and start-up, over the classes the run
  certified (never fewer than the nine of the product's plan), so that the
  budgets of all classes add up to the target;
* the machines' figures: examples, histories and operations, and
  operations per second of machine work;
* where the processor time went: the CPU time of the certification's own
  processes (the CLI, pytest and its workers) and of the database server's
  (PostgreSQL's embedded server, whose processes are not the run's
  children: sampled from ``/proc`` five times a second, so a server process
  that lives less than a sample is missed and the figure is a lower bound),
  against the cores times the wall time.

With ``--zoo`` (the default) it then certifies every mutant of the shipped
zoo the way ``tests/test_zoo.py`` does (the classes it breaks, stopping at
the first failure, two at a time) and prints each mutant's time to verdict,
the median (target: at most 15 s) and whether every one was rejected.

A report without ``timings`` (an older checkout) is split by test module
from a JUnit XML file of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ("reference", "sqlite", "postgres", "mongo")
#: wall-time targets of a quick certification, in seconds
TARGETS = {"reference": 60.0, "sqlite": 60.0, "mongo": 60.0, "postgres": 90.0}
#: the classes of the product's plan: the per-class budget divides by these,
#: or by the classes a run certified when it certified more
PLANNED_CLASSES = 9
#: the zoo's target median time to verdict, in seconds
ZOO_TARGET = 15.0
#: the process names of each backend's database server (processes outside the run)
SERVER_PROCESSES = {"postgres": ("postgres",)}


def _env(checkout: Path) -> dict[str, str]:
    env = dict(os.environ, CORTEX_SPEC_PROFILE="quick")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(checkout), str(checkout / "tests"),
                                                      env.get("PYTHONPATH")]))
    return env


def certify(backend: str, checkout: Path, workdir: Path) -> dict[str, Any]:
    """One ``cortex-spec certify`` run; its wall time, report and per-test times."""
    report = workdir / f"{backend}-{time.monotonic_ns()}.json"
    junit = report.with_suffix(".xml")
    command = [sys.executable, "-c", "from cortex_spec.cli import main; raise SystemExit(main())",
               "certify", backend, "--report", str(report), "--", f"--junitxml={junit}"]
    server = ServerCpu(SERVER_PROCESSES.get(backend, ()))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with server:
        proc = subprocess.run(command, cwd=workdir, env=_env(checkout), capture_output=True, text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if not report.exists():
        raise SystemExit(f"{backend}: no report (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    data = json.loads(report.read_text())
    own_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "report": data, "junit": _junit_times(junit), "status": proc.returncode,
            "cpu": own_cpu, "server_cpu": server.seconds}


class ServerCpu:
    """The CPU time of the processes named ``names`` that appear while the
    block runs (a database server outside the run's process tree), sampled
    from ``/proc``; ``seconds`` is None where nothing is sampled (no
    server, or no ``/proc``)."""

    INTERVAL = 0.2

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self._ticks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._old: set[int] = set()

    def _sample(self) -> None:
        for pid, name, ticks in _processes():
            if name in self.names and pid not in self._old:
                self._ticks[pid] = max(ticks, self._ticks.get(pid, 0))

    def _loop(self) -> None:
        while not self._stop.wait(self.INTERVAL):
            self._sample()

    def __enter__(self) -> ServerCpu:
        if self.names and Path("/proc/self/stat").exists():
            self._old = {pid for pid, name, _ in _processes() if name in self.names}
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()

    @property
    def seconds(self) -> float | None:
        if self._thread is None:
            return None
        return sum(self._ticks.values()) / os.sysconf("SC_CLK_TCK")


def _processes() -> list[tuple[int, str, int]]:
    """(pid, name, user + system clock ticks) of every process in ``/proc``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # it ended
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out.append((int(entry), name, int(fields[11]) + int(fields[12])))
    return out


def _junit_times(path: Path) -> dict[str, float]:
    if not path.exists():
        return {}
    out: dict[str, float] = {}
    for case in ET.parse(path).iter("testcase"):
        out[f"{case.get('classname')}::{case.get('name')}"] = float(case.get("time") or 0)
    return out


def units_of(run: dict[str, Any]) -> dict[str, float]:
    """Seconds of work per unit (``suite:<class>``, ``machine:<test>``)."""
    timings = run["report"].get("timings") or {}
    if timings.get("units"):
        return dict(timings["units"])
    units: dict[str, float] = defaultdict(float)
    for name, seconds in run["junit"].items():
        module, _, test = name.rpartition("::")
        module = module.rsplit(".", 1)[-1]
        if module == "test_machines":
            units[f"machine:{test.removeprefix('test_')}"] += seconds
        else:
            units[f"suite:{module.removeprefix('test_')}"] += seconds
    return dict(units)


def class_of(unit: str) -> list[str]:
    """The classes a unit's time is charged to (split evenly)."""
    kind, _, rest = unit.partition(":")
    if kind == "suite":
        return rest.split("+")
    m = re.search(r"\[([^\]:]+)", rest)
    return [m.group(1)] if m else ["machines (all classes)"]


def machine_kind(unit: str) -> str | None:
    if not unit.startswith("machine:"):
        return None
    return unit.removeprefix("machine:").split("[", 1)[0]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report_backend(backend: str, runs: list[dict[str, Any]]) -> tuple[float, bool]:
    walls = [r["wall"] for r in runs]
    wall = _median(walls)
    timings = [r["report"].get("timings") or {} for r in runs]
    workers = max((t.get("workers", 1) for t in timings), default=1)
    collection = _median([t.get("collection_s", 0.0) for t in timings])
    start = _median([t.get("backend_start_s", 0.0) for t in timings])
    target = TARGETS.get(backend, 60.0)
    verdicts = {r["report"]["verdict"] for r in runs}
    print(f"\n== {backend}: median {wall:.1f}s of {len(runs)} run(s) "
          f"({', '.join(f'{w:.1f}' for w in walls)}), target {target:.0f}s: "
          f"{'met' if wall <= target else 'NOT met'}; {workers} worker(s)")
    for verdict in sorted(verdicts):
        print(f"   verdict: {verdict}")
    print(f"   collection {collection:.1f}s, backend start {start:.1f}s")
    cores = os.cpu_count() or 1
    own = _median([r["cpu"] for r in runs])
    server_runs = [r["server_cpu"] for r in runs if r.get("server_cpu") is not None]
    server = _median(server_runs) if server_runs else 0.0
    available = cores * wall
    print(f"   processor time (medians): the run's processes {own:.1f}s"
          + (f", the database server's at least {server:.1f}s" if server_runs else "")
          + f", of {available:.0f}s ({cores} cores x {wall:.1f}s): {100 * (own + server) / available:.0f}% busy")
    per_unit: dict[str, list[float]] = defaultdict(list)
    for r in runs:
        for unit, seconds in units_of(r).items():
            per_unit[unit].append(seconds)
    medians = {u: _median(v) for u, v in per_unit.items()}
    per_class: dict[str, dict[str, float]] = defaultdict(lambda: {"suite": 0.0, "machines": 0.0})
    for unit, seconds in medians.items():
        owners = class_of(unit)
        for owner in owners:
            per_class[owner]["suite" if unit.startswith("suite:") else "machines"] += seconds / len(owners)
    certified = max((len(r["report"].get("classes") or ()) for r in runs), default=0)
    shares = max(PLANNED_CLASSES, certified)
    budget = max(0.0, target * workers - workers * (collection + start)) / shares
    rows = []
    for owner, parts in sorted(per_class.items(), key=lambda kv: -sum(kv[1].values())):
        total = parts["suite"] + parts["machines"]
        within = "" if owner in ("general", "machines (all classes)") else (
            "ok" if total <= budget else "OVER")
        rows.append([owner, f"{parts['suite']:.1f}", f"{parts['machines']:.1f}", f"{total:.1f}", within])
    print(f"   work per class (s), budget per class {budget:.1f}s of work "
          f"(= ({target:.0f}s x {workers} workers - start-up) / {shares} classes):")
    print(_indent(_table(rows, ["class", "suite", "machines", "total", "budget"])))
    rows = [[u, f"{s:.1f}"] for u, s in sorted(medians.items(), key=lambda kv: -kv[1])[:25]]
    print("   slowest units (s of work):")
    print(_indent(_table(rows, ["unit", "seconds"])))
    # machine figures per machine kind
    kinds: dict[str, float] = defaultdict(float)
    for unit, seconds in medians.items():
        kind = machine_kind(unit)
        if kind:
            kinds[kind] += seconds
    figures = runs[len(runs) // 2]["report"].get("machines") or {}
    rows = []
    for name, fig in sorted(figures.items()):
        kind = name.replace("-", "_")
        seconds = kinds.get(kind)
        ops = fig.get("operations", 0)
        rate = f"{ops / seconds:.0f}" if seconds else "-"
        rows.append([name, fig.get("examples", 0), fig.get("histories", 0), ops,
                     f"{seconds:.1f}" if seconds else "-", rate])
    if rows:
        print("   machines (one run):")
        print(_indent(_table(rows, ["machine", "examples", "histories", "operations", "seconds", "ops/s"])))
    return wall, wall <= target


def _indent(text: str) -> str:
    return "\n".join("     " + line for line in text.splitlines())


def run_zoo(checkout: Path, workdir: Path, parallel: int) -> bool:
    sys.path[:0] = [str(checkout / "tests")]
    from mutants import MUTANTS  # type: ignore[import-not-found]
    from zoo import certify_mutant, failed_clauses  # type: ignore[import-not-found]

    def one(mutant: Any) -> dict[str, Any]:
        where = workdir / f"zoo-{mutant.name}"
        where.mkdir(exist_ok=True)
        return certify_mutant(mutant, where, "quick")

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        results = list(pool.map(one, MUTANTS))
    wall = time.monotonic() - started
    rows = []
    all_rejected = True
    for r in sorted(results, key=lambda r: -r["seconds"]):
        report = r["report"]
        failed = failed_clauses(report) if report else []
        caught = [c for c in r["mutant"].expected if c in failed]
        rejected = bool(report) and not report["certified"] and bool(caught)
        all_rejected &= rejected
        rows.append([r["mutant"].name, ",".join(r["mutant"].classes), "yes" if rejected else "NO",
                     ", ".join(caught) or "-", f"{r['seconds']:.1f}"])
    times = [r["seconds"] for r in results]
    med = _median(times)
    print(f"\n== zoo: {sum(1 for row in rows if row[2] == 'yes')} of {len(rows)} mutants rejected with an "
          f"expected clause; time to verdict median {med:.1f}s (target {ZOO_TARGET:.0f}s: "
          f"{'met' if med <= ZOO_TARGET else 'NOT met'}), max {max(times):.1f}s; "
          f"{wall:.0f}s for the zoo, {parallel} at a time")
    print(_indent(_table(rows, ["mutant", "classes", "rejected", "caught by", "verdict s"])))
    return all_rejected and med <= ZOO_TARGET


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-zoo", dest="zoo", action="store_false")
    parser.add_argument("--zoo-parallel", type=int, default=2)
    parser.add_argument("--checkout", type=Path, default=ROOT,
                        help="the checkout to measure (default: this one)")
    args = parser.parse_args(argv)
    checkout = args.checkout.resolve()
    print(f"cortex-spec certification time, checkout {checkout}, {os.cpu_count()} cores, "
          f"{args.repeats} run(s) per backend, interleaved")
    met = True
    with tempfile.TemporaryDirectory(prefix="cortex-certify-time-") as tmp:
        workdir = Path(tmp)
        runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for _ in range(args.repeats):  # interleaved: load changes hit every backend alike
            for backend in args.backends:
                runs[backend].append(certify(backend, checkout, workdir))
        summary = []
        for backend in args.backends:
            wall, ok = report_backend(backend, runs[backend])
            met &= ok
            summary.append([backend, f"{wall:.1f}", f"{TARGETS[backend]:.0f}", "met" if ok else "NOT met"])
        if args.zoo:
            met &= run_zoo(checkout, workdir, args.zoo_parallel)
    print("\n== summary (medians)")
    print(_indent(_table(summary, ["backend", "wall s", "target s", ""])))
    print("\nall targets met" if met else "\nsome targets NOT met")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
