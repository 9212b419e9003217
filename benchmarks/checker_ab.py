"""Two versions of the linearizability checker on the same histories, in one process (a script, not a test).

    python benchmarks/checker_ab.py --old /tmp/old/linearizability.py
    python benchmarks/checker_ab.py --old /tmp/old/linearizability.py --only 'etcd|kv' --repeats 9

The histories are those of ``checker_vs_porcupine.py`` (its ``histories.json``,
made from the shared ``bench/porcupine`` folder the same way; Go is not
needed).  Each history is checked ``--repeats`` times by each version, in
turns (which goes first alternates), timed in CPU time (``time.thread_time``);
per family and size it prints the median of new / old (of the median CPU time
per history), and it compares everything each verdict reports but its time
and steps: result, calls, best order, unexplained calls.  On a shared machine
both versions see the same load, so their ratio is steadier than either
ratio to Porcupine.  Exit status: 0 when every verdict is identical, 1 when
one differs, 2 when something needed is absent.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import checker_vs_porcupine as bench  # noqa: E402


def reported(verdict: Any) -> tuple[Any, ...]:
    """What a verdict reports, but its time and steps."""
    return (verdict.result, verdict.calls, verdict.best_order,
            tuple((u.call, u.observed, u.expected) for u in verdict.unexplained), verdict.partitions)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the linearizability.py to compare with")
    parser.add_argument("--new", type=Path, help="the other one (default: the project's)")
    parser.add_argument("--shared", help="the shared bench/porcupine folder (as checker_vs_porcupine.py)")
    parser.add_argument("--out", help="folder of histories.json (default: checker_vs_porcupine.py's)")
    parser.add_argument("--only", help="regular expression: check only histories whose name matches")
    parser.add_argument("--repeats", type=int, default=5, help="checks of each history by each version")
    parser.add_argument("--budget", type=float, default=30.0, help="seconds per check")
    args = parser.parse_args(argv)

    out = Path(args.out) if args.out else Path(tempfile.gettempdir()) / "cortex-spec-checker-vs-porcupine"
    out.mkdir(parents=True, exist_ok=True)
    try:
        path = bench.histories_file(bench.shared_folder(args.shared), out.resolve(), False)
    except bench.Absent as exc:
        print(f"checker_ab: cannot run: {exc}", file=sys.stderr)
        return 2
    histories = json.loads(path.read_text())["histories"]
    selected = [(h, bench.to_calls(h["ops"])) for h in histories if not args.only or re.search(args.only, h["name"])]
    gc.collect()
    gc.freeze()  # the corpus is the benchmark's (as in checker_vs_porcupine.py)
    old = bench.load_checker(args.old)
    new = bench.load_checker(args.new)
    models = {"etcd": bench.EtcdRegister, "kv": bench.KeyValue, "claim": bench._claim_register()}
    print(f"new ({args.new or 'stateful/linearizability.py'}) / old ({args.old}): {len(selected)} histories, "
          f"{args.repeats} checks each by each; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    groups: dict[tuple[str, str], list[float]] = {}
    differ = []
    for h, calls in selected:
        times: dict[str, list[float]] = {"old": [], "new": []}
        verdicts: dict[str, set[tuple[Any, ...]]] = {"old": set(), "new": set()}
        for turn in range(args.repeats):
            for name, check in (("old", old), ("new", new)) if turn % 2 == 0 else (("new", new), ("old", old)):
                model = models[h["model"]]()
                started = time.thread_time()
                verdict = check(model, calls, args.budget)
                times[name].append(time.thread_time() - started)
                verdicts[name].add(reported(verdict))
        if verdicts["old"] != verdicts["new"]:
            differ.append(h["name"])
        groups.setdefault((h["family"], h["size"]), []).append(
            statistics.median(times["new"]) / max(statistics.median(times["old"]), 1e-9))
    print(f"{'family':<10} {'size':>9} {'hist':>4} {'new/old':>8}")
    for (family, size), ratios in sorted(groups.items(), key=lambda kv: (kv[0][0], bench._size_key(kv[0][1]))):
        print(f"{family:<10} {size:>9} {len(ratios):>4} {statistics.median(ratios):>8.3f}")
    every = [r for ratios in groups.values() for r in ratios]
    print(f"{'all':<10} {'':>9} {len(every):>4} {statistics.median(every):>8.3f}")
    print(f"load average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"verdicts identical: {'yes' if not differ else 'NO (' + ', '.join(differ) + ')'} "
          f"({len(selected) - len(differ)}/{len(selected)})")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
