"""A study as data, as a paper's experiment table is: arms (start, recipe, overrides), a budget, the measures of
bench/measures.py, and comparisons with the rule that turns them into a verdict (bench/verdict.py); and a selection
among candidates (`Selection`: checkpoints of arms and arms derived from them, chosen on a dev split by a rule fixed
before the runs, reported on the test split apart; bench/selection.py), which the GPU aligner runs.

A comparison sets two arms against each other on one metric: the method against the same start continued with
the baseline objectives for the same budget, or trained from scratch at the same FLOPs. Comparisons of one section
share their setup and their arms: an arm is trained once per seed and measured once, whatever number of
comparisons read it. `python -m bench.run STUDY SECTION` trains and measures a section; `python -m bench.run STUDY
--page` draws the study's page from what the runs saved.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.arm import SMALL_BASE, Arm, Budget
from bench.measures import MEASURES, measure_of

SECTION_LIMIT_MINUTES = 45.0
"""Every section, seed 1 and evaluation included, fits in 45 CPU-minutes: a sitting on the 2-core machine."""
MEASURE_SCALE_SCRATCH = 1.7
"""Measures of arms from scratch without a preset (the recipes' 6 x 384) take this much longer than small-base's."""
TRAIN = "train"


@dataclass(frozen=True)
class Check:
    """A premise or mechanism measurement shown for a comparison that is not reproduced."""

    label: str
    arm: str
    key: str
    """`log:NAME`: a logged training metric of the arm (mean of its first and of its last 10 values); otherwise a
    metric of the arm (bench/measures.py)."""
    reference: str = ""
    """What the number is compared with, in words (e.g. `chance: ln(K+1) = 8.32`)."""
    premise_max: float | None = None
    """For a premise: the largest value at which it holds (e.g. the worst AER of the paper's start model)."""
    floor: str | None = None
    """`unigram` / `unigram:en`: the unigram floor a loss is shown against (bench/verdict.py); `majority:<logged
    rate>`: a detector's accuracy, whose premise is to beat predicting the majority class everywhere."""
    premise_below_floor: bool = False
    """A loss with a unigram `floor` whose premise is to end below it (an RTD generator: XLM-E §3.1)."""

    @property
    def rate_key(self) -> str | None:
        """For a detector check: the logged rate its majority-class floor comes from."""
        return self.floor.removeprefix("majority:") if self.floor and self.floor.startswith("majority:") else None


@dataclass(frozen=True)
class Setup:
    """What the comparisons of one section share."""

    budget: Budget
    start: str | None = SMALL_BASE
    """The start model (None: from scratch); measured once per section."""
    languages: tuple[str, ...] | None = None
    """Train on these languages only (None: every language of the prepared folder)."""
    data: str | None = None
    """The prepared folder, when the start's vocabulary is not the study's (`bench.run --data` otherwise); the
    runner prepares it with the start's tokenizer when it is missing."""
    device: str = "cpu"
    """`cuda`: sized for a GPU; `bench.run` runs it with `--device cuda` on a GPU."""


@dataclass(frozen=True)
class Investigation:
    """What the page shows for a comparison that is not reproduced, beside a person's note."""

    checks: tuple[Check, ...] = ()
    code: tuple[str, ...] = ()
    """pytest node ids of the tests that fail if the mechanism is wired otherwise than the paper has it."""
    diagnostics: tuple[str, ...] = ()
    """Ids of comparisons that separate code from scale for this one: the same mechanism where its premise is met."""
    localises: tuple[str, str, str] = ()
    """For a diagnostic that holds or removes a part of the model: (the part; what it does with it; the id of the
    comparison without)."""
    departs: tuple[str, str] = ()
    """For a diagnostic set up otherwise than the paper: (how; the id of the same one at the paper's setting)."""
    independent: str = ""
    """A JSON of the method trained by polyalign and by an independent implementation on the same batches."""


@dataclass(frozen=True)
class Rule:
    close: float = 2.0
    """Points: a difference below this after seed 0 gets a second seed."""
    floor: float = 0.5
    """A difference at or under this is inconclusive whatever the seeds say (the test set's sampling error:
    Tatoeba-14's 14,000 queries per direction give one binomial standard error of 0.1-0.4 points)."""


@dataclass(frozen=True)
class Comparison:
    id: str
    section: str
    setup: Setup
    paper: str
    statement: str
    paper_number: str
    """The paper's own number, quoted with its table."""
    baseline: Arm
    method: Arm
    metric: str
    """The decisive metric (bench/measures.py METRICS)."""
    direction: int
    """+1: the method should score higher than the baseline; -1: lower."""
    baseline_metric: str | None = None
    """Compare the method's `metric` with this metric of the baseline arm (e.g. two aligners on one model)."""
    measures: tuple[str, ...] = ()
    """Metrics reported beside the decisive one."""
    rule: Rule = Rule()
    why: Investigation = Investigation()

    def __post_init__(self) -> None:
        if self.direction not in (1, -1):
            raise ValueError(f"comparison {self.id}: direction={self.direction}: use +1 or -1")
        for key in (self.metric, self.base_metric, *self.measures):
            measure_of(key)

    @property
    def base_metric(self) -> str:
        return self.baseline_metric or self.metric

    @property
    def arms(self) -> tuple[Arm, ...]:
        return (self.baseline,) if self.baseline == self.method else (self.baseline, self.method)

    def metrics_of(self, arm: Arm) -> set[str]:
        keys = set(self.measures)
        keys |= {self.base_metric} if arm == self.baseline else set()
        return keys | ({self.metric} if arm == self.method else set())


@dataclass
class Section:
    name: str
    comparisons: list[Comparison] = field(default_factory=list)

    @property
    def setup(self) -> Setup:
        return self.comparisons[0].setup

    @property
    def arms(self) -> list[Arm]:
        """Every arm once (the start model first, when the section has one)."""
        out: dict[str, Arm] = {}
        if self.setup.start is not None:
            out["start"] = Arm("start", None, init_from=self.setup.start)
        for comparison in self.comparisons:
            for arm in comparison.arms:
                out.setdefault(arm.name, arm)
        return list(out.values())

    def checks(self) -> list[Check]:
        return [c for comparison in self.comparisons for c in comparison.why.checks]

    def metrics_of(self, arm: Arm) -> set[str]:
        keys = set().union(*(c.metrics_of(a) for c in self.comparisons for a in c.arms if a.name == arm.name))
        keys |= {c.key for c in self.checks() if c.arm == arm.name and not c.key.startswith("log:")}
        if arm.name == "start":  # the start model: every measure of the section's trained arms but translation
            keys |= set().union(*(self.metrics_of(a) for a in self.arms if a.trained))
            keys -= {k for k in keys if not MEASURES[measure_of(k)].of_start}
        return keys

    def measures_of(self, arm: Arm) -> list[str]:
        return sorted({measure_of(k) for k in self.metrics_of(arm)})

    def training_key(self, arm: Arm) -> tuple:
        """What makes two sections' runs of an arm one training, measured once (the runner keeps runs under a hash
        of its `key_text`): the arm and the section's budget and languages; the start model's measures, the
        languages. The arm it continues is a seventh field, present only when there is one."""
        if not arm.trained:
            return ("start", arm.init_from, self.setup.languages)
        key = (arm.recipe, arm.overrides, arm.init_from, arm.preset, self.setup.budget, self.setup.languages)
        return key + ((self.training_key(arm.continues),) if arm.continues else ())

    def work(self) -> set[tuple]:
        """(training key, TRAIN) and (training key, measure) for everything this section trains and measures."""
        out = set()
        for arm in self.arms:
            key = self.training_key(arm)
            out |= {(key, m) for m in self.measures_of(arm)}
            out |= {(self.training_key(a), TRAIN) for a in arm.lineage if a.trained}
        return out

    def estimated_minutes(self, seeds: int = 2, earlier: set[tuple] = frozenset()) -> float:
        """Worst case: every trained arm for `seeds` seeds, trained and measured; what `earlier` sections trained
        or measured (their `work()`) costs nothing."""
        total, budget = 0.0, self.setup.budget
        for arm in self.arms:
            key = self.training_key(arm)
            scale = MEASURE_SCALE_SCRATCH if self.setup.start is None and not arm.preset else 1.0
            new = [m for m in self.measures_of(arm) if (key, m) not in earlier]
            measure = scale * sum(MEASURES[m].minutes_for(self.setup.languages) for m in new)
            if not arm.trained:
                total += measure
                continue
            training = 0.0
            for trained in (a for a in arm.lineage if (self.training_key(a), TRAIN) not in earlier):
                total += 3 * trained.seconds_per_step / 60 if budget.max_flops else 0.0  # the FLOP probe
                training += budget.estimated_steps(trained) * trained.seconds_per_step / 60
            total += seeds * (training + measure)
        return total

    def problems(self, earlier: set[tuple] = frozenset(), limit: float = SECTION_LIMIT_MINUTES) -> list[str]:
        """What makes the section unrunnable as one A/B: another setup, one arm name for two arms, another preset
        or start, a budget over the CPU limit."""
        problems, seen = [], {}
        for c in self.comparisons[1:]:
            for name in ("start", "languages", "budget", "data"):
                if getattr(c.setup, name) != getattr(self.setup, name):
                    problems.append(f"{self.name}: {c.id} has another {name} than {self.comparisons[0].id}")
        preset = self.comparisons[0].method.preset
        for arm in (a for c in self.comparisons for a in c.arms):
            if seen.setdefault(arm.name, arm) != arm:
                problems.append(f"{self.name}: two different arms are named {arm.name}")
            if arm.trained and arm.preset != preset:
                problems.append(f"{self.name}: arm {arm.name} has preset {arm.preset}, the method another")
            if arm.trained and (arm.init_from is None) != (self.setup.start is None):
                problems.append(f"{self.name}: arm {arm.name} starts from {arm.init_from}, not {self.setup.start}")
        if (minutes := self.estimated_minutes(earlier=earlier)) > limit:
            problems.append(f"{self.name}: about {minutes:.0f} CPU-minutes > {limit:g}")
        return problems


# ---------------------------------------------------------------------------------------------------------
# A selection: candidates measured under one protocol, one chosen on the dev split (bench/selection.py), run by the
# GPU aligner (bench/perf/gpu/aligner.py) through the selection's steps (bench/selection_steps.py)


@dataclass(frozen=True)
class Candidate(Arm):
    """An arm of a selection: checkpointed along its schedule, each checkpoint a candidate."""

    note: str = ""
    """What the arm is, in words (its record keeps it)."""
    rule_layer: bool = False  # self-trains and is measured at the layer rule's layer too
    steps_per_minute: float = 0.0
    """The card's measured training rate: such an arm runs only when its schedule and `Selection.reserve_s` fit the
    step's time left, else it is recorded as not run (0: it always runs; a call cut at its budget is resumed)."""


@dataclass(frozen=True)
class Protocol:
    """How every candidate is measured (AER, %): its decisive numbers at one layer, encoding and extraction method."""

    layer: int | None
    """None: the layer rule's layer only (`Selection.rule_layers`)."""
    encoding: str
    method: str

    def key(self, half: str = "") -> str:
        """The results' key of the protocol's scores: `encoding/method`, `/dev` or `/test` for a half."""
        return f"{self.encoding}/{self.method}" + (f"/{half}" if half else "")


@dataclass(frozen=True)
class Derived:
    """An arm made from a trained one without training by WiSE-FT (Wortsman et al. 2022): (1 - weight) x the start +
    weight x the base."""

    weight: float
    base: str = ""
    """The arm it is made from, at its best checkpoint on the dev split; "": the best trained candidate of all."""

    def name_for(self, base: str) -> str:
        """Named after the arm it is made from (`BASE-wise-WEIGHT`), so that another base makes another arm and none
        is overwritten."""
        return f"{base}-wise-{self.weight:g}"


@dataclass(frozen=True)
class Selection:
    """Arms trained from one start with a checkpoint every `save_every` steps, each checkpoint and each derived arm a
    candidate; the rule picks one on the gold sets' dev halves (bench/selection.py `choose`)."""

    start: str
    data: str
    """The prepared folder the arms train on."""
    runs: str
    gold: str
    """The folder of the gold sets."""
    gold_sets: tuple[str, ...]
    protocol: Protocol
    arms: tuple[Candidate, ...]
    steps: int
    """The schedule's length."""
    save_every: int
    derived: tuple[Derived, ...] = ()
    rule_layers: tuple[int, ...] = ()
    """The selection's rules (bench/selection.py: rule_layer, chosen_method): the layer among these with the start's
    lowest mean dev-half AER is a candidate layer beside the protocol's, and the offered method is chosen on the dev
    halves; (): neither."""
    below_start_everywhere: bool = True
    """The rule: among the candidates below the start on every dev half the lowest mean AER (one aligner serves
    every language); the lowest mean of all when none is, or when this is False."""
    device: str = "cpu"
    """`cuda`: its models are scored on the GPU where there is one (its trainings pick their device themselves)."""
    each_arm: bool = False
    """The rule is applied to each trained arm among its own candidates (its checkpoints and what is derived from it),
    the first arm's choice offered and the others' reported beside (the GPU check's aligner); False: among all."""
    reserve_s: float = 0.0
    """Seconds of a step's budget kept after an arm's training for its scores (`Candidate.steps_per_minute`)."""


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    comparisons: tuple[Comparison, ...]
    limit_minutes: float = SECTION_LIMIT_MINUTES
    """CPU-minutes a section may take (45 by default; the long studies, such as the best recipe, more)."""
    tables: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Extra tables of the page: (title, metric keys), one row per arm of every section."""

    def sections(self) -> dict[str, Section]:
        out: dict[str, Section] = {}
        for c in self.comparisons:
            out.setdefault(c.section, Section(c.section)).comparisons.append(c)
        return out

    def comparison(self, id: str) -> Comparison:
        return next(c for c in self.comparisons if c.id == id)

    def estimates(self, seeds: int = 2) -> dict[str, float]:
        """CPU-minutes of every section run in the listed order: what an earlier one did is not counted again."""
        done: set[tuple] = set()
        out = {}
        for name, section in self.sections().items():
            out[name] = section.estimated_minutes(seeds, done)
            done |= section.work()
        return out
