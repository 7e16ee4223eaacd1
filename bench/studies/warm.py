"""Issue 47: a claim measured from a cold MLM head, rerun with the head trained first (the trainer's default).

The warm variant of a comparison is the same comparison with every trained arm's cold-head override dropped and
`-warm` added to its name (so its runs are new), its checks pointed at those arms, its statement without the cold
note, and its id and diagnostics suffixed `-warm`. It measures the claim's own metric and premises only (issue 47:
each claim on the metric its paper names): the cold rows' extra context measures (Tatoeba's dev-layer sweep, about
8 CPU-minutes per e5 model, and AER) stay on the cold rows. Everything else (metric, budget, rule) stays as it was,
so the cold row stays on the page as the diagnostic it now is.
"""

from __future__ import annotations

import re
from dataclasses import replace

from bench.study import Arm, Comparison

SUFFIX = "-warm"


def warm_arm(arm: Arm, cold: str) -> Arm:
    if not arm.trained:
        return arm
    continues = warm_arm(arm.continues, cold) if arm.continues else None
    overrides = tuple(o for o in arm.overrides if o != cold)
    return replace(arm, name=arm.name + SUFFIX, overrides=overrides, continues=continues)


def warm_statement(statement: str) -> str:
    """The cold row's statement without its "cold head (...): " note, saying how the head started instead."""
    claim = statement.split("): ", 1)[1] if statement.startswith("cold head (") else statement
    return f"{claim}; the MLM head trained first"


def warm_variant(c: Comparison, cold: str, section: str, diagnostics: tuple[str, ...] | None = None) -> Comparison:
    """`diagnostics`: the cold row's diagnostics that have warm variants (default: all of them)."""
    arms = {a.name: warm_arm(a, cold) for a in (c.baseline, c.method)}

    names = sorted((a for a in arms if arms[a].name != a), key=len, reverse=True)
    pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, names)) + r")(?![\w-])") if names else None

    def renamed(text: str) -> str:  # arm names in a check's label, e.g. "MLM loss, exp2-mlm-tlm"
        return pattern.sub(lambda m: arms[m.group(1)].name, text) if pattern else text

    checks = tuple(replace(k, arm=arms[k.arm].name if k.arm in arms else k.arm, label=renamed(k.label))
                   for k in c.why.checks)  # fmt: skip
    kept = c.why.diagnostics if diagnostics is None else diagnostics
    why = replace(c.why, checks=checks, diagnostics=tuple(d + SUFFIX for d in kept))
    return replace(
        c,
        id=c.id + SUFFIX,
        section=section,
        statement=warm_statement(c.statement),
        baseline=arms[c.baseline.name],
        method=arms[c.method.name],
        why=why,
        measures=(),
    )
