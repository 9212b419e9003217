"""Unit tests of the gateway's contract helpers, the child-process driver, the
machine plumbing (session targets, race classification) and the detection
power of the crash machine's gateway driver."""

from __future__ import annotations

import os
import signal
import subprocess
from datetime import datetime, timedelta, timezone

import pytest

from cortex_spec import InboxItem, ItemStatus
from cortex_spec.clock import EPOCH
from cortex_spec.errors import InvalidArgument
from cortex_spec.gateway import check_offset_value, rfc3339_nano, validate_message
from cortex_spec.gateway_child import ForkedProcess, GatewayChild, decode, encode, forking, start_python
from cortex_spec.reference import MemoryGateway, MemoryMedium, MemoryStore
from cortex_spec.reference.harness import ReferenceHarness
from cortex_spec.stateful.classes import reference_session
from cortex_spec.stateful.gateway import gw_op
from cortex_spec.stateful.gateway_driver import CrashViolation
from cortex_spec.stateful.gateway_races import race_clauses
from cortex_spec.stateful.ops import run_op
from cortex_spec.testing import ZERO
from cortex_spec.gateway import make_message

UTC = timezone.utc


@pytest.mark.parametrize("instant, text", [
    (datetime(2026, 1, 1, tzinfo=UTC), "2026-01-01T00:00:00Z"),
    (datetime(2026, 1, 1, 0, 0, 0, 500000, tzinfo=UTC), "2026-01-01T00:00:00.5Z"),
    (datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=UTC), "2026-01-01T00:00:00.123Z"),
    (datetime(2026, 1, 1, 2, 0, tzinfo=timezone(timedelta(hours=2))), "2026-01-01T02:00:00+02:00"),
    (datetime(2026, 1, 1, 2, 0, tzinfo=timezone(timedelta(hours=-5, minutes=-30))), "2026-01-01T02:00:00-05:30"),
])
def test_rfc3339_nano_is_gos_format(instant, text):
    assert rfc3339_nano(instant) == text


def test_rfc3339_text_order_is_wrong_within_a_second():
    """The reason GW-ORD-1 orders instants: Go's trimmed text sorts a whole
    second after its own half second."""
    whole = datetime(2026, 1, 1, tzinfo=UTC)
    half = whole + timedelta(milliseconds=500)
    assert whole < half and rfc3339_nano(whole) > rfc3339_nano(half)


def test_validate_message_stamps_and_truncates():
    item = validate_message(ZERO, make_message("tg", "m1"), datetime(2026, 1, 1, 0, 0, 0, 999999, tzinfo=UTC))
    assert item.status is ItemStatus.PENDING and item.reply == ""
    assert item.received_at == datetime(2026, 1, 1, 0, 0, 0, 999000, tzinfo=UTC)
    with pytest.raises(InvalidArgument):
        validate_message("not a context", make_message("tg", "m1"), EPOCH)
    with pytest.raises(InvalidArgument):
        check_offset_value(True)


def test_wire_encoding_round_trips():
    item = InboxItem(channel="tg", message_id="m", text="ü", trusted=True, status=ItemStatus.REPLIED,
                     reply="r", received_at=EPOCH)
    for value in (make_message("tg", "m1"), item, [item], ("a", "b"), EPOCH, None, 5, "x"):
        assert decode(encode(value)) == value


@pytest.fixture(params=["forked", "fresh interpreter"])
def child_mode(request, monkeypatch):
    """Each child test runs with children forked from the fork server (where
    the platform can) and with a fresh interpreter per child."""
    if request.param == "forked":
        if not forking():
            pytest.skip("this platform cannot fork children from a fork server")
        monkeypatch.delenv("CORTEX_SPEC_CHILD_EXEC", raising=False)
    else:
        monkeypatch.setenv("CORTEX_SPEC_CHILD_EXEC", "1")
    return request.param


def test_child_process_serves_a_gateway_and_dies_on_sigkill(child_mode):
    """The child protocol end to end, with a reference location (in the
    child's own process)."""
    child = GatewayChild("cortex_spec.reference.gateway:open_location", ["child-test"])
    try:
        assert child.open() is None
        assert child.call("accept", make_message("tg", "m1"), EPOCH) == ("ok", True)
        assert child.call("accept", make_message("tg", "m1"), EPOCH) == ("ok", False)
        kind, items = child.call("pending")
        assert kind == "ok" and [i.message_id for i in items] == ["m1"]
        assert child.call("get_item", "", "m1") == ("error", "InvalidArgument")
        assert child.call("conversation", "tg", "c") == ("ok", ("", ""))
        child.send(child.call_request("set_offset", "tg", 5))
    finally:
        child.kill()
    assert child.proc.returncode == -9
    assert isinstance(child.proc, ForkedProcess if child_mode == "forked" else subprocess.Popen)
    assert child.pid != os.getpid()
    bad = GatewayChild("cortex_spec.reference.gateway:open_location", [""])
    try:
        assert bad.open() == "InvalidArgument"
    finally:
        bad.kill()


def test_start_python_runs_a_function_in_a_child_and_reports_its_exit(child_mode):
    """start_python (the kill-writer machines' writers): the function's
    output arrives on the piped stdout, a failure on stderr with a non-zero
    status, SIGKILL as -9."""
    out = start_python("builtins:print", "hello from the child")
    assert out.wait(60) == 0 and out.stdout.read() == "hello from the child\n"
    failed = start_python("json:loads", "not json")
    assert failed.wait(60) == 1 and "JSONDecodeError" in failed.stderr.read()
    sleeper = start_python("builtins:exec", "import time; print('up', flush=True); time.sleep(60)")
    assert sleeper.stdout.readline() == "up\n" and sleeper.poll() is None
    os.kill(sleeper.pid, signal.SIGKILL)
    assert sleeper.wait(60) == -9


def test_gateway_ops_run_on_the_session_target():
    store = MemoryStore()
    session = reference_session(store)
    op = gw_op("accept", ZERO, make_message("tg", "m1"), EPOCH, keys=None)
    assert op.render() == f"gateway.accept(ctx(''), {op.render().split(', ', 1)[1]}"
    assert op.short().startswith("gateway.accept[")
    assert run_op(session, op).value == ("bool", True)
    # the target's rows live on the reference store's medium (the model clones it)
    assert list(store.medium.gw_items) == [("tg", "m1")]
    clone = MemoryMedium.clone(store.medium)
    assert MemoryGateway.on_medium(clone).get_item(ZERO, "tg", "m1").message_id == "m1"


def test_race_clauses_name_the_race():
    from cortex_spec.stateful.gateway import KEY, item_key

    def scenario(*ops):
        return tuple((op,) for op in ops)

    accept = gw_op("accept", ZERO, make_message(*KEY), EPOCH, keys=[item_key(*KEY)])
    prune = gw_op("prune_done", ZERO, EPOCH, keys=None)
    reply = gw_op("set_replied", ZERO, *KEY, "r", keys=[item_key(*KEY)])
    done = gw_op("mark_done", ZERO, *KEY, keys=[item_key(*KEY)])
    read = gw_op("pending", ZERO, 0, 0, keys=None)
    assert race_clauses(scenario(accept, accept)) == ("GW-RACE-1",)
    assert race_clauses(scenario(accept, prune)) == ("GW-RACE-2",)
    assert race_clauses(scenario(reply, done)) == ("GW-RACE-3",)
    assert "GW-RACE-4" in race_clauses(scenario(reply, reply))
    assert "GW-RACE-5" in race_clauses(scenario(done, prune))
    assert "GW-RACE-8" in race_clauses(scenario(read, done))


def _mutant_harness(name):
    from mutants import BY_NAME

    return BY_NAME[name].harness()


@pytest.mark.parametrize("mutant, clauses", [
    ("gw-reply-not-durable", {"GW-CRASH-3", "GW-CRASH-4", "GW-CRASH-1"}),
    ("gw-lock-left-by-dead-holder", {"GW-CRASH-9"}),
])
def test_gateway_driver_catches_crash_bugs(mutant, clauses):
    """The driver model refutes a store that keeps replies in memory (the
    finished job comes back as pending after a crash) and one whose lock
    outlives its holder."""
    from cortex_spec.profiles import PROFILES
    from cortex_spec.stateful.gateway_driver import run_gateway_crash

    import os

    os.environ.setdefault("CORTEX_SPEC_SHRINK", "0")
    with pytest.raises(CrashViolation) as info:
        run_gateway_crash(_mutant_harness(mutant), PROFILES["quick"])
    assert set(info.value.cortex_clauses) & clauses, info.value


def test_gateway_driver_passes_the_reference():
    from cortex_spec.profiles import PROFILES
    from cortex_spec.stateful.gateway_driver import run_gateway_crash

    stats = run_gateway_crash(ReferenceHarness(), PROFILES["quick"])
    assert stats.rules["crash"] > 0 and stats.rules["crash_during_call"] > 0
    assert stats.rules["run_job"] > 0 and stats.rules["send_reply"] > 0
