"""The SQL schema of the store, as SQLAlchemy ``MetaData``.

Conventions (the same on SQLite and PostgreSQL):

* every table is prefixed ``cortex_`` so the store can share a database
  with an application;
* ids are primary keys; ids and other ordered text use a binary collation
  (:func:`~.dialect.id_type`);
* instants are ``BIGINT`` milliseconds since the Unix epoch
  (:func:`cortex_spec.clock.to_millis`): exact round trips at the contract's
  precision and a correct order on both dialects;
* JSON objects are ``TEXT`` written by :func:`json.dumps` (so ``1``,
  ``1.0`` and ``true`` keep their types);
* a scope is stored twice: its canonical string (``scope``, which is what
  is read back) and one column pair per level (``scope_k1``/``scope_v1`` …
  ``scope_k3``/``scope_v3``, ``NULL`` below the row's depth) plus
  ``scope_depth``.  Prefix visibility is then plain equality on whole
  values, per level, never ``LIKE``: ``ws=ws1`` cannot match ``ws=ws10``,
  and ``%``, ``_`` or ``=`` in a value are just characters.

Constraints the spec needs: one suspension per run (``uq_cortex_suspensions_run``,
SUSP-CREATE-2), ids unique across scopes (primary keys, SCOPE-ID-1), and a
checkpoint is ``pending`` without a decision or ``resolved`` with one
(CP-ENT-1).

:data:`SCHEMA_VERSION` is written into ``cortex_schema`` when the store
creates the tables; a store refuses a database of another version.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from .dialect import id_type

__all__ = [
    "SCHEMA_VERSION",
    "metadata",
    "schema_info",
    "runs",
    "steps",
    "tool_calls",
    "suspensions",
    "checkpoints",
    "a2a_messages",
    "a2a_conversations",
    "a2a_deliveries",
    "a2a_asks",
    "DATA_TABLES",
    "KIND_TABLES",
    "LAID_OUT",
    "kind_table",
    "SCOPE_LEVELS",
    "SCOPE_INDEXED",
]

#: Bump on any change of the tables below; :mod:`.admin` migrates an older
#: database up to it.  2: the a2a tables.  3: the tables of the stored kinds
#: (class catalog).  4: the visibility indexes of the runs and a2a tables hold
#: the first scope level only (SCOPE-CANON-6); the runs' revision (RUN-REV);
#: new stored kinds (progress, the a2a exactly-once records).
SCHEMA_VERSION = 4

#: Scope depth the level columns hold (SCOPE-VAL-1).
SCOPE_LEVELS = 3

metadata = sa.MetaData()


def _scope_columns() -> list[sa.Column[Any]]:
    cols: list[sa.Column[Any]] = [
        sa.Column("scope", sa.Text, nullable=False),
        sa.Column("scope_depth", sa.SmallInteger, nullable=False),
    ]
    for i in range(1, SCOPE_LEVELS + 1):
        cols.append(sa.Column(f"scope_k{i}", sa.Text, nullable=True))
        cols.append(sa.Column(f"scope_v{i}", sa.Text, nullable=True))
    return cols


def _stamps() -> list[sa.Column[Any]]:
    return [
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.BigInteger, nullable=False),
    ]


#: The tables with a visibility index (:func:`_scope_index`), by short name.
SCOPE_INDEXED = ("runs", "a2a_messages", "a2a_conversations", "a2a_deliveries", "a2a_asks")


def _scope_index(table: str) -> sa.Index:
    """The visibility index: the first scope level only.  A key and a value
    are at most 255 code points, 1,020 UTF-8 bytes each, so the entry stays
    under PostgreSQL's btree limit (2,704 bytes) whatever the scope; the
    whole scope (up to six such strings) would not (SCOPE-CANON-6).  The
    deeper levels are compared on the rows the first level selects."""
    return sa.Index(f"ix_cortex_{table}_scope", "scope_k1", "scope_v1")


schema_info = sa.Table(
    "cortex_schema",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("version", sa.Integer, nullable=False),
)

runs = sa.Table(
    "cortex_runs",
    metadata,
    sa.Column("id", id_type(), primary_key=True),
    sa.Column("agent_id", id_type(), nullable=False),
    sa.Column("session_id", id_type(), nullable=True),
    *_scope_columns(),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("input", sa.Text, nullable=False),
    sa.Column("output", sa.Text, nullable=False),
    sa.Column("error", sa.Text, nullable=False),
    sa.Column("step_count", sa.BigInteger, nullable=False),
    sa.Column("tokens_used", sa.BigInteger, nullable=False),
    sa.Column("started_at", sa.BigInteger, nullable=True),
    sa.Column("completed_at", sa.BigInteger, nullable=True),
    sa.Column("persona_ref", sa.Text, nullable=False),
    sa.Column("metadata", sa.Text, nullable=False),
    sa.Column("principal", sa.Text, nullable=True),
    sa.Column("reply_route", sa.Text, nullable=True),
    # written only by the `leases` class (RUN-ENT-2); always empty until then
    sa.Column("lease_owner", sa.Text, nullable=True),
    sa.Column("lease_expires_at", sa.BigInteger, nullable=True),
    sa.Column("reclaim_count", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("notified_at", sa.BigInteger, nullable=True),
    # RUN-REV: advanced by every write of the run through runs and suspensions
    sa.Column("revision", sa.BigInteger, nullable=False),
    *_stamps(),
    sa.CheckConstraint(
        "state IN ('created', 'running', 'paused', 'completed', 'failed', 'cancelled')",
        name="ck_cortex_runs_state",
    ),
    _scope_index("runs"),
    sa.Index("ix_cortex_runs_created", "created_at", "id"),
    sa.Index("ix_cortex_runs_agent", "agent_id"),
)

steps = sa.Table(
    "cortex_steps",
    metadata,
    sa.Column("id", id_type(), primary_key=True),
    sa.Column("run_id", id_type(), nullable=False),
    *_scope_columns(),
    # the field ``index`` (an SQL keyword) in a column of the first layout's name
    sa.Column("step_index", sa.BigInteger, nullable=False, key="index"),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("input", sa.Text, nullable=False),
    sa.Column("output", sa.Text, nullable=False),
    sa.Column("tokens_used", sa.BigInteger, nullable=False),
    sa.Column("started_at", sa.BigInteger, nullable=True),
    sa.Column("completed_at", sa.BigInteger, nullable=True),
    sa.Column("metadata", sa.Text, nullable=False),
    *_stamps(),
    sa.Index("ix_cortex_steps_run", "run_id", "index", "id"),  # column keys
)

tool_calls = sa.Table(
    "cortex_tool_calls",
    metadata,
    sa.Column("id", id_type(), primary_key=True),
    sa.Column("step_id", id_type(), nullable=False),
    sa.Column("run_id", id_type(), nullable=False),
    *_scope_columns(),
    sa.Column("tool_name", sa.Text, nullable=False),
    sa.Column("arguments", sa.Text, nullable=False),
    sa.Column("result", sa.Text, nullable=False),
    sa.Column("error", sa.Text, nullable=False),
    sa.Column("started_at", sa.BigInteger, nullable=True),
    sa.Column("completed_at", sa.BigInteger, nullable=True),
    sa.Column("metadata", sa.Text, nullable=False),
    *_stamps(),
    sa.Index("ix_cortex_tool_calls_step", "step_id", "created_at", "id"),
)

suspensions = sa.Table(
    "cortex_suspensions",
    metadata,
    sa.Column("id", id_type(), primary_key=True),
    sa.Column("run_id", id_type(), nullable=False),
    *_scope_columns(),
    sa.Column("reason", sa.String(32), nullable=False),
    # JSON list of [id, name, arguments], in order (SUSP-ENT-2)
    sa.Column("pending", sa.Text, nullable=False),
    sa.Column("continuation", sa.Text, nullable=False),
    sa.Column("expires_at", sa.BigInteger, nullable=True),
    *_stamps(),
    # SUSP-CREATE-2: one suspension per run, across all scopes, unconditionally
    sa.UniqueConstraint("run_id", name="uq_cortex_suspensions_run"),
    sa.Index("ix_cortex_suspensions_expires", "expires_at", "id"),
)

checkpoints = sa.Table(
    "cortex_checkpoints",
    metadata,
    sa.Column("id", id_type(), primary_key=True),
    sa.Column("run_id", id_type(), nullable=False),
    sa.Column("agent_id", id_type(), nullable=False),
    *_scope_columns(),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("step_index", sa.BigInteger, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    # the nested decision spread over one column per field (NULL: none),
    # keyed <field>_<sub-field> as the interpreter reads them (.kinds.cells)
    sa.Column("decision_approved", sa.Boolean, nullable=True),
    sa.Column("decided_by", sa.Text, nullable=True, key="decision_decided_by"),
    sa.Column("decision_reason", sa.Text, nullable=True),
    sa.Column("decided_at", sa.BigInteger, nullable=True, key="decision_decided_at"),
    sa.Column("metadata", sa.Text, nullable=False),
    *_stamps(),
    # CP-ENT-1: pending without a decision, or resolved with one
    sa.CheckConstraint(
        "(state = 'pending' AND decided_at IS NULL AND decision_approved IS NULL)"
        " OR (state = 'resolved' AND decided_at IS NOT NULL AND decision_approved IS NOT NULL)",
        name="ck_cortex_checkpoints_decision",
    ),
    sa.Index("ix_cortex_checkpoints_pending", "state", "created_at", "id"),
    sa.Index("ix_cortex_checkpoints_run", "run_id"),
)

# -- class a2a ---------------------------------------------------------------------------
#
# Every a2a row carries its partition (A2A-PART), compared by equality only.
# Addresses are (agent, node) column pairs; lists of addresses are JSON text
# (a list of [agent, node]).  A conversation's unique peer pair (A2A-PEER-3)
# is a nullable ``peer_key``: NULL without a pair, else a SHA-256 of
# (exact scope, partition, node, context), so the unique index holds short
# keys and NULLs never collide.  A message's (conversation_id, hops) is
# unique too: a second envelope with the same hop number (A2A-HOP-11) can
# never be stored, whatever the application does.


def _partition() -> sa.Column[str]:
    return sa.Column("partition", sa.Text, nullable=False)


a2a_messages = sa.Table(
    "cortex_a2a_messages",
    metadata,
    sa.Column("id", id_type(), primary_key=True),
    sa.Column("conversation_id", id_type(), nullable=False),
    *_scope_columns(),
    _partition(),
    sa.Column("performative", sa.String(32), nullable=False),
    sa.Column("sender_agent", sa.Text, nullable=False),
    sa.Column("sender_node", sa.Text, nullable=False),
    sa.Column("receivers", sa.Text, nullable=False),
    sa.Column("reply_to", sa.Text, nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("language", sa.Text, nullable=False),
    sa.Column("encoding", sa.Text, nullable=False),
    sa.Column("ontology", sa.Text, nullable=False),
    sa.Column("protocol", sa.Text, nullable=False),
    sa.Column("reply_with", sa.Text, nullable=False),
    sa.Column("in_reply_to", sa.Text, nullable=False),
    sa.Column("reply_by", sa.BigInteger, nullable=True),
    sa.Column("origin_run_id", id_type(), nullable=True),
    sa.Column("metadata", sa.Text, nullable=False),
    sa.Column("hops", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("conversation_id", "hops", name="uq_cortex_a2a_messages_hop"),
    _scope_index("a2a_messages"),
    sa.Index("ix_cortex_a2a_messages_created", "created_at", "id"),
)

a2a_conversations = sa.Table(
    "cortex_a2a_conversations",
    metadata,
    sa.Column("id", id_type(), primary_key=True),
    *_scope_columns(),
    _partition(),
    sa.Column("protocol", sa.Text, nullable=False),
    sa.Column("initiator_agent", sa.Text, nullable=False),
    sa.Column("initiator_node", sa.Text, nullable=False),
    sa.Column("participants", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("hop_ceiling", sa.BigInteger, nullable=False),
    sa.Column("hops_used", sa.BigInteger, nullable=False),
    sa.Column("deadline", sa.BigInteger, nullable=True),
    sa.Column("peer_node", sa.Text, nullable=False),
    sa.Column("peer_context", sa.Text, nullable=False),
    sa.Column("peer_key", sa.String(64), nullable=True),
    *_stamps(),
    sa.CheckConstraint("status IN ('open', 'closed', 'expired')", name="ck_cortex_a2a_conversations_status"),
    sa.UniqueConstraint("peer_key", name="uq_cortex_a2a_conversations_peer"),
    _scope_index("a2a_conversations"),
    sa.Index("ix_cortex_a2a_conversations_created", "created_at", "id"),
)

a2a_deliveries = sa.Table(
    "cortex_a2a_deliveries",
    metadata,
    sa.Column("id", id_type(), primary_key=True),
    sa.Column("message_id", id_type(), nullable=False),
    sa.Column("receiver_agent", sa.Text, nullable=False),
    sa.Column("receiver_node", sa.Text, nullable=False),
    *_scope_columns(),
    _partition(),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("error", sa.Text, nullable=False),
    sa.Column("claim_token", sa.Text, nullable=True),
    sa.Column("claimed_at", sa.BigInteger, nullable=True),
    sa.Column("delivered_at", sa.BigInteger, nullable=True),
    sa.Column("read_at", sa.BigInteger, nullable=True),
    sa.Column("run_id", id_type(), nullable=True),
    *_stamps(),
    sa.CheckConstraint(
        "state IN ('queued', 'delivering', 'delivered', 'failed')", name="ck_cortex_a2a_deliveries_state"
    ),
    _scope_index("a2a_deliveries"),
    sa.Index("ix_cortex_a2a_deliveries_queue", "partition", "state", "created_at", "id"),
    sa.Index("ix_cortex_a2a_deliveries_claimed", "partition", "state", "claimed_at", "id"),
    sa.Index("ix_cortex_a2a_deliveries_inbox", "receiver_agent", "state", "created_at", "id"),
)

a2a_asks = sa.Table(
    "cortex_a2a_asks",
    metadata,
    sa.Column("reply_with", id_type(255), primary_key=True),
    sa.Column("conversation_id", id_type(), nullable=False),
    sa.Column("message_id", id_type(), nullable=False),
    sa.Column("asker_run_id", id_type(), nullable=False),
    sa.Column("asker_agent", sa.Text, nullable=False),
    sa.Column("tool_call_id", sa.Text, nullable=False),
    sa.Column("expected_agent", sa.Text, nullable=False),
    sa.Column("expected_node", sa.Text, nullable=False),
    sa.Column("deadline", sa.BigInteger, nullable=True),
    sa.Column("claimed_at", sa.BigInteger, nullable=True),
    *_scope_columns(),
    _partition(),
    *_stamps(),
    _scope_index("a2a_asks"),
    sa.Index("ix_cortex_a2a_asks_expired", "deadline", "reply_with"),
    sa.Index("ix_cortex_a2a_asks_conversation", "conversation_id", "created_at", "reply_with"),
)

# -- the stored kinds (cortex_spec.kinds), one table each --------------------------------
#
# A column per field, typed by the field's kind; nested records, string
# tuples and JSON are JSON text.  The scope has the usual level columns plus
# ``scope_key``, a SHA-256 of its canonical form: unique keys "within one
# exact scope" index that digest (short, whatever the scope's length), and the
# visibility index holds the first level only, so no index entry outgrows
# PostgreSQL's btree limit whatever scopes SCOPE-VAL allows.


def _kind_type(kind: Any) -> Any:
    from cortex_spec import kinds as k

    if isinstance(kind, k.Optional):
        return _kind_type(kind.inner)
    if isinstance(kind, k.Id):
        return id_type()
    if isinstance(kind, (k.Count, k.Int, k.Instant)):
        return sa.BigInteger
    if isinstance(kind, k.Float):
        return sa.Double
    if isinstance(kind, k.Bool):
        return sa.Boolean
    if isinstance(kind, k.Choice):
        return sa.String(max(len(v) for v in kind.values))
    return sa.Text  # strings, JSON and nested records (JSON text)


def kind_table(table: Any) -> sa.Table:
    """The SQL table of a stored kind (:class:`cortex_spec.kinds.Table`)."""
    from cortex_spec import kinds as k

    name = f"cortex_{table.name}"
    columns: list[Any] = []
    checks: list[Any] = []
    for field_name, spec in table.fields.items():
        if spec.role == k.KEY:
            # an internal table's key is any short string its class derives
            # (a reply_with token, a delivery id): up to 255 code points
            columns.append(sa.Column(field_name, id_type(255 if table.internal else 64), primary_key=True))
        elif spec.role == k.SCOPE:
            columns += _scope_columns()
            columns.append(sa.Column("scope_key", sa.String(64), nullable=False))
        else:
            nullable = spec.kind.nullable and spec.role not in (k.CREATED, k.UPDATED)
            columns.append(sa.Column(field_name, _kind_type(spec.kind), nullable=nullable))
            inner = spec.kind.inner if isinstance(spec.kind, k.Optional) else spec.kind
            if isinstance(inner, k.Choice):
                values = ", ".join(f"'{v}'" for v in inner.values)
                checks.append(sa.CheckConstraint(f"{field_name} IN ({values})",
                                                 name=f"ck_{name}_{field_name}"))
    indexes = [sa.Index(f"ix_{name}_scope", "scope_k1", "scope_v1", "created_at", "id")]
    for unique in table.unique:
        cols = (["scope_key"] if unique.exact_scope else []) + list(unique.fields)
        where = None
        if unique.where:
            where = sa.and_(*(sa.literal_column(f) == sa.literal(v) for f, v in unique.where))
        indexes.append(sa.Index(f"uq_{name}_{k.unique_name(table, unique)}", *cols, unique=True,
                                sqlite_where=where, postgresql_where=where))
    return sa.Table(name, metadata, *columns, *checks, *indexes)


#: Stored kinds whose tables predate the description (schema version 1),
#: declared above: the interpreter reads and writes them through the kind's
#: codec (a column's ``key`` is its field's name), and their layout stays.
LAID_OUT = {"runs": runs, "steps": steps, "tool_calls": tool_calls, "checkpoints": checkpoints}


def _kind_tables() -> dict[str, sa.Table]:
    from cortex_spec.classes import CLASSES

    return {t.name: LAID_OUT[t.name] if t.name in LAID_OUT else kind_table(t) for cls in CLASSES.values() for t in cls.tables}


#: The SQL table of every stored kind, by the kind's table name.
KIND_TABLES = _kind_tables()

#: Every table holding data, each once (the per-test reset empties these;
#: ``runs`` is also a stored kind's table).
DATA_TABLES = tuple(dict.fromkeys((runs, suspensions, a2a_messages, a2a_conversations, a2a_deliveries,
                                   a2a_asks, *KIND_TABLES.values())))
