"""Machine operations of class ``memory``: the sessions' generated rules,
views, world and storms (:mod:`.kinds`), and by hand the conversation,
working-memory and summary calls with the MEM-RACE storms — saves racing
saves, clears, deletes, updates and loads of one session, and working saves
of one run, key and scope."""

from __future__ import annotations

from typing import Any, Callable

import attrs
from hypothesis import strategies as st

from cortex_spec import ids
from cortex_spec.memory import SESSIONS, TABLES, Message

from .kinds import class_machines
from .ops import Op
from .plugin import MachineTest, World, storm
from .world import ROLES, ctx_of, fixed_id, json_objects, make_op, sampled

NAME = "memory"

#: the agents sessions name (the sessions' agent_id pool of :mod:`.kinds`)
AGENTS = tuple(fixed_id(ids.AGENT, n) for n in (1, 2))
RUNS = tuple(fixed_id(ids.RUN, n) for n in (1, 2))
KEYS = ("k", "K")
SESSION_KEYS = [("table", SESSIONS.name)]


def _messages() -> Any:
    one = st.builds(Message, role=sampled(("user", "assistant")), content=sampled(("", "hi", "bye")),
                    tool_calls=sampled(([], [{"a": 1}])), metadata=sampled(({}, {"n": 1.0})))
    return st.lists(one, max_size=3)


MESSAGES = _messages()


def _session_id(m: Any, data: Any) -> str:
    return data.draw(m.id_choice(SESSIONS.name), "session_id")


def _conv(method: str, *extra: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Op]:
    def rule(m: Any, data: Any) -> Op:
        args = [data.draw(sampled(AGENTS), "agent_id"), _session_id(m, data)]
        args += [draw(m, data) for draw in extra]
        return make_op(method, data.draw(m.ctx_choice(), "ctx"), *args, keys=SESSION_KEYS)
    rule.__name__ = method
    return rule


def _working(method: str, with_key: bool, with_value: bool) -> Callable[[Any, Any], Op]:
    def rule(m: Any, data: Any) -> Op:
        run = data.draw(sampled(RUNS), "run_id")
        args: list[Any] = [run]
        if with_key:
            args.append(data.draw(sampled(KEYS), "key"))
        if with_value:
            args.append(data.draw(st.one_of(json_objects(), sampled((1, 1.0, None, [True]))), "value"))
        return make_op(method, data.draw(m.ctx_choice(), "ctx"), *args, keys=[("working", run)])
    rule.__name__ = method
    return rule


def _summary(method: str, with_text: bool) -> Callable[[Any, Any], Op]:
    def rule(m: Any, data: Any) -> Op:
        agent = data.draw(sampled(AGENTS), "agent_id")
        args = [agent] + ([data.draw(sampled(("s", "t", "")), "text")] if with_text else [])
        return make_op(method, data.draw(m.ctx_choice(), "ctx"), *args, keys=[("summaries", agent)])
    rule.__name__ = method
    return rule


RULES = {
    "memory_delete_session": lambda m, data: make_op("delete_session", data.draw(m.ctx_choice(), "ctx"),
                                                     _session_id(m, data), keys=SESSION_KEYS),
    "memory_save_conversation": _conv("save_conversation", lambda m, data: data.draw(MESSAGES, "messages")),
    "memory_load_conversation": _conv("load_conversation",
                                      lambda m, data: data.draw(sampled((0, 1, 2, -1)), "limit")),
    "memory_clear_conversation": _conv("clear_conversation"),
    "memory_save_working": _working("save_working", True, True),
    "memory_load_working": _working("load_working", True, False),
    "memory_clear_working": _working("clear_working", False, False),
    "memory_save_summary": _summary("save_summary", True),
    "memory_load_summaries": _summary("load_summaries", False),
}


def views(ctxs: list, known: dict) -> dict[str, Op]:
    out: dict[str, Op] = {}
    root = ctx_of("ws=w1")
    for sid in known.get(SESSIONS.name, [])[:6]:
        for agent in AGENTS:
            out[f"load_conversation[{agent[-4:]},{sid}]"] = make_op("load_conversation", root, agent, sid, keys=None)
    for c in ctxs:
        for agent in AGENTS:
            out[f"load_summaries[{agent[-4:]}]@{c.scope.canonical()}"] = make_op("load_summaries", c, agent,
                                                                               keys=None)
    for run in RUNS:
        for key in KEYS:
            out[f"load_working[{run[-4:]},{key}]"] = make_op("load_working", root, run, key, keys=None)
    return out


def storm_ops(w: World) -> list[Callable[[Any], Op]]:
    """MEM-RACE-1..7 on the world's first session (and one working key)."""
    first = w[NAME].rows[SESSIONS.name][0]
    exact = ctx_of(ROLES["exact"])

    def save(draw: Any, label: str = "save") -> Op:
        return make_op("save_conversation", exact, first.agent_id, first.id, draw(MESSAGES), keys=SESSION_KEYS,
                       label=label)

    def save_or(other: Callable[[Any], Op]) -> Callable[[Any], Op]:
        return lambda draw: save(draw) if draw(st.booleans()) else other(draw)

    def clear(draw: Any) -> Op:
        return make_op("clear_conversation", exact, first.agent_id, first.id, keys=SESSION_KEYS, label="clear")

    def delete(draw: Any) -> Op:
        return make_op("delete_session", exact, first.id, keys=SESSION_KEYS, label="delete")

    def update(draw: Any) -> Op:
        obj = attrs.evolve(first, title=draw(sampled(("t1", "t2"))), is_default=draw(st.booleans()),
                           message_count=0, last_message="stale")
        return make_op("update_session", exact, obj, keys=SESSION_KEYS, label="update")

    def load(draw: Any) -> Op:
        return make_op("load_conversation", ctx_of(ROLES[draw(sampled(("exact", "ancestor")))]),
                       first.agent_id, first.id, draw(sampled((0, 2))), keys=SESSION_KEYS, label="load")

    def working(draw: Any) -> Op:
        return make_op("save_working", exact, RUNS[0], "k", draw(sampled((1, 2, 1.0, [3]))),
                       keys=[("working", RUNS[0])], label="working")

    builders = [save, save_or(clear), save_or(delete), save_or(update), save_or(load), working]
    return [storm(b, *c) for b, c in zip(builders, STORM_CLAUSES, strict=True)]


#: the clauses of the storms above, in their order
STORM_CLAUSES = (("MEM-RACE-1",), ("MEM-RACE-2",), ("MEM-RACE-3",), ("MEM-RACE-4",), ("MEM-RACE-7",),
                 ("MEM-RACE-6",))


def racing_ops(w: World) -> list[Callable[[Any], Op]]:
    """Any memory call on the world's sessions, runs and agents."""
    rows = w[NAME].rows[SESSIONS.name]
    sessions = sampled(tuple(r.id for r in rows))
    roles = sampled(("exact", "exact", "ancestor", "sibling"))

    def conv(draw: Any) -> Op:
        method = draw(sampled(("save_conversation", "load_conversation", "clear_conversation")))
        args: list[Any] = [draw(sampled(AGENTS)), draw(sessions)]
        if method == "save_conversation":
            args.append(draw(MESSAGES))
        return make_op(method, ctx_of(ROLES[draw(roles)]), *args, keys=SESSION_KEYS)

    def work(draw: Any) -> Op:
        method = draw(sampled(("save_working", "load_working", "clear_working")))
        run = draw(sampled(RUNS))
        args: list[Any] = [run] + ([draw(sampled(KEYS))] if method != "clear_working" else [])
        if method == "save_working":
            args.append(draw(sampled((1, "v", None))))
        return make_op(method, ctx_of(ROLES[draw(roles)]), *args, keys=[("working", run)])

    def summary(draw: Any) -> Op:
        agent = draw(sampled(AGENTS))
        if draw(st.booleans()):
            return make_op("save_summary", ctx_of(ROLES[draw(roles)]), agent, "s", keys=[("summaries", agent)])
        return make_op("load_summaries", ctx_of(ROLES[draw(roles)]), agent, keys=[("summaries", agent)])

    return [conv, conv, work, summary]


# -- a writer that dies (MEM-CRASH-1) ---------------------------------------------------------
#
# A child process opens the store on the same storage (harness feature
# ``kill-writer``) and writes without pause: batches of 1–4 messages, each
# message naming its batch and place ("<session>#<batch>:<j>/<n>"), now and
# then a delete of a session or a new one.  It prints what it is about to do
# and what returned.  The parent kills it with SIGKILL after a drawn number
# of lines — mostly while a call runs — opens the storage again and checks
# every session the child touched.


def writer_main(spec_json: str) -> None:
    """The child: ``spec`` = {"target", "args", "scope", "agent", "sessions", "seed"}."""
    import importlib
    import json
    import random
    import sys

    from cortex_spec.context import Context
    from cortex_spec.memory import Session
    from cortex_spec.scope import Scope

    spec = json.loads(spec_json)
    module, _, function = spec["target"].partition(":")
    store = getattr(importlib.import_module(module), function)(*spec["args"])
    c, agent = Context(Scope.parse(spec["scope"])), spec["agent"]
    live = list(spec["sessions"])
    rng = random.Random(spec["seed"])
    out = sys.stdout
    n_batch = 0
    while True:
        roll = rng.random()
        if roll < 0.08 and len(live) > 1:
            sid = live.pop(rng.randrange(len(live)))
            out.write(f"delete {sid}\n")
            out.flush()
            store.delete_session(c, sid)
            out.write(f"deleted {sid}\n")
        elif roll < 0.14:
            sid = ids.new_id(ids.SESSION)
            out.write(f"create {sid}\n")
            out.flush()
            store.create_session(c, Session(id=sid, agent_id=agent))
            live.append(sid)
            out.write(f"created {sid}\n")
        else:
            sid = rng.choice(live)
            n_batch += 1
            n = rng.randint(1, 4)
            batch = [Message(content="" if j == n - 1 and rng.random() < 0.3 else f"{sid}#{n_batch}:{j}/{n}",
                             metadata={"tag": f"{sid}#{n_batch}:{j}/{n}"}) for j in range(n)]
            out.write(f"save {sid} {n_batch}\n")
            out.flush()
            store.save_conversation(c, agent, sid, batch)
            out.write(f"saved {sid} {n_batch}\n")
        out.flush()


def _check_after_kill(store: Any, c: Any, agent: str, log: list[str], initial: list[str]) -> None:
    from cortex_spec.errors import SessionNotFound

    from .differential import Mismatch

    touched = {line.split()[1] for line in log if len(line.split()) >= 2} | set(initial)
    acked_saves = {(p[1], p[2]) for p in (line.split() for line in log) if p[0] == "saved"}
    deleted = {line.split()[1] for line in log if line.startswith("deleted ")}
    created = {line.split()[1] for line in log if line.startswith("created ")}
    for sid in sorted(touched):
        try:
            session = store.get_session(c, sid)
        except SessionNotFound:
            session = None
        messages = store.load_conversation(c, agent, sid)

        def fail(what: str) -> None:
            raise Mismatch(f"MEM-CRASH-1: after the writer was killed, session {sid}: {what}", "MEM-CRASH-1")

        if session is None:
            if messages:
                fail(f"the session is gone but {len(messages)} of its messages are still stored")
            if (sid in created or sid in initial) and not _cleared_later(log, sid):
                fail("it is gone, and no delete of it was even begun")
            continue
        if sid in deleted:
            fail("a delete that returned did not remove it")
        if session.message_count != len(messages):
            fail(f"message_count is {session.message_count} but {len(messages)} messages are stored")
        batches: dict[str, set[int]] = {}
        sizes: dict[str, int] = {}
        for m in messages:
            tag = m.metadata.get("tag", "")
            head, _, place = tag.rpartition(":")
            j, _, n = place.partition("/")
            batches.setdefault(head, set()).add(int(j))
            sizes[head] = int(n)
        for head, places in batches.items():
            if places != set(range(sizes[head])):
                fail(f"batch {head} is torn: places {sorted(places)} of {sizes[head]}")
        spoken = [m.content for m in messages if m.content]
        if spoken and session.last_message != spoken[-1]:
            fail(f"last_message is {session.last_message!r}, the last non-empty content {spoken[-1]!r}")
        for _, batch in [a for a in acked_saves if a[0] == sid]:
            if f"{sid}#{batch}" not in batches and not _cleared_later(log, sid):
                fail(f"batch {batch}, whose save returned, is not stored")


def _cleared_later(log: list[str], sid: str) -> bool:
    return any(line.startswith(("delete ", "deleted ")) and line.split()[1] == sid for line in log)


def run_writer_crash(harness: Any, profile: Any, declared: frozenset[str], stats: Any) -> None:
    """MEM-CRASH-1: kill a writer process in the middle of its saves and
    deletes, reopen, check (see above)."""
    import json
    import os
    import random
    import select
    import signal
    import time

    from cortex_spec.clock import ManualClock
    from cortex_spec.gateway_child import start_python
    from cortex_spec.memory import Session

    from .runner import session_seed

    rng = random.Random(session_seed())
    rounds = max(3, profile.crash_examples // 4)
    for round_ in range(rounds):
        location = harness.new_location()
        clock = ManualClock()
        store = harness.open(location, clock)
        c = ctx_of(ROLES["exact"])
        agent = AGENTS[0]
        sessions = [ids.new_id(ids.SESSION) for _ in range(3)]
        try:
            for sid in sessions:
                store.create_session(c, Session(id=sid, agent_id=agent))
            store.close()
            target, args = harness.store_child(location)
            spec = {"target": target, "args": args, "scope": ROLES["exact"], "agent": agent,
                    "sessions": sessions, "seed": rng.randrange(2**32)}
            child = start_python("cortex_spec.stateful.memory:writer_main", json.dumps(spec),
                                 preload=[target.partition(":")[0]])
            log: list[str] = []
            wanted = rng.randint(2, 40)
            deadline = time.monotonic() + 60
            assert child.stdout is not None
            while len(log) < wanted and time.monotonic() < deadline:
                ready, _, _ = select.select([child.stdout], [], [], 1.0)
                if ready:
                    line = child.stdout.readline()
                    if not line:
                        break
                    log.append(line.strip())
            if child.poll() is not None and child.returncode != 0:
                raise AssertionError(f"the writer process failed: {child.stderr.read()[-2000:]}")
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            log += [line.strip() for line in child.stdout.read().splitlines()]
            stats.examples += 1
            stats.histories += 1
            stats.operations += sum(1 for line in log if line.split()[0] in ("saved", "deleted", "created"))
            store = harness.open(location, clock)
            stats.rules["reopen"] += 1
            _check_after_kill(store, c, agent, log, sessions)
        finally:
            store.close()
            harness.discard(location)


MACHINES = class_machines(
    NAME, TABLES, rules=RULES, views=views, storm_ops=storm_ops, racing_ops=racing_ops,
    seed_rules=("sessions_create", "memory_save_conversation"), weight=0.6, cost=4.0,
    race_clauses=tuple(c for clauses in STORM_CLAUSES for c in clauses),
    tests=(MachineTest("writer-killed", ("MEM-CRASH-1", "MEM-CONV-11", "MEM-SES-9"), run_writer_crash,
                       requires=("kill-writer",), machine="memory-writer-killed", cost=6.0),),
)
