"""How every study declares a comparison: its fields in the page's table order, then its setup, investigation and
rule by keyword. A study fixes what its claims share with `functools.partial(claim, ...)`."""

from __future__ import annotations

from bench.arm import SMALL_BASE, Arm, Budget
from bench.study import Comparison, Investigation, Rule, Setup


def claim(id: str, section: str, paper: str, statement: str, paper_number: str, baseline: Arm, method: Arm,
          metric: str, direction: int, *, budget: Budget, start: str | None = SMALL_BASE, languages=None, data=None,
          device="cpu", checks=(), code=(), diagnostics=(), localises=(), departs=(), independent="",
          close=Rule.close, floor=Rule.floor, **fields) -> Comparison:  # fmt: skip
    """The comparison; `fields`: the rest of `Comparison`'s (measures, baseline_metric)."""
    why = Investigation(checks, code, diagnostics, localises, departs, independent)
    setup = Setup(budget, start, languages, data, device)
    return Comparison(id, section, setup, paper, statement, paper_number, baseline, method, metric, direction,
                      rule=Rule(close, floor), why=why, **fields)  # fmt: skip
