"""Class ``admin`` on SQL (spec: admin.md): ping, the schema version and its
migrations, and the scope inspection.

The version is the one row of ``cortex_schema``.  A database of an older
version is refused by every other method (``ensure_schema`` raises
``SchemaMismatch``) until :meth:`AdminMixin.migrate` brings it up to date
in one transaction that first takes the schema lock (an advisory lock on
PostgreSQL, SQLite's write lock), so concurrent migrations run one after the
other and the second finds nothing to do (ADMIN-MIG-5).  The steps:

* every version: the tables that are missing are created with their
  indexes (``metadata.create_all``): the a2a tables (version 2), the stored
  kinds' tables (3), those of classes added since (4: ``cortex_progress``);
* below 4: the visibility index of the runs and a2a tables is rebuilt on
  the first scope level only (SCOPE-CANON-6; :func:`.schema._scope_index`).

No step rewrites a row.  The inspection reads every table with scope
columns page by page (one SELECT of 500 rows each, in key order) and calls
the operator's ``visit`` between pages, outside any transaction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa

from cortex_spec.admin import Inspection, ScopeIssue, check_visitor, schema_mismatch
from cortex_spec.context import Context, require_context
from cortex_spec.errors import StoreError

from .schema import SCHEMA_VERSION, SCOPE_INDEXED, SCOPE_LEVELS, metadata, schema_info
from .store import _SCHEMA_READY, READ, TX, SqlStoreBase

__all__ = ["COLUMNS_SINCE", "OLD_SCOPE_INDEX_COLUMNS", "SCOPE_INDEX_SINCE", "TABLES_SINCE", "AdminMixin"]

#: The version since which the visibility indexes hold the first level only.
SCOPE_INDEX_SINCE = 4
#: What they held before (every level: an entry outgrows PostgreSQL's btree limit).
OLD_SCOPE_INDEX_COLUMNS = ("scope_k1", "scope_v1", "scope_k2", "scope_v2", "scope_k3", "scope_v3")
#: Tables by the version that added them (older ones are created by a migration too).
TABLES_SINCE = {4: ("cortex_progress", "cortex_a2a_resolutions", "cortex_a2a_reply_receipts",
                    "cortex_a2a_held_releases")}
#: Columns by the version that added them: (table, column, what a migration
#: adds to an older table; existing rows get the default).
COLUMNS_SINCE = {4: (("cortex_runs", "revision", "BIGINT NOT NULL DEFAULT 1"),)}

_PAGE = 500


def _scoped_tables() -> list[sa.Table]:
    return [t for t in metadata.sorted_tables if "scope" in t.c and "scope_depth" in t.c]


def _digest(text: Any) -> str | None:
    return hashlib.sha256(text.encode("utf-8")).hexdigest() if isinstance(text, str) else None


class AdminMixin(SqlStoreBase):
    def ping(self, ctx: Context) -> None:
        require_context(ctx)
        self._check_open()  # ADMIN-PING-2
        self._run_core(lambda conn: conn.execute(sa.text("SELECT 1")).scalar_one(), READ)

    def _stored_version(self) -> int | None:
        def read(conn: sa.Connection) -> int | None:
            if not sa.inspect(conn).has_table(schema_info.name):
                return None
            return conn.execute(sa.select(schema_info.c.version)).scalar_one_or_none()

        return self._run_core(read, READ)

    def get_schema_version(self, ctx: Context) -> int:
        require_context(ctx)
        self._check_open()
        found = self._stored_version()
        if found is None:  # an empty database: this store makes the current layout
            self.ensure_schema()
            found = self._stored_version()
        if found is None:
            raise StoreError("the schema version could not be read after creating the schema")
        return found  # ADMIN-MIG-1

    def migrate(self, ctx: Context) -> int:
        require_context(ctx)
        self._check_open()

        def step(conn: sa.Connection) -> int:
            self._dialect.lock_schema(conn)
            found = None
            if sa.inspect(conn).has_table(schema_info.name):
                found = conn.execute(sa.select(schema_info.c.version)).scalar_one_or_none()
            if found is not None and found > SCHEMA_VERSION:
                raise schema_mismatch(found, SCHEMA_VERSION)  # ADMIN-MIG-4: nothing changes
            if found == SCHEMA_VERSION:
                return SCHEMA_VERSION  # ADMIN-MIG-2
            metadata.create_all(conn, checkfirst=True)
            for since, columns in COLUMNS_SINCE.items():
                if found is not None and found < since:
                    for table, column, ddl in columns:
                        present = {c["name"] for c in sa.inspect(conn).get_columns(table)}
                        if column not in present:
                            conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}"))
            if found is not None and found < SCOPE_INDEX_SINCE:
                for short in SCOPE_INDEXED:
                    indexed = metadata.tables[f"cortex_{short}"]
                    index = next(i for i in indexed.indexes if i.name == f"ix_cortex_{short}_scope")
                    conn.execute(sa.text(f"DROP INDEX IF EXISTS {index.name}"))
                    index.create(conn)
            if found is None:
                conn.execute(sa.insert(schema_info).values(id=1, version=SCHEMA_VERSION))
            else:
                conn.execute(sa.update(schema_info).values(version=SCHEMA_VERSION))
            return SCHEMA_VERSION

        version = self._run_core(step, TX)
        self._schema_ready = False  # read again (and cached) by the next call
        _SCHEMA_READY.discard(self._engine)
        return version

    def inspect_scopes(self, ctx: Context, visit: Callable[[ScopeIssue], object]) -> int:
        check_visitor(ctx, visit)
        self._check_open()
        present = set(self._run_core(lambda conn: sa.inspect(conn).get_table_names(), READ))
        tables = [t for t in _scoped_tables() if t.name in present]

        def scan(inspection: Inspection) -> None:
            for table in tables:
                self._scan(table, inspection)

        return Inspection(visit).run(scan)

    def _scan(self, table: sa.Table, inspection: Inspection) -> None:
        key = next(iter(table.primary_key.columns))
        levels = [table.c[f"scope_{part}{i}"] for i in range(1, SCOPE_LEVELS + 1) for part in ("k", "v")]
        digest = table.c.get("scope_key")
        cols = [key, table.c.scope, table.c.scope_depth, *levels] + ([digest] if digest is not None else [])
        first = sa.select(*cols).order_by(key).limit(_PAGE)
        more = sa.select(*cols).where(key > sa.bindparam("w_after")).order_by(key).limit(_PAGE)
        after = None
        kind = table.name.removeprefix("cortex_")
        params: dict[str, Any]
        while True:
            stmt, params = (first, {}) if after is None else (more, {"w_after": after})

            def read_page(conn: sa.Connection) -> Sequence[Any]:
                return conn.execute(stmt, params).all()  # called at once, in this iteration

            rows = self._run_core(read_page, READ)
            for row in rows:
                pairs = [(row[3 + 2 * i], row[4 + 2 * i]) for i in range(SCOPE_LEVELS)]
                while pairs and pairs[-1] == (None, None):
                    pairs.pop()
                agrees = digest is None or row[-1] == _digest(row[1])
                inspection.offer(kind, row[0], row[1], pairs, row[2], agrees)
            if len(rows) < _PAGE:
                return
            after = rows[-1][0]
