"""Benchmark of the linearizability checker (a script, not a test).

    python benchmarks/checker.py            # the default grid
    python benchmarks/checker.py --ops 100 1000 --objects 1 8 --lanes 4

For each (history length, number of objects) it generates linearizable
histories of a claim register per object — ``claim`` (wins iff free),
``release`` and ``read`` — made by concurrent lanes whose calls overlap, and
times the checker on them (P-compositional split by object, Lowe's memo).
It prints one table: mean and worst check time per history, search steps,
and verdicts.  A verdict other than ``ok`` on these valid histories would be
a checker bug; ``unknown`` means the time budget ran out.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

try:  # installed package
    from cortex_spec.stateful.history import Call
    from cortex_spec.stateful.linearizability import check
    from cortex_spec.stateful.ops import Op, Outcome
except ImportError:  # pragma: no cover - from a bare checkout
    from stateful.history import Call  # type: ignore[no-redef]
    from stateful.linearizability import check  # type: ignore[no-redef]
    from stateful.ops import Op, Outcome  # type: ignore[no-redef]

from cortex_spec.context import Context
from cortex_spec.scope import Scope

CTX = Context(Scope(("ws", "bench")))


WON, LOST = Outcome("ok", True), Outcome("ok", False)
TAKEN, FREE = WON, LOST
RELEASED = Outcome("ok", None)


class ClaimRegister:
    """Sequential model: one boolean per object (state is a frozenset of
    taken objects, restricted to the partition being checked).  Outcomes are
    built once, each state once per model (so equal states are one object),
    and a step that changes nothing returns the state it got."""

    def __init__(self):
        self._with = {}  # (state, obj) -> state | {obj}
        self._without = {}  # (state, obj) -> state - {obj}

    def init(self):
        return frozenset()

    def step(self, state, op, observed):
        obj = op.args[0]
        method = op.method
        if method == "read":
            expected = TAKEN if obj in state else FREE
            new = state
        elif method == "claim":
            if obj in state:
                expected, new = LOST, state
            else:
                expected, new = WON, self._with.get((state, obj))
                if new is None:
                    new = self._with[state, obj] = state | {obj}
        else:
            expected = RELEASED
            new = state
            if obj in state:
                new = self._without.get((state, obj))
                if new is None:
                    new = self._without[state, obj] = state - {obj}
        kind = observed.kind
        return kind == "unknown" or kind == "ok" and observed.value == expected.value, new, expected


def history(n_ops: int, n_objects: int, lanes: int, rng: random.Random) -> list[Call]:
    """A linearizable history: each call takes effect at a random instant
    inside its own [start, end] interval; lanes are sequential."""
    lane_clock = [0] * lanes
    pending = []
    for i in range(n_ops):
        lane = rng.randrange(lanes)
        start = lane_clock[lane] + rng.randint(0, 5)
        end = start + rng.randint(1, 40)
        lane_clock[lane] = end + 1
        point = rng.uniform(start, end)
        obj = rng.randrange(n_objects)
        method = rng.choices(["claim", "release", "read"], weights=[5, 3, 2])[0]
        pending.append((point, i, lane, start, end, method, obj))
    taken: set[int] = set()
    calls = []
    for point, i, lane, start, end, method, obj in sorted(pending):
        if method == "claim":
            value = obj not in taken
            taken.add(obj)
        elif method == "release":
            value = None
            taken.discard(obj)
        else:
            value = obj in taken
        op = Op(method, CTX, (obj,), keys=frozenset({obj}))
        calls.append(Call(i, lane, op, start, end, Outcome("ok", value)))
    calls.sort(key=lambda c: c.start)
    return calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, nargs="+", default=[100, 500, 1000, 2000, 5000])
    parser.add_argument("--objects", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--lanes", type=int, default=4, help="concurrent clients")
    parser.add_argument("--histories", type=int, default=3, help="histories per cell")
    parser.add_argument("--budget", type=float, default=30.0, help="seconds per history")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    header = f"{'ops':>6} {'objects':>7} {'mean ms':>10} {'worst ms':>10} {'steps':>9}  verdicts"
    print(f"linearizability checker, {args.lanes} lanes, {args.histories} histories per row")
    print(header)
    print("-" * len(header))
    for n_ops in args.ops:
        for n_objects in args.objects:
            times, steps, verdicts = [], [], []
            for _ in range(args.histories):
                calls = history(n_ops, n_objects, args.lanes, rng)
                started = time.perf_counter()
                verdict = check(ClaimRegister(), calls, budget_s=args.budget)
                times.append((time.perf_counter() - started) * 1000)
                steps.append(verdict.steps)
                verdicts.append(verdict.result)
            summary = ", ".join(f"{v} {verdicts.count(v)}" for v in sorted(set(verdicts)))
            print(f"{n_ops:>6} {n_objects:>7} {statistics.mean(times):>10.1f} {max(times):>10.1f} "
                  f"{int(statistics.mean(steps)):>9}  {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
