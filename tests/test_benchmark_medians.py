"""The benchmarks' ``--median-of N`` verdicts (issue 14 judges the median of
three runs): the pure functions that judge the runs' figures, on figures
made up so that a single run's verdict and the median's differ."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

claim_throughput = pytest.importorskip("claim_throughput")
checker_vs_porcupine = pytest.importorskip("checker_vs_porcupine")


def _claim_row(dialect: str, op: str, ratio: float, factor: float | None = None, **extra: Any) -> dict[str, Any]:
    row = {"dialect": dialect, "operation": op, "ratio": ratio, "differ": [], "exact": True, **extra}
    if factor is not None:
        row["p99_factor"] = factor
    return row


def _claim_runs(ratios: list[float], factors: list[float]) -> list[list[dict[str, Any]]]:
    return [[_claim_row("sqlite", "suspension claim", r, f), _claim_row("postgresql", "delivery claim", 1.1)]
            for r, f in zip(ratios, factors)]


def test_claim_targets_are_judged_on_the_median_of_the_runs(capsys: pytest.CaptureFixture[str]) -> None:
    # one run misses each target; the median of three meets both
    runs = _claim_runs([0.79, 0.9, 0.85], [2.0, 6.5, 2.9])
    assert claim_throughput.judge_median(runs) is True
    out = capsys.readouterr().out
    assert "SqlStore/driver 0.85 >= 0.8: met  (median of 0.79, 0.90, 0.85)" in out
    assert "p99 2.90x the driver's (<= 3x): met  (median of 2.00x, 6.50x, 2.90x)" in out
    assert out.rstrip().endswith("all targets met at the median of 3 runs")


@pytest.mark.parametrize(("ratios", "factors", "missed"), [
    ([0.79, 0.9, 0.78], [2.0, 2.0, 2.0], "SqlStore/driver 0.79 >= 0.8: NOT MET"),
    ([0.9, 0.9, 0.9], [3.1, 2.0, 3.2], "p99 3.10x the driver's (<= 3x): NOT MET"),
    # a median on the wrong side of the target by less than the two decimals shows
    ([0.9, 0.9, 0.9], [3.004, 3.004, 1.0], "p99 3.004x the driver's (<= 3x): NOT MET"),
])
def test_a_claim_target_missed_at_the_median_fails(ratios: list[float], factors: list[float], missed: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert claim_throughput.judge_median(_claim_runs(ratios, factors)) is False
    out = capsys.readouterr().out
    assert missed in out
    assert out.rstrip().endswith("some targets NOT met at the median of 3 runs")


def test_a_claim_run_with_other_sql_or_a_key_not_won_once_fails_the_median(
        capsys: pytest.CaptureFixture[str]) -> None:
    runs = _claim_runs([0.9, 0.9, 0.9], [1.0, 1.0, 1.0])
    runs[1][0]["differ"] = ["probe"]
    runs[2][1]["exact"] = False
    assert claim_throughput.judge_median(runs) is False
    out = capsys.readouterr().out
    assert "run 2: the SQL differed (probe)" in out
    assert "run 3: a key was not won exactly once" in out


def test_a_claim_operation_missing_from_a_run_is_not_judged(capsys: pytest.CaptureFixture[str]) -> None:
    runs = _claim_runs([0.9, 0.9, 0.9], [1.0, 1.0, 1.0])
    del runs[2][1]
    assert claim_throughput.judge_median(runs) is False
    assert "delivery claim    measured in 2 of the 3 runs: NOT judged" in capsys.readouterr().out


def _checker_run(median: float, groups: dict[str, float], disagree: tuple[str, ...] = (),
                 undecided: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"histories": 5, "median": median,
            "groups": [[name.split()[0], name.split()[1], ratio] for name, ratio in groups.items()],
            "disagree": list(disagree), "undecided": list(undecided)}


def _met(found: dict[str, Any]) -> list[bool]:
    return [met for met, _ in checker_vs_porcupine.targets(found)]


def test_checker_targets_are_judged_on_the_median_of_the_runs() -> None:
    # the second run misses the median target, the third a family's: the medians meet both
    runs = [_checker_run(1.5, {"claim-bad 10000x8": 3.3, "kv c50": 2.0}),
            _checker_run(2.4, {"claim-bad 10000x8": 3.0, "kv c50": 2.2}),
            _checker_run(1.6, {"claim-bad 10000x8": 6.3, "kv c50": 1.9})]
    assert [_met(run) for run in runs] == [[True] * 4, [True, False, True, True], [True, True, False, True]]
    found = checker_vs_porcupine.median_figures(runs)
    assert found["median"] == 1.6
    assert sorted(found["groups"]) == [["claim-bad", "10000x8", 3.3], ["kv", "c50", 2.0]]
    assert _met(found) == [True] * 4


def test_a_checker_family_at_the_median_over_five_fails() -> None:
    runs = [_checker_run(1.5, {"claim-bad 10000x8": x}) for x in (2.9, 5.3, 6.3)]
    checks = checker_vs_porcupine.targets(checker_vs_porcupine.median_figures(runs))
    assert [met for met, _ in checks] == [True, True, False, True]
    assert "(highest: claim-bad 10000x8 at 5.30x)" in checks[2][1]


def test_a_verdict_that_differs_or_an_unknown_in_any_run_fails_the_median() -> None:
    runs = [_checker_run(1.5, {"kv c50": 2.0}), _checker_run(1.5, {"kv c50": 2.0}, disagree=("c50-bad",)),
            _checker_run(1.5, {"kv c50": 2.0}, undecided=("c50-ok",))]
    checks = checker_vs_porcupine.targets(checker_vs_porcupine.median_figures(runs))
    assert [met for met, _ in checks] == [False, True, True, False]
    assert "(differ: c50-bad)" in checks[0][1] and "(unknown: c50-ok)" in checks[3][1]


def test_a_checker_family_missing_from_a_run_fails_the_median() -> None:
    runs = [_checker_run(1.5, {"kv c50": 2.0, "kv c10": 1.0}), _checker_run(1.5, {"kv c50": 2.0})]
    checks = checker_vs_porcupine.targets(checker_vs_porcupine.median_figures(runs))
    assert checks[0] == (False, "identical verdicts on every history (differ: kv c10 (in 1 of 2 runs))")


@pytest.mark.parametrize("n", [1, 99, 100, 101, 2400, 8000])
def test_the_count_of_slow_attempts_printed_is_where_the_p99_crosses(n: int) -> None:
    # the claim report says "the p99 is over 1 ms when K or more of N are"
    k = claim_throughput._p99_count(n)
    for slow in (k - 1, k):
        values = sorted([0.0] * (n - slow) + [1.0] * slow)
        assert (claim_throughput._quantile(values, 0.99) > 0.5) is (slow >= k), (n, slow)
    assert claim_throughput._slow(sorted([0.0005] * 3 + [0.0015] * 2)) == 2
