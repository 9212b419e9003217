"""The example store certified from a test module of its own (the route a
backend author takes inside their repository; see the README's
"Certifying your own store")::

    pytest examples/test_checkpoint_store.py --cortex-report-dir cortex-reports

gives the verdict ``cortex-spec certify examples.checkpoint_store:make_store``
gives (the project's own tests check that the two agree, clause by clause).
"""

from cortex_spec.suite import StoreSuite

from examples.checkpoint_store import make_store


class TestCheckpointStore(StoreSuite):
    """Every test a certification runs, against ``make_store``."""

    factory = make_store
