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


@pytest.fixture
def gateway_location(cortex_gateway_location):
    """A fresh gateway location of the backend under certification."""
    return cortex_gateway_location


@pytest.fixture
def open_gateway(cortex_open_gateway):
    """``open_gateway(location=None)``: open a gateway store through ``store``."""
    return cortex_open_gateway


@pytest.fixture
def gateway(cortex_gateway):
    """An open gateway store on a fresh location."""
    return cortex_gateway
