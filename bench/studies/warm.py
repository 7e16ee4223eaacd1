"""A claim measured from a cold MLM head, rerun with the head trained first (the trainer's default).

The warm variant of a comparison is the same comparison with every trained arm's cold-head override dropped and
`-warm` added to its name (so its runs are new), its checks pointed at those arms, its statement without the cold
note, and its id and diagnostics suffixed `-warm`. It measures the claim's own metric and premises only (each
claim on the metric its paper names): the cold rows' extra context measures (Tatoeba's dev-layer sweep, about
8 CPU-minutes per e5 model, and AER) stay on the cold rows. Everything else (metric, budget, rule) stays as it was,
so the cold row stays on the page as the diagnostic it now is.
"""

from __future__ import annotations

import re
from dataclasses import replace

from bench.study import Arm, Budget, Comparison

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


# The cold-head rows of ERNIE-M and VECO again from the warm start, by section (declared; run section by section).
WARM = {"real-ernie-m-camlm": "ernie-m-warm", "real-ernie-m-btmlm": "ernie-m-btmlm-warm",
        "real-ernie-m-pseudo": "ernie-m-btmlm-warm", "real-veco-plug-in": "veco-warm"}  # fmt: skip
# A cold row with no warm rerun, and why.
NO_WARM_RERUN = {
    "real-veco-ca-mlm-adds": "its baseline trains nothing (lr 0, one step) and a warm-up changes only the MLM head, "
    "which plug-in fine-tuning does not read: a warm baseline would repeat the cold one's 43-minute measurement of the "
    "same encoder with a cross-attention drawn alike, so the warm plug-in row's note reads its warm CA-MLM arm "
    "against that measurement",
}
# Item 4: exp4's warm MLM and BTMLM losses still fell in the last quarter of 200 steps (the rule reads "budget"), so
# that comparison again at three times the steps, its schedule scaled alike.
LONGER = {"real-ernie-m-btmlm-warm": 600}


def warm_reruns(claims: tuple[Comparison, ...], cold: str) -> tuple[Comparison, ...]:
    """The warm variants of the cold rows in WARM, then the longer runs of LONGER."""
    warm = tuple(
        warm_variant(c, cold, WARM[c.id], diagnostics=tuple(d for d in c.why.diagnostics if d in WARM))
        for c in claims
        if c.id in WARM
    )
    longer = tuple(
        replace(c, id=f"{c.id}-{LONGER[c.id]}", section=f"{c.section}-{LONGER[c.id]}",
                setup=replace(c.setup, budget=Budget(steps=LONGER[c.id])))
        for c in warm
        if c.id in LONGER
    )  # fmt: skip
    return warm + longer
