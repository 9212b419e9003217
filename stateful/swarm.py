"""Rule selection for the rule-based machines: swarm testing at one choice a step.

Hypothesis' stateful runner picks each step's rule with swarm testing (Groce
et al., 2012): every example switches a random subset of the rules off, each
rule with the same drawn probability, so that an example can dwell on a few
operations.  It decides those switches lazily, and a step writes a choice
for every switch it consults: a step tries three rules at random, and when
none of them is on and valid it asks every rule in turn.  On a machine of
twenty to forty rules under a high switch-off probability that is dozens of
choices a step; measured on the differential machines, rule selection was
about a sixth of their time (``benchmarks/README.md``).

:class:`SwarmRules` keeps the distribution and changes the bookkeeping: at
an example's first step it decides every switch (one probability, then one
boolean per rule, at least one rule left on — the last one decided is
forced on if every other is off), and each step then draws one index among
the rules that are on and whose preconditions hold (a step where none of
them holds draws among every rule whose preconditions hold, where
Hypothesis' selection would discard the example).  A step's rule is
uniform over the same set as before; the switches shrink towards *on*, as
Hypothesis' do, so a shrunk failure keeps every rule it needs.  The
arguments are drawn as Hypothesis draws them.

It takes Hypothesis' own rule list (sorted its way) from the strategy it
replaces; :func:`install` falls back to Hypothesis' selection when that
strategy is not where this version of Hypothesis keeps it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["install", "installed"]

try:  # the strategy Hypothesis' runner draws each step's rule from
    from hypothesis.stateful import RuleStrategy as _RuleStrategy
except ImportError:  # pragma: no cover - a Hypothesis that moved it
    _RuleStrategy = None  # type: ignore[assignment,misc]


if _RuleStrategy is not None:
    class SwarmRules(_RuleStrategy):  # type: ignore[misc,valid-type]
        """One machine's rule strategy (see the module's docstring)."""

        def __init__(self, machine: Any) -> None:
            super().__init__(machine)
            #: the rules switched on for this example (decided at its first step)
            self.switched_on: list[Any] | None = None

        def _switch(self, data: Any) -> list[Any]:
            p_off = data.draw_integer(0, 254) / 255
            on: list[Any] = []
            last = len(self.rules) - 1
            for i, rule in enumerate(self.rules):
                off = data.draw_boolean(p_off, forced=False if i == last and not on else None)
                if not off:
                    on.append(rule)
            return on

        def _valid(self, rules: list[Any]) -> list[Any]:
            # Hypothesis' own check (with its observability counts) for a
            # rule that has something to check; most rules have nothing
            return [r for r in rules if not (r.bundles or r.preconditions) or self.is_valid(r)]

        def do_draw(self, data: Any) -> tuple[Any, dict[str, Any]]:
            if self.switched_on is None:
                self.switched_on = self._switch(data)
            choices = self._valid(self.switched_on) or self._valid(self.rules)
            if not choices:
                return super().do_draw(data)  # type: ignore[no-any-return]  # Hypothesis' own error
            rule = choices[data.draw_integer(0, len(choices) - 1)] if len(choices) > 1 else choices[0]
            arguments: dict[str, Any] = {}
            for name, strategy in rule.arguments_strategies.items():
                try:
                    arguments[name] = data.draw(strategy)
                except Exception as err:  # the note Hypothesis' own selection adds
                    err.add_note(f"while generating {name!r} from {strategy!r} for rule {rule.function.__name__}")
                    raise
            return rule, arguments


def install(machine: Any) -> None:
    """Give ``machine`` (a ``RuleBasedStateMachine`` instance, from its
    ``__init__``) swarm rule selection at one choice a step, where this
    Hypothesis keeps its rule strategy where the runner reads it."""
    if _RuleStrategy is not None and isinstance(getattr(machine, "_rules_strategy", None), _RuleStrategy):
        machine._rules_strategy = SwarmRules(machine)


def installed(machine: Any) -> bool:
    """Whether ``machine`` selects its rules through :class:`SwarmRules`."""
    return _RuleStrategy is not None and isinstance(getattr(machine, "_rules_strategy", None), SwarmRules)
