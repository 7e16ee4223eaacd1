"""The issue-19 rule, as pure functions: the paired difference over seeds, its spread, the verdict."""

from __future__ import annotations

from dataclasses import dataclass

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"


@dataclass(frozen=True)
class Difference:
    mean: float
    """Mean over seeds of method - baseline (same seed)."""
    spread: float | None
    """Half the range of the per-seed differences; None with one seed."""
    seeds: int


def difference(method: list[float], baseline: list[float]) -> Difference:
    """Paired by seed: seed i of the method against seed i of the baseline (a one-value arm, such as an
    untrained start model, pairs with every seed)."""
    if len(baseline) == 1:
        baseline = baseline * len(method)
    if len(method) == 1:
        method = method * len(baseline)
    if not method or len(method) != len(baseline):
        raise ValueError(f"cannot pair {len(method)} method values with {len(baseline)} baseline values")
    diffs = [m - b for m, b in zip(method, baseline, strict=True)]
    mean = sum(diffs) / len(diffs)
    spread = (max(diffs) - min(diffs)) / 2 if len(diffs) > 1 else None
    return Difference(mean, spread, len(diffs))


def verdict(diff: Difference, direction: int, close: float = 2.0, varies: bool = True, floor: float = 0.0) -> str:
    """Reproduced when the mean difference goes the paper's way (`direction` +1 or -1) by more than the seeds'
    spread; not reproduced when it goes the other way by more than the spread; inconclusive otherwise, when
    one seed moved the number by less than `close` points, and when the difference is within `floor` (the test
    set's own sampling error, which seeds do not see). `varies=False`: nothing seeded differs between the
    two (e.g. one untrained model under two aligners), so one value is exact and the sign decides."""
    if abs(diff.mean) <= floor:
        return INCONCLUSIVE
    signed = diff.mean * direction
    if diff.spread is None:
        if varies and abs(diff.mean) < close:
            return INCONCLUSIVE
        spread = 0.0
    else:
        spread = diff.spread
    if signed > spread:
        return REPRODUCED
    if signed < -spread:
        return NOT_REPRODUCED
    return INCONCLUSIVE


def needs_second_seed(diff: Difference, close: float = 2.0) -> bool:
    """Issue 19: two seeds for any difference under `close` points."""
    return diff.seeds < 2 and abs(diff.mean) < close
