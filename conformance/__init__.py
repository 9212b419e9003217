"""The clause suite: one module per conformance class.

Run it against any store with::

    pytest --pyargs cortex_spec.conformance --cortex-store NAME|module:factory

Every test names the clauses it checks (``@pytest.mark.clause``); tests of a
class the store does not declare are reported as *not claimed*.
"""
