"""Short fixture names for the clause suite (aliases of the plugin's)."""

from __future__ import annotations

import pytest


@pytest.fixture
def store(cortex_store):
    """A fresh, empty store of the backend under certification."""
    return cortex_store


@pytest.fixture
def clock(cortex_clock):
    """The manual clock ``store`` reads."""
    return cortex_clock


@pytest.fixture
def profile(cortex_profile):
    return cortex_profile
