"""The gateway driver model of the crash machine (GW-CRASH-1..10) and the
double opens of one location (GW-RACE-9): the class ``gateway``'s own
certification tests (see :mod:`.gateway`)."""

from __future__ import annotations

import functools
import random
import threading
import time
from datetime import datetime, timedelta
from typing import Any, Callable

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from cortex_spec.clock import EPOCH
from cortex_spec.errors import StoreLocked
from cortex_spec.gateway import InboundMessage, InboxItem, ItemStatus
from cortex_spec.harness import Harness
from cortex_spec.profiles import Profile

from .gateway import CONVERSATIONS, NAMES, TEXTS, ZERO
from .ops import Outcome, normalize, outcome_of
from .stats import MachineStats
from .swarm import install as install_swarm
from .world import sampled

class CrashViolation(AssertionError):
    """A crash property broke; ``cortex_clauses`` names which."""

    def __init__(self, message: str, *clauses: str) -> None:
        super().__init__(message)
        self.cortex_clauses = clauses


def open_gateway_after_death(harness: Harness, open_: Callable[[], Any], location: Any) -> Any:
    """Open ``location`` whose holder died: at once, or — only for a lease
    lock — after the declared lease has run out (GW-OPEN-6, GW-CRASH-9)."""
    try:
        return open_()
    except StoreLocked:
        if harness.gateway_lease is None:
            raise CrashViolation(
                "GW-CRASH-9: the lock of a crashed holder kept the next open out, and the "
                "backend declares no lease", "GW-CRASH-9", "GW-OPEN-6") from None
        harness.expire_gateway_lease(location)
        try:
            return open_()
        except StoreLocked:
            raise CrashViolation(
                "GW-CRASH-9: the lock of a crashed holder still kept the next open out after its "
                f"declared lease ({harness.gateway_lease}s) ran out", "GW-CRASH-9", "GW-OPEN-6") from None


def _outcome(value: Any) -> Outcome:
    return Outcome("ok", normalize(value), raw=value)


class InProcessWorker:
    """The model gateway's store in this process; a crash is the harness's
    crash hook (the reference's medium hook, a closed lock file, ...)."""

    kind = "in-process"

    def __init__(self, harness: Harness, opener: Any, location: Any) -> None:
        self.harness = harness
        self.opener = opener
        self.location = location
        self.gw = open_gateway_after_death(harness, lambda: opener.open_gateway(location), location)

    def call(self, method: str, *args: Any) -> Outcome:
        return outcome_of(lambda: getattr(self.gw, method)(ZERO, *args))

    def crash(self) -> None:
        self.harness.crash_gateway(self.gw)

    def crash_during(self, method: str, *args: Any) -> Outcome:
        """The call and the crash at the same time; the call's thread is
        joined before anything reopens the location."""
        box: list[Outcome] = []
        t = threading.Thread(target=lambda: box.append(self.call(method, *args)), daemon=True)
        t.start()
        time.sleep(random.random() * 0.001)
        self.crash()
        t.join(60)
        if t.is_alive():
            raise CrashViolation(f"{method} hung after its holder crashed", "GW-CRASH-7")
        return box[0]

    def reopen(self) -> "InProcessWorker":
        return InProcessWorker(self.harness, self.opener, self.location)

    def close(self) -> None:
        self.gw.close()


class ChildWorker:
    """The model gateway's store in a child process; a crash is SIGKILL."""

    kind = "child"

    def __init__(self, harness: Harness, location: Any) -> None:
        from cortex_spec.gateway_child import take_child

        self.harness = harness
        self.location = location
        target, args = harness.gateway_child(location)
        self.child = take_child(target, args)
        error = self.child.open()
        if error == "StoreLocked" and harness.gateway_lease is not None:
            harness.expire_gateway_lease(location)  # the declared bound (GW-OPEN-6)
            error = self.child.open()
        if error == "StoreLocked":
            self.child.kill()
            raise CrashViolation("GW-CRASH-9: the lock of a killed child kept the next open out"
                                 + (" past the declared lease" if harness.gateway_lease else ""),
                                 "GW-CRASH-9", "GW-OPEN-6")
        if error is not None:
            self.child.kill()
            raise CrashViolation(f"the child could not open the location: {error}", "GW-OPEN-1")

    def call(self, method: str, *args: Any) -> Outcome:
        kind, value = self.child.call(method, *args)
        if kind == "error":
            return Outcome("error", value)
        return _outcome(value)

    def crash(self) -> None:
        self.child.kill()

    def crash_during(self, method: str, *args: Any) -> Outcome:
        """Send the call and kill the child a moment later: the call may have
        happened or not (the outcome is unknown)."""
        self.child.send(self.child.call_request(method, *args))
        time.sleep(random.random() * 0.003)
        self.child.kill()
        return Outcome("unknown")

    def reopen(self) -> "ChildWorker":
        return ChildWorker(self.harness, self.location)

    def close(self) -> None:
        try:
            self.child.close()
        except Exception:  # noqa: BLE001
            self.child.kill()


@attrs.define
class Life:
    """One life of a key's row, from a fresh accept to its pruning."""

    message: InboundMessage
    received_at: datetime
    number: int
    #: True once accept's True reached the worker (else: adopted after a
    #: killed accept turned out to have happened)
    runs: int = 0
    replied_acked: bool = False
    #: the reply the row holds once replied (known: computed by the job)
    reply: str | None = None
    done_acked: bool = False
    sends: int = 0
    sent_unconfirmed: bool = False
    duplicate_send_allowed: bool = False

    def expected_reply(self) -> str:
        return f"reply to {self.message.channel}/{self.message.message_id} (life {self.number})"


def _step(fn: Callable) -> Callable:
    """Mark a rule in progress, so that teardown knows whether the example
    ended with a violation (then it must not drain and mask it)."""

    @functools.wraps(fn)
    def step(self: "GatewayDriverMachine", *args: Any, **kwargs: Any) -> None:
        self.in_step = True
        fn(self, *args, **kwargs)
        self.in_step = False

    return step


class GatewayDriverMachine(RuleBasedStateMachine):
    """A model gateway driving the store under crashes.

    The provider keeps every message of each channel under increasing update
    ids and redelivers whatever lies past the offset the gateway last
    acknowledged.  The worker polls (``offset`` then ``accept``), acks the
    provider by ``set_offset`` only after ``accept`` returned (GW-CRASH-10),
    runs the first pending job (an effect in the outside world, counted),
    records its reply with ``set_replied``, sends the first pending reply
    (counted) and calls ``mark_done``.  Any of these steps may be followed by
    a crash (the holder dies; the worker's memory is lost) or be killed
    mid-call; every crash reopens the location and checks the stored state
    against what was acknowledged.  At the end everything is drained and
    every message the provider saw acknowledged must have had its job run and
    its reply sent.
    """

    harness: Harness
    stats: MachineStats
    use_child: bool = False

    def __init__(self) -> None:
        super().__init__()
        from cortex_spec.clock import ManualClock

        install_swarm(self)

        self.stats.examples += 1
        self.calls = 0
        self.location_store = self.harness.new_location()
        self.opener = self.harness.open(self.location_store, ManualClock())
        self.location = self.harness.new_gateway_location()
        self.worker = self._open()
        self.t = EPOCH + timedelta(days=10)
        #: the provider's messages per channel (update id = index + 1)
        self.provider: dict[str, list[InboundMessage]] = {"tg": [], "sms": []}
        #: the offset acknowledged per channel (the provider's view)
        self.acked_offset: dict[str, int] = {"tg": 0, "sms": 0}
        #: the selection acknowledged per key
        self.selections: dict[tuple[str, str], tuple[str, str]] = {}
        #: live row lives by key
        self.lives: dict[tuple[str, str], Life] = {}
        #: every life ever (the outside world's logs)
        self.history: list[Life] = []
        self.next_life = 1
        # worker memory, lost on every crash
        self.to_ack: dict[str, int] = {}
        self.job: tuple[tuple[str, str], str] | None = None
        self.sending: tuple[str, str] | None = None
        #: True while a rule runs: still True in teardown after a violation
        self.in_step = False
        self.crashes = 0
        self.calls_at_restart = 0

    # -- plumbing -----------------------------------------------------------------------

    def _open(self) -> Any:
        if self.use_child:
            return ChildWorker(self.harness, self.location)
        return InProcessWorker(self.harness, self.opener, self.location)

    def call(self, method: str, *args: Any, clause: str = "GW-CRASH-1") -> Outcome:
        outcome = self.worker.call(method, *args)
        self.calls += 1
        self.stats.operations += 1
        if outcome.kind != "ok":
            raise CrashViolation(f"{method}{args!r} failed on an open store: {outcome.describe()}",
                                 clause, "GW-SCOPE-6")
        return outcome

    def forget_worker_memory(self) -> None:
        self.to_ack.clear()
        self.job = None
        if self.sending is not None:
            life = self.lives.get(self.sending)
            if life is not None and life.sent_unconfirmed:
                life.duplicate_send_allowed = True  # GW-CRASH-5: crash between send and done
        self.sending = None
        for life in self.lives.values():
            if life.sent_unconfirmed:
                life.duplicate_send_allowed = True

    def new_life(self, msg: InboundMessage, received_at: datetime) -> Life:
        life = Life(message=msg, received_at=received_at, number=self.next_life)
        self.next_life += 1
        self.lives[(msg.channel, msg.message_id)] = life
        self.history.append(life)
        return life

    # -- provider and worker rules ---------------------------------------------------------

    @rule(channel=sampled(("tg", "sms")), text=sampled(TEXTS),
          agent=sampled(NAMES), trusted=st.booleans())
    def provider_receives(self, channel: str, text: str, agent: str, trusted: bool) -> None:
        """A user writes: the provider holds a new message with the next update id."""
        self.stats.rules["provider_receives"] += 1
        n = len(self.provider[channel]) + 1
        self.provider[channel].append(InboundMessage(
            channel=channel, message_id=str(n), conversation="c1", principal="user",
            text=f"{text} #{n}", trusted=trusted, agent=agent, project="p"))

    @rule(channel=sampled(("tg", "sms")), step=sampled((0, 0, 1, 1000)),
          text=sampled(TEXTS), ack_now=st.booleans())
    @_step
    def poll_and_accept(self, channel: str, step: int, text: str, ack_now: bool) -> None:
        """Poll from the stored offset and accept the next message (a user
        writes one first when nothing waits); the ack waits for a later step
        (a crash in between means redelivery)."""
        self.stats.rules["poll_and_accept"] += 1
        stored = self.call("offset", channel, clause="GW-CRASH-8").raw
        if stored != self.acked_offset[channel]:
            raise CrashViolation(f"GW-CRASH-8: offset of {channel!r} is {stored}, acknowledged "
                                 f"{self.acked_offset[channel]}", "GW-CRASH-8")
        start = max(stored, self.to_ack.get(channel, 0))
        if start >= len(self.provider[channel]):
            self.provider_receives(channel, text, "", True)
        msg = self.provider[channel][start]
        self.t += timedelta(milliseconds=step)
        self.accept(msg)
        self.to_ack[channel] = start + 1
        if ack_now:  # ack what was accepted on the channel, only after accept returned;
            self.ack_provider_now(channel)  # until then a crash means redelivery (GW-CRASH-10)

    def accept(self, msg: InboundMessage) -> None:
        key = (msg.channel, msg.message_id)
        fresh = self.call("accept", msg, self.t, clause="GW-CRASH-2").raw
        live = self.lives.get(key)
        if fresh and live is not None:
            raise CrashViolation(
                f"GW-CRASH-2: accept of {key} returned True although its row (life "
                f"{live.number}) was stored and never pruned", "GW-CRASH-2", "GW-ACC-4")
        if not fresh and live is None:
            raise CrashViolation(f"accept of {key} returned False but no row of it should exist",
                                 "GW-CRASH-1", "GW-ACC-2")
        if fresh:
            self.new_life(msg, self.t)

    @precondition(lambda self: self.job is None)
    @rule()
    @_step
    def run_job(self) -> None:
        """Run the oldest pending job (an effect outside the store)."""
        self.stats.rules["run_job"] += 1
        pending = self.call("pending", 1, 0, clause="GW-CRASH-3").raw
        if not pending:
            return
        item: InboxItem = pending[0]
        key = (item.channel, item.message_id)
        life = self.lives.get(key)
        if life is None:
            raise CrashViolation(f"pending holds {key}, which has no row in the model", "GW-CRASH-1")
        self.check_item(item, life, "a pending row")
        if life.replied_acked:
            raise CrashViolation(
                f"GW-CRASH-3/5: the job of {key} is about to run again although its set_replied "
                "was acknowledged (a finished job must never run twice)", "GW-CRASH-3", "GW-CRASH-5")
        life.runs += 1  # GW-CRASH-6: a second run is legal while set_replied was never acked
        self.job = (key, life.expected_reply())

    @precondition(lambda self: self.job is not None)
    @rule()
    @_step
    def record_reply(self) -> None:
        """``set_replied`` with the finished job's reply."""
        self.stats.rules["record_reply"] += 1
        assert self.job is not None
        key, reply = self.job
        self.job = None
        changed = self.call("set_replied", *key, reply, clause="GW-CRASH-3").raw
        life = self.lives[key]
        if changed:
            life.replied_acked = True
            life.reply = reply

    @precondition(lambda self: self.sending is None)
    @rule()
    @_step
    def send_reply(self) -> None:
        """Send the oldest pending reply (an effect outside the store)."""
        self.stats.rules["send_reply"] += 1
        replies = self.call("pending_replies", 1, 0, clause="GW-CRASH-4").raw
        if not replies:
            return
        item: InboxItem = replies[0]
        key = (item.channel, item.message_id)
        life = self.lives.get(key)
        if life is None:
            raise CrashViolation(f"pending_replies holds {key}, which has no row", "GW-CRASH-1")
        self.check_item(item, life, "a replied row")
        if life.sends and not life.duplicate_send_allowed:
            raise CrashViolation(
                f"GW-CRASH-5: the reply of {key} is sent a second time although no crash came "
                "between its send and mark_done", "GW-CRASH-5", "GW-CRASH-4")
        life.sends += 1
        life.sent_unconfirmed = True
        self.sending = key

    @precondition(lambda self: self.sending is not None)
    @rule()
    @_step
    def confirm_sent(self) -> None:
        """``mark_done`` after the send."""
        self.stats.rules["confirm_sent"] += 1
        assert self.sending is not None
        key = self.sending
        self.sending = None
        changed = self.call("mark_done", *key, clause="GW-CRASH-4").raw
        life = self.lives[key]
        life.sent_unconfirmed = False
        if changed:
            life.done_acked = True

    @rule(field=sampled(("agent", "project")), conv=sampled(CONVERSATIONS),
          value=sampled(NAMES))
    @_step
    def select(self, field: str, conv: str, value: str) -> None:
        """A conversation's agent or project selection changes."""
        self.stats.rules["select"] += 1
        self.call(f"set_conversation_{field}", "tg", conv, value, clause="GW-CRASH-8")
        agent, project = self.selections.get(("tg", conv), ("", ""))
        self.selections[("tg", conv)] = (value, project) if field == "agent" else (agent, value)

    @rule(back=sampled((timedelta(0), timedelta(milliseconds=1), timedelta(seconds=2))))
    @_step
    def prune(self, back: timedelta) -> None:
        """Prune done rows received before a cutoff near the model's now."""
        self.stats.rules["prune"] += 1
        before = self.t - back
        count = self.call("prune_done", before, clause="GW-CRASH-1").raw
        doomed = [k for k, life in self.lives.items()
                  if life.done_acked and life.received_at < before]
        unsure = [k for k, life in self.lives.items()
                  if not life.done_acked and life.received_at < before]
        if not len(doomed) <= count <= len(doomed) + len(unsure):
            raise CrashViolation(f"prune_done deleted {count} rows; {len(doomed)} done rows were due",
                                 "GW-CRASH-1", "GW-PRUNE-1")
        for key in doomed:
            del self.lives[key]
        if count > len(doomed):
            self.resync("prune")

    # -- crashes ----------------------------------------------------------------------------

    def may_crash(self) -> bool:
        """Crash again only after the worker got some work done since the last
        restart, and only a few times per history (a restart of a child
        process costs a process start)."""
        return (self.crashes < (4 if self.use_child else 8)
                and self.calls - self.calls_at_restart >= 3)

    @precondition(lambda self: self.may_crash() and not (self.use_child and self.crashes % 3))
    @rule()
    @_step
    def crash(self) -> None:
        """The holding process dies between two calls; the gateway restarts."""
        self.stats.rules["crash"] += 1
        self.worker.crash()
        self.restart()

    @precondition(lambda self: self.may_crash())
    @rule(what=sampled(("accept", "set_replied", "mark_done", "select", "set_offset")))
    @_step
    def crash_during_call(self, what: str) -> None:
        """The holder dies while a write is in flight (GW-CRASH-7)."""
        self.stats.rules["crash_during_call"] += 1
        if what == "accept":
            channel = "tg"
            start = max(self.acked_offset[channel], self.to_ack.get(channel, 0))
            if start >= len(self.provider[channel]):
                self.provider_receives(channel, "late", "", False)
            msg = self.provider[channel][start]
            self.t += timedelta(milliseconds=1)
            self.pending_call = ("accept", msg, self.t)
            self.worker.crash_during("accept", msg, self.t)
        elif what == "set_replied" and self.job is not None:
            key, reply = self.job
            self.pending_call = ("set_replied", key, reply)
            self.worker.crash_during("set_replied", *key, reply)
        elif what == "mark_done" and self.sending is not None:
            self.pending_call = ("mark_done", self.sending)
            self.worker.crash_during("mark_done", *self.sending)
        elif what == "select":
            old = self.selections.get(("tg", "c1"), ("", ""))
            self.pending_call = ("select", old)
            self.worker.crash_during("set_conversation_agent", "tg", "c1", "killed")
        elif what == "set_offset" and "tg" in self.to_ack:
            old, value = self.acked_offset["tg"], self.to_ack["tg"]
            self.pending_call = ("set_offset", old, value)
            self.worker.crash_during("set_offset", "tg", value)
        else:
            self.pending_call = None
            self.worker.crash()
        self.restart()

    def restart(self) -> None:
        self.crashes += 1
        self.forget_worker_memory()
        self.worker = self._open()  # GW-CRASH-9: the dead holder's lock is gone
        self.resolve_killed_call()
        self.check_after_restart()
        self.calls_at_restart = self.calls

    def resolve_killed_call(self) -> None:
        """Learn whether the killed call happened; it must have happened
        entirely or not at all (GW-CRASH-7)."""
        pending, self.pending_call = getattr(self, "pending_call", None), None
        if pending is None:
            return
        kind = pending[0]
        if kind == "accept":
            _, msg, now = pending
            key = (msg.channel, msg.message_id)
            item = self.call("get_item", *key, clause="GW-CRASH-7").raw
            live = self.lives.get(key)
            if item is not None and live is None:
                if (item.received_at != now or item.status != ItemStatus.PENDING
                        or any(getattr(item, f) != getattr(msg, f) for f in _FIELDS)):
                    raise CrashViolation(f"GW-CRASH-7: a killed accept left a partial row {item!r}",
                                         "GW-CRASH-7")
                self.new_life(msg, now)  # it happened; never acked to the provider
        elif kind == "set_replied":
            _, key, reply = pending
            item = self.call("get_item", *key, clause="GW-CRASH-7").raw
            life = self.lives[key]
            if item is not None and item.status == ItemStatus.REPLIED and not life.replied_acked:
                if item.reply != reply:
                    raise CrashViolation(f"GW-CRASH-7: a killed set_replied left reply {item.reply!r}",
                                         "GW-CRASH-7")
                life.replied_acked = True  # it happened: the job is finished for good
                life.reply = reply
        elif kind == "mark_done":
            _, key = pending
            item = self.call("get_item", *key, clause="GW-CRASH-7").raw
            life = self.lives[key]
            if item is not None and item.status == ItemStatus.DONE:
                life.done_acked = True
                life.sent_unconfirmed = False
        elif kind == "select":
            _, old = pending
            got = self.call("conversation", "tg", "c1", clause="GW-CRASH-7").raw
            if got not in (old, ("killed", old[1])):
                raise CrashViolation(f"GW-CRASH-7: a killed selection setter left {got!r} "
                                     f"(before: {old!r})", "GW-CRASH-7")
            self.selections[("tg", "c1")] = got
        elif kind == "set_offset":
            _, old, value = pending
            got = self.call("offset", "tg", clause="GW-CRASH-7").raw
            if got not in (old, value):
                raise CrashViolation(f"GW-CRASH-7: a killed set_offset left {got!r}", "GW-CRASH-7")
            self.acked_offset["tg"] = got  # if it happened, the provider saw the ack

    def resync(self, why: str) -> None:
        """Drop lives whose rows are gone (after a prune that took rows whose
        mark_done outcome was unknown)."""
        for key, life in list(self.lives.items()):
            item = self.call("get_item", *key).raw
            if item is None:
                if not (life.done_acked or life.sends):
                    raise CrashViolation(f"GW-CRASH-1: the row of {key} vanished ({why}) before "
                                         "its reply was sent", "GW-CRASH-1", "GW-PRUNE-2")
                del self.lives[key]

    def check_item(self, item: InboxItem, life: Life, what: str) -> None:
        wrong = [f for f in _FIELDS if getattr(item, f) != getattr(life.message, f)]
        if wrong or item.received_at != life.received_at:
            raise CrashViolation(f"GW-CRASH-1/7: {what} lost fields {wrong or ['received_at']}: "
                                 f"{item!r}", "GW-CRASH-1", "GW-CRASH-7")
        if item.status == ItemStatus.REPLIED and item.reply != life.expected_reply():
            raise CrashViolation(f"GW-CRASH-7: a replied row holds reply {item.reply!r}, expected "
                                 f"{life.expected_reply()!r}", "GW-CRASH-7", "GW-CRASH-4")

    def check_after_restart(self) -> None:
        pending = {(i.channel, i.message_id): i for i in self.call("pending").raw}
        replies = {(i.channel, i.message_id): i for i in self.call("pending_replies").raw}
        for key, life in self.lives.items():
            item = self.call("get_item", *key, clause="GW-CRASH-1").raw
            if item is None:
                raise CrashViolation(f"GW-CRASH-1: the accepted row {key} is gone after a crash",
                                     "GW-CRASH-1")
            self.check_item(item, life, f"row {key} after a crash")
            if life.done_acked:
                want = ItemStatus.DONE
            elif life.replied_acked:
                want = ItemStatus.REPLIED
            else:
                want = item.status if item.status != ItemStatus.DONE else None
            if item.status != want:
                clause = "GW-CRASH-3" if life.replied_acked and item.status == ItemStatus.PENDING else "GW-CRASH-4"
                raise CrashViolation(f"{clause}: after a crash row {key} is {item.status}; "
                                     f"acknowledged: replied={life.replied_acked} "
                                     f"done={life.done_acked}", clause, "GW-CRASH-1")
            if item.status == ItemStatus.REPLIED:
                life.replied_acked = True  # adopt: it is replied for good now
                life.reply = item.reply
            in_pending, in_replies = key in pending, key in replies
            if in_pending != (item.status == ItemStatus.PENDING) or in_replies != (item.status == ItemStatus.REPLIED):
                raise CrashViolation(f"GW-CRASH-3/4: row {key} ({item.status}) is in the wrong "
                                     "queue after a crash", "GW-CRASH-3", "GW-CRASH-4")
        extra = (set(pending) | set(replies)) - set(self.lives)
        if extra:
            raise CrashViolation(f"rows {sorted(extra)} appeared after a crash", "GW-CRASH-7")
        # GW-CRASH-2: a redelivery of a stored key is still a duplicate
        for key, life in list(self.lives.items())[:3]:
            if self.call("accept", life.message, self.t, clause="GW-CRASH-2").raw:
                raise CrashViolation(f"GW-CRASH-2: re-accepting {key} after a restart returned True",
                                     "GW-CRASH-2")
        for channel, value in self.acked_offset.items():
            got = self.call("offset", channel, clause="GW-CRASH-8").raw
            if got != value:
                raise CrashViolation(f"GW-CRASH-8: offset {channel!r} is {got} after a crash, "
                                     f"acknowledged {value}", "GW-CRASH-8")
        for key, value in self.selections.items():
            got = self.call("conversation", *key, clause="GW-CRASH-8").raw
            if tuple(got) != value:
                raise CrashViolation(f"GW-CRASH-8: selection {key} is {got!r} after a crash, "
                                     f"acknowledged {value!r}", "GW-CRASH-8")

    # -- the end: drain and check that nothing was lost ----------------------------------------

    def drain(self, send: bool = True) -> None:
        """Work until nothing is left: deliver and accept every message, run
        every job, record its reply and (``send``) send every reply."""
        for _ in range(10_000):
            progressed = False
            for channel in ("tg", "sms"):
                if self.to_ack.get(channel):
                    self.ack_provider_now(channel)
                    progressed = True
                start = self.acked_offset[channel]
                if start < len(self.provider[channel]):
                    self.accept(self.provider[channel][start])  # GW-CRASH-10: redelivery
                    self.to_ack[channel] = start + 1
                    progressed = True
            if self.sending is not None and send:
                self.confirm_sent()
                progressed = True
            if self.job is not None:
                self.record_reply()
                progressed = True
            if self.call("pending", 1, 0).raw:
                self.run_job()
                progressed = True
            elif send and self.call("pending_replies", 1, 0).raw:
                self.send_reply()
                progressed = True
            if not progressed:
                return
        raise CrashViolation("the gateway never drained", "GW-CRASH-10")

    def ack_provider_now(self, channel: str) -> None:
        value = self.to_ack.pop(channel)
        self.call("set_offset", channel, value, clause="GW-CRASH-8")
        self.acked_offset[channel] = value

    def check_nothing_lost(self) -> None:
        by_key: dict[tuple[str, str], list[Life]] = {}
        for life in self.history:
            by_key.setdefault((life.message.channel, life.message.message_id), []).append(life)
        for channel, msgs in self.provider.items():
            for msg in msgs[: self.acked_offset[channel]]:
                lives = by_key.get((channel, msg.message_id), [])
                if not lives or not any(life.runs for life in lives):
                    raise CrashViolation(
                        f"GW-CRASH-10: message {channel}/{msg.message_id} was acknowledged to the "
                        "provider but its job never ran (lost between ack and run)",
                        "GW-CRASH-10", "GW-CRASH-1")
                if not any(life.sends for life in lives):
                    raise CrashViolation(
                        f"GW-CRASH-4: the reply of {channel}/{msg.message_id} was never sent",
                        "GW-CRASH-4")

    def teardown(self) -> None:
        self.stats.histories += 1
        self.stats.longest_history = max(self.stats.longest_history, self.calls)
        try:
            if not self.in_step:  # a rule failed: keep its violation, do not drain
                # Every history ends with a crash (the restart of whatever state
                # it reached is checked), runs every job, crashes again while
                # the replies wait to be sent (finished jobs must stay
                # finished, GW-CRASH-3/4), and then sends everything.
                for send in (False, True):
                    self.worker.crash()
                    self.restart()
                    self.drain(send=send)
                self.check_nothing_lost()
        finally:
            try:
                self.worker.close()
            finally:
                try:
                    self.opener.close()
                finally:
                    self.harness.discard_gateway_location(self.location)
                    self.harness.discard(self.location_store)


_FIELDS = ("channel", "message_id", "conversation", "principal", "text", "trusted", "agent", "project")


def build_driver(harness: Harness, stats: MachineStats, use_child: bool = False) -> type[GatewayDriverMachine]:
    return type("GatewayDriverMachine", (GatewayDriverMachine,),
                {"harness": harness, "stats": stats, "use_child": use_child})


# -- GW-RACE-9: two opens of one location ------------------------------------------------------


def double_open_round(opener: Any, location: Any, contenders: int) -> list[Any]:
    """``contenders`` threads open ``location`` at once; returns what each
    got (an open store or the exception)."""
    barrier = threading.Barrier(contenders)
    results: list[Any] = [None] * contenders

    def contend(i: int) -> None:
        barrier.wait()
        try:
            results[i] = opener.open_gateway(location)
        except BaseException as exc:  # noqa: BLE001 - the outcome is the data
            results[i] = exc

    threads = [threading.Thread(target=contend, args=(i,), daemon=True) for i in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if any(t.is_alive() for t in threads):
        raise CrashViolation("an open of a held location did not return (GW-OPEN-3)", "GW-RACE-9",
                             "GW-OPEN-3")
    return results


# -- the class's certification tests -------------------------------------------------------


def run_gateway_crash(harness: Harness | Callable[..., Any], profile: Profile | None = None,
                      stats: MachineStats | None = None, child: bool = False) -> MachineStats:
    """Run the gateway driver model (GW-CRASH-1..10).

    ``child=False`` crashes the holder through ``harness.crash_gateway``
    (feature ``gateway-crash``); ``child=True`` holds the location in a child
    process and kills it with SIGKILL, mid-call too (feature
    ``cross-process``).  Child processes are slow to start, so that variant
    runs a fifth of the profile's crash examples, with shorter histories.
    """
    from .differential import machine_settings
    from .runner import as_harness, default_profile, limit_shrinking, run_machine

    harness = as_harness(harness)
    profile = profile or default_profile()
    limit_shrinking(profile.shrink_seconds)
    stats = stats or MachineStats("gateway-crash-child" if child else "gateway-crash")
    feature = "cross-process" if child else "gateway-crash"
    if feature not in harness.features:
        raise ValueError(f"the {harness.name!r} harness does not provide {feature}")
    machine = build_driver(harness, stats, use_child=child)
    examples = max(4, profile.crash_examples // 5) if child else profile.crash_examples
    steps = min(profile.crash_steps, 20) if child else profile.crash_steps
    try:
        run_machine(machine, machine_settings(examples, steps, profile), stats)
    finally:
        if child:
            from cortex_spec.gateway_child import kill_spares

            kill_spares()
    return stats


def run_driver(harness: Harness, profile: Profile, declared: frozenset[str], stats: MachineStats) -> None:
    """The driver model with its holder crashed through the harness's crash
    hook, between and during calls: nothing acknowledged is lost, a finished
    job never runs again, only delivery is retried."""
    run_gateway_crash(harness, profile, stats)


def run_driver_in_child(harness: Harness, profile: Profile, declared: frozenset[str],
                        stats: MachineStats) -> None:
    """The same driver model with the store held by a real child process that
    is killed with SIGKILL, between calls and while a write is in flight."""
    run_gateway_crash(harness, profile, stats, child=True)


def _double_open_rounds(harness: Harness, profile: Profile, contenders: int, stats: MachineStats) -> None:
    from cortex_spec.clock import ManualClock

    location_store = harness.new_location()
    opener = harness.open(location_store, ManualClock())
    location = harness.new_gateway_location()
    try:
        for round_ in range(profile.race_rounds):
            results = double_open_round(opener, location, contenders)
            stats.examples += 1
            stats.operations += contenders
            winners = [r for r in results if not isinstance(r, BaseException)]
            losers = [r for r in results if isinstance(r, BaseException)]
            for winner in winners:
                winner.close()
            if len(winners) != 1:
                raise CrashViolation(
                    f"GW-OPEN-2: {contenders} threads opened one location at once and {len(winners)} "
                    f"of them got the store (round {round_}); exactly one may hold it", "GW-OPEN-2",
                    "GW-RACE-9")
            wrong = [f"{type(e).__name__} ({e})" for e in losers if not isinstance(e, StoreLocked)]
            if wrong:
                raise CrashViolation(
                    f"GW-OPEN-3: the opens that lost the race raised {'; '.join(wrong)} instead of "
                    f"StoreLocked (round {round_})", "GW-OPEN-3", "GW-RACE-9")
    finally:
        opener.close()
        harness.discard_gateway_location(location)
        harness.discard(location_store)


def run_double_open(harness: Harness, profile: Profile, declared: frozenset[str],
                    stats: MachineStats) -> None:
    """Two threads, then ``race_threads`` threads, open one location at once:
    exactly one gets the store, the others StoreLocked; repeated."""
    _double_open_rounds(harness, profile, 2, stats)
    _double_open_rounds(harness, profile, profile.race_threads, stats)


def run_double_open_across_processes(harness: Harness, profile: Profile, declared: frozenset[str],
                                     stats: MachineStats) -> None:
    """Two child processes and this one open one location at once: exactly
    one of the three holds it."""
    import sys

    from cortex_spec.clock import ManualClock
    from cortex_spec.gateway_child import GatewayChild

    location_store = harness.new_location()
    opener = harness.open(location_store, ManualClock())
    location = harness.new_gateway_location()
    try:
        for round_ in range(3):
            children = [GatewayChild(*harness.gateway_child(location)) for _ in range(2)]
            try:
                for child in children:  # both requests in flight before either answers
                    child.send({"op": "open", "target": child.target, "args": child.args,
                                "path": list(sys.path)})
                try:
                    mine = opener.open_gateway(location)
                except StoreLocked:
                    mine = None
                answers = [child.receive() for child in children]
                stats.examples += 1
                stats.operations += 3
                won = [a for a in answers if "error" not in a]
                wrong = [a["error"] for a in answers if "error" in a and a.get("error") != "StoreLocked"]
                if mine is not None:
                    mine.close()
                if wrong:
                    raise CrashViolation(f"GW-OPEN-3: a child's losing open raised {', '.join(wrong)} "
                                         "instead of StoreLocked", "GW-OPEN-3", "GW-RACE-9")
                holders = len(won) + (mine is not None)
                if holders != 1:
                    raise CrashViolation(
                        f"GW-OPEN-2: two child processes and this one opened one location at once and "
                        f"{holders} of them hold it (round {round_}); exactly one may", "GW-OPEN-2",
                        "GW-RACE-9")
            finally:
                for child in children:
                    child.kill()
    finally:
        opener.close()
        harness.discard_gateway_location(location)
        harness.discard(location_store)
