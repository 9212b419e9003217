"""Certifies conformance class ``catalog`` (spec: catalog.md) beyond what
its stored kinds' description generates (``test_kinds.py``: create, get,
by-name reads, updates, deletes, lists, counts, search, every field, bad
input, sizes): the overlay reads at an exact scope (CAT-OVL-3..6), clearing
an override (CAT-OVL-8), the overlay listing by agent (CAT-OVL-10), the
agent's prompt and sections kept apart (CAT-AGT), deletes that cascade to
nothing (CAT-GEN-10), the trait category filter (CAT-GEN-12), verbatim
enumerated strings (CAT-GEN-13), and the examples of the two hand-written
methods for the scope and common suites.
"""

from __future__ import annotations

from types import SimpleNamespace

import attrs
import pytest

from cortex_spec import Scope, ids
from cortex_spec.catalog import TABLES, Agent, Overlay, Persona, PersonaSkill, Section, Skill, Trait
from cortex_spec.errors import InvalidArgument, NoScope, OverlayNotFound
from cortex_spec.testing import ZERO, clause, ctx, example, expect, expect_is, expect_raises

from .examples import HOME, Examples, table_long_scopes

S = Scope.parse


def _overlay(agent_id: str | None = None, **fields):
    return example(Overlay, agent_id=agent_id or ids.new_id(ids.AGENT), **fields)


def _seed(store, fixture) -> SimpleNamespace:
    row = store.create_overlay(ctx(HOME), _overlay())
    return SimpleNamespace(overlay_for_agent=row)


#: The hand-written methods' examples (the generated ones come from the tables).
EXAMPLES = Examples(
    "catalog",
    long_scopes=table_long_scopes(TABLES),  # SCOPE-CANON-6 on every stored kind (test_long_scopes.py)
    seed=_seed,
    good={
        "get_overlay_for_agent": lambda s, c, w: s.get_overlay_for_agent(c, w.overlay_for_agent.agent_id),
        "get_overlay_for_agent_at": lambda s, c, w: s.get_overlay_for_agent_at(
            c, w.overlay_for_agent.agent_id, S(HOME)),
    },
    bad={
        "get_overlay_for_agent": lambda s, c, w: s.get_overlay_for_agent(c, "agt_bad"),
        "get_overlay_for_agent_at": lambda s, c, w: s.get_overlay_for_agent_at(
            c, w.overlay_for_agent.agent_id, "ws=w1"),
    },
    # tested against SCOPE-COVERS-3 by test_overlay_for_agent_at_a_scope_that_covers_the_caller
    scope_args=frozenset({"get_overlay_for_agent_at"}),
)


# -- overlays ----------------------------------------------------------------------------------


@pytest.mark.clause("CAT-OVL-1", "CAT-OVL-3")
def test_overlay_for_agent_is_the_one_at_exactly_the_callers_scope(store):
    """One agent's overlays at an ancestor, the caller's scope and a
    descendant: the read finds the caller's own, and from a scope holding none
    nothing, whatever is stored above or below."""
    agent, other = ids.new_id(ids.AGENT), ids.new_id(ids.AGENT)
    at, others = {}, {}
    for sc in ("ws=w1", HOME, "ws=w1/proj=p1/env=e1"):
        others[sc] = store.create_overlay(ctx(sc), _overlay(other))  # another agent's, stored there first
        at[sc] = store.create_overlay(ctx(sc), _overlay(agent))
    for sc, row in at.items():
        expect("CAT-OVL-3", store.get_overlay_for_agent(ctx(sc), agent).id, row.id,
               f"get_overlay_for_agent from {sc}")
        expect("CAT-OVL-3", store.get_overlay_for_agent(ctx(sc), other).id, others[sc].id,
               f"get_overlay_for_agent of the other agent from {sc}")
    for sc in ("ws=w1/proj=p2", "ws=w1/proj=p1/env=e2", "ws=w10"):
        expect_raises("CAT-OVL-3", OverlayNotFound, lambda: store.get_overlay_for_agent(ctx(sc), agent),
                      f"get_overlay_for_agent from {sc}, where no overlay is stored")
    expect_raises("CAT-OVL-3", OverlayNotFound,
                  lambda: store.get_overlay_for_agent(ctx(HOME), ids.new_id(ids.AGENT)),
                  "get_overlay_for_agent of an agent with no overlay")


@pytest.mark.clause("CAT-OVL-4", "CAT-OVL-5", "CAT-OVL-6", "SCOPE-COVERS-3")
def test_overlay_for_agent_at_a_scope_that_covers_the_caller(store):
    agent = ids.new_id(ids.AGENT)
    for sc in ("ws=w1", HOME):  # another agent's overlays, stored first at both scopes
        store.create_overlay(ctx(sc), _overlay())
    top = store.create_overlay(ctx("ws=w1"), _overlay(agent))
    mine = store.create_overlay(ctx(HOME), _overlay(agent))
    c = ctx(HOME)
    expect("CAT-OVL-6", store.get_overlay_for_agent_at(c, agent, S("ws=w1")).id, top.id,
           "get_overlay_for_agent_at the caller's ancestor")
    expect("CAT-OVL-6", store.get_overlay_for_agent_at(c, agent, S(HOME)).id, mine.id,
           "get_overlay_for_agent_at the caller's own scope")
    expect_raises("CAT-OVL-6", OverlayNotFound,
                  lambda: store.get_overlay_for_agent_at(ctx("ws=w1/proj=p1/env=e1"), agent,
                                                         S("ws=w1/proj=p1/env=e1")),
                  "get_overlay_for_agent_at a covering scope holding no overlay")
    for scope in (Scope(), S("ws=w1/proj=p1/env=e1"), S("ws=w1/proj=p2"), S("ws=w2"), S("ws=w10")):
        expect_raises("CAT-OVL-5", OverlayNotFound, lambda: store.get_overlay_for_agent_at(c, agent, scope),
                      f"get_overlay_for_agent_at {scope.canonical() or 'the zero scope'}, which does not "
                      "cover the caller")
    for bad in ("ws=w1", None, {"ws": "w1"}, ("ws", "w1")):
        expect_raises("CAT-OVL-4", InvalidArgument, lambda: store.get_overlay_for_agent_at(c, agent, bad),
                      f"get_overlay_for_agent_at with scope={bad!r}")


@pytest.mark.clause("CAT-OVL-7", "CAT-OVL-8")
def test_none_clears_an_override_and_zero_is_a_value(store, clock):
    row = store.create_overlay(ctx(HOME), _overlay(temperature=0.7, max_tokens=100, model="m"))
    for temperature, max_tokens in ((None, None), (0.0, 0), (None, 5), (1.5, None)):
        got = store.update_overlay(ctx(HOME), attrs.evolve(row, temperature=temperature, max_tokens=max_tokens))
        read = store.get_overlay(ctx(HOME), row.id)
        with clause("CAT-OVL-8", what=f"temperature={temperature!r}, max_tokens={max_tokens!r} after an update"):
            for value in (got, read):
                expect("CAT-OVL-8", value.temperature, temperature, "value.temperature")
                expect_is("CAT-OVL-8", type(value.temperature), type(temperature), "type(value.temperature)")
                expect("CAT-OVL-8", value.max_tokens, max_tokens, "value.max_tokens")
                expect_is("CAT-OVL-8", type(value.max_tokens), type(max_tokens), "type(value.max_tokens)")
    other_agent = store.update_overlay(ctx(HOME), attrs.evolve(row, agent_id=ids.new_id(ids.AGENT)))
    expect("CAT-OVL-7", other_agent.agent_id, row.agent_id, "update_overlay never writes agent_id")


@pytest.mark.clause("CAT-OVL-10")
def test_overlays_listed_by_agent_from_above_never_from_below(store, clock):
    a, b = ids.new_id(ids.AGENT), ids.new_id(ids.AGENT)
    rows = {}
    for sc in ("ws=w1", HOME, "ws=w1/proj=p1/env=e1", "ws=w1/proj=p2"):
        for agent in (a, b):
            rows[(sc, agent)] = store.create_overlay(ctx(sc), _overlay(agent)).id
            clock.advance(milliseconds=1)
    for caller in ("ws=w1", HOME):
        c = ctx(caller)
        seen = [(sc, ag) for (sc, ag) in rows if c.scope.covers(S(sc))]
        expect("CAT-OVL-10", [o.id for o in store.list_overlays(c)], [rows[k] for k in seen],
               f"list_overlays from {caller}")
        expect("CAT-OVL-10", [o.id for o in store.list_overlays(c, agent_id=a)],
               [rows[k] for k in seen if k[1] == a], f"list_overlays(agent_id=a) from {caller}")
        expect("CAT-OVL-10", [o.id for o in store.list_overlays(c, agent_id=a, exact=True)],
               [rows[(caller, a)]], f"list_overlays(agent_id=a, exact=True) from {caller}")


# -- agents, traits, cascades, enumerations ---------------------------------------------------


@pytest.mark.clause("CAT-AGT-1", "CAT-AGT-2")
def test_prompt_and_sections_are_kept_apart(store):
    sections = (Section(id="b", title="Second", body="two", order=2), Section(id="a", title="First", body="one",
                                                                              order=1, locked=True, source="x"))
    agent = store.create_agent(ctx(HOME), example(Agent, system_prompt="the prompt", sections=sections))
    got = store.get_agent(ctx(HOME), agent.id)
    expect("CAT-AGT-1", (got.system_prompt, got.sections), ("the prompt", sections),
           "the prompt and the sections, in order, as created")
    bare = store.update_agent(ctx(HOME), attrs.evolve(agent, sections=(), system_prompt="new prompt"))
    for row in (bare, store.get_agent(ctx(HOME), agent.id)):
        expect("CAT-AGT-2", (row.sections, row.system_prompt), ((), "new prompt"),
               "an update without sections")


@pytest.mark.clause("CAT-GEN-10")
def test_deletes_cascade_to_nothing(store):
    agent = store.create_agent(ctx(HOME), example(Agent))
    overlays = [store.create_overlay(ctx(sc), _overlay(agent.id)) for sc in ("ws=w1", HOME, "ws=w2")]
    persona = store.create_persona(ctx(HOME), example(Persona, skills=(PersonaSkill(skill_name="s"),)))
    skill = store.create_skill(ctx(HOME), example(Skill, name="s"))
    store.delete_agent(ctx(HOME), agent.id)
    store.delete_skill(ctx(HOME), skill.id)
    for o in overlays:
        expect("CAT-GEN-10", store.get_overlay(ctx(o.scope.canonical()), o.id), o,
               "an overlay of a deleted agent")
    expect("CAT-GEN-10", store.get_persona(ctx(HOME), persona.id), persona, "a persona naming a deleted skill")


@pytest.mark.clause("CAT-GEN-12", "CAT-GEN-13")
def test_trait_category_filter_is_exact_and_categories_are_verbatim(store):
    """Categories are any short strings (an engine's newer vocabulary
    included); the filter matches one exactly (not by case, not as a prefix)."""
    cats = ["personality", "Personality", "person", "cognitive/style", "brand-new-kind", "%", ""]
    made = {c: store.create_trait(ctx(HOME), example(Trait, category=c)).id for c in cats}
    for cat in cats:
        expect("CAT-GEN-12", [t.id for t in store.list_traits(ctx(HOME), category=cat)], [made[cat]],
               f"list_traits(category={cat!r})")
        expect("CAT-GEN-12", store.count_traits(ctx(HOME), category=cat), 1, f"count_traits(category={cat!r})")
        expect("CAT-GEN-13", store.get_trait(ctx(HOME), made[cat]).category, cat, "a category read back")
    expect("CAT-GEN-12", store.list_traits(ctx(HOME), category="unknown"), [], "an unused category")
    expect_raises("MC-GEN-1", NoScope, lambda: store.list_traits(ZERO, category="x"), "the zero scope")
