"""Unit tests of the linearizability checker and the reference model."""

from __future__ import annotations

import time

from cortex_spec.clock import EPOCH
from cortex_spec.runs import Run, RunState
from cortex_spec.suspensions import Suspension
from cortex_spec.testing import ZERO, ctx
from cortex_spec.stateful.history import Call, render_timeline, timeline_data
from cortex_spec.stateful import linearizability
from cortex_spec.stateful.linearizability import check, partition
from cortex_spec.stateful.model import ReferenceModel
from cortex_spec.stateful.ops import UNKNOWN, Op, Outcome, normalize, outcome_of
from cortex_spec.stateful.world import fixed_id


class Register:
    """write(v) -> None, read() -> v; one register per key."""

    def init(self):
        return ()

    def step(self, state, op, observed):
        regs = dict(state)
        key = op.args[0]
        if op.method == "write":
            regs[key] = op.args[1]
            expected = Outcome("ok", None)
        else:
            expected = Outcome("ok", regs.get(key, 0))
        new = tuple(sorted(regs.items()))
        return observed.kind == "unknown" or observed == expected, new, expected


def W(i, lane, key, value, start, end):
    return Call(i, lane, Op("write", ZERO, (key, value), keys=frozenset({key})), start, end,
                Outcome("ok", None))


def R(i, lane, key, value, start, end):
    return Call(i, lane, Op("read", ZERO, (key,), keys=frozenset({key})), start, end,
                Outcome("ok", value))


def test_overlapping_write_and_read_may_see_either_value():
    assert check(Register(), [W(0, 1, "x", 1, 0, 10), R(1, 2, "x", 1, 5, 15)]).ok
    assert check(Register(), [W(0, 1, "x", 1, 0, 10), R(1, 2, "x", 0, 5, 15)]).ok


def test_real_time_order_is_respected():
    verdict = check(Register(), [W(0, 1, "x", 1, 0, 10), R(1, 2, "x", 0, 20, 30)])
    assert verdict.result == "violation"
    assert [u.call for u in verdict.unexplained] == [1]
    assert verdict.unexplained[0].observed == "-> 0"
    assert verdict.unexplained[0].expected == "-> 1"


def test_touching_intervals_count_as_concurrent():
    # the write returns exactly when the read starts: either order is legal
    assert check(Register(), [W(0, 1, "x", 1, 0, 10), R(1, 2, "x", 0, 10, 20)]).ok


def test_stale_read_after_two_writes_is_a_violation():
    calls = [W(0, 1, "x", 1, 0, 10), W(1, 1, "x", 2, 11, 20), R(2, 2, "x", 1, 21, 30)]
    assert check(Register(), calls).result == "violation"


def test_a_call_with_unknown_outcome_may_have_happened():
    pending = Call(0, 1, Op("write", ZERO, ("x", 7), keys=frozenset({"x"})), 0, None, UNKNOWN)
    assert check(Register(), [pending, R(1, 2, "x", 7, 20, 30)]).ok
    assert check(Register(), [pending, R(1, 2, "x", 0, 20, 30)]).ok



def test_a_call_never_completed_may_take_effect_after_every_later_call():
    # a write that timed out at 5 (its outcome unknown) and one that never
    # returned: each responds after every time of the history, the latest
    # start included, so both may take effect after reads invoked later
    timed_out = Call(0, 1, Op("write", ZERO, ("x", 7), keys=frozenset({"x"})), 0, 5, UNKNOWN)
    lost = Call(1, 3, Op("write", ZERO, ("x", 8), keys=frozenset({"x"})), 1, None, UNKNOWN)
    reads = [R(2, 2, "x", 0, 10, 11), R(3, 2, "x", 7, 20, 21), R(4, 2, "x", 8, 30, 31), R(5, 2, "x", 8, 40, 40)]
    assert check(Register(), [timed_out, lost, *reads]).ok
    # the same reads with the writes in the other order: 8 then 7, read 8 last
    stale = [R(2, 2, "x", 0, 10, 11), R(3, 2, "x", 8, 20, 21), R(4, 2, "x", 7, 30, 31), R(5, 2, "x", 8, 40, 40)]
    verdict = check(Register(), [timed_out, lost, *stale])
    assert verdict.result == "violation"
    assert [u.call for u in verdict.unexplained] == [5]
    assert verdict.best_order == (2, 1, 3, 0, 4)

def test_partition_splits_by_key_and_keeps_spanning_calls_whole():
    calls = [W(0, 1, "x", 1, 0, 10), W(1, 2, "y", 1, 0, 10), R(2, 3, "x", 1, 20, 30)]
    parts = partition(calls)
    assert sorted(len(p) for p in parts) == [1, 2]
    spanning = Call(3, 4, Op("read", ZERO, ("x",), keys=None), 0, 5, Outcome("ok", 0))
    assert len(partition(calls + [spanning])) == 1


def test_partition_of_calls_that_all_touch_the_same_objects():
    # one key, several, every object (None): one sub-history, in call order;
    # no object at all: each call alone; as the general union-find gives them
    def touching(keys):
        return [Call(i, i, Op("read", ZERO, ("x",), keys=keys), i, i + 1, Outcome("ok", 0)) for i in range(3)]

    for keys in (frozenset({"x"}), frozenset({"x", "y"}), None, frozenset()):
        calls = touching(keys)
        expected = [calls] if keys is None or keys else [[c] for c in calls]
        assert partition(calls) == expected, keys
        if keys is not None:
            assert linearizability._partition_shared(calls) == expected, keys
    assert partition([]) == []


def test_out_of_budget_is_unknown_never_ok():
    class Slow(Register):
        def step(self, state, op, observed):
            time.sleep(0.002)
            return super().step(state, op, observed)

    # many concurrent writes and a read nobody explains: a large search
    calls = [W(i, i, "x", i, 0, 100) for i in range(1, 14)] + [R(0, 0, "x", 99, 0, 100)]
    verdict = check(Slow(), calls, budget_s=0.05)
    assert verdict.result == "unknown"
    assert not verdict.ok


def test_reference_model_rejects_two_winning_claims():
    run_id, sus_id = fixed_id("arun", 1), fixed_id("sus", 1)
    c = ctx("ws=a")
    key = frozenset({("run", run_id)})

    def call(i, lane, method, args, start, end, outcome):
        return Call(i, lane, Op(method, c, args, EPOCH, key), start, end, outcome)

    from cortex_spec.reference import MemoryStore
    from cortex_spec.stateful.model import FixedClock

    scratch = MemoryStore(FixedClock(EPOCH))
    run = scratch.create_run(c, Run(id=run_id, agent_id=fixed_id("agt", 1), state=RunState.PAUSED))
    sus = scratch.create_suspension(c, Suspension(id=sus_id, run_id=run_id))
    claimed = outcome_of(lambda: sus)
    setup = [
        call(0, 0, "create_run", (run,), 0, 1, outcome_of(lambda: run)),
        call(1, 0, "create_suspension", (sus,), 2, 3, claimed),
    ]
    one_winner = setup + [
        call(2, 1, "claim_suspension", (run_id,), 10, 20, claimed),
        call(3, 2, "claim_suspension", (run_id,), 10, 20, Outcome("error", "NotSuspended")),
    ]
    assert check(ReferenceModel(), one_winner).ok
    two_winners = setup + [
        call(2, 1, "claim_suspension", (run_id,), 10, 20, claimed),
        call(3, 2, "claim_suspension", (run_id,), 10, 20, claimed),
    ]
    verdict = check(ReferenceModel(), two_winners)
    assert verdict.result == "violation"
    # the results no order explains are those of the deepest order found:
    # after one winner the other claim would raise; listing both (each
    # refused after the other) would describe no order at all
    assert len(verdict.unexplained) == 1
    (u,) = verdict.unexplained
    assert u.call in {2, 3} and u.call not in verdict.best_order
    assert {2, 3} - {u.call} <= set(verdict.best_order)
    assert "NotSuspended" in u.expected


def test_normalize_keeps_json_types_apart():
    assert normalize({"a": 1}) != normalize({"a": 1.0}) != normalize({"a": True})
    assert normalize([1, 2]) != normalize((1, 2))


def test_timeline_renders_every_lane():
    calls = [W(0, 1, "x", 1, 0, 10), R(1, 2, "x", 1, 5, 15)]
    text = render_timeline(calls, ["setup", "a", "b"], {1})
    assert "#0" in text and "#1" in text and "✗" in text
    data = timeline_data(calls, ["setup", "a", "b"], {1})
    assert data["calls"][1]["unexplained"] is True


# -- the search against a brute force ---------------------------------------------------


class Registers:
    """Registers per key: ``write(k, v)``, ``read(k) -> v`` (0 at first), and
    ``bump(k1, k2, ...)``, which adds 1 to each key and returns how many it
    bumped — as one step, or (:class:`SplitRegisters`) one step per key."""

    def init(self):
        return ()

    def apply(self, state, op):
        regs = dict(state)
        if op.method == "write":
            regs[op.args[0]] = op.args[1]
            value = None
        elif op.method == "read":
            value = regs.get(op.args[0], 0)
        else:
            for k in op.args:
                regs[k] = regs.get(k, 0) + 1
            value = len(op.args)
        return tuple(sorted(regs.items())), Outcome("ok", value)

    def step(self, state, op, observed):
        new, expected = self.apply(state, op)
        if op.method == "read":
            new = state
        return observed.kind == "unknown" or observed == expected, new, expected


class SplitRegisters(Registers):
    """``bump`` takes a first step that selects (writes nothing), then one step per key."""

    def is_split(self, op):
        return op.method == "bump"

    def step_part(self, state, op, observed, progress):
        if progress is None:
            progress, new = 0, state
        else:
            regs = dict(state)
            regs[op.args[progress]] = regs.get(op.args[progress], 0) + 1
            new, progress = tuple(sorted(regs.items())), progress + 1
        if progress < len(op.args):
            return True, new, None, progress, False
        expected = Outcome("ok", len(op.args))
        return observed.kind == "unknown" or observed == expected, new, expected, progress, True


def brute_force(model, calls):
    """(linearizable?, most calls completed by any legal order of steps).

    Deliberately simple: every order of steps that respects real time (a
    call may step once every call that returned before it was invoked is
    complete), tried one by one — no memo, no entry list."""
    split = getattr(model, "is_split", lambda op: False)
    before = {c.index: [d.index for d in calls if d.completed and d.end < c.start] for c in calls}
    deepest = 0

    def orders(done, progress, state):
        nonlocal deepest
        deepest = max(deepest, len(done))
        if len(done) == len(calls):
            return True
        for c in calls:
            if c.index in done or any(d not in done for d in before[c.index]):
                continue
            if split(c.op):
                ok, new, _, step, complete = model.step_part(state, c.op, c.outcome, progress.get(c.index))
                later = {**progress, c.index: step}
            else:
                (ok, new, _), complete, later = model.step(state, c.op, c.outcome), True, progress
            if ok and orders(done | {c.index} if complete else done, later, new):
                return True
        return False

    return orders(frozenset(), {}, model.init()), deepest


def random_history(rng, n):
    """Calls whose outcomes come from executing them atomically at a random
    instant of their interval (a linearizable history), then maybe one
    outcome changed; some calls never return, some touch instants."""
    pending = []
    for i in range(n):
        start = rng.randint(0, 8)
        end = start + rng.randint(0, 5)
        kind = rng.choice(["write", "read", "read", "bump"])
        if kind == "write":
            key = rng.choice("ab")
            op = Op("write", ZERO, (key, rng.randint(1, 2)), keys=frozenset({key}))
        elif kind == "read":
            key = rng.choice("ab")
            op = Op("read", ZERO, (key,), keys=frozenset({key}))
        else:
            keys = tuple(rng.sample("ab", rng.randint(1, 2)))
            op = Op("bump", ZERO, keys, keys=frozenset(keys))
        pending.append((rng.uniform(start, end), i, op, start, end))
    state, calls = (), []
    for _, i, op, start, end in sorted(pending):
        state, outcome = Registers().apply(state, op)
        calls.append(Call(i, i, op, start, end, outcome))
    if rng.random() < 0.5:
        c = rng.choice(calls)
        wrong = (c.outcome.value or 0) + rng.choice([-1, 1])
        c.outcome = Outcome("ok", wrong if c.op.method != "write" else None)
    for c in calls:
        if rng.random() < 0.15:
            c.end, c.outcome = (None, UNKNOWN) if rng.random() < 0.7 else (c.end, UNKNOWN)
    return sorted(calls, key=lambda c: c.start)


def legal_prefix(model, calls, order):
    """Whether ``order`` (call indexes) is a legal prefix for a model without split calls."""
    by_index = {c.index: c for c in calls}
    state, done = model.init(), set()
    for i in order:
        c = by_index[i]
        if any(d.completed and d.end < c.start and d.index not in done for d in calls):
            return False
        ok, state, _ = model.step(state, c.op, c.outcome)
        if not ok:
            return False
        done.add(i)
    return True


def agree_with_brute_force(trials, seed):
    import random

    rng = random.Random(seed)
    seen = {"ok": 0, "violation": 0}
    for trial in range(trials):
        calls = random_history(rng, rng.randint(1, 5))
        for model in (Registers(), SplitRegisters()):
            expected, deepest = brute_force(model, calls)
            verdict = check(model, calls, budget_s=60)
            assert verdict.result == ("ok" if expected else "violation"), (trial, type(model).__name__)
            seen[verdict.result] += 1
            if verdict.result == "violation":
                # the deepest point: as deep as any legal order of steps reaches
                # within the failing sub-history
                part = [c for c in calls if c.index in set(verdict.calls)]
                assert len(verdict.best_order) == brute_force(model, part)[1], trial
                assert verdict.unexplained or deepest < len(calls)
                if not isinstance(model, SplitRegisters):
                    assert legal_prefix(model, part, verdict.best_order), trial
    assert min(seen.values()) > trials // 5, seen  # both verdicts well represented


def test_search_agrees_with_brute_force_on_random_histories():
    agree_with_brute_force(1500, 14)


def test_search_agrees_with_brute_force_with_hashed_sets(monkeypatch):
    # the memo keyed by Zobrist hashes (as for large sub-histories), and with
    # every hash equal, so that every hit is settled on the exact sets
    monkeypatch.setattr(linearizability, "_EXACT_CALLS", 0)
    agree_with_brute_force(300, 15)
    monkeypatch.setattr(linearizability, "_ZOBRIST", [0] * 64)
    agree_with_brute_force(300, 16)


def test_search_agrees_with_brute_force_in_short_turns(monkeypatch):
    # sub-histories interleaved step by step, and the step cache dropped early
    monkeypatch.setattr(linearizability, "_SLICE", 1)
    monkeypatch.setattr(linearizability, "_TURN", 1)
    agree_with_brute_force(300, 17)


def test_a_violating_partition_is_found_while_another_would_exhaust_the_budget():
    # x: 20 concurrent writes and a read of a value none of them wrote; a
    # violation, but only once every subset of the writes has been tried
    # (millions of configurations): far beyond any budget here
    slow = [W(i, i, "x", i, 0, 100) for i in range(1, 21)] + [R(21, 0, "x", 99, 0, 100)]
    assert check(Register(), slow, budget_s=0.2).result == "unknown"
    # y: a larger sub-history (so "smallest first" alone would not help) with a stale read
    bad = []
    for k in range(15):
        bad += [W(100 + 2 * k, 20, "y", k, 10 * k, 10 * k + 4), R(101 + 2 * k, 21, "y", k, 10 * k + 5, 10 * k + 9)]
    bad[-1] = R(bad[-1].index, 21, "y", 3, bad[-1].start, bad[-1].end)
    verdict = check(Register(), slow + bad, budget_s=5.0)
    assert verdict.result == "violation"
    assert set(verdict.calls) == {c.index for c in bad}
    assert [u.call for u in verdict.unexplained] == [bad[-1].index]
    assert verdict.partitions == 2


def test_a_violation_in_the_smallest_sub_history_sets_up_no_other_search(monkeypatch):
    # three sub-histories, smallest first: the first is a stale read, so the
    # check ends in its first turn and the two larger ones are never set up
    made = []

    class Counted(linearizability._Search):
        def __init__(self, model, calls):
            made.append(len(calls))
            super().__init__(model, calls)

    monkeypatch.setattr(linearizability, "_Search", Counted)
    stale = [W(0, 0, "a", 1, 0, 1), W(1, 0, "a", 2, 2, 3), R(2, 1, "a", 1, 4, 5)]
    fine = {key: [W(10 * n + i, 2, key, i, 10 * i, 10 * i + 1) for i in range(n)]
            for key, n in (("b", 4), ("c", 5))}
    verdict = check(Register(), fine["c"] + stale + fine["b"])
    assert verdict.result == "violation" and set(verdict.calls) == {0, 1, 2}
    assert verdict.partitions == 3
    assert made == [3]
    # without the violation every sub-history is set up, smallest first
    made.clear()
    assert check(Register(), fine["c"] + stale[:2] + fine["b"]).ok
    assert made == [2, 4, 5]


def test_twins_are_open_calls_with_equal_operations_and_outcomes():
    # never-returned writes: 0 and 2 are equal (2 follows 0), 1 differs from
    # them only in its context, 3 has an unhashable argument (no twin, no error)
    other = ctx("workspace=w1")
    calls = [
        Call(0, 0, Op("write", ZERO, ("x", 1), keys=frozenset({"x"})), 0, None, UNKNOWN),
        Call(1, 1, Op("write", other, ("x", 1), keys=frozenset({"x"})), 1, None, UNKNOWN),
        Call(2, 2, Op("write", ZERO, ("x", 1), keys=frozenset({"x"})), 2, None, UNKNOWN),
        Call(3, 3, Op("write", ZERO, ("x", [1]), keys=frozenset({"x"})), 3, None, UNKNOWN),
        Call(4, 4, Op("write", ZERO, ("x", [1]), keys=frozenset({"x"})), 4, None, UNKNOWN),
    ]
    twin = linearizability._Search(Register(), calls)._twins()
    assert twin == [-1, -1, 0, -1, -1]
    assert check(Register(), calls[:3] + [R(5, 5, "x", 1, 6, 7)]).ok


def test_the_entry_list_puts_a_twin_invocation_node_where_the_invocation_is():
    # calls 0 and 2 are twins (equal writes that never returned) around a
    # read; 2's invocation is node 2n + 2 + 2 in its place in time, its own
    # node 2 is in no list, and the responses of the open calls come last
    write = Op("write", ZERO, ("x", 1), keys=frozenset({"x"}))
    calls = [Call(0, 0, write, 0, None, UNKNOWN), R(1, 1, "x", 1, 1, 3), Call(2, 2, write, 2, None, UNKNOWN)]
    search = linearizability._Search(Register(), calls)
    search._entries()
    n, nxt, prv = 3, search.nxt, search.prv
    walk, p = [], nxt[search.head]
    while p != search.tail:
        walk.append(p)
        p = nxt[p]
    assert walk == [0, 1, 2 * n + 2 + 2, n + 1, n + 0, n + 2]
    assert search.inv == [0, 1, 2 * n + 2 + 2]
    assert [prv[q] for q in walk] == [search.head, *walk[:-1]] and prv[search.tail] == walk[-1]
    assert nxt[2] == prv[2] == -1


# -- the replay in invocation order (the fast path) against the search -------------------


def sequential_history(rng, n):
    """Calls on two keys, each invoked after the previous one returned (ties
    of a return and the next invocation included: those overlap), with
    outcomes of executing them in that order; then maybe one outcome changed
    and the last call left open."""
    state, calls, t = (), [], 0
    for i in range(n):
        key = rng.choice("ab")
        if rng.random() < 0.5:
            op = Op("write", ZERO, (key, rng.randint(1, 2)), keys=frozenset({key}))
        else:
            op = Op("read", ZERO, (key,), keys=frozenset({key}))
        start = t + rng.randint(0, 1)
        end = start + rng.randint(0, 3)
        t = end
        state, outcome = Registers().apply(state, op)
        calls.append(Call(i, i % 3, op, start, end, outcome))
    if rng.random() < 0.6:
        c = rng.choice(calls)
        c.outcome = Outcome("ok", (c.outcome.value or 0) + rng.choice([-1, 1]) if c.op.method == "read" else 9)
    if rng.random() < 0.2:
        calls[-1].end, calls[-1].outcome = None, UNKNOWN
    return calls


def verdict_of(calls, fast, small=True, slots=None):
    """Everything a verdict reports but its time and steps, with the fast path
    (the replay first) and the small-history loop on or off (and the slots
    its rows may hold)."""
    import pytest

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(linearizability, "_FAST_PATH", fast)
        patch.setattr(linearizability, "_SMALL_LOOP", small)
        if slots is not None:
            patch.setattr(linearizability, "_SMALL_SLOTS", slots)
        v = check(Registers(), calls, budget_s=60)
    return v.result, v.calls, v.best_order, v.unexplained, v.partitions


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12), sequential=st.booleans())
def test_the_replay_gives_the_search_verdict_prefix_and_refusals(seed, n, sequential):
    import random

    rng = random.Random(seed)
    calls = sequential_history(rng, n) if sequential else random_history(rng, min(n, 6))
    assert verdict_of(calls, fast=True) == verdict_of(calls, fast=False)


def test_the_replay_alone_decides_calls_that_do_not_overlap():
    # a stale read at the end of calls that never overlap: decided by the
    # replay, no entry list made, with the prefix and the refused call
    calls = [W(0, 1, "x", 1, 0, 1), R(1, 2, "x", 1, 2, 3), W(2, 1, "x", 2, 4, 5), R(3, 2, "x", 1, 6, 7)]
    search = linearizability._Search(Register(), calls)
    assert search.sequential
    for _ in search.run():
        pass
    assert search.nxt == []
    assert search.result.result == "violation"
    assert search.result.best_order == (0, 1, 2)
    assert [(u.call, u.expected) for u in search.result.unexplained] == [(3, "-> 2")]
    # touching intervals overlap: the same calls with the read invoked as the
    # write returns are no longer sequential, and the search finds them legal
    touching = calls[:3] + [R(3, 2, "x", 1, 5, 7)]
    assert not linearizability._Search(Register(), touching).sequential
    assert check(Register(), touching).ok


def test_a_replay_refused_in_overlapping_calls_leaves_the_verdict_to_the_search(monkeypatch):
    # the read, invoked first, returns the value of the write beside it: the
    # replay in invocation order refuses it, the search finds the order
    monkeypatch.setattr(linearizability, "_REPLAY_CALLS", 64)
    calls = [R(0, 1, "x", 5, 0, 10), W(1, 2, "x", 5, 1, 9)]
    search = linearizability._Search(Register(), calls)
    for _ in search.run():
        pass
    assert search.nxt != [] and search.result.result == "ok"
    assert check(Register(), calls).ok


# -- the loop for small sub-histories against the general one ---------------------------


def overlapping_history(rng, n):
    """Up to ``n`` calls on one register, most of them overlapping, with
    outcomes of executing them atomically at a random instant of their
    interval; then maybe a few outcomes changed and some calls left open
    (often twins: equal writes that never returned)."""
    pending = []
    for i in range(n):
        start = rng.randint(0, 3 * n)
        end = start + rng.randint(0, 12)
        if rng.random() < 0.5:
            op = Op("write", ZERO, ("x", rng.randint(1, 3)), keys=frozenset({"x"}))
        else:
            op = Op("read", ZERO, ("x",), keys=frozenset({"x"}))
        pending.append((rng.uniform(start, end), i, op, start, end))
    state, calls = (), []
    for _, i, op, start, end in sorted(pending):
        state, outcome = Registers().apply(state, op)
        calls.append(Call(i, i, op, start, end, outcome))
    for c in rng.sample(calls, rng.randint(0, min(2, n))):
        if c.op.method == "read":
            c.outcome = Outcome("ok", (c.outcome.value or 0) + rng.choice([-1, 1]))
    for c in calls:
        if rng.random() < 0.2:
            c.end, c.outcome = (None, UNKNOWN) if rng.random() < 0.8 else (c.end, UNKNOWN)
    return sorted(calls, key=lambda c: c.start)


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 14))
def test_the_small_loop_gives_the_general_loops_verdict_prefix_and_refusals(seed, n):
    # the search alone (no replay first), by each loop: the same verdict,
    # failing calls, deepest order and refusals there; and when the small
    # loop gives up after a few states met, leaving the search to the other
    import random

    rng = random.Random(seed)
    calls = overlapping_history(rng, n) if rng.random() < 0.7 else random_history(rng, min(n, 6))
    small = verdict_of(calls, fast=False, small=True)
    assert small == verdict_of(calls, fast=False, small=False)
    assert small == verdict_of(calls, fast=True, small=True)
    assert small == verdict_of(calls, fast=False, small=True, slots=rng.randint(0, 3) * (len(calls) + 2))


def test_the_small_loop_reports_the_general_loops_steps_and_turns(monkeypatch):
    # steps as the general loop counts them when both ask the model the same
    # questions (no question asked twice: each call writes a new value), and
    # a search paused at every step ends as one never paused
    calls = [W(i, i, "x", i, 0, 10) for i in range(6)] + [R(6, 6, "x", 99, 0, 10)]
    monkeypatch.setattr(linearizability, "_FAST_PATH", False)
    counts = {}
    for small in (True, False):
        monkeypatch.setattr(linearizability, "_SMALL_LOOP", small)
        verdict = check(Register(), calls)
        counts[small] = verdict.steps
        monkeypatch.setattr(linearizability, "_SLICE", 1)
        paused = check(Register(), calls)
        monkeypatch.setattr(linearizability, "_SLICE", 256)
        assert (paused.result, paused.best_order, paused.unexplained) == (
            verdict.result, verdict.best_order, verdict.unexplained)
    assert verdict.result == "violation"
    assert counts[True] <= counts[False]


def test_the_small_loop_gives_up_to_the_general_one_beyond_its_slots(monkeypatch):
    # seven writes of new values: eight states; rows for two of them only
    calls = [W(i, i, "x", i + 1, 0, 10) for i in range(7)] + [R(7, 7, "x", 99, 0, 10)]
    monkeypatch.setattr(linearizability, "_FAST_PATH", False)
    monkeypatch.setattr(linearizability, "_SMALL_SLOTS", 2 * (len(calls) + 2))
    ran = []
    monkeypatch.setattr(linearizability._Search, "_run_plain", lambda self, plain=linearizability._Search._run_plain: (
        ran.append(len(self.calls)) or plain(self)))
    verdict = check(Register(), calls)
    assert ran == [len(calls)]
    assert verdict.result == "violation" and [u.call for u in verdict.unexplained] == [7]
    assert len(verdict.best_order) == 7


# -- model states: built from the parent's images = built from scratch ----------------------

_ROW_VALUES = st.one_of(st.integers(-3, 3), st.text("ab", max_size=2), st.tuples(st.integers(0, 2), st.text("x", max_size=1)))
_TABLE = st.dictionaries(st.text("kq", min_size=1, max_size=2), _ROW_VALUES, max_size=4)
#: what a step may do to one table of the clone: write (a key to a value),
#: delete a key, put an equal but new object back, reorder the table, or
#: move a row (the very same object) to another key
_EDIT = st.one_of(
    st.tuples(st.just("write"), st.text("kq", min_size=1, max_size=2), _ROW_VALUES),
    st.tuples(st.just("delete"), st.text("kq", min_size=1, max_size=2)),
    st.tuples(st.just("copy-back"), st.text("kq", min_size=1, max_size=2)),
    st.tuples(st.just("reorder")),
    st.tuples(st.just("move"), st.text("kq", min_size=1, max_size=2), st.text("kq", min_size=1, max_size=2)),
)


@settings(max_examples=300, deadline=None)
@given(tables=st.lists(_TABLE, min_size=1, max_size=4),
       edits=st.lists(st.tuples(st.integers(0, 3), _EDIT), max_size=6))
def test_a_state_from_its_parent_is_the_state_from_scratch(tables, edits):
    """RefState images only the tables a step changed (the rest keep the
    parent's images); whatever a step does to the clone's tables, the state
    must equal, and hash as, the one imaged from scratch — and differ from
    the parent exactly when some table's content differs."""
    from cortex_spec.reference import MemoryMedium
    from cortex_spec.stateful.model import RefState

    names = sorted(MemoryMedium().tables())[: len(tables)]
    medium = MemoryMedium()
    for name, table in zip(names, tables):
        setattr(medium, name, dict(table))
    memo: dict = {}
    parent = RefState(medium, memo)
    clone = medium.clone()
    for which, edit in edits:
        table = getattr(clone, names[which % len(names)])
        if edit[0] == "write":
            table[edit[1]] = edit[2]
        elif edit[0] == "delete":
            table.pop(edit[1], None)
        elif edit[0] == "copy-back" and edit[1] in table:
            value = table[edit[1]]
            table[edit[1]] = tuple(list(value)) if isinstance(value, tuple) else value  # equal, a new object
        elif edit[0] == "move" and edit[1] in table:
            table[edit[2]] = table.pop(edit[1])
        elif edit[0] == "reorder":
            items = list(table.items())[::-1]
            table.clear()
            table.update(items)
    stepped, scratch = RefState(clone, memo, parent), RefState(clone, {})
    assert stepped == scratch and hash(stepped) == hash(scratch), (
        f"a state built from its parent differs from the one built from scratch:\n"
        f"  from the parent: {stepped.key!r}\n  from scratch:    {scratch.key!r}")
    same = all(normalize_table(getattr(clone, n)) == normalize_table(getattr(medium, n))
               for n in MemoryMedium().tables())
    assert (stepped == parent) == same, (
        f"the stepped state {'equals' if stepped == parent else 'differs from'} its parent, while the "
        f"tables' contents {'are' if same else 'are not'} the same")


def normalize_table(table):
    return sorted((key, normalize(row)) for key, row in table.items())
