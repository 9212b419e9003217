"""Conformance class ``catalog``: agents, skills, traits, personas and
prompt overlays (spec: catalog.md).

Every entity here is a plain stored kind: its fields carry their kinds
(:mod:`.kinds`), its :class:`~.kinds.Table` says how it is stored, and the
generic operations (create, get, get by name, update, delete, list, count)
are the same for all of them (CAT-GEN).  Only the overlay reads of
CAT-OVL-3..6 are written by hand, once, on top of a backend's storage
primitives (:class:`CatalogMethods`).  The enumerated strings of the seed
(trait category, proficiencies, trigger and action types, patch and inject
modes) are stored verbatim as short strings (CAT-GEN-13).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from . import ids
from .context import Context, require_scope
from .entities import entity
from .errors import (
    AgentNotFound,
    BehaviorNotFound,
    InvalidArgument,
    OverlayNotFound,
    PersonaNotFound,
    SkillNotFound,
    TraitNotFound,
)
from .kinds import (
    Bool,
    Count,
    Filter,
    Float,
    FloatMap,
    Id,
    Int,
    Json,
    Listing,
    Optional,
    Query,
    Records,
    Short,
    Strings,
    Table,
    Text,
    Unique,
    check_protocol,
    created,
    field,
    install,
    key,
    scope_field,
    updated,
)
from .scope import Scope

__all__ = [
    "Section",
    "Agent",
    "SkillTool",
    "Knowledge",
    "Skill",
    "Dimension",
    "Influence",
    "Trait",
    "Trigger",
    "Action",
    "Behavior",
    "PersonaSkill",
    "PersonaTrait",
    "Persona",
    "Patch",
    "Overlay",
    "TABLES",
    "CatalogStore",
    "CatalogMethods",
]

SHORT = Short()
NAME = field(Short(nonempty=True), default="", update=True)


def _text() -> Any:
    return field(Text(), default="", update=True)


def _short() -> Any:
    return field(SHORT, default="", update=True)


def _strings() -> Any:
    return field(Strings(), factory=tuple, update=True)


def _json() -> Any:
    return field(Json(), factory=dict, update=True)


def _records(record: type) -> Any:
    return field(Records(record), factory=tuple, update=True)


# -- nested records --------------------------------------------------------------------------


@entity
class Section:
    """One section of an agent's prompt, stored verbatim (CAT-AGT-1)."""

    id: str = field(SHORT, default="")
    title: str = field(SHORT, default="")
    body: str = field(Text(), default="")
    order: int = field(Int(), default=0)
    locked: bool = field(Bool(), default=False)
    source: str = field(SHORT, default="")


@entity
class SkillTool:
    tool_name: str = field(SHORT, default="")
    mastery: str = field(SHORT, default="")
    guidance: str = field(Text(), default="")
    prefer_when: str = field(Text(), default="")


@entity
class Knowledge:
    source: str = field(Text(), default="")
    inject_mode: str = field(SHORT, default="")
    priority: int = field(Int(), default=0)


@entity
class Dimension:
    name: str = field(SHORT, default="")
    low_label: str = field(SHORT, default="")
    high_label: str = field(SHORT, default="")
    value: float = field(Float(), default=0.0)


@entity
class Influence:
    target: str = field(SHORT, default="")
    value: str = field(Text(), default="")
    condition: str = field(Text(), default="")
    weight: float = field(Float(), default=0.0)


@entity
class PersonaSkill:
    skill_name: str = field(SHORT, default="")
    proficiency: str = field(SHORT, default="")


@entity
class PersonaTrait:
    trait_name: str = field(SHORT, default="")
    dimension_values: dict[str, float] = field(FloatMap(), factory=dict)


@entity
class Trigger:
    type: str = field(SHORT, default="")
    pattern: str = field(Text(), default="")


@entity
class Action:
    type: str = field(SHORT, default="")
    target: str = field(SHORT, default="")
    value: str = field(Text(), default="")


@entity
class Patch:
    id: str = field(SHORT, default="")
    body: str = field(Text(), default="")
    mode: str = field(SHORT, default="")


# -- the entities ----------------------------------------------------------------------------


@entity
class Agent:
    """An agent definition (CAT-GEN, CAT-AGT)."""

    id: str = key(ids.AGENT)
    scope: Scope = scope_field()
    name: str = NAME
    description: str = _text()
    system_prompt: str = _text()
    model: str = _short()
    tools: tuple[str, ...] = _strings()
    max_steps: int = field(Count(), default=0, update=True)
    max_tokens: int = field(Count(), default=0, update=True)
    temperature: float = field(Float(), default=0.0, update=True)
    reasoning_loop: str = _short()
    guardrails: dict[str, Any] = _json()
    metadata: dict[str, Any] = _json()
    enabled: bool = field(Bool(), default=True, update=True)
    persona_ref: str = _short()
    inline_skills: tuple[str, ...] = _strings()
    inline_traits: tuple[str, ...] = _strings()
    inline_behaviors: tuple[str, ...] = _strings()
    sections: tuple[Section, ...] = _records(Section)
    created_at: datetime | None = created()
    updated_at: datetime | None = updated()


@entity
class Skill:
    id: str = key(ids.SKILL)
    scope: Scope = scope_field()
    name: str = NAME
    description: str = _text()
    tools: tuple[SkillTool, ...] = _records(SkillTool)
    knowledge: tuple[Knowledge, ...] = _records(Knowledge)
    system_prompt_fragment: str = _text()
    dependencies: tuple[str, ...] = _strings()
    default_proficiency: str = _short()
    metadata: dict[str, Any] = _json()
    created_at: datetime | None = created()
    updated_at: datetime | None = updated()


@entity
class Trait:
    id: str = key(ids.TRAIT)
    scope: Scope = scope_field()
    name: str = NAME
    description: str = _text()
    dimensions: tuple[Dimension, ...] = _records(Dimension)
    influences: tuple[Influence, ...] = _records(Influence)
    category: str = _short()
    metadata: dict[str, Any] = _json()
    created_at: datetime | None = created()
    updated_at: datetime | None = updated()


@entity
class Behavior:
    id: str = key(ids.BEHAVIOR)
    scope: Scope = scope_field()
    name: str = NAME
    description: str = _text()
    triggers: tuple[Trigger, ...] = _records(Trigger)
    actions: tuple[Action, ...] = _records(Action)
    priority: int = field(Int(), default=0, update=True)
    requires_skill: str = _short()
    requires_trait: str = _short()
    metadata: dict[str, Any] = _json()
    created_at: datetime | None = created()
    updated_at: datetime | None = updated()


@entity
class Persona:
    id: str = key(ids.PERSONA)
    scope: Scope = scope_field()
    name: str = NAME
    description: str = _text()
    identity: str = _text()
    skills: tuple[PersonaSkill, ...] = _records(PersonaSkill)
    traits: tuple[PersonaTrait, ...] = _records(PersonaTrait)
    behaviors: tuple[str, ...] = _strings()
    cognitive_style: dict[str, Any] = _json()
    communication_style: dict[str, Any] = _json()
    perception: dict[str, Any] = _json()
    metadata: dict[str, Any] = _json()
    created_at: datetime | None = created()
    updated_at: datetime | None = updated()


@entity
class Overlay:
    """A per-scope patch of an agent (CAT-OVL); ``model == ""``,
    ``temperature is None`` and ``max_tokens is None`` mean no override."""

    id: str = key(ids.OVERLAY)
    scope: Scope = scope_field()
    agent_id: str = field(Id(ids.AGENT), default="")
    patches: tuple[Patch, ...] = _records(Patch)
    tools_added: tuple[str, ...] = _strings()
    tools_removed: tuple[str, ...] = _strings()
    model: str = _short()
    temperature: float | None = field(Optional(Float()), default=None, update=True)
    max_tokens: int | None = field(Optional(Count()), default=None, update=True)
    created_at: datetime | None = created()
    updated_at: datetime | None = updated()


# -- the tables ----------------------------------------------------------------------------------

#: The generic rules of a named catalog entity, by clause (memory-catalog.md §5).
NAMED_CLAUSES = {
    "create": "MC-GEN-4",
    "create.nonempty": "CAT-GEN-1",
    "create.id": "CAT-GEN-3",
    "create.unique": "CAT-GEN-2",
    "get": "CAT-GEN-4",
    "get_by_name": "CAT-GEN-5",
    "update": "CAT-GEN-6",
    "update.immutable": "CAT-GEN-7",
    "update.unique": "CAT-GEN-8",
    "update.missing": "CAT-GEN-6",
    "delete": "CAT-GEN-9",
    "list": "CAT-GEN-11",
    "count": "MC-GEN-8",
    "search": "MC-GEN-10",
    "fields": "MC-GEN-13",
    "race.unique": "CAT-RACE-1",
    "race.rename": "CAT-RACE-2",
    "race.delete": "CAT-RACE-4",
}
_NAME_UNIQUE = (Unique(("name",), name="name"),)


def _named(entity_cls: type, name: str, singular: str, plural: str, not_found: type,
           *filters: Filter) -> Table:
    listing = Listing(f"list_{plural}", f"count_{plural}", filters=filters, search="name")
    return Table(entity_cls, name, "catalog", not_found, singular, plural,
                 ops=("create", "get", "get_by_name", "update", "delete"),
                 unique=_NAME_UNIQUE, listings=(listing,), by_name="name", clauses=NAMED_CLAUSES)


AGENTS = _named(Agent, "agents", "agent", "agents", AgentNotFound)
SKILLS = _named(Skill, "skills", "skill", "skills", SkillNotFound)
TRAITS = _named(Trait, "traits", "trait", "traits", TraitNotFound, Filter("category", "category"))
BEHAVIORS = _named(Behavior, "behaviors", "behavior", "behaviors", BehaviorNotFound)
PERSONAS = _named(Persona, "personas", "persona", "personas", PersonaNotFound)
OVERLAYS = Table(
    Overlay, "overlays", "catalog", OverlayNotFound, "overlay", "overlays",
    unique=(Unique(("agent_id",), name="agent"),),
    listings=(Listing("list_overlays", filters=(Filter("agent_id", "agent_id"),)),),
    clauses={
        "create": "MC-GEN-4",
        "create.id": "CAT-OVL-1",
        "create.unique": "CAT-OVL-1",
        "get": "CAT-OVL-2",
        "update": "CAT-OVL-7",
        "update.immutable": "CAT-OVL-7",
        "update.missing": "CAT-OVL-9",
        "delete": "CAT-OVL-9",
        "list": "CAT-OVL-10",
        "fields": "MC-GEN-13",
        "race.unique": "CAT-RACE-3",
        "race.delete": "CAT-RACE-4",
    },
)

#: Every stored kind of the class, in the order of the spec.
TABLES = (AGENTS, SKILLS, TRAITS, BEHAVIORS, PERSONAS, OVERLAYS)


# -- the overlay reads (CAT-OVL-3..6), once for every backend ------------------------------------


if TYPE_CHECKING:  # the methods install() generates below, declared for type checkers (cortex_spec.stubs)
    from .generated import GeneratedCatalogMethods as _Generated
else:
    _Generated = object


class CatalogMethods(_Generated):
    """The class's store methods: the generic ones of :data:`TABLES` and
    the two overlay reads, all on ``self._crud`` (a :class:`~.kinds.Crud`
    over the backend's storage).  A backend's catalog mixin inherits this."""

    _crud: Any

    def get_overlay_for_agent(self, ctx: Context, agent_id: str) -> Overlay:
        """CAT-OVL-3: the agent's overlay stored at exactly ``ctx.scope``."""
        scope = require_scope(ctx)
        return self._overlay_at(scope, Id(ids.AGENT).check(agent_id, "agent_id"))

    def get_overlay_for_agent_at(self, ctx: Context, agent_id: str, scope: Scope) -> Overlay:
        """CAT-OVL-4..6: the agent's overlay stored at exactly ``scope``, a
        scope that covers the caller (``ctx.scope`` or an ancestor)."""
        caller = require_scope(ctx)
        agent = Id(ids.AGENT).check(agent_id, "agent_id")
        if not isinstance(scope, Scope):
            raise InvalidArgument(f"scope must be a Scope, got {type(scope).__name__}")  # CAT-OVL-4
        if scope.is_zero or not scope.covers(caller):
            raise OverlayNotFound(f"no overlay of agent {agent} at that scope")  # CAT-OVL-5
        return self._overlay_at(scope, agent)

    def _overlay_at(self, scope: Scope, agent: str) -> Overlay:
        rows = self._crud.storage.select(OVERLAYS, Query(scope, exact=True, where=(("agent_id", agent),)))
        if not rows:
            raise OverlayNotFound(f"no overlay of agent {agent} at that scope")
        return rows[0]  # type: ignore[no-any-return]


install(CatalogMethods, TABLES)


# -- the protocol ----------------------------------------------------------------------------


@runtime_checkable
class CatalogStore(Protocol):
    """What a store of class ``catalog`` provides (memory-catalog.md §5–§6).

    Every method takes ``ctx`` first (NoScope for the zero scope before any
    storage access); ``X`` is agent, skill, trait, behavior or persona:
    ``create_X`` (CAT-GEN-1..3), ``get_X`` (CAT-GEN-4), ``get_X_by_name``
    (CAT-GEN-5), ``update_X`` (CAT-GEN-6..8), ``delete_X`` (CAT-GEN-9),
    ``list_Xs(ctx, *, search=None, exact=False, limit=0, offset=0)`` (traits
    add ``category=None``) and ``count_Xs`` with the same filter
    (CAT-GEN-11/12, MC-GEN-7/8); overlays per CAT-OVL.
    """

    def create_agent(self, ctx: Context, agent: Agent) -> Agent: ...
    def get_agent(self, ctx: Context, agent_id: str) -> Agent: ...
    def get_agent_by_name(self, ctx: Context, name: str) -> Agent: ...
    def update_agent(self, ctx: Context, agent: Agent) -> Agent: ...
    def delete_agent(self, ctx: Context, agent_id: str) -> None: ...
    def list_agents(self, ctx: Context, *, search: str | None = None, exact: bool = False,
                    limit: int = 0, offset: int = 0) -> list[Agent]: ...
    def count_agents(self, ctx: Context, *, search: str | None = None, exact: bool = False) -> int: ...

    def create_skill(self, ctx: Context, skill: Skill) -> Skill: ...
    def get_skill(self, ctx: Context, skill_id: str) -> Skill: ...
    def get_skill_by_name(self, ctx: Context, name: str) -> Skill: ...
    def update_skill(self, ctx: Context, skill: Skill) -> Skill: ...
    def delete_skill(self, ctx: Context, skill_id: str) -> None: ...
    def list_skills(self, ctx: Context, *, search: str | None = None, exact: bool = False,
                    limit: int = 0, offset: int = 0) -> list[Skill]: ...
    def count_skills(self, ctx: Context, *, search: str | None = None, exact: bool = False) -> int: ...

    def create_trait(self, ctx: Context, trait: Trait) -> Trait: ...
    def get_trait(self, ctx: Context, trait_id: str) -> Trait: ...
    def get_trait_by_name(self, ctx: Context, name: str) -> Trait: ...
    def update_trait(self, ctx: Context, trait: Trait) -> Trait: ...
    def delete_trait(self, ctx: Context, trait_id: str) -> None: ...
    def list_traits(self, ctx: Context, *, category: str | None = None, search: str | None = None,
                    exact: bool = False, limit: int = 0, offset: int = 0) -> list[Trait]: ...
    def count_traits(self, ctx: Context, *, category: str | None = None, search: str | None = None,
                     exact: bool = False) -> int: ...

    def create_behavior(self, ctx: Context, behavior: Behavior) -> Behavior: ...
    def get_behavior(self, ctx: Context, behavior_id: str) -> Behavior: ...
    def get_behavior_by_name(self, ctx: Context, name: str) -> Behavior: ...
    def update_behavior(self, ctx: Context, behavior: Behavior) -> Behavior: ...
    def delete_behavior(self, ctx: Context, behavior_id: str) -> None: ...
    def list_behaviors(self, ctx: Context, *, search: str | None = None, exact: bool = False,
                       limit: int = 0, offset: int = 0) -> list[Behavior]: ...
    def count_behaviors(self, ctx: Context, *, search: str | None = None, exact: bool = False) -> int: ...

    def create_persona(self, ctx: Context, persona: Persona) -> Persona: ...
    def get_persona(self, ctx: Context, persona_id: str) -> Persona: ...
    def get_persona_by_name(self, ctx: Context, name: str) -> Persona: ...
    def update_persona(self, ctx: Context, persona: Persona) -> Persona: ...
    def delete_persona(self, ctx: Context, persona_id: str) -> None: ...
    def list_personas(self, ctx: Context, *, search: str | None = None, exact: bool = False,
                      limit: int = 0, offset: int = 0) -> list[Persona]: ...
    def count_personas(self, ctx: Context, *, search: str | None = None, exact: bool = False) -> int: ...

    def create_overlay(self, ctx: Context, overlay: Overlay) -> Overlay: ...
    def get_overlay(self, ctx: Context, overlay_id: str) -> Overlay: ...
    def get_overlay_for_agent(self, ctx: Context, agent_id: str) -> Overlay: ...
    def get_overlay_for_agent_at(self, ctx: Context, agent_id: str, scope: Scope) -> Overlay: ...
    def update_overlay(self, ctx: Context, overlay: Overlay) -> Overlay: ...
    def delete_overlay(self, ctx: Context, overlay_id: str) -> None: ...
    def list_overlays(self, ctx: Context, *, agent_id: str | None = None, exact: bool = False,
                      limit: int = 0, offset: int = 0) -> list[Overlay]: ...


check_protocol(CatalogStore, TABLES, CatalogMethods)
