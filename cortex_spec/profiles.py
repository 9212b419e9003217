"""Certification profiles: how hard the suite pushes.

``quick`` is the pull-request gate (one backend in about a minute on two
cores); ``full`` is the nightly run.  Select with ``--cortex-profile`` or the
``CORTEX_SPEC_PROFILE`` environment variable.
"""

from __future__ import annotations

import os

import attrs

__all__ = ["Profile", "PROFILES", "profile_from_env", "DEFAULT_PROFILE"]


@attrs.frozen
class Profile:
    name: str
    #: threads released together in every example-based claim race
    race_threads: int
    #: how many times each example-based race is repeated
    race_rounds: int
    #: Hypothesis examples of the differential machine
    differential_examples: int
    #: most steps per differential example
    differential_steps: int
    #: Hypothesis examples of the concurrent machine (scenarios)
    concurrent_examples: int
    #: how many times each scenario is executed (thread schedules vary)
    concurrent_runs: int
    #: scenarios of each storm kind the mixed family races before its
    #: random search (see ``stateful.concurrent.storm_census``)
    census_examples: int
    #: Hypothesis examples of the crash machine (each fault test)
    crash_examples: int
    #: most steps per crash example
    crash_steps: int
    #: compare whole-state views every this many steps (and at the end)
    view_every: int
    #: seconds the linearizability checker may spend on one history
    checker_budget: float
    #: seconds Hypothesis may spend shrinking one failure
    shrink_seconds: int


PROFILES = {
    "quick": Profile(
        name="quick",
        race_threads=8,
        race_rounds=8,
        differential_examples=60,
        differential_steps=40,
        concurrent_examples=60,
        concurrent_runs=4,
        census_examples=2,
        crash_examples=20,
        crash_steps=25,
        view_every=4,
        checker_budget=10.0,
        shrink_seconds=60,
    ),
    "full": Profile(
        name="full",
        race_threads=8,
        race_rounds=60,
        differential_examples=600,
        differential_steps=80,
        concurrent_examples=500,
        concurrent_runs=12,
        census_examples=6,
        crash_examples=200,
        crash_steps=80,
        view_every=1,
        checker_budget=60.0,
        shrink_seconds=300,
    ),
}

DEFAULT_PROFILE = "quick"


def profile_from_env(default: str = DEFAULT_PROFILE) -> str:
    return os.environ.get("CORTEX_SPEC_PROFILE", default) or default
