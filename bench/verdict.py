"""The rules that turn measurements into verdicts and readings, as pure functions of numbers.

A verdict compares a method with a baseline over seeds. A reading says what stands in the way of a claim that is
not reproduced: its premises (a start model as aligned as the paper's, a detector that beats the majority class, a
masked-token loss below the unigram floor of its text), the same comparison at other budgets and the diagnostics.
Each rule returns a label or a `Reading` (a code and its parameters); the page words it beside the numbers
(bench/page.py `words`) and a person's note says the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from bench import budget
from bench.measures import MEASURES, ONE_CLASS, current_key, measure_of
from bench.study import Check, Comparison, Study

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
    """Two seeds for any difference under `close` points: one seed cannot tell it from seed noise."""
    return diff.seeds < 2 and abs(diff.mean) < close


def compute_trend(direction: int, differences: list[tuple[float, float | None]]) -> int:
    """(difference, spread) from the smallest to the largest budget: +1 when the gap moves the paper's way by
    more than the two spreads, -1 when against it (which scale alone does not explain), 0 otherwise."""
    if len(differences) < 2:
        return 0
    (first, s1), (last, s2) = differences[0], differences[-1]
    spreads, moved = (s1 or 0.0) + (s2 or 0.0), (last - first) * direction
    return 1 if moved > spreads else -1 if moved < -spreads else 0


# --------------------------------------------------------------------------------------------------------
# Floors: what a model scores without having learned anything a context could tell it

MAJORITY_MARGIN = 0.005
"""Accuracy within half a point of the majority floor counts as at it (the only position a detector can tell
without learning, the never-masked <s> and </s>, is worth about that much)."""


def majority_floor(replaced_rate: float) -> float:
    """Accuracy of predicting the more frequent of replaced / original at every token."""
    return max(replaced_rate, 1.0 - replaced_rate)


def beats_majority(accuracy: float, majority: float) -> bool:
    """A detector has learned something to detect with: above the majority floor by more than MAJORITY_MARGIN."""
    return accuracy > majority + MAJORITY_MARGIN


def first_step_beating_majority(curve: list[dict]) -> int | None:
    """The first logged window ({step, discriminator_accuracy, replaced}) whose detector beats the majority class
    of its own replaced rate (None: none does)."""
    return next(
        (p["step"] for p in curve if beats_majority(p["discriminator_accuracy"], majority_floor(p["replaced"]))),
        None,
    )


def entropy(counts: np.ndarray) -> float:
    """Shannon entropy (nats) of the distribution the counts give."""
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def conditional_entropy(counts_by_language: dict[str, np.ndarray]) -> float:
    """H(token | language): each language's unigram entropy, weighted by its number of tokens. Masked positions
    are drawn uniformly from the text's tokens, so this is the expected masked-token loss of the per-language
    unigram predictor: a loss at or above it has learned nothing from context."""
    totals = {lang: float(c.sum()) for lang, c in counts_by_language.items() if c.sum() > 0}
    if not totals:
        raise ValueError("no tokens to count")
    return sum(totals[lang] * entropy(counts_by_language[lang]) for lang in totals) / sum(totals.values())


# --------------------------------------------------------------------------------------------------------
# Comparisons: the row of one comparison from its section's results, and what stands in its way

NOT_RUN, NOT_MEASURED = "not run yet", "not measured"
STALE = "stale: AER from before the Itermax filtering or the one pair layout, rerun"
ONE_CLASS_VERDICT = "inconclusive: a classifier predicts one class"
BUDGET_REACHED = 0.95
"""An arm of a FLOP budget that logged less than this share of it was stopped short (a wall-clock guard): the
comparison is then not at equal compute. Every CPU run so far logged at least 0.99 of its budget."""


class R(StrEnum):
    """The codes of the readings. Each concludes that the model's scale stands in the way, that the code is suspect,
    or that neither is shown (bench/page.py words them)."""

    # Why a comparison is not reproduced
    DEPARTURE_EXPLAINS = "departure explains"  # the same comparison at the paper's setting does not fail
    DEPARTURE_DOES_NOT = "departure does not explain"
    PREMISE_NOT_MET = "premise not met"  # parts: the diagnostics' readings (none: scale); also: independent
    AT_FLOOR = "every model at its floor"  # scale
    AT_FLOOR_GAP_GROWS = "at the floor, gap grows with compute"  # not separated
    STILL_FALLING = "a loss still falls at the end"  # args: the runs; the budget, not yet scale
    LOSS_FALLS = "the method's loss falls"  # not separated; also: independent
    LOSS_FLAT = "a loss of the method does not fall"  # code suspect
    NO_LOSS = "no logged loss"  # not measured; also: independent
    # What the diagnostics of the mechanism say
    DIAGNOSTICS_DISAGREE = "diagnostics disagree"  # not separated
    DIAGNOSTIC_REPRODUCED = "diagnostic reproduced"  # args: its premise met; scale
    DIAGNOSTIC_GAP_CLOSES = "diagnostic trails, gap closes"  # not separated, trend to scale
    DIAGNOSTIC_TRAILS = "diagnostic trails"  # code suspect
    DIAGNOSTIC_OTHER = "diagnostic otherwise"  # args: its premise met, its verdict
    GAP_IN = "gap in the part"  # args: the part a diagnostic holds or removes
    GAP_NOT_IN = "gap not in the part"
    GAP_NOT_ONLY_IN = "gap not only in the part"
    NO_GAP_TO_PLACE = "no gap without to place"
    INDEPENDENT_ALIKE = "independent implementation ends alike"  # not the code
    INDEPENDENT_OTHERWISE = "independent implementation ends otherwise"  # code suspect
    # How a diagnostic was read
    READ = "read"
    NOT_MEASURED = "not measured"
    STALE_NOT_READ = "stale"
    DEPARTS_NOT_READ = "departs"
    UNMET_NOT_READ = "premise not met, not reproduced"


@dataclass(frozen=True)
class Reading:
    """What a rule concludes: a code, its parameters, the readings it rests on, and one read beside it."""

    code: R
    args: tuple = ()
    parts: tuple[Reading, ...] = ()
    also: Reading | None = None


def seed_values(section: dict, arm: str, metric: str) -> list[float]:
    """The metric of every seed of the arm that has it, in seed order."""
    seeds = section["results"].get(arm, {})
    return [seeds[s][metric] for s in sorted(seeds, key=int) if metric in seeds[s]]


def seed0(section: dict, arm: str) -> dict:
    return section["results"].get(arm, {}).get("0", {})


def stale_aer(c: Comparison, section: dict) -> bool:
    """Some run of the comparison measured its AER under a protocol older than the bench reads (measures.py's
    `oldest_current_protocol`), or was read by a runner that did not say."""
    for arm, metric in ((c.baseline, c.base_metric), (c.method, c.metric)):
        if metric.startswith("aer-"):
            seeds = [s for s in section["results"].get(arm.name, {}).values() if metric in s]
            if any(s.get(current_key(metric)) is not True for s in seeds):
                return True
    return False


def one_class(c: Comparison, section: dict) -> bool:
    """Some seed of either arm fine-tuned into an XNLI classifier that ignores its input."""
    seeds = [s for arm in c.arms for s in section["results"].get(arm.name, {}).values() if c.metric in s]
    return c.metric.startswith("xnli") and any(s.get(ONE_CLASS) for s in seeds)


def short_of_budget(c: Comparison, section: dict) -> list[tuple[str, float]]:
    """(arm, share of the FLOP budget it logged) for every trained arm's seed that stopped short of the budget."""
    budget = c.setup.budget.max_flops
    if not budget:
        return []
    short = []
    for arm in (a for a in c.arms if a.trained):
        for seed in section["results"].get(arm.name, {}).values():
            flops = seed.get("train", {}).get("flops")
            if flops is not None and flops < BUDGET_REACHED * budget:
                short.append((arm.name, flops / budget))
    return short


def comparison_row(c: Comparison, section: dict | None) -> dict:
    """The table row of one comparison (also written to the study's JSON)."""
    row = {"claim": c.id, "paper": c.paper, "statement": c.statement, "paper_number": c.paper_number}
    row |= {"metric": c.metric, "baseline_metric": c.base_metric, "direction": "higher" if c.direction > 0 else "lower"}
    row |= {"baseline": None, "method": None, "difference": None, "spread": None, "seeds": 0, "verdict": NOT_RUN}
    if section is None:
        return row
    base, meth = seed_values(section, c.baseline.name, c.base_metric), seed_values(section, c.method.name, c.metric)
    if c.baseline.trained and c.method.trained:  # paired by seed: the seeds both arms have
        base, meth = base[: len(meth)], meth[: len(base)]
    row |= {"baseline": base, "method": meth}  # an untrained arm (the start model) has one value for every seed
    if not base or not meth:
        return row | {"verdict": NOT_MEASURED}
    diff = difference(meth, base)
    row |= {"difference": diff.mean, "spread": diff.spread, "seeds": diff.seeds}
    if stale_aer(c, section):
        return row | {"verdict": STALE}
    if one_class(c, section):
        return row | {"verdict": ONE_CLASS_VERDICT}
    if short := short_of_budget(c, section):
        reached = ", ".join(f"{arm} logged {share:.0%}" for arm, share in short)
        return row | {"verdict": f"{INCONCLUSIVE}: unequal compute ({reached} of the FLOP budget)"}
    varies = (
        c.baseline.trained or c.method.trained or any(MEASURES[measure_of(k)].seeded for k in (c.metric, c.base_metric))
    )
    return row | {"verdict": verdict(diff, c.direction, c.rule.close, varies, c.rule.floor)}


def check_numbers(check: Check, section: dict) -> list[float] | None:
    """Seed 0's numbers for a check: [first, last] window means of a logged metric, [value] of a measured one."""
    results = seed0(section, check.arm)
    if check.key.startswith("log:"):
        pair = results.get("train", {}).get(check.key.removeprefix("log:"))
        return None if pair is None else list(pair)
    return None if check.key not in results else [results[check.key]]


def majority_of(check: Check, section: dict) -> float | None:
    """The majority-class accuracy a detector is held against: from the same arm's logged rate (last window)."""
    rate = seed0(section, check.arm).get("train", {}).get(check.rate_key) if check.rate_key else None
    return None if rate is None else majority_floor(rate[1])


def premise(check: Check, section: dict, floors: dict[str, float]) -> tuple[float, str, float, bool] | None:
    """(last value, what it is held against, that number, held) for a premise check; None when the check is no
    premise or is not measured."""
    numbers = check_numbers(check, section)
    if numbers is None:
        return None
    last = numbers[-1]
    if check.premise_max is not None:
        return last, "at most", check.premise_max, last <= check.premise_max
    if (majority := majority_of(check, section)) is not None:
        return last, "above majority", majority, beats_majority(last, majority)
    if check.premise_below_floor and (unigram := floors.get(check.floor)) is not None:
        return last, "below unigram", unigram, last < unigram
    return None


def unmet_premises(c: Comparison, section: dict) -> list[Check]:
    floors = section.get("floors", {})
    return [ch for ch in c.why.checks if (p := premise(ch, section, floors)) and not p[3]]


def mechanism_reading(counted: list[tuple[Comparison, dict, bool]]) -> Reading | None:
    """From the diagnostics of the mechanism (diagnostic, row, its premise met), in the listed order: the last
    one's verdict, with the trend of the same arms across budgets; settings whose last ones disagree separate
    nothing."""
    if not counted:
        return None
    last_of = {(d.baseline, d.method): r for d, r, _ in counted}
    if {REPRODUCED, NOT_REPRODUCED} <= {r["verdict"] for r in last_of.values()}:
        return Reading(R.DIAGNOSTICS_DISAGREE)
    last, row, met = counted[-1]
    same = [r for d, r, _ in counted if (d.baseline, d.method) == (last.baseline, last.method)]
    trend = compute_trend(last.direction, [(r["difference"], r["spread"]) for r in same])
    if row["verdict"] == REPRODUCED:
        return Reading(R.DIAGNOSTIC_REPRODUCED, (met,))
    if row["verdict"] == NOT_REPRODUCED:
        return Reading(R.DIAGNOSTIC_GAP_CLOSES if trend > 0 else R.DIAGNOSTIC_TRAILS)
    return Reading(R.DIAGNOSTIC_OTHER, (met, row["verdict"]))


def location_reading(d: Comparison, row: dict, rows: dict) -> Reading:
    """Whether the gap of the comparison without the hold lies in the part the diagnostic holds or removes."""
    part, _, reference = d.why.localises
    ref = rows.get(reference)
    if ref is None or ref["verdict"] != NOT_REPRODUCED:
        return Reading(R.NO_GAP_TO_PLACE, (part,))
    if row["verdict"] == NOT_REPRODUCED:
        larger = d.direction * (row["difference"] - ref["difference"]) <= 0
        return Reading(R.GAP_NOT_IN if larger else R.GAP_NOT_ONLY_IN, (part,))
    return Reading(R.GAP_IN, (part,))


def diagnostic_lines(study: Study, c: Comparison, rows: dict, loaded: dict) -> tuple[list[dict], list[Reading]]:
    """Each diagnostic's row (with its premise and how it is read) and the readings they give."""
    lines, counted, located = [], [], []
    for name in c.why.diagnostics:
        d = study.comparison(name)
        row, section = rows.get(name), loaded.get(d.section)
        line = {"diagnostic": d, "row": row, "unmet": None, "read": Reading(R.NOT_MEASURED)}
        lines.append(line)
        if row is None or row["difference"] is None or section is None:
            continue
        line["unmet"] = unmet = unmet_premises(d, section)
        line["read"] = Reading(R.STALE_NOT_READ if row["verdict"] == STALE else R.DEPARTS_NOT_READ)
        if row["verdict"] == STALE or d.why.departs:
            continue
        line["read"] = Reading(R.READ)
        if d.why.localises:
            located.append((d, row))
        elif not unmet or row["verdict"] == REPRODUCED:  # an effect shown without its premise still shows
            counted.append((d, row, not unmet))
        else:
            line["read"] = Reading(R.UNMET_NOT_READ)
    readings = [mechanism_reading(counted), *(location_reading(d, r, rows) for d, r in located)]
    return lines, [r for r in readings if r]


def implementation_state(curve: list[dict], floor: float) -> dict:
    """Where one implementation's logged RTD windows end, judged as the premises are."""
    last = curve[-1]
    majority = majority_floor(last["replaced"])
    detects = beats_majority(last["discriminator_accuracy"], majority)
    return {
        "accuracy": last["discriminator_accuracy"],
        "majority": majority,
        "since": first_step_beating_majority(curve) if detects else None,
        "generator_loss": last["generator_loss"],
        "state": (detects, last["generator_loss"] < floor),
    }


def independent_states(result: dict) -> tuple[dict[str, dict], Reading]:
    """Each implementation's end state, and the reading: the same state of both premises clears the code."""
    states = {name: implementation_state(curve, result["unigram_floor"]) for name, curve in result["curves"].items()}
    same = len({s["state"] for s in states.values()}) == 1
    return states, Reading(R.INDEPENDENT_ALIKE if same else R.INDEPENDENT_OTHERWISE)


def reading(study: Study, c: Comparison, rows: dict, loaded: dict, independent: dict | None = None) -> Reading:
    """The rule's conclusion for a comparison that is not reproduced (`independent`: its reference result)."""
    section, row = loaded[c.section], rows[c.id]
    if (
        c.why.departs
        and (ref := rows.get(c.why.departs[1]))
        and ref["difference"] is not None
        and ref["verdict"] != STALE
    ):
        departed = row["verdict"] == NOT_REPRODUCED and ref["verdict"] != NOT_REPRODUCED
        return Reading(R.DEPARTURE_EXPLAINS if departed else R.DEPARTURE_DOES_NOT)
    floors = section.get("floors", {})
    also = independent_states(independent)[1] if independent else None
    if unmet_premises(c, section):
        _, readings = diagnostic_lines(study, c, rows, loaded)
        return Reading(R.PREMISE_NOT_MET, parts=tuple(readings), also=also)
    losses = [
        (ch, n)
        for ch in c.why.checks
        if (n := check_numbers(ch, section)) and ch.key.startswith("log:") and "loss" in ch.key
    ]
    at_floor = [n[-1] >= floors[ch.floor] for ch, n in losses if ch.floor in floors]
    falls = [n[-1] < n[0] for ch, n in losses if ch.arm == c.method.name]
    if at_floor and all(at_floor) and (falling := budget.still_falling(c, section)):
        return Reading(R.STILL_FALLING, tuple(falling))  # a longer run first, not "scale"
    if at_floor and all(at_floor):
        same = [rows[x.id] for x in same_comparison(study, c)]
        trend = compute_trend(
            c.direction, [(r["difference"], r["spread"]) for r in same if r["difference"] is not None]
        )
        return Reading(R.AT_FLOOR_GAP_GROWS if trend < 0 else R.AT_FLOOR)
    if falls and all(falls):
        return Reading(R.LOSS_FALLS, also=also)
    if falls:
        return Reading(R.LOSS_FLAT)
    return Reading(R.NO_LOSS, also=also)


def same_comparison(study: Study, c: Comparison) -> list[Comparison]:
    """The same comparison (arms, start, metric) at every budget of the same kind, smallest first."""
    key = lambda x: (x.paper, x.metric, x.base_metric, x.baseline, x.method, x.setup.start, bool(x.setup.budget.steps))  # noqa: E731
    return sorted((x for x in study.comparisons if key(x) == key(c)), key=lambda x: x.setup.budget.amount())
