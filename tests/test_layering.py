"""The cross-class suites name no class.

``conformance/test_scope.py`` and ``conformance/test_common.py`` check their
rules on every class through what each class gives them
(``conformance/examples.py``), so neither they nor the examples API nor the
helpers they share may name a class, a method of one, an entity, a record or
an error of a class: a class plugs in by its own module alone.

The forbidden words are built from :data:`cortex_spec.classes.CLASSES`: each
class's name, its methods (and the opener its methods live behind), the
public names (``__all__``) of its protocol's module, its stored kinds'
tables, entities, singular and plural names and not-found errors, every
error of :mod:`cortex_spec.errors` but those of the common contract, and the
TypeID prefix constants of :mod:`cortex_spec.ids`.

What is checked: every NAME token, and every word of every STRING token
(f-strings included), of the code; comments and docstrings are not checked
(they may say what a class gives, as prose).  A whole identifier or word
must not be a forbidden word; no part of it between underscores may be a
class name, whatever its case (``_GATEWAY_OPENER``, ``open_gateway``).  The
one exception is a paging argument of the common contract (``offset``,
``limit``), allowed as an argument but not as an attribute (the gateway's
``offset`` method); the machines' word ``step``; and a public function or class the generic layer
defines itself (``kinds.visible``) is not a class's word because a class
module exports a helper of that name.

The same holds for the test helpers (``cortex_spec/testing.py``: a class's
builders live in the class's module) and for the machines' generic modules
of ``stateful/`` (a class's rules, world and races are in its own files).
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import sys
import tokenize
from pathlib import Path

import pytest

from cortex_spec import context, errors, ids, kinds, scope, validation, views
from cortex_spec.classes import CLASSES
from cortex_spec.kinds import PAGE_ARGUMENTS

ROOT = Path(__file__).resolve().parents[1]

#: The files that must stay generic: the cross-class suites, the test
#: helpers, and every module of ``stateful/`` but a class's own files
#: (``stateful/<class>.py`` and its companions, e.g. ``gateway_driver.py``).
GENERIC = [
    "conformance/test_scope.py",
    "conformance/test_common.py",
    "conformance/examples.py",
    "conformance/helpers.py",
    "conformance/test_kinds.py",
    "conformance/test_sizes.py",
    "conformance/test_long_scopes.py",
    "cortex_spec/testing.py",
    "stateful/classes.py",
    "stateful/concurrent.py",
    "stateful/crash.py",
    "stateful/differential.py",
    "stateful/history.py",
    "stateful/kinds.py",
    "stateful/linearizability.py",
    "stateful/model.py",
    "stateful/ops.py",
    "stateful/plugin.py",
    "stateful/runner.py",
    "stateful/stats.py",
    "stateful/test_machines.py",
    "stateful/world.py",
]

#: Errors of the common contract (common.md, scope.md), raised by every class alike.
COMMON_ERRORS = frozenset({
    "CortexError", "NoScope", "InvalidArgument", "AlreadyExists", "NotFound", "InvalidState",
    "StoreClosed", "StoreError", "BackendUnavailable",
})

#: The public functions and classes the generic layer defines itself
#: (:mod:`cortex_spec.kinds`'s ``visible``, …): a class module that exports a
#: helper of the same name does not make the generic word a name of the
#: class (its helper is still caught where it is imported: the import names
#: the class's module).
GENERIC_NAMES = frozenset(
    name for module in (kinds, context, scope, validation, views) for name, value in vars(module).items()
    if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__)

#: Words of the common contract that a class also uses as a name: the paging
#: arguments (``offset`` is a gateway method too).  Such a word is allowed as
#: an argument (a keyword, a key, a string, a variable), never as an
#: attribute (``gateway.offset(...)``, ``store.offset``).
COMMON_ARGUMENTS = frozenset(PAGE_ARGUMENTS)

#: The state machines' own vocabulary, which class ``runs`` also uses for a
#: stored kind (a step of a machine, ``stateful_step_count``; the table
#: ``steps``; the checker's ``model.step``; a scenario step's ``run``, a
#: failing run of a machine): allowed, attributes too, as no class has a
#: method of that name.  The kinds are still caught through their methods
#: (``create_step``, ``list_steps``, ``get_run``) and their entities
#: (``Step``, ``Run``).
MACHINE_WORDS = frozenset({"step", "steps", "run"})

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def forbidden_words() -> tuple[dict[str, str], frozenset[str]]:
    """(word -> why it is forbidden, the class names in lower case)."""
    words: dict[str, str] = {}
    for cls in CLASSES.values():
        words[cls.name] = f"the name of class {cls.name}"
        for m in cls.methods:
            words.setdefault(m.name, f"a method of class {cls.name}")
        if cls.opened_by:
            words.setdefault(cls.opened_by, f"the opener of class {cls.name}")
        module = importlib.import_module(cls.protocol.__module__)
        for name in module.__all__:
            if name not in GENERIC_NAMES:
                words.setdefault(name, f"a public name of {module.__name__} (class {cls.name})")
        for table in cls.tables:
            for name in (table.name, table.singular, table.plural, table.entity.__name__, table.not_found.__name__):
                words.setdefault(name, f"stored kind {table.name} of class {cls.name}")
    for name in errors.__all__:
        if name not in COMMON_ERRORS:
            words.setdefault(name, "an error of a class (cortex_spec.errors)")
    prefixes = set(ids.PREFIXES.values())
    for name in dir(ids):
        value = getattr(ids, name)
        if name.isupper() and isinstance(value, str) and value in prefixes:
            words.setdefault(name, f"the TypeID prefix constant ids.{name}")
    return words, frozenset(c.lower() for c in CLASSES)


def _docstrings(source: str) -> set[tuple[int, int]]:
    """Where the docstrings of a module, its classes and functions start."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                out.add((first.lineno, first.col_offset))
    return out


def violations(source: str) -> list[tuple[int, str, str]]:
    """``(line, word, why)`` for every forbidden word in the code of ``source``."""
    words, class_names = forbidden_words()
    skip = _docstrings(source)
    string_kinds = {tokenize.STRING} | ({getattr(tokenize, "FSTRING_MIDDLE")} if sys.version_info >= (3, 12) else set())
    found = []
    previous = None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        attribute = previous is not None and previous.type == tokenize.OP and previous.string == "."
        if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            previous = tok
        if tok.type == tokenize.NAME:
            candidates = [tok.string]
        elif tok.type in string_kinds and tok.start not in skip:
            candidates = _WORD.findall(tok.string)
            attribute = False
        else:
            continue
        for word in candidates:
            if word in MACHINE_WORDS or (word in COMMON_ARGUMENTS and not attribute):
                continue
            if word in words:
                found.append((tok.start[0], word, words[word]))
                continue
            parts = [p for p in word.lower().split("_") if p]
            hit = next((p for p in parts if p in class_names), None)
            if hit is not None:
                found.append((tok.start[0], word, f"contains the class name {hit}"))
    return found


@pytest.mark.parametrize("path", GENERIC)
def test_generic_suites_name_no_class(path):
    source = (ROOT / path).read_text(encoding="utf-8")
    found = violations(source)
    assert not found, f"{path} names what a class gives it:\n" + "\n".join(
        f"  line {line}: {word!r} ({why})" for line, word, why in found)


def test_the_check_sees_every_kind_of_name():
    """The check is not vacuous: a class, a method, an entity, an error, an
    opener, a prefix constant, a builder of a class and a class name inside
    an identifier or a string are each caught, and so is a paging argument
    of the common contract used as a class's method (an attribute); a
    comment, a docstring and a paging argument as an argument are not."""
    snippets = {
        'x = "runs"': "runs",
        "store.create_run(c, obj)": "create_run",
        "w.gateway.accept(c, m)": "gateway",
        "from cortex_spec.errors import RunNotFound": "RunNotFound",
        "raise NotSuspended()": "NotSuspended",
        "RunFilter(exact=True)": "RunFilter",
        "ids.new_id(ids.CHECKPOINT)": "CHECKPOINT",
        "_GATEWAY_OPENER = []": "_GATEWAY_OPENER",
        'request.getfixturevalue("cortex_open_gateway")': "cortex_open_gateway",
        'f"{x} of list_agents"': "list_agents",
        "get_overlay_for_agent_at(c, a, s)": "get_overlay_for_agent_at",
        "Agent(name='x')": "Agent",
        "for step in steps: store.create_step(c, step)": "create_step",
        "Step(run_id=r)": "Step",
        # a common paging argument used as a class's method, and the class's builders
        "w.offset(ZERO, 'telegram')": "offset",
        "store.pending(c)": "pending",
        "from cortex_spec.runs import make_run": "make_run",
        "testing.make_envelope(conversation_id)": "make_envelope",
        "store.create_session(c, Session(agent_id=a))": "Session",
        "for r in store.list_runs(c, offset=2): pass": "list_runs",
    }
    for snippet, word in snippets.items():
        assert word in [w for _, w, _ in violations(snippet + "\n")], snippet
    clean = '"""The runs class, its create_run and RunNotFound."""\n# gateway, checkpoints\nx = 1\n'
    assert violations(clean) == []
    # the paging arguments of the common contract, as arguments
    paging = 'args["offset"] = 1\nf(limit=2, offset=3)\noffset, limit = 0, 0\nx = {"offset": offset}\n'
    assert violations(paging) == []
    # the generic layer's own visible, but not a class's helper through its module
    assert violations("k.visible(c.scope, exact, r.scope)\n") == []
    assert "a2a" in [w for _, w, _ in violations("from cortex_spec.a2a import visible\n")]
    assert "check_address" in [w for _, w, _ in violations("check_address(x)\n")]
    words, _ = forbidden_words()
    assert {"runs", "catalog", "resolve", "list_pending_across_scopes", "Overlay", "RunNotFound",
            "open_gateway", "make_run", "make_message", "approve", "gateway_view"} <= set(words)
    assert not COMMON_ERRORS & set(words)


def test_the_builders_of_each_class_are_reexported_by_the_test_helpers():
    """``cortex_spec.testing`` names no class but still gives every class's
    builders (``from cortex_spec.testing import make_run``): each name of a
    class module's ``BUILDERS`` is there, the same object, and in
    ``__all__``; a name no class builds is an AttributeError."""
    import cortex_spec.testing as testing

    seen = 0
    for cls in CLASSES.values():
        module = importlib.import_module(cls.protocol.__module__)
        for name in getattr(module, "BUILDERS", ()):
            assert getattr(testing, name) is getattr(module, name), name
            assert name in testing.__all__ and name in module.__all__, name
            seen += 1
    assert seen >= 12, seen  # runs 3, suspensions 1, checkpoints 3, a2a 4, gateway 2
    from cortex_spec.testing import make_run  # noqa: F401 - the documented import

    with pytest.raises(AttributeError):
        getattr(testing, "make_nothing")
