"""The library-level properties of the clause suites take the running
profile's budget (``Profile.library_examples``), read when a suite module is
imported: the plugin activates the profile it chose at configuration."""

from __future__ import annotations

from cortex_spec import profiles
from cortex_spec.profiles import PROFILES, activate, active_profile, library_settings


def test_library_settings_follow_the_active_profile() -> None:
    saved = list(profiles._active)
    try:
        for name in ("quick", "full"):
            activate(PROFILES[name])
            assert active_profile() is PROFILES[name]
            made = library_settings()
            assert made.max_examples == PROFILES[name].library_examples
            assert made.deadline is None and made.database is None
    finally:
        profiles._active[:] = saved


def test_the_nightly_budget_exceeds_the_gates() -> None:
    assert PROFILES["full"].library_examples > PROFILES["quick"].library_examples > 0


def test_the_plugin_activates_the_chosen_profile(pytester) -> None:
    pytester.makepyfile(test_budget="""
        from cortex_spec.profiles import active_profile

        def test_budget():
            assert active_profile().name == "full"
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--cortex-profile", "full", "test_budget.py")
    result.assert_outcomes(passed=1)
