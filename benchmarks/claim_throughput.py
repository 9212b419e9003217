#!/usr/bin/env python3
"""Claim throughput: the SQL adapter against hand-written driver SQL.

Not a test: a measurement.  For each dialect (SQLite, PostgreSQL) it makes N
paused runs with a suspension each, then lets 8 threads race to claim every
one of them (each thread walks all runs in its own random order, so every
run is contended and exactly N claims win).  It does that twice on fresh
rows: once through ``SqlStore.claim_suspension`` and once through the
driver directly (``sqlite3`` / ``psycopg``) running the same statements the
adapter runs: the conditional UPDATE of the run whose WHERE carries the
suspension's deadline predicate, then, in the same transaction, the read of
the suspension (win) or the one-statement classification read (loss).

Run from a checkout with the ``postgres`` extra installed::

    python benchmarks/claim_throughput.py            # both dialects, 8 threads
    python benchmarks/claim_throughput.py --runs 2000 --dialects sqlite

PostgreSQL comes from ``CORTEX_SPEC_POSTGRES_URL`` or, by default, the
embedded server of the ``postgres`` certification harness.  The result is
one run's figures, printed as a table with the adapter/driver ratio.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys
import tempfile
import threading
import time
from typing import Any, Callable

from cortex_spec import ManualClock, errors
from cortex_spec.adapters.sql import SqlStore
from cortex_spec.clock import to_millis
from cortex_spec.testing import ctx, make_run, make_suspension

SCOPE = ctx("ws=bench")

# The adapter's claim, written out by hand for the driver (one scope level).
CLAIM = (
    "UPDATE cortex_runs SET state = 'running', updated_at = {p} "
    "WHERE cortex_runs.id = {p} AND cortex_runs.state = 'paused' "
    "AND cortex_runs.scope_k1 = {p} AND cortex_runs.scope_v1 = {p} "
    "AND EXISTS (SELECT 1 FROM cortex_suspensions WHERE cortex_suspensions.run_id = {p} "
    "AND cortex_suspensions.scope_k1 = {p} AND cortex_suspensions.scope_v1 = {p} "
    "AND (cortex_suspensions.expires_at IS NULL OR cortex_suspensions.expires_at > {p}))"
)
CLAIMED = (
    "SELECT * FROM cortex_suspensions WHERE run_id = {p} AND scope_k1 = {p} AND scope_v1 = {p} "
    "AND (expires_at IS NULL OR expires_at > {p}){lock}"
)
PROBE = (
    "SELECT (SELECT count(*) FROM cortex_suspensions WHERE run_id = {p} AND scope_k1 = {p} "
    "AND scope_v1 = {p}), "
    "(SELECT count(*) FROM cortex_suspensions WHERE run_id = {p} AND scope_k1 = {p} "
    "AND scope_v1 = {p} AND (expires_at IS NULL OR expires_at > {p})), "
    "(SELECT count(*) FROM cortex_runs WHERE id = {p} AND scope_k1 = {p} AND scope_v1 = {p} "
    "AND state = 'paused')"
)


def _statements(p: str, lock: str) -> tuple[str, str, str]:
    return CLAIM.format(p=p), CLAIMED.format(p=p, lock=lock), PROBE.format(p=p)


def _claim_params(run_id: str, now_ms: int) -> tuple:
    return (now_ms, run_id, "ws", "bench", run_id, "ws", "bench", now_ms)


def _probe_params(run_id: str, now_ms: int) -> tuple:
    return (run_id, "ws", "bench", run_id, "ws", "bench", now_ms, run_id, "ws", "bench")


def _race(run_ids: list[str], threads: int, make_worker: Callable[[], Callable[[str], bool]]):
    """Every thread tries every run; returns (seconds, attempts, wins)."""
    workers = [make_worker() for _ in range(threads)]
    barrier = threading.Barrier(threads + 1)
    wins = [0] * threads
    failures: list[BaseException] = []

    def body(i: int) -> None:
        order = list(run_ids)
        random.Random(i).shuffle(order)
        claim = workers[i]
        barrier.wait()
        try:
            for rid in order:
                if claim(rid):
                    wins[i] += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    ts = [threading.Thread(target=body, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise failures[0]
    return elapsed, threads * len(run_ids), sum(wins)


def _seed(store: SqlStore, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        run = store.create_run(SCOPE, make_run(state="paused"))
        store.create_suspension(SCOPE, make_suspension(run.id))
        ids.append(run.id)
    return ids


def _adapter_worker(store: SqlStore) -> Callable[[], Callable[[str], bool]]:
    def make() -> Callable[[str], bool]:
        def claim(run_id: str) -> bool:
            try:
                store.claim_suspension(SCOPE, run_id)
                return True
            except errors.NotSuspended:
                return False

        return claim

    return make


def _sqlite_worker(path: str, now_ms: int) -> Callable[[], Callable[[str], bool]]:
    claim_sql, claimed_sql, probe_sql = _statements("?", "")

    def make() -> Callable[[str], bool]:
        conn = sqlite3.connect(path, isolation_level=None, timeout=5.0, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")  # the store's default

        def claim(run_id: str) -> bool:
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    break
                except sqlite3.OperationalError:  # busy past the timeout: try again
                    time.sleep(0.001)
            try:
                won = conn.execute(claim_sql, _claim_params(run_id, now_ms)).rowcount == 1
                if won:
                    conn.execute(claimed_sql, (run_id, "ws", "bench", now_ms)).fetchone()
                else:
                    conn.execute(probe_sql, _probe_params(run_id, now_ms)).fetchone()
                conn.execute("COMMIT")
                return won
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        return claim

    return make


def _postgres_worker(url: str, now_ms: int) -> Callable[[], Callable[[str], bool]]:
    import psycopg

    claim_sql, claimed_sql, probe_sql = _statements("%s", " FOR SHARE")

    def make() -> Callable[[str], bool]:
        conn = psycopg.connect(url)  # READ COMMITTED, not autocommit

        def claim(run_id: str) -> bool:
            with conn.transaction():
                won = conn.execute(claim_sql, _claim_params(run_id, now_ms)).rowcount == 1
                if won:
                    conn.execute(claimed_sql, (run_id, "ws", "bench", now_ms)).fetchone()
                else:
                    conn.execute(probe_sql, _probe_params(run_id, now_ms)).fetchone()
            return won

        return claim

    return make


def bench_sqlite(n: int, threads: int) -> list[dict[str, Any]]:
    clock = ManualClock()
    now_ms = to_millis(clock.now())
    rows = []
    with tempfile.TemporaryDirectory(prefix="cortex-bench-") as tmp:
        for path_name in ("adapter", "driver"):
            path = os.path.join(tmp, f"{path_name}.sqlite")
            store = SqlStore.from_url(f"sqlite:///{path}", clock)
            ids = _seed(store, n)
            if path_name == "adapter":
                worker = _adapter_worker(store)
            else:
                worker = _sqlite_worker(path, now_ms)
            elapsed, attempts, wins = _race(ids, threads, worker)
            store.close()
            rows.append(dict(dialect="sqlite", path=path_name, seconds=elapsed,
                             attempts=attempts, wins=wins, runs=n))
    return rows


def bench_postgres(n: int, threads: int) -> list[dict[str, Any]]:
    from cortex_spec.adapters.sql.harness import PostgresHarness

    harness = PostgresHarness()
    harness.start()
    rows = []
    try:
        clock = ManualClock()
        now_ms = to_millis(clock.now())
        for path_name in ("adapter", "driver"):
            location = harness.new_location()  # emptied
            store = harness.open(location, clock)
            ids = _seed(store, n)
            if path_name == "adapter":
                worker = _adapter_worker(store)
            else:
                url = location.engine.url.set(drivername="postgresql")
                worker = _postgres_worker(url.render_as_string(hide_password=False), now_ms)
            elapsed, attempts, wins = _race(ids, threads, worker)
            store.close()
            harness.discard(location)
            rows.append(dict(dialect="postgresql", path=path_name, seconds=elapsed,
                             attempts=attempts, wins=wins, runs=n,
                             server=harness.describe()["server"].split(" on ")[0]))
    finally:
        harness.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500, help="paused runs per measurement")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--dialects", default="sqlite,postgres",
                        help="comma-separated: sqlite, postgres")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for d in args.dialects.split(","):
        d = d.strip()
        if d == "sqlite":
            rows += bench_sqlite(args.runs, args.threads)
        elif d in ("postgres", "postgresql"):
            rows += bench_postgres(args.runs, args.threads)
        else:
            parser.error(f"unknown dialect {d!r}")
    print(f"claim throughput: {args.threads} threads racing for {args.runs} paused runs "
          f"({args.threads * args.runs} claim attempts, {args.runs} must win)")
    print(f"{'dialect':<11} {'path':<22} {'seconds':>8} {'attempts/s':>11} {'wins':>6}  "
          f"adapter/driver")
    ok = True
    for i in range(0, len(rows), 2):
        adapter, driver = rows[i], rows[i + 1]
        ratio = (adapter["attempts"] / adapter["seconds"]) / (driver["attempts"] / driver["seconds"])
        for row, label in ((adapter, "SqlStore (SQLAlchemy)"), (driver, "driver SQL")):
            rate = row["attempts"] / row["seconds"]
            tail = f"  {ratio:.2f}" if row is adapter else ""
            print(f"{row['dialect']:<11} {label:<22} {row['seconds']:>8.2f} {rate:>11.0f} "
                  f"{row['wins']:>6}{tail}")
            ok &= row["wins"] == row["runs"]
    if not ok:
        print("ERROR: some measurement did not have exactly one winner per run", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
