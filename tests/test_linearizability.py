"""Unit tests of the linearizability checker and the reference model."""

from __future__ import annotations

import time

from cortex_spec.clock import EPOCH
from cortex_spec.runs import Run, RunState
from cortex_spec.suspensions import Suspension
from cortex_spec.testing import ZERO, ctx
from cortex_spec.stateful.history import Call, render_timeline, timeline_data
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


def test_partition_splits_by_key_and_keeps_spanning_calls_whole():
    calls = [W(0, 1, "x", 1, 0, 10), W(1, 2, "y", 1, 0, 10), R(2, 3, "x", 1, 20, 30)]
    parts = partition(calls)
    assert sorted(len(p) for p in parts) == [1, 2]
    spanning = Call(3, 4, Op("read", ZERO, ("x",), keys=None), 0, 5, Outcome("ok", 0))
    assert len(partition(calls + [spanning])) == 1


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
    assert {u.call for u in verdict.unexplained} & {2, 3}


def test_normalize_keeps_json_types_apart():
    assert normalize({"a": 1}) != normalize({"a": 1.0}) != normalize({"a": True})
    assert normalize([1, 2]) != normalize((1, 2))


def test_timeline_renders_every_lane():
    calls = [W(0, 1, "x", 1, 0, 10), R(1, 2, "x", 1, 5, 15)]
    text = render_timeline(calls, ["setup", "a", "b"], {1})
    assert "#0" in text and "#1" in text and "✗" in text
    data = timeline_data(calls, ["setup", "a", "b"], {1})
    assert data["calls"][1]["unexplained"] is True
