"""Machine operations of class ``runs``: rules, views, a world of paused
runs, racing calls, object keys (see :mod:`.plugin`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

from hypothesis import strategies as st

from cortex_spec import ids
from cortex_spec.clock import EPOCH
from cortex_spec.runs import Run, RunFilter, RunState, Step, ToolCall

import attrs

from .ops import Op
from .plugin import ClassMachines, World
from .world import ROLES, ctx_of, fixed_id, json_objects, make_op, sampled, short_texts

NAME = "runs"

AGENTS = tuple(fixed_id(ids.AGENT, n) for n in (1, 2))
#: ``started_at`` values: none, and one with sub-millisecond digits to truncate
STARTS = (None, EPOCH + timedelta(microseconds=1500))


def run_key(run_id: str) -> tuple[str, str]:
    return ("run", run_id)


def run_entity(data: st.DataObject, run_id: str, *, state: Any = None) -> Run:
    """A run with drawn mutable fields (the identity fields are the caller's)."""
    return Run(
        id=run_id,
        agent_id=data.draw(sampled(AGENTS), "agent_id"),
        session_id=data.draw(sampled((None, fixed_id(ids.SESSION, 1))), "session_id"),
        state=state if state is not None else data.draw(sampled(list(RunState)), "state"),
        input=data.draw(short_texts(), "input"),
        output=data.draw(sampled(("", "done")), "output"),
        step_count=data.draw(st.integers(0, 3), "step_count"),
        tokens_used=data.draw(sampled((0, 7, 2**63 - 1)), "tokens_used"),
        started_at=data.draw(sampled(STARTS), "started_at"),
        metadata=data.draw(json_objects(), "metadata"),
        reply_route=data.draw(sampled((None, {"channel": "slack", "n": 1})), "reply_route"),
    )


# -- differential rules: each returns an Op (or None to do nothing) -----------------


def _run_id(m: Any, data: st.DataObject) -> str:
    return data.draw(m.id_choice("run"), "run_id")


def r_create_run(m: Any, data: st.DataObject):
    run_id = data.draw(m.id_choice("run", fresh=True), "run_id")
    m.remember("run", run_id)
    run = run_entity(data, run_id)
    # the run is stamped with the caller's principal (RUN-CREATE-1): callers act for several
    return make_op("create_run", data.draw(m.ctx_choice(actors=True), "ctx"), run, keys=[run_key(run_id)])


def r_get_run(m, data):
    run_id = _run_id(m, data)
    return make_op("get_run", data.draw(m.ctx_choice(), "ctx"), run_id, keys=[run_key(run_id)])


def r_update_run(m, data):
    run_id = _run_id(m, data)
    # an update never writes the principal (RUN-UPD-3), whoever the caller acts for
    return make_op(
        "update_run", data.draw(m.ctx_choice(actors=True), "ctx"), run_entity(data, run_id), keys=[run_key(run_id)]
    )


def _run_filter(data: st.DataObject) -> RunFilter | None:
    if data.draw(st.booleans(), "no filter"):
        return None
    return RunFilter(
        agent_id=data.draw(sampled((None,) + AGENTS), "agent_id"),
        state=data.draw(sampled((None, RunState.PAUSED, RunState.RUNNING, RunState.FAILED))),
        exact=data.draw(st.booleans(), "exact"),
        limit=data.draw(sampled((0, 1, 2, -1)), "limit"),
        offset=data.draw(sampled((0, 1, 3)), "offset"),
    )


def r_list_runs(m, data):
    return make_op("list_runs", data.draw(m.ctx_choice(), "ctx"), _run_filter(data), keys=None)


def r_count_runs(m, data):
    return make_op("count_runs", data.draw(m.ctx_choice(), "ctx"), _run_filter(data), keys=None)


def r_create_step(m, data):
    step_id = data.draw(m.id_choice("step", fresh=True), "step_id")
    m.remember("step", step_id)
    run_id = _run_id(m, data)
    step = Step(
        id=step_id,
        run_id=run_id,
        index=data.draw(st.integers(0, 2), "index"),
        type=data.draw(sampled(("llm", "tool")), "type"),
        metadata=data.draw(json_objects(), "metadata"),
    )
    return make_op("create_step", data.draw(m.ctx_choice(), "ctx"), step,
                   keys=[("step", step_id), ("steps-of", run_id)])


def r_list_steps(m, data):
    run_id = _run_id(m, data)
    return make_op("list_steps", data.draw(m.ctx_choice(), "ctx"), run_id, keys=[("steps-of", run_id)])


def r_create_tool_call(m, data):
    tc_id = data.draw(m.id_choice("tool_call", fresh=True), "tool_call_id")
    m.remember("tool_call", tc_id)
    step_id = data.draw(m.id_choice("step"), "step_id")
    tc = ToolCall(
        id=tc_id,
        step_id=step_id,
        run_id=_run_id(m, data),
        tool_name=data.draw(sampled(("search", "deploy")), "tool_name"),
        arguments=data.draw(short_texts(), "arguments"),
    )
    return make_op("create_tool_call", data.draw(m.ctx_choice(), "ctx"), tc,
                   keys=[("tool_call", tc_id), ("calls-of", step_id)])


def r_list_tool_calls(m, data):
    step_id = data.draw(m.id_choice("step"), "step_id")
    return make_op("list_tool_calls", data.draw(m.ctx_choice(), "ctx"), step_id,
                   keys=[("calls-of", step_id)])


#: rules the machine runs a few times before anything else (``populate``)
SEED_RULES = ("create_run", "create_step", "create_tool_call")

RULES = {
    "create_run": r_create_run,
    "get_run": r_get_run,
    "update_run": r_update_run,
    "list_runs": r_list_runs,
    "count_runs": r_count_runs,
    "create_step": r_create_step,
    "list_steps": r_list_steps,
    "create_tool_call": r_create_tool_call,
    "list_tool_calls": r_list_tool_calls,
}

ID_KINDS = {"run": ids.RUN, "step": ids.STEP, "tool_call": ids.TOOL_CALL}


def views(ctxs: list, known: dict[str, list[str]]) -> dict[str, Op]:
    """Whole-state views of the class (MACH-DIFF-2)."""
    out: dict[str, Op] = {}
    for c in ctxs:
        scope = c.scope.canonical()
        out[f"list_runs@{scope}"] = make_op("list_runs", c, None, keys=None)
        out[f"count_runs@{scope}"] = make_op("count_runs", c, None, keys=None)
    root = ctx_of("ws=w1")
    for run_id in known.get("run", [])[:6]:
        out[f"list_steps[{run_id}]"] = make_op("list_steps", root, run_id, keys=None)
    for step_id in known.get("step", [])[:6]:
        out[f"list_tool_calls[{step_id}]"] = make_op("list_tool_calls", root, step_id, keys=None)
    return out


# -- concurrent scenarios ------------------------------------------------------------


@attrs.frozen
class RunRows:
    """A scenario's runs: ``runs`` are created paused at the exact role (a
    suspension can pause them), ``spare`` is an id no row has yet.  The runs
    alternate between the two :data:`AGENTS` (``agent_of``), so a listing
    filtered by agent has rows of the other agent to skip; ``agent`` is the
    first one."""

    agent: str
    runs: tuple[str, ...]
    spare: str

    def agent_of(self, run_id: str) -> str:
        return AGENTS[self.runs.index(run_id) % len(AGENTS)] if run_id in self.runs else self.agent


def world(draw: Any, w: World, size: int, live: bool) -> RunRows:
    return RunRows(AGENTS[0], tuple(fixed_id(ids.RUN, 100 + i) for i in range(size)),
                   fixed_id(ids.RUN, 199))


def setup(w: World) -> list[Op]:
    rows: RunRows = w[NAME]
    exact = ctx_of(ROLES["exact"])
    return [make_op("create_run", exact, Run(id=run_id, agent_id=rows.agent_of(run_id), state=RunState.PAUSED),
                    keys=[run_key(run_id)]) for run_id in rows.runs]


#: the filters a racing listing draws: every run, one agent's, one state's,
#: and pages of them (offset 1, limit 1): the page must skip the other rows
RACING_FILTERS: tuple[RunFilter | None, ...] = (
    None,
    RunFilter(agent_id=AGENTS[1]),
    RunFilter(agent_id=AGENTS[0], limit=1, offset=1),
    RunFilter(state=RunState.RUNNING, limit=1),
    RunFilter(state=RunState.PAUSED, offset=1),
)


def racing_ops(w: World) -> list[Callable[[Any], Op]]:
    """Calls on the world's runs that race well: updates, reads, duplicate
    creates, lists.  Each builder takes Hypothesis' ``draw``."""
    world = w[NAME]

    def update(draw):
        run_id = draw(sampled(world.runs))
        role = draw(sampled(("exact", "ancestor")))
        return make_op("update_run", ctx_of(ROLES[role]), run_entity(_Drawer(draw), run_id),
                       keys=[run_key(run_id)])

    def read(draw):
        run_id = draw(sampled(world.runs))
        role = draw(sampled(("exact", "ancestor", "sibling", "lookalike")))
        return make_op("get_run", ctx_of(ROLES[role]), run_id, keys=[run_key(run_id)])

    def create_dup(draw):
        run_id = draw(sampled(world.runs + (world.spare,)))
        role = draw(sampled(("exact", "sibling", "other")))
        return make_op("create_run", ctx_of(ROLES[role]),
                       Run(id=run_id, agent_id=AGENTS[0], state=RunState.PAUSED),
                       keys=[run_key(run_id)])

    def listing(draw):
        role = draw(sampled(("exact", "ancestor")))
        method = draw(sampled(("list_runs", "count_runs")))
        return make_op(method, ctx_of(ROLES[role]), draw(sampled(RACING_FILTERS)), keys=None)

    return [update, read, create_dup, listing]


def storm_ops(w: World) -> list[Callable[[Any], Op]]:
    """Builders for storms: whole updates of one run (RUN-UPD-6) and one id
    created from several scopes (SCOPE-ID-1)."""
    world = w[NAME]
    run_id = world.runs[0]

    def update(draw):
        role = draw(sampled(("exact", "ancestor")))
        return make_op("update_run", ctx_of(ROLES[role]), run_entity(_Drawer(draw), run_id),
                       keys=[run_key(run_id)])

    def create_twice(draw):
        role = draw(sampled(("exact", "sibling", "other", "lookalike")))
        return make_op("create_run", ctx_of(ROLES[role]),
                       Run(id=world.spare, agent_id=AGENTS[0], state=RunState.PAUSED),
                       keys=[run_key(world.spare)])

    return [update, create_twice]


class _Drawer:
    """Adapts a composite ``draw`` to the ``data.draw(strategy, label)`` shape."""

    def __init__(self, draw: Any) -> None:
        self._draw = draw

    def draw(self, strategy: st.SearchStrategy, label: str | None = None) -> Any:
        return self._draw(strategy)


MACHINES = ClassMachines(
    name=NAME,
    rules=RULES,
    views=views,
    id_kinds=ID_KINDS,
    seed_rules=SEED_RULES,
    world=world,
    setup=setup,
    racing_ops=racing_ops,
    storm_ops=storm_ops,
    weight=0.5,
    cost=3.0,
)
