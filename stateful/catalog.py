"""Machine operations of class ``catalog``: its stored kinds' generated
rules, views, world and storms (CAT-RACE-1..4, see :mod:`.kinds`)."""

from __future__ import annotations

from cortex_spec.catalog import TABLES

from .kinds import class_machines

NAME = "catalog"

MACHINES = class_machines(NAME, TABLES, weight=0.6, cost=4.0)
