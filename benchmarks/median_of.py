"""``--median-of N`` for the benchmarks of issue 14 (a helper, not a script).

The issue judges each benchmark on the median of three runs.  A run is one
invocation of the script, so each of the N runs here is a fresh process: no
warm cache, pool or interpreter state carries from one run into the next, as
none does between invocations by hand.  Each run prints its own report as
usual and writes what it measured as JSON (``--json``); the script then
judges the targets on the medians of the runs' figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def runs(script: str | Path, argv: list[str], n: int) -> list[Any] | None:
    """Run ``script`` with ``argv`` ``n`` times, each in a fresh process told
    ``--median-of 1 --json FILE`` (the last of a repeated option wins), its
    output passed through under a line naming the run; each run's JSON in
    order.  None, after saying why on stderr, when a run ends without results
    or with a status other than 0 (targets met) or 1 (some missed): status 2
    is the scripts' "something needed is absent", and anything else a crash.
    """
    script = Path(script)
    measured = []
    with tempfile.TemporaryDirectory(prefix="cortex-spec-median-of-") as tmp:
        for i in range(1, n + 1):
            out = Path(tmp) / f"run-{i}.json"
            print(f"== {script.name}: run {i} of {n}, a fresh process ==", flush=True)
            done = subprocess.run([sys.executable, str(script), *argv, "--median-of", "1", "--json", str(out)],
                                  check=False)
            if done.returncode not in (0, 1) or not out.is_file():
                print(f"{script.name}: run {i} of {n} ended with status {done.returncode}"
                      f"{'' if out.is_file() else ' and no results'}: no verdict at the median",
                      file=sys.stderr)
                return None
            measured.append(json.loads(out.read_text()))
    print(f"== {script.name}: the targets at the median of the {n} runs ==", flush=True)
    return measured


def write(path: str | Path, measured: Any) -> None:
    """A run's figures for :func:`runs` (``--json PATH``)."""
    Path(path).write_text(json.dumps(measured))
