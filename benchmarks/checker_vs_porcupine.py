"""The linearizability checker against Porcupine, on the same histories (a script, not a test).

    CORTEX_SPEC_PORCUPINE=/work/shared/bench/porcupine python benchmarks/checker_vs_porcupine.py
    python benchmarks/checker_vs_porcupine.py --rounds 5 --only 'etcd|kv' -v
    python benchmarks/checker_vs_porcupine.py --checker /tmp/old/linearizability.py

Porcupine (Go) is the reference Wing & Gong / Lowe checker.  This script needs
the shared folder ``bench/porcupine`` (default ``../shared/bench/porcupine``
beside the repository, or ``$CORTEX_SPEC_PORCUPINE``, or ``--shared``): its
``build.sh`` builds the Go harness ``gocheck`` (needs Go: ``apt-get install
golang-go``; or pass a prebuilt one with ``--gocheck``) and its ``convert.py``
writes ``histories.json`` — Porcupine's 102 Jepsen etcd logs and 6 key-value
logs, and claim-register histories of ``benchmarks/checker.py`` (with copies
where one returned value is flipped).  Nothing of Porcupine lives in this
repository; build products go to ``--out`` (a temporary folder by default).

Each history is checked by both checkers in turn: ``--rounds`` rounds of
``--block`` checks by each (which one goes first alternates); the times
compared are both in-process check times (Porcupine with ``GOMAXPROCS=1``,
as ours uses one core), in CPU time and in wall-clock time (this folder's
``gocheck/main.go`` reports Porcupine's CPU time); per history the ratio is
median(ours) / median(Porcupine) of CPU times, on which the targets are
judged (``--statistic median``: of wall-clock times; ``--statistic min``:
the fastest wall-clock check of each, which on a loaded machine is the
least preempted one; every statistic is reported, and the first line gives
the load average).  The loaded corpus and the histories converted for our
checker (before any check) are frozen out of the garbage collector's sight
(``gc.freeze``), as ``timeit`` switches it off: they are the benchmark's, as
Porcupine's are converted when gocheck starts.  The table
gives, per family and size, verdict agreement and the median ratio; the last
lines say whether the targets are met: identical verdicts, median ratio
<= 2x overall and <= 5x in every family and size, and no ``unknown`` where
Porcupine decides within 1 s.  ``--median-of N`` runs the whole benchmark N
times, each a fresh process (``benchmarks/median_of.py``), and judges the
targets on the medians of the runs: the median of their median ratios, each
family and size at the median of its runs (issue 14: the median of three).
Exit status: 0 targets met, 1 a target missed, 2 something needed is absent.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import median_of  # benchmarks/median_of.py, beside this script
from cortex_spec.stateful.history import Call
from cortex_spec.stateful.ops import UNKNOWN, Op, Outcome

from cortex_spec.context import Context
from cortex_spec.scope import Scope

CTX = Context(Scope(("ws", "bench")))

#: verdict names of gocheck, in ours
PORCUPINE_VERDICTS = {"Ok": "ok", "Illegal": "violation", "Unknown": "unknown"}
TARGET_MEDIAN = 2.0
TARGET_EVERY = 5.0
TARGET_DECIDES_S = 1.0


class Absent(Exception):
    """Something the benchmark needs is not on this machine."""


# -- models for our checker (the semantics of gocheck's Porcupine models) -----------------


OK_NONE = Outcome("ok", None)
OK_EMPTY = Outcome("ok", "")
OK_TRUE, OK_FALSE = Outcome("ok", True), Outcome("ok", False)


def _returned(outcomes: dict[Any, Outcome], value: Any) -> Outcome:
    """``Outcome("ok", value)``, built once per value (a model's expected
    outcomes are compared by value; building one is most of a step's cost)."""
    outcome = outcomes.get(value)
    if outcome is None:
        outcome = outcomes[value] = Outcome("ok", value)
    return outcome


class EtcdRegister:
    """Porcupine's etcd model: one register (``None`` = no value) with read,
    write and compare-and-set.  A call whose outcome is not ``ok`` (it timed
    out, or never returned) accepts whatever the register did.  The expected
    outcome is the observed one when they agree, else built once per value
    (no new object per step)."""

    def __init__(self) -> None:
        self._outcomes: dict[Any, Outcome] = {}

    def init(self) -> Hashable:
        return None

    def step(self, state: Any, op: Op, observed: Outcome) -> tuple[bool, Any, Outcome]:
        method = op.method
        if method == "read":
            if observed.kind != "ok" or observed.value == state:
                return True, state, observed
            return False, state, _returned(self._outcomes, state)
        if method == "write":
            return True, op.args[0], OK_NONE
        expect, new = op.args
        hit = state == expect
        if observed.kind != "ok" or observed.value is hit:
            return True, (new if hit else state), observed
        return False, (new if hit else state), OK_TRUE if hit else OK_FALSE


class KeyValue:
    """Porcupine's kv model: one string per key (the history is partitioned
    by key) with get, put and append."""

    def __init__(self) -> None:
        self._outcomes: dict[Any, Outcome] = {}

    def init(self) -> Hashable:
        return ""

    def step(self, state: Any, op: Op, observed: Outcome) -> tuple[bool, Any, Outcome]:
        method = op.method
        if method == "get":
            if observed.value == state:
                return True, state, observed
            return False, state, _returned(self._outcomes, state)
        if method == "put":
            return True, op.args[0], OK_EMPTY
        return True, state + op.args[0], OK_EMPTY


def _claim_register() -> Callable[[], Any]:
    """The project's own claim-register model, from ``benchmarks/checker.py``."""
    spec = importlib.util.spec_from_file_location("_bench_checker", ROOT / "benchmarks" / "checker.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ClaimRegister


#: a call that returned at t1 but whose result is unknown (Porcupine's etcd
#: ``unknown`` output): it must take effect before t1, and any result is accepted;
#: only an outcome of kind "unknown" would make the checker leave it open forever
RETURNED_UNKNOWN = Outcome("timeout")


def to_calls(ops: list[dict[str, Any]]) -> list[Call]:
    calls = []
    for i, o in enumerate(ops):
        if o["t1"] is None:
            outcome = UNKNOWN  # never returned
        elif o["unk"]:
            outcome = RETURNED_UNKNOWN
        else:
            outcome = Outcome("ok", o["out"])
        op = Op(o["f"], CTX, tuple(o["args"]), keys=frozenset({o["key"]}))
        calls.append(Call(i, o["c"], op, o["t0"], o["t1"], outcome))
    return calls


# -- the two checkers ---------------------------------------------------------------------


def load_checker(path: Path | None) -> Callable[..., Any]:
    """``check`` of the project, or of another ``linearizability.py`` (e.g. an
    older version), loaded as a sibling module so its relative imports resolve."""
    if path is None:
        from cortex_spec.stateful.linearizability import check

        return check
    spec = importlib.util.spec_from_file_location("cortex_spec.stateful._checker_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.check


class Porcupine:
    """The gocheck process: ``IDX REPS TIMEOUT_MS`` in, ``IDX VERDICT NS,... CPUNS,...`` out
    (the shared folder's own gocheck, e.g. a prebuilt ``--gocheck``, gives no CPU times)."""

    def __init__(self, binary: Path, histories: Path, gomaxprocs: int) -> None:
        env = dict(os.environ, GOMAXPROCS=str(gomaxprocs))
        self._proc = subprocess.Popen(
            [str(binary), str(histories)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=env,
        )
        assert self._proc.stdout is not None
        ready = self._proc.stdout.readline().split()
        if len(ready) != 2 or ready[0] != "ready":
            raise Absent(f"{binary} did not start (said {' '.join(ready)!r})")
        self.count = int(ready[1])

    def check(self, index: int, reps: int, timeout_s: float) -> tuple[str, list[float], list[float] | None]:
        """``reps`` checks of history ``index``: (our verdict name, wall-clock
        seconds of each, CPU seconds of each or None when gocheck gives none)."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(f"{index} {reps} {max(1, int(timeout_s * 1000))}\n")
        self._proc.stdin.flush()
        idx, verdict, times, *cpu = self._proc.stdout.readline().split()
        assert int(idx) == index
        return (PORCUPINE_VERDICTS[verdict], [int(ns) / 1e9 for ns in times.split(",")],
                [int(ns) / 1e9 for ns in cpu[0].split(",")] if cpu else None)

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=30)


# -- preparing the shared material --------------------------------------------------------


def shared_folder(option: str | None) -> Path:
    path = Path(option or os.environ.get("CORTEX_SPEC_PORCUPINE") or ROOT.parent / "shared" / "bench" / "porcupine")
    for needed in ("build.sh", "convert.py", "porcupine-src"):
        if not (path / needed).exists():
            raise Absent(f"the Porcupine folder {path} has no {needed} "
                         "(set CORTEX_SPEC_PORCUPINE or --shared to the shared bench/porcupine folder)")
    return path.resolve()


#: this benchmark's copy of the shared gocheck, which also reports CPU times
GOCHECK_SOURCE = ROOT / "benchmarks" / "gocheck" / "main.go"


def gocheck_binary(shared: Path, out: Path, option: str | None) -> Path:
    """A prebuilt ``--gocheck``, or this benchmark's gocheck built against the
    shared ``porcupine-src`` (as the shared ``build.sh`` builds its own: no
    module downloads), rebuilt when its source changed."""
    if option:
        binary = Path(option)
        if not os.access(binary, os.X_OK):
            raise Absent(f"--gocheck {binary}: no such executable")
        return binary
    build = out / "gobuild-cpu"
    binary = build / "gocheck"
    source = GOCHECK_SOURCE.read_text()
    if os.access(binary, os.X_OK) and (build / "main.go").is_file() and (build / "main.go").read_text() == source:
        return binary
    if shutil.which("go") is None:
        raise Absent("Go is not installed (Debian: apt-get install -y golang-go), "
                     "and no prebuilt gocheck was given (--gocheck)")
    build.mkdir(parents=True, exist_ok=True)
    (build / "go.mod").write_text(
        "module gocheck\n\ngo 1.19\n\nrequire github.com/anishathalye/porcupine v0.0.0\n\n"
        f"replace github.com/anishathalye/porcupine => {shared / 'porcupine-src'}\n"
    )
    (build / "main.go").write_text(source)
    done = subprocess.run(["go", "build", "-o", "gocheck", "."], cwd=build,
                          env=dict(os.environ, GOFLAGS="-mod=mod", GOPROXY="off"),
                          capture_output=True, text=True, check=False)
    if done.returncode != 0 or not os.access(binary, os.X_OK):
        raise Absent(f"building gocheck failed:\n{done.stdout}{done.stderr}")
    return binary


def histories_file(shared: Path, out: Path, regenerate: bool) -> Path:
    path = out / "histories.json"
    if path.is_file() and not regenerate:
        return path
    done = subprocess.run([sys.executable, str(shared / "convert.py")], cwd=ROOT,
                          env=dict(os.environ, BENCH_OUT=str(out), CORTEX_SPEC_DIR=str(ROOT)),
                          capture_output=True, text=True, check=False)
    if done.returncode != 0 or not path.is_file():
        raise Absent(f"convert.py failed:\n{done.stdout}{done.stderr}")
    return path


# -- measuring ----------------------------------------------------------------------------

#: per history, each checker's time: name -> (the times it is taken from, how)
STATISTICS: dict[str, tuple[str, Callable[[list[float]], float]]] = {
    "cpu": ("cpu", statistics.median),
    "median": ("wall", statistics.median),
    "min": ("wall", min),
}
#: what each statistic is, for the table's headings
DESCRIBED = {
    "cpu": "median CPU time",
    "median": "median wall-clock time",
    "min": "fastest wall-clock time",
}


def measure(
    histories: list[dict[str, Any]], selected: dict[int, list[Call]], porcupine: Porcupine,
    check: Callable[..., Any], rounds: int, block: int, budget: float, per_history_s: float, progress: bool,
) -> Iterator[dict[str, Any]]:
    """Per history, ``rounds`` rounds of ``block`` checks by each checker (the
    first to go alternates); each timed in-process, in wall-clock and CPU
    time (ours: ``time.thread_time``; Porcupine's: its process's CPU clock,
    with ``GOMAXPROCS=1``); per statistic of :data:`STATISTICS`, the ratio.
    ``selected`` maps the index of each history to check to its calls."""
    models = {"etcd": EtcdRegister, "kv": KeyValue, "claim": _claim_register()}
    for n, (index, calls) in enumerate(selected.items()):
        h = histories[index]
        times: dict[str, dict[str, list[float]]] = {"ours": {"wall": [], "cpu": []},
                                                      "theirs": {"wall": [], "cpu": []}}
        ours_v: set[str] = set()
        theirs_v: set[str] = set()
        for turn in range(rounds):
            for who in ("ours", "theirs") if turn % 2 == 0 else ("theirs", "ours"):
                if who == "theirs":
                    verdict, seconds, cpu = porcupine.check(index, block, budget)
                    times["theirs"]["wall"] += seconds
                    if cpu is not None:
                        times["theirs"]["cpu"] += cpu
                    theirs_v.add(verdict)
                    continue
                for _ in range(block):
                    model = models[h["model"]]()
                    started_cpu = time.thread_time()
                    started = time.perf_counter()
                    result = check(model, calls, budget).result
                    elapsed = time.perf_counter() - started
                    times["ours"]["cpu"].append(time.thread_time() - started_cpu)
                    times["ours"]["wall"].append(elapsed)
                    ours_v.add(result)
            if sum(times["ours"]["wall"]) + sum(times["theirs"]["wall"]) > per_history_s:
                break
        row: dict[str, Any] = {
            "name": h["name"], "family": h["family"], "size": h["size"], "ops": len(calls),
            "ours": "/".join(sorted(ours_v)), "theirs": "/".join(sorted(theirs_v)),
            "reps": len(times["ours"]["wall"]),
        }
        for name, (clock, statistic) in STATISTICS.items():
            if not times["theirs"][clock]:
                continue
            ours_s, theirs_s = statistic(times["ours"][clock]), statistic(times["theirs"][clock])
            row[name] = {"ours_s": ours_s, "theirs_s": theirs_s, "ratio": ours_s / max(theirs_s, 1e-9)}
        if progress:
            shown = " ".join(f"{name} {row[name]['ours_s'] * 1e3:.2f}/{row[name]['theirs_s'] * 1e3:.2f} ms "
                             f"({row[name]['ratio']:.1f}x)" for name in STATISTICS if name in row)
            print(f"  [{n + 1}/{len(selected)}] {row['name']}: {row['ours']} / porcupine {row['theirs']}; {shown}",
                  file=sys.stderr)
        yield row


def _size_key(size: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", size)) or (0,)


def _median_ratio(rows: list[dict[str, Any]], name: str) -> float:
    return statistics.median(r[name]["ratio"] for r in rows)


def figures(rows: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """What issue 14's targets are judged on, from the ratios of statistic
    ``name``: the median ratio, the median ratio of each family and size,
    the histories whose verdicts differ, and those left ``unknown`` that
    Porcupine decides within :data:`TARGET_DECIDES_S`."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["family"], row["size"]), []).append(row)
    return {
        "histories": len(rows),
        "median": _median_ratio(rows, name),
        "groups": [[family, size, _median_ratio(g, name)] for (family, size), g in groups.items()],
        "disagree": [r["name"] for r in rows if r["ours"] != r["theirs"]],
        "undecided": [r["name"] for r in rows if r["ours"] == "unknown" and r["theirs"] != "unknown"
                      and r[name]["theirs_s"] <= TARGET_DECIDES_S],
    }


def targets(found: dict[str, Any]) -> list[tuple[bool, str]]:
    """Issue 14's targets on :func:`figures`, met or not, each with its line."""
    family, size, worst = max(found["groups"], key=lambda g: g[2])
    median, disagree, undecided, n = found["median"], found["disagree"], found["undecided"], found["histories"]
    return [
        (not disagree, "identical verdicts on every history"
         + (f" (differ: {', '.join(disagree)})" if disagree else f" ({n}/{n})")),
        (median <= TARGET_MEDIAN, f"median ratio {median:.2f}x <= {TARGET_MEDIAN:g}x"),
        (worst <= TARGET_EVERY, (f"median ratio of every family and size <= {TARGET_EVERY:g}x "
                                 f"(highest: {family} {size} at {worst:.2f}x)")),
        (not undecided, f"no unknown where Porcupine decides within {TARGET_DECIDES_S:g} s"
         + (f" (unknown: {', '.join(undecided)})" if undecided else "")),
    ]


def median_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """``--median-of``: the :func:`figures` of several runs as one, as issue
    14 judges them: the median of the runs' median ratios, each family and
    size at the median of its runs' ratios (the highest of those is judged),
    and a history counted against the targets if its verdicts differed, or
    it was left unknown, in any run.  A family and size missing from a run
    fails the whole."""
    groups: dict[tuple[str, str], list[float]] = {}
    for run in runs:
        for family, size, ratio in run["groups"]:
            groups.setdefault((family, size), []).append(ratio)
    incomplete = [f"{family} {size} (in {len(r)} of {len(runs)} runs)"
                  for (family, size), r in groups.items() if len(r) != len(runs)]
    return {
        "histories": max(run["histories"] for run in runs),
        "median": statistics.median(run["median"] for run in runs),
        "groups": [[family, size, statistics.median(r)] for (family, size), r in groups.items()],
        "disagree": sorted({h for run in runs for h in run["disagree"]}) + incomplete,
        "undecided": sorted({h for run in runs for h in run["undecided"]}),
    }


def report(rows: list[dict[str, Any]], judged: str, verbose: bool) -> None:
    """The table (times and ratios of statistic ``judged``, and the median
    ratio of every other statistic measured), then the targets on each other
    statistic (:func:`main` ends with those on ``judged``)."""
    others = [name for name in STATISTICS if name != judged and all(name in r for r in rows)]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["family"], row["size"]), []).append(row)
    print(f"times and ratios (ours / Porcupine's) per history: {DESCRIBED[judged]}; "
          + ", ".join(f"'{name} x': ratio of the {DESCRIBED[name]}" for name in others))
    header = (f"{'family':<10} {'size':>9} {'hist':>4} {'agree':>7} {'ours ms':>9} {'porc ms':>9} "
              f"{'median x':>8} {'worst x':>8}" + "".join(f" {name + ' x':>8}" for name in others))
    print(header)
    print("-" * len(header))
    for family, size in sorted(groups, key=lambda k: (k[0], _size_key(k[1]))):
        g = groups[(family, size)]
        agree = sum(r["ours"] == r["theirs"] for r in g)
        print(f"{family:<10} {size:>9} {len(g):>4} {agree:>3}/{len(g):<3} "
              f"{statistics.median(r[judged]['ours_s'] for r in g) * 1e3:>9.2f} "
              f"{statistics.median(r[judged]['theirs_s'] for r in g) * 1e3:>9.2f} "
              f"{_median_ratio(g, judged):>8.2f} {max(r[judged]['ratio'] for r in g):>8.2f}"
              + "".join(f" {_median_ratio(g, name):>8.2f}" for name in others))
    print("-" * len(header))
    ratios = [r[judged]["ratio"] for r in rows]
    geomean = math.exp(statistics.mean(math.log(max(x, 1e-9)) for x in ratios))
    print(f"{'all':<10} {'':>9} {len(rows):>4} {sum(r['ours'] == r['theirs'] for r in rows):>3}/{len(rows):<3} "
          f"{'':>9} {'':>9} {statistics.median(ratios):>8.2f} {max(ratios):>8.2f}"
          + "".join(f" {_median_ratio(rows, name):>8.2f}" for name in others)
          + f"   geometric mean {geomean:.2f}x")
    if verbose:
        print()
        for r in sorted(rows, key=lambda r: -r[judged]["ratio"]):
            print(f"  {r['name']:<32} {r['ops']:>6} ops  {r['ours']:>9} {r[judged]['ours_s'] * 1e3:>10.2f} ms  "
                  f"{r['theirs']:>9} {r[judged]['theirs_s'] * 1e3:>10.2f} ms  {r[judged]['ratio']:>7.2f}x  "
                  f"({r['reps']} reps)")

    for name in others:
        print_targets(figures(rows, name), name, "for information")


def print_targets(found: dict[str, Any], name: str, role: str) -> bool:
    """Each of issue 14's targets on :func:`figures` ``found`` of statistic
    ``name``, met or missed; returns whether all are met."""
    print()
    print(f"on the {DESCRIBED[name]} ({role}):")
    checks = targets(found)
    for met, text in checks:
        print(f"target {'met   ' if met else 'MISSED'}: {text}")
    met_all = all(met for met, _ in checks)
    print(f"targets: {'all met' if met_all else 'NOT all met'} ({name})")
    return met_all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", help="the shared bench/porcupine folder (default: $CORTEX_SPEC_PORCUPINE "
                                         "or ../shared/bench/porcupine beside the repository)")
    parser.add_argument("--gocheck", help="a prebuilt gocheck binary (default: build benchmarks/gocheck/main.go "
                                          "against the shared porcupine-src)")
    parser.add_argument("--out", help="folder for the build and histories.json (default: a temporary one)")
    parser.add_argument("--regenerate", action="store_true", help="rewrite histories.json even if present")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per history (the first checker alternates)")
    parser.add_argument("--block", type=int, default=3,
                        help="checks of a history by one checker in a round (1: strict alternation)")
    parser.add_argument("--per-history", type=float, default=4.0,
                        help="no further round of a history after this many seconds (at least one round)")
    parser.add_argument("--budget", type=float, default=30.0, help="seconds per check, both checkers")
    parser.add_argument("--gomaxprocs", type=int, default=1, help="GOMAXPROCS for Porcupine (our checker uses one core)")
    parser.add_argument("--statistic", choices=tuple(STATISTICS), default="cpu",
                        help="per history, each checker's time the targets are judged on: the median CPU time of "
                             "its checks (default; what the check itself costs, whatever else runs on the "
                             "machine), the median wall-clock time, or the fastest wall-clock time (on a loaded "
                             "machine, the least preempted). Every statistic measured is reported.")
    parser.add_argument("--only", help="regular expression: check only histories whose name matches")
    parser.add_argument("--checker", type=Path, help="check with this linearizability.py instead of the project's")
    parser.add_argument("--verbose", "-v", action="store_true", help="one line per history, slowest ratio first")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    parser.add_argument("--median-of", type=int, default=1, metavar="N",
                        help="run the whole benchmark N times, each a fresh process, and judge the targets on "
                             "the medians of the runs (issue 14 judges the median of three)")
    parser.add_argument("--json", metavar="PATH", help="also write the judged figures to PATH as JSON")
    args = parser.parse_args(argv)
    if args.median_of < 1:
        parser.error("--median-of must be at least 1")
    if args.median_of > 1:
        measured = median_of.runs(__file__, sys.argv[1:] if argv is None else argv, args.median_of)
        if measured is None:
            return 2
        found = median_figures(measured)
        print("(each run's own report is above; a run's figures are on the statistic it judged)")
        met = print_targets(found, args.statistic, f"judged at the median of {args.median_of} runs")
        return 0 if met else 1

    out = Path(args.out) if args.out else Path(tempfile.gettempdir()) / "cortex-spec-checker-vs-porcupine"
    out.mkdir(parents=True, exist_ok=True)
    try:
        shared = shared_folder(args.shared)
        binary = gocheck_binary(shared, out.resolve(), args.gocheck)
        path = histories_file(shared, out.resolve(), args.regenerate)
        porcupine = Porcupine(binary, path, args.gomaxprocs)
    except Absent as exc:
        print(f"checker_vs_porcupine: cannot run: {exc}", file=sys.stderr)
        return 2
    histories = json.loads(path.read_text())["histories"]
    if porcupine.count != len(histories):
        print(f"checker_vs_porcupine: gocheck loaded {porcupine.count} histories, {path} has {len(histories)}",
              file=sys.stderr)
        return 2
    selected = {i: to_calls(h["ops"]) for i, h in enumerate(histories)
                if not args.only or re.search(args.only, h["name"])}
    # The corpus and the converted histories are the benchmark's, not a
    # checker's: keep the garbage collector from walking them at every full
    # collection during a check.
    gc.collect()
    gc.freeze()
    check = load_checker(args.checker)
    print(f"linearizability checker ({args.checker or 'stateful/linearizability.py'}) vs Porcupine "
          f"(GOMAXPROCS={args.gomaxprocs}): {len(selected)} histories, up to {args.rounds} rounds of "
          f"{args.block} checks each, budget {args.budget:g} s; targets judged on the {DESCRIBED[args.statistic]}; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    try:
        rows = list(measure(histories, selected, porcupine, check, args.rounds, args.block, args.budget,
                            args.per_history, not args.quiet))
    finally:
        porcupine.close()
    if not rows:
        print("checker_vs_porcupine: no history selected", file=sys.stderr)
        return 2
    if any(args.statistic not in r for r in rows):
        print(f"checker_vs_porcupine: {binary} reports no CPU times (use this benchmark's gocheck, "
              "or --statistic median)", file=sys.stderr)
        return 2
    report(rows, args.statistic, args.verbose)
    print()
    print(f"load average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    # the judged targets last: whether each is met ends the output
    found = figures(rows, args.statistic)
    if args.json:
        median_of.write(args.json, found)
    met = print_targets(found, args.statistic, "judged")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
