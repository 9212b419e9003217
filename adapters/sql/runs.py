"""Class ``runs`` on SQL: runs, steps and tool calls (spec: runs.md)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import sqlalchemy as sa

from cortex_spec import ids
from cortex_spec.context import Context, require_scope
from cortex_spec.entities import detach
from cortex_spec.errors import RunNotFound
from cortex_spec.runs import (
    Lease,
    Run,
    RunFilter,
    RunState,
    RunsMethods,
    validate_new_run,
    validate_run_filter,
    validate_run_update,
)
from cortex_spec.validation import check_entity_size

from .schema import runs
from cortex_spec.clock import from_millis

from .store import (
    SqlStoreBase,
    db_int,
    decode,
    dump_json,
    instant,
    load_json,
    ms,
    read_scope,
    scope_params,
    scope_values,
    visible,
)

__all__ = ["RunsMixin", "run_from_row"]


# -- codecs ---------------------------------------------------------------------------


def _run_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """Columns of the mutable run fields (RUN_MUTABLE_FIELDS), validated."""
    return {
        "agent_id": fields["agent_id"],
        "session_id": fields["session_id"],
        "state": RunState(fields["state"]).value,
        "input": fields["input"],
        "output": fields["output"],
        "error": fields["error"],
        "step_count": fields["step_count"],
        "tokens_used": fields["tokens_used"],
        "started_at": ms(fields["started_at"]),
        "completed_at": ms(fields["completed_at"]),
        "persona_ref": fields["persona_ref"],
        "metadata": dump_json(fields["metadata"]),
    }


def _run_row(run: Run) -> dict[str, Any]:
    row = {name: getattr(run, name) for name in (
        "agent_id", "session_id", "state", "input", "output", "error", "step_count",
        "tokens_used", "started_at", "completed_at", "persona_ref", "metadata",
    )}
    return {
        "id": run.id,
        **scope_values(run.scope),
        **_run_fields(row),
        "principal": run.principal,
        "reply_route": None if run.reply_route is None else dump_json(run.reply_route),
        "lease_owner": None,
        "lease_expires_at": None,
        "reclaim_count": 0,
        "notified_at": None,
        "revision": run.revision,
        "created_at": ms(run.created_at),
        "updated_at": ms(run.updated_at),
    }


def run_from_row(row: Any) -> Run:
    def build() -> Run:
        return Run(
            id=row.id,
            agent_id=row.agent_id,
            session_id=row.session_id,
            scope=read_scope(row),
            state=RunState(row.state),
            input=row.input,
            output=row.output,
            error=row.error,
            step_count=int(row.step_count),
            tokens_used=int(row.tokens_used),
            started_at=instant(row.started_at),
            completed_at=instant(row.completed_at),
            persona_ref=row.persona_ref,
            metadata=load_json(row.metadata),
            principal=row.principal,
            reply_route=load_json(row.reply_route),
            # RUN-ENT-2: written only by class `leases` (and cleared by update_run)
            lease=None if row.lease_owner is None else Lease(owner=row.lease_owner, expires_at=from_millis(row.lease_expires_at)),
            reclaim_count=int(row.reclaim_count),
            notified_at=instant(row.notified_at),
            revision=int(row.revision),
            created_at=instant(row.created_at),
            updated_at=instant(row.updated_at),
        )

    return decode("run", build)


# -- statements (built once per shape, see store.visible) ------------------------------

_INSERT_RUN = sa.insert(runs)


@lru_cache(maxsize=None)
def _get_run(depth: int) -> sa.Select[Any]:
    return sa.select(runs).where(runs.c.id == sa.bindparam("w_id"), visible(runs, depth))


@lru_cache(maxsize=None)
def _update_run(depth: int, columns: tuple[str, ...]) -> sa.Update:
    # SET the written columns (each from its ``v_`` parameter: the mutable
    # fields, updated_at, the lease LEASE-CLEAR-1 clears) and advance the
    # revision in the same statement (RUN-REV-2)
    return (
        sa.update(runs)
        .where(runs.c.id == sa.bindparam("w_id"), visible(runs, depth))
        .values({**{name: sa.bindparam(f"v_{name}") for name in columns}, "revision": runs.c.revision + 1})
        .returning(runs)
    )


def _run_conds(depth: int, exact: bool, agent: bool, state: bool) -> list[sa.ColumnElement[bool]]:
    conds = [visible(runs, depth, exact)]
    if agent:
        conds.append(runs.c.agent_id == sa.bindparam("w_agent"))
    if state:
        conds.append(runs.c.state == sa.bindparam("w_state"))
    return conds


@lru_cache(maxsize=None)
def _list_runs(depth: int, exact: bool, agent: bool, state: bool, offset: bool,
               limit: bool) -> sa.Select[Any]:
    stmt = (
        sa.select(runs)
        .where(*_run_conds(depth, exact, agent, state))
        .order_by(runs.c.created_at.desc(), runs.c.id.desc())  # RUN-LIST-2
    )
    if offset:
        stmt = stmt.offset(sa.bindparam("w_offset", type_=sa.BigInteger))
    if limit:
        stmt = stmt.limit(sa.bindparam("w_limit", type_=sa.BigInteger))
    return stmt


@lru_cache(maxsize=None)
def _count_runs(depth: int, exact: bool, agent: bool, state: bool) -> sa.Select[Any]:
    return sa.select(sa.func.count()).select_from(runs).where(
        *_run_conds(depth, exact, agent, state)
    )


def _page_params(flt: Any) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if flt.offset > 0:
        params["w_offset"] = db_int(flt.offset)
    if flt.limit > 0:
        params["w_limit"] = db_int(flt.limit)
    return params


# -- the mixin ---------------------------------------------------------------------------


class RunsMixin(RunsMethods, SqlStoreBase):
    """Runs by hand; steps and tool calls are the generated methods of
    :data:`cortex_spec.runs.TABLES` on the SQL storage of :mod:`.kinds`
    (tables ``cortex_steps`` and ``cortex_tool_calls``)."""

    def create_run(self, ctx: Context, run: Run) -> Run:
        require_scope(ctx)
        stored = validate_new_run(run, ctx, self._now())
        row = _run_row(stored)
        # RUN-CREATE-2: the primary key refuses an id of any scope
        self._write1(lambda conn: conn.execute(_INSERT_RUN, row))
        return detach(stored)

    def get_run(self, ctx: Context, run_id: str) -> Run:
        scope = require_scope(ctx)
        ids.check_id(run_id, ids.RUN, "run_id")
        params = {"w_id": run_id, **scope_params(scope)}
        return self._read_one(_get_run(scope.depth), params, run_from_row,
                              lambda: RunNotFound(f"run {run_id} not found"))  # RUN-GET-1

    def update_run(self, ctx: Context, run: Run) -> Run:
        scope = require_scope(ctx)
        run_id, fields = validate_run_update(run)
        now = self._now()
        written = {**_run_fields(fields), "updated_at": ms(now)}
        if fields["state"] != RunState.RUNNING:
            # LEASE-CLEAR-1: a run leaving `running` drops its lease in the same statement
            written.update(lease_owner=None, lease_expires_at=None)
        update = _update_run(scope.depth, tuple(written))
        params = {**{f"v_{name}": value for name, value in written.items()}, "w_id": run_id,
                  **scope_params(scope)}

        def write(conn: Any) -> Run:
            # RUN-UPD-2/3/5: unconditional, whole (one statement), only the
            # mutable fields and updated_at; scope and the rest never change.
            row = conn.execute(update, params).one_or_none()
            if row is None:
                raise RunNotFound(f"run {run_id} not found")  # RUN-UPD-1
            updated = run_from_row(row)
            # RUN-UPD-7: the size limit applies to the run as stored; too big
            # raises InvalidArgument and the transaction rolls the update back
            check_entity_size(updated, "run")
            return updated

        return self._tx(write)

    def _run_query(
        self, ctx: Context, filter: RunFilter | None
    ) -> tuple[RunFilter, tuple[int, bool, bool, bool], dict[str, Any]]:
        scope = require_scope(ctx)
        flt = validate_run_filter(filter)
        params = scope_params(scope)
        if flt.agent_id is not None:
            params["w_agent"] = flt.agent_id
        if flt.state is not None:
            params["w_state"] = RunState(flt.state).value
        shape = (scope.depth, flt.exact, flt.agent_id is not None, flt.state is not None)
        return flt, shape, params

    def list_runs(self, ctx: Context, filter: RunFilter | None = None) -> list[Run]:
        flt, shape, params = self._run_query(ctx, filter)
        params.update(_page_params(flt))
        stmt = _list_runs(*shape, flt.offset > 0, flt.limit > 0)
        return self._read(
            lambda conn: [run_from_row(r) for r in conn.execute(stmt, params)]
        )

    def count_runs(self, ctx: Context, filter: RunFilter | None = None) -> int:
        _, shape, params = self._run_query(ctx, filter)
        stmt = _count_runs(*shape)  # RUN-LIST-4: the page is ignored
        return self._read(lambda conn: int(conn.execute(stmt, params).scalar_one()))
