"""The state machines: differential, concurrent (linearizability) and crash.

Each takes a harness (or a plain ``factory(clock) -> store``) and raises an
``AssertionError`` subclass with a readable counterexample when the store
breaks the contract::

    from cortex_spec.stateful import check_differential, check_concurrent, check_crash
    check_differential(my_factory)
    check_concurrent(my_factory)
    check_crash(my_factory)

Under pytest the same machines run as ``cortex_spec.stateful.test_machines``
(``pytest --pyargs cortex_spec.stateful --cortex-store ...``), with their
figures in the certification report.
"""

from .concurrent import run_concurrent as check_concurrent
from .differential import run_differential as check_differential
from .linearizability import Verdict, check
from .stats import MachineStats

__all__ = ["check_differential", "check_concurrent", "check", "Verdict", "MachineStats"]
