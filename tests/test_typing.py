"""The package is typed (PEP 561): a store type-checks against the protocols.

mypy runs in a subprocess on two tiny files: one assigns the example store
to the protocols of what it declares (no error), the other a store that
spells one method differently and lacks another (an error for each)."""

from __future__ import annotations

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
    assert '"cortex_spec" = ["py.typed"]' in (REPO / "pyproject.toml").read_text()


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
    done = _mypy(tmp_path, """
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
    """)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert any('"Misspelt"' in line and "Incompatible types in assignment" in line for line in lines), lines
    assert any('"Partial"' in line and "Incompatible types in assignment" in line for line in lines), lines
    assert len(lines) == 2, lines  # those two, and nothing in the package itself
