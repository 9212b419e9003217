"""The package is typed (PEP 561): a store type-checks against the protocols.

mypy runs in a subprocess on two tiny files: one assigns the example store
to the protocols of what it declares (no error), the other a store that
spells one method differently and lacks another (an error for each)."""

from __future__ import annotations

import builtins
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytest.importorskip("mypy", reason="mypy is in the lint and test extras")


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "check_store.py"
    path.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--strict", "--follow-imports=silent",
         "--config-file", "/dev/null", "--cache-dir", str(tmp_path / ".mypy_cache"), str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )


def test_the_package_ships_py_typed():
    assert (REPO / "cortex_spec" / "py.typed").is_file()
    assert '"cortex_spec" = ["py.typed", "*.pyi"]' in (REPO / "pyproject.toml").read_text()


def test_the_stub_of_the_generated_methods_is_current():
    """``cortex_spec/generated.pyi`` is what :mod:`cortex_spec.stubs`
    derives from the protocols and tables as they are now, and declares
    every method :func:`cortex_spec.kinds.install` generated."""
    from cortex_spec import stubs
    from cortex_spec.kinds import checked_protocols

    # the checkout's stub (the one a commit ships), whether the package is
    # imported from the checkout or installed (tox): both must be current
    current = stubs.render()
    for path in {REPO / "cortex_spec" / "generated.pyi", stubs.PATH}:
        assert path.read_text(encoding="utf-8") == current, (
            f"{path} is stale: run `python -m cortex_spec.stubs` in the checkout")
    installed = [(m, getattr(m, "__cortex_installed__", ())) for m, _ in checked_protocols()]
    assert sum(len(names) for _, names in installed) > 0, installed
    for methods, names in installed:
        if names:
            assert f"class Generated{methods.__name__}:" in current, methods
        for name in names:
            assert f"    def {name}(self, ctx: Context" in current, name


def test_a_conforming_store_type_checks_against_the_protocols(tmp_path):
    done = _mypy(tmp_path, """
        from cortex_spec import CheckpointStore, ManualClock, Store
        from examples.checkpoint_store import DictCheckpointStore, make_store

        store: CheckpointStore = DictCheckpointStore(ManualClock())
        shared: Store = make_store(ManualClock())
    """)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found in 1 source file" in done.stdout


def test_a_store_that_does_not_conform_is_refused_by_the_type_checker(tmp_path):
    done = _mypy(tmp_path, textwrap.dedent("""
        from cortex_spec import CheckpointStore, ManualClock
        from cortex_spec.checkpoints import Checkpoint, Decision
        from cortex_spec.context import Context
        from examples.checkpoint_store import DictCheckpointStore


        class Misspelt(DictCheckpointStore):
            def resolve(self, ctx: Context, checkpoint_id: int, decision: Decision) -> Checkpoint:  # type: ignore[override]
                raise NotImplementedError


        class Partial:
            capabilities = frozenset({"checkpoints"})

            def close(self) -> None:
                pass

            def get_checkpoint(self, ctx: Context, checkpoint_id: str) -> Checkpoint:
                raise NotImplementedError


        misspelt: CheckpointStore = Misspelt(ManualClock())
        partial: CheckpointStore = Partial()
    """) + _generated_method_stores())
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if ": error:" in line]
    refused = ("Misspelt", "Partial", "DropsGenerated", "MisspellsGenerated", "MistypesGenerated")
    for name in refused:
        assert any(f'"{name}"' in line and "Incompatible types in assignment" in line for line in lines), (name, lines)
    assert len(lines) == len(refused), lines  # those, and nothing in the package itself (nor Complete)


def _generated_method_stores() -> str:
    """Stores of class ``memory`` written out from its protocol's own
    declarations: one complete (accepted), one without a generated method
    (``count_sessions``), one with a generated method misspelt
    (``list_session``); and the class's shared methods with a generated
    method overridden by an incompatible one (its ``agent_id`` an int)."""
    from cortex_spec.kinds import protocol_methods
    from cortex_spec.memory import AgentMemoryStore, MemoryMethods
    from cortex_spec.stubs import method_declarations

    names = protocol_methods(AgentMemoryStore)
    generated = set(getattr(MemoryMethods, "__cortex_installed__"))
    assert {"count_sessions", "list_sessions"} <= generated, generated

    def store(cls: str, declarations: list[str]) -> str:
        body = "".join(f"    {d.removesuffix(': ...')}:\n        raise NotImplementedError\n" for d in declarations)
        return f"class {cls}:\n    capabilities = frozenset({{'memory'}})\n\n    def close(self) -> None:\n" \
               f"        pass\n\n{body}\n\n{cls.lower()}: AgentMemoryStore = {cls}()\n\n\n"

    every, used = method_declarations(AgentMemoryStore, names)
    dropped, _ = method_declarations(AgentMemoryStore, [n for n in names if n != "count_sessions"])
    misspelt = [d.replace("def list_sessions(", "def list_session(") for d in every]
    assert misspelt != every
    imports = ", ".join(sorted(used - set(dir(builtins)) - {"Any", "Sequence", "Context"}))
    return textwrap.dedent(f"""

        from typing import Any, Sequence

        from cortex_spec.context import Context
        from cortex_spec.memory import AgentMemoryStore, MemoryMethods, {imports}


        class MistypesGenerated(MemoryMethods):
            capabilities = frozenset({{"memory"}})

            def close(self) -> None:
                pass

            def count_sessions(self, ctx: Context, *, agent_id: int | None = None,  # type: ignore[override]
                               default_only: bool = False, search: str | None = None, exact: bool = False) -> int:
                raise NotImplementedError


        mistypesgenerated: AgentMemoryStore = MistypesGenerated()


    """) + store("Complete", every) + store("DropsGenerated", dropped) + store("MisspellsGenerated", misspelt)



def _built_in_stores() -> list[type]:
    """The store class of every built-in backend, as its harness describes
    it (``implementation``), each once."""
    import importlib

    from cortex_spec.harness import BUILTIN_HARNESSES, resolve_harness

    out: list[type] = []
    for name in BUILTIN_HARNESSES:
        module, _, qualname = resolve_harness(name).describe()["implementation"].rpartition(".")
        cls = getattr(importlib.import_module(module), qualname)
        if cls not in out:
            out.append(cls)
    return out


def _generated(class_name: str) -> bool:
    """Whether some methods of the class's protocol are generated at import
    time from its tables (:func:`cortex_spec.kinds.install`): a type checker
    does not see them."""
    from cortex_spec.classes import CLASSES
    from cortex_spec.kinds import protocol_methods

    cls = CLASSES[class_name]
    declared = set(protocol_methods(cls.protocol))
    return any(name in declared for table in cls.tables for name in table.methods())


def _conformance_source(stores: list[type]) -> str:
    """A module that assigns each store to the protocol of every class it
    declares (and to ``Store``), in two functions per store: ``static_<i>``
    for the classes whose methods are all written out, ``generated_<i>``
    for those with generated methods.  A class opened by a method of the
    store (``opened_by``) is checked on what that method returns."""
    from cortex_spec.classes import CLASSES

    imports = ["from typing import Any", "from cortex_spec.classes import Store"]
    body: list[str] = []
    for i, store in enumerate(stores):
        imports.append(f"from {store.__module__} import {store.__qualname__} as Impl{i}")
        for part in ("static", "generated"):
            body += [f"def {part}_{i}(store: Impl{i}, location: Any) -> None:", "    whole: Store = store"]
            for name in sorted(store.capabilities):
                if _generated(name) != (part == "generated"):
                    continue
                cls = CLASSES[name]
                proto = f"P_{cls.protocol.__qualname__}"
                imports.append(f"from {cls.protocol.__module__} import {cls.protocol.__qualname__} as {proto}")
                target = "store" if cls.opened_by is None else f"store.{cls.opened_by}(location)"
                body.append(f"    as_{name}: {proto} = {target}")
            body.append("")
    return "\n".join(sorted(set(imports)) + [""] + body)


def _shadow_package(root: Path) -> Path:
    """The package as it installs (the sub-packages under ``cortex_spec``),
    made of links to this checkout, so that mypy reads the checkout's code
    rather than an installed copy."""
    pkg = root / "cortex_spec"
    pkg.mkdir(parents=True)
    for entry in (REPO / "cortex_spec").iterdir():
        (pkg / entry.name).symlink_to(entry)
    for sub in ("reference", "adapters", "conformance", "stateful", "reports"):
        (pkg / sub).symlink_to(REPO / sub)
    return root


@pytest.fixture(scope="module")
def store_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """mypy (strict) on the module of :func:`_conformance_source`: its
    errors by the function they are in (every function listed)."""
    pytest.importorskip("sqlalchemy", reason="the SQL adapter's driver (the sql extra)")
    pytest.importorskip("pymongo", reason="the Mongo adapter's driver (the mongo extra)")
    stores = _built_in_stores()
    assert len(stores) > 1, stores  # the reference and at least one adapter
    source = _conformance_source(stores)
    tmp = tmp_path_factory.mktemp("stores")
    root = _shadow_package(tmp / "src")
    (root / "check_stores.py").write_text(source)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--strict", "--follow-imports=silent",
         "--config-file", "/dev/null", "--cache-dir", str(tmp / ".mypy_cache"), "check_stores.py"],
        cwd=root, capture_output=True, text=True, timeout=900,
    )
    owner: dict[int, str] = {}
    current = ""
    for number, line in enumerate(source.splitlines(), 1):
        if line.startswith("def "):
            current = line[4:].partition("(")[0]
        owner[number] = current
    errors: dict[str, list[str]] = {name: [] for name in owner.values() if name}
    for line in done.stdout.splitlines():
        where, _, message = line.partition(": error: ")
        if message:
            assert where.startswith("check_stores.py:"), done.stdout  # nothing in the package itself
            errors[owner[int(where.split(":")[1])]].append(message)
    assert done.returncode == (1 if any(errors.values()) else 0), done.stdout + done.stderr
    return errors


def test_the_reference_and_the_adapters_type_check_against_their_protocols(store_errors):
    static = {name: found for name, found in store_errors.items() if name.startswith("static_")}
    assert static and not any(static.values()), static


def test_the_generated_methods_type_check_against_their_protocols(store_errors):
    generated = {name: found for name, found in store_errors.items() if name.startswith("generated_")}
    assert generated and not any(generated.values()), generated
