"""Certifies conformance class ``preparation`` (spec: preparation.md): a
capture returns what ``collect`` returns; every read of the sources gives
what the store method of the same name gives under the capture's context
(checked for every source method, from insiders and outsiders); a capture
writes nothing, raises ``collect``'s exception unchanged and refuses the
zero scope and a ``collect`` that is not callable before reading; sources
used after their capture are refused; and, while a writer updates an
agent, its persona, a skill, its overlay and a session one after the other
(each stamped with a generation), every capture on other threads sees one
moment of that sequence, never a newer row next to an older one written
before it.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import attrs
import pytest

from cortex_spec import Context, ids
from cortex_spec.catalog import Agent, Overlay, Persona, Skill
from cortex_spec.errors import InvalidArgument, InvalidState, NoScope
from cortex_spec.memory import Session
from cortex_spec.preparation import SOURCE_METHODS, PreparationSources
from cortex_spec.testing import (
    ZERO, clause, ctx, example, expect, expect_false, expect_is, expect_op, expect_raises, expect_strict, expect_true,
    shorten,
)

from .examples import HOME, Examples, examples, long_call, long_check


def _everything(src: PreparationSources) -> tuple:
    return (tuple(src.list_agents()), tuple(src.list_personas()), tuple(src.list_skills()),
            tuple(src.list_traits()), tuple(src.list_overlays()), tuple(src.list_sessions()))


def _long_scopes(store: Any, c: Context, up: Context) -> None:
    """SCOPE-CANON-6: every writing method at the long scope ``c``, the rows
    read back from ``c`` and from its parent ``up`` (test_long_scopes.py)."""
    agent = long_call("create_agent", lambda: store.create_agent(c, example(Agent)))
    for who in (c, up):
        seen = long_call("capture_preparation", lambda who=who: store.capture_preparation(
            who, lambda src: [a.id for a in src.list_agents()]))
        long_check("the agents a capture lists", agent.id in seen, True)


EXAMPLES = Examples(
    "preparation",
    long_scopes=_long_scopes,
    good={"capture_preparation": lambda s, c, w: s.capture_preparation(c, _everything)},
    bad={"capture_preparation": lambda s, c, w: s.capture_preparation(c, "not callable")},
)


class _AsStore:
    """The sources of a capture, called like the store (``ctx`` first): the
    examples' calls of the catalog and memory methods run on them."""

    def __init__(self, sources: PreparationSources, c: Any) -> None:
        self._sources = sources
        self._ctx = c

    def __getattr__(self, name: str) -> Any:
        read = getattr(self._sources, name)

        def call(c: Any, *args: Any, **kwargs: Any) -> Any:
            if c is not self._ctx:  # the examples' own mistake, not the store's
                raise TypeError(f"{name}: a source call made with another ctx than the capture's: {c!r}")
            return read(*args, **kwargs)
        return call


def _outcome(fn: Any) -> Any:
    try:
        return ("ok", fn())
    except Exception as exc:  # noqa: BLE001 - the error class is the observation
        return ("error", type(exc).__name__)


def _seed(store: Any, fixture: Any) -> SimpleNamespace:
    world = SimpleNamespace()
    for cls in ("catalog", "memory"):
        for key, value in vars(examples()[cls].seed(store, fixture)).items():
            setattr(world, key, value)
    return world


def _source_params() -> list:
    return [pytest.param(name, id=name) for name in SOURCE_METHODS]


@pytest.mark.clause("PREP-3", "PREP-1")
@pytest.mark.parametrize("method", _source_params())
def test_every_source_reads_what_the_store_method_reads(store, method, request):
    """The source and the store method of one name, with the arguments the
    classes' examples give, from the rows' scope, an ancestor, a descendant
    and an outsider: the same value (types kept) or the same error class."""
    world = _seed(store, request.getfixturevalue)
    good = {**examples()["catalog"].good, **examples()["memory"].good}
    with clause("PREP-3", what=f"an example call of {method}"):
        expect_op("PREP-3", method, "in", good, f"no example call of {method} in the catalog and memory examples")
    call = good[method]
    for scope in (HOME, "ws=w1", "ws=w1/proj=p1/env=e1", "ws=w2"):
        c = ctx(scope)
        direct = _outcome(lambda c=c: call(store, c, world))
        through = store.capture_preparation(
            c, lambda src, c=c: _outcome(lambda: call(_AsStore(src, c), c, world)))
        with clause("PREP-3", what=f"{method} from {scope}: the source and the store method"):
            expect_strict("PREP-3", through, direct, f"source: {through!r:.200}\nstore:  {direct!r:.200}")


@pytest.mark.clause("PREP-1", "PREP-4", "PREP-5")
def test_a_capture_returns_what_collect_returns_and_writes_nothing(store, request):
    world = _seed(store, request.getfixturevalue)
    view = examples()["catalog"].viewer()
    before = view(store, world, [HOME, "ws=w1"])
    calls: list[PreparationSources] = []

    def collect(src: PreparationSources) -> Any:
        calls.append(src)
        return {"agents": len(src.list_agents()), "marker": object}

    result = store.capture_preparation(ctx(HOME), collect)
    with clause("PREP-1", what="the value capture_preparation returns"):
        expect("PREP-1", result, {"agents": len(store.list_agents(ctx(HOME))), "marker": object}, "result")
        expect("PREP-1", len(calls), 1, f"collect ran {len(calls)} times")
    expect("PREP-4", view(store, world, [HOME, "ws=w1"]), before, "the store after a capture")
    expect_raises("PREP-5", InvalidState, lambda: calls[0].list_agents(),
                  "a source used after its capture returned")


@pytest.mark.clause("PREP-4")
def test_an_exception_of_collect_is_raised_unchanged(store, request):
    _seed(store, request.getfixturevalue)

    class Mine(Exception):
        pass

    raised = Mine("collect gave up")

    def collect(src: PreparationSources) -> Any:
        src.list_agents()
        raise raised

    with clause("PREP-4", what="capture_preparation with a collect that raises"):
        try:
            store.capture_preparation(ctx(HOME), collect)
        except Mine as exc:
            expect_is("PREP-4", exc, raised, "the exception was replaced")
        else:
            raise AssertionError("capture_preparation returned although collect raised")
    missing = ids.new_id(ids.AGENT)
    got = store.capture_preparation(ctx(HOME), lambda src: _outcome(lambda: src.get_agent(missing)))
    expect("PREP-3", got, ("error", "AgentNotFound"), "a missing agent read inside collect")


@pytest.mark.clause("PREP-6", "SCOPE-ZERO-1", "SCOPE-ZERO-3")
def test_zero_scope_and_bad_collect_are_refused_before_reading(store):
    called: list[Any] = []
    expect_raises("PREP-6", NoScope, lambda: store.capture_preparation(ZERO, called.append),
                  "a capture from the zero scope")
    expect_raises("PREP-6", NoScope, lambda: store.capture_preparation(ZERO, "garbage"),
                  "a capture from the zero scope with a collect that is not callable")
    for bad in (None, "collect", 3):
        expect_raises("PREP-6", InvalidArgument, lambda bad=bad: store.capture_preparation(ctx(HOME), bad),
                      f"capture_preparation(collect={bad!r})")
    for bad_ctx in (None, "ws=w1"):
        expect_raises("SCOPE-ZERO-3", InvalidArgument, lambda bad_ctx=bad_ctx: store.capture_preparation(bad_ctx, called.append),
                      f"capture_preparation(ctx={bad_ctx!r})")
    expect("PREP-6", called, [], "collect calls made by the refused captures")


# -- one snapshot under concurrent writes (PREP-2) --------------------------------------------------


def _rows(store: Any) -> SimpleNamespace:
    c = ctx(HOME)
    agent = store.create_agent(c, example(Agent, description="g0"))
    persona = store.create_persona(c, example(Persona, description="g0"))
    skill = store.create_skill(c, example(Skill, description="g0"))
    overlay = store.create_overlay(c, example(Overlay, agent_id=agent.id, model="g0"))
    session = store.create_session(c, example(Session, agent_id=agent.id, is_default=False, title="g0"))
    return SimpleNamespace(agent=agent, persona=persona, skill=skill, overlay=overlay, session=session)


def _gen(text: str) -> int:
    return int(text[1:])


def _capture(rows: SimpleNamespace, begun: threading.Event) -> Any:
    """What a preparation reads: the five rows, by id and by name, in the
    order they are written.  ``begun`` is set once the first row is read
    (the writer waits for it: see :func:`_race_round`)."""
    def collect(src: PreparationSources) -> tuple[int, ...]:
        first = _gen(src.get_agent(rows.agent.id).description)
        begun.set()
        return (first,
                _gen(src.get_persona_by_name(rows.persona.name).description),
                _gen(src.get_skill(rows.skill.id).description),
                _gen(src.get_overlay_for_agent(rows.agent.id).model),
                _gen(src.get_session(rows.session.id).title))
    return collect


def _write_generation(store: Any, rows: SimpleNamespace, g: int) -> None:
    c = ctx(HOME)
    text = f"g{g}"
    store.update_agent(c, attrs.evolve(rows.agent, description=text))
    store.update_persona(c, attrs.evolve(rows.persona, description=text))
    store.update_skill(c, attrs.evolve(rows.skill, description=text))
    store.update_overlay(c, attrs.evolve(rows.overlay, model=text))
    store.update_session(c, attrs.evolve(rows.session, title=text))


def _consistent(seen: tuple[int, ...]) -> bool:
    """A moment of the writer's sequence: the rows written so far carry
    generation g, the rest g - 1 (a prefix of the five updates)."""
    top = seen[0]
    k = sum(1 for x in seen if x == top)
    return seen[:k] == (top,) * k and all(x == top - 1 for x in seen[k:])


@pytest.mark.clause("PREP-2", "PREP-7", "RSC-GEN-12")
def test_every_capture_sees_one_moment_of_a_writers_sequence(store, profile):
    """One writer updates the agent, its persona, a skill, its overlay and a
    session, in that order, generation after generation; three threads
    capture the five rows meanwhile.  Each capture must see a prefix of the
    writer's updates: generation g in the first k rows and g - 1 in the
    others.  A store whose reads see different moments shows, sooner or
    later, a row newer than one written before it."""
    rows = _rows(store)
    generations = 12
    for round_ in range(max(2, profile.race_rounds // 2)):
        seen, failures, hung = _race_round(store, rows, round_ * generations, generations)
        with clause("PREP-2", what=f"round {round_}: the calls of the writer and the readers"):
            expect_false("PREP-2", failures, "failures" + ": " + shorten(repr(failures[0]) if failures else ""))
            expect_false("PREP-2", hung, "a thread did not finish within 120 s")
        bad = [s for s in seen if not _consistent(s)]
        with clause("PREP-2", what=f"round {round_}: {len(seen)} captures during {generations} generations"):
            expect_false("PREP-2", bad, f"{len(bad)} captures saw rows of different moments, e.g. {bad[:1]} "
                             "(agent, persona, skill, overlay, session generations, written in that order)")
            expect_true("PREP-2", seen, "seen" + ": " + shorten(seen[-1:]))
            expect("PREP-2", seen[-1], (round_ * generations + generations,) * 5,
                   "seen[-1]" + ": " + shorten(seen[-1:]))


def _race_round(store: Any, rows: SimpleNamespace, base: int, generations: int) -> tuple[list, list, bool]:
    """One writer writes generations ``base + 1 .. base + generations`` while
    three readers capture until it is done (and once more): what they saw.

    After each generation the writer waits (up to 50 ms) until some capture
    has read its first row since, so that the next generation is written
    while that capture is under way, whatever the relative speed of the
    threads: unpaced, a writer faster than a scheduler slice (5 ms of the
    interpreter's lock) could write every generation before any capture
    started, and a store whose reads see different moments would pass."""
    done = threading.Event()
    begun = threading.Event()
    seen: list[tuple[int, ...]] = []
    failures: list[BaseException] = []
    barrier = threading.Barrier(4)

    def writer() -> None:
        barrier.wait()
        try:
            for g in range(base + 1, base + generations + 1):
                _write_generation(store, rows, g)
                begun.clear()
                begun.wait(0.05)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)
        finally:
            done.set()

    def reader() -> None:
        barrier.wait()
        try:
            while not done.is_set():
                seen.append(store.capture_preparation(ctx(HOME), _capture(rows, begun)))
            seen.append(store.capture_preparation(ctx(HOME), _capture(rows, begun)))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return seen, failures, any(t.is_alive() for t in threads)
