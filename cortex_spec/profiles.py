"""Certification profiles: how hard the suite pushes.

``quick`` is the pull-request gate (one backend in about a minute on two
cores); ``full`` is the nightly run.  Select with ``--cortex-profile``, the
``CORTEX_SPEC_PROFILE`` environment variable, ``cortex_profile`` in the ini
file, or ``--hypothesis-profile cortex-quick|cortex-full``.

Each profile is also a registered Hypothesis settings profile
(``cortex-quick``, ``cortex-full``, see :func:`register_hypothesis_profiles`)
that the state machines' settings derive from: no deadline, the
``@reproduce_failure`` blob printed with every failure, and the example
database in :func:`examples_directory`.
"""

from __future__ import annotations

import os
from typing import Any

import attrs

__all__ = [
    "Profile",
    "PROFILES",
    "profile_from_env",
    "DEFAULT_PROFILE",
    "HYPOTHESIS_PREFIX",
    "active_profile",
    "activate",
    "examples_directory",
    "hypothesis_settings",
    "library_settings",
    "register_hypothesis_profiles",
    "reproduction_notes",
]


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
    concurrent_rounds: int
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
    #: Hypothesis examples of each *library-level* property of the clause
    #: suites (:func:`library_settings`): a property of cortex-spec's own
    #: values (a ``Scope``, an a2a address) that calls no store.  It runs the
    #: same library code whichever backend is certified, so the pull-request
    #: gate draws fewer examples and the nightly run many more; a property
    #: that calls a store never takes this budget.
    library_examples: int


PROFILES = {
    "quick": Profile(
        name="quick",
        race_threads=8,
        race_rounds=8,
        differential_examples=60,
        differential_steps=40,
        concurrent_examples=60,
        concurrent_rounds=4,
        census_examples=2,
        crash_examples=20,
        crash_steps=25,
        view_every=4,
        checker_budget=10.0,
        shrink_seconds=60,
        library_examples=50,
    ),
    "full": Profile(
        name="full",
        race_threads=8,
        race_rounds=60,
        differential_examples=600,
        differential_steps=80,
        concurrent_examples=500,
        concurrent_rounds=12,
        census_examples=6,
        crash_examples=200,
        crash_steps=80,
        view_every=1,
        checker_budget=60.0,
        shrink_seconds=300,
        library_examples=500,
    ),
}

DEFAULT_PROFILE = "quick"


def profile_from_env(default: str = DEFAULT_PROFILE) -> str:
    return os.environ.get("CORTEX_SPEC_PROFILE", default) or default


#: The profile of the running certification, once the pytest plugin chose it
#: (:func:`activate`); until then the environment's.
_active: list[Profile] = []


def activate(profile: Profile) -> None:
    """Make ``profile`` the running certification's (the pytest plugin does,
    at configuration: before any suite module is imported)."""
    _active[:] = [profile]


def active_profile() -> Profile:
    """The running certification's profile (:func:`activate`), else the
    environment's (``CORTEX_SPEC_PROFILE``; ``quick`` when unknown)."""
    if _active:
        return _active[0]
    return PROFILES.get(profile_from_env(), PROFILES[DEFAULT_PROFILE])


def library_settings() -> Any:
    """The ``hypothesis.settings`` of a library-level property of the clause
    suites: :attr:`Profile.library_examples` examples of the running
    profile, no deadline, no example database (a certification leaves no
    files behind).  Evaluated when the suite module is imported."""
    from hypothesis import settings

    return settings(max_examples=active_profile().library_examples, deadline=None, database=None)


#: ``--hypothesis-profile cortex-<name>`` selects profile ``<name>``.
HYPOTHESIS_PREFIX = "cortex-"


def examples_directory() -> str:
    """Where the profiles' Hypothesis example database lives:
    ``CORTEX_SPEC_EXAMPLES_DB``, else ``.hypothesis/cortex-spec`` in the
    current directory (the tox envs set it to the checkout's).  The machines
    run under the run's seed (:func:`cortex_spec.stateful.runner.session_seed`),
    for which Hypothesis bypasses the database: they are replayed by seed."""
    return os.path.abspath(os.environ.get("CORTEX_SPEC_EXAMPLES_DB") or os.path.join(".hypothesis", "cortex-spec"))


def register_hypothesis_profiles() -> None:
    """Register ``cortex-quick`` and ``cortex-full`` with Hypothesis
    (idempotent; the pytest plugin does it on import, so that
    ``--hypothesis-profile`` finds them)."""
    from hypothesis import HealthCheck, settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    database = DirectoryBasedExampleDatabase(examples_directory())
    for profile in PROFILES.values():
        settings.register_profile(
            HYPOTHESIS_PREFIX + profile.name,
            max_examples=profile.differential_examples,
            stateful_step_count=profile.differential_steps,
            deadline=None,
            print_blob=True,
            report_multiple_bugs=False,
            database=database,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                   HealthCheck.filter_too_much],
        )


def hypothesis_settings(profile: Profile | None = None, **changes: Any) -> Any:
    """The ``hypothesis.settings`` of the state machines: the registered
    ``cortex-<profile>`` profile with ``changes`` (example and step budgets)."""
    from hypothesis import settings

    name = HYPOTHESIS_PREFIX + (profile.name if profile is not None else profile_from_env())
    try:
        parent = settings.get_profile(name)
    except Exception:  # noqa: BLE001 - not registered yet (used outside the plugin)
        register_hypothesis_profiles()
        parent = settings.get_profile(name)
    return settings(parent, **changes)


def reproduction_notes(exc: BaseException) -> list[str]:
    """The ``@reproduce_failure(...)`` lines Hypothesis attached (with
    ``print_blob``) to ``exc`` or to an exception it was raised from or
    during, outermost first."""
    found: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for note in getattr(current, "__notes__", ()) or ():
            if "@reproduce_failure(" in note and note not in found:
                found.append(note.strip())
        current = current.__cause__ or current.__context__
    return found
