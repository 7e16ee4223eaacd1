"""Studies whose runs were measured by scripts of their own and whose saved results the one harness reads: the
best recipe, the preset sweep, the foundation, PPA's arms, ERNIE-M's Table 6, VECO's plug-in fine-tuning, word
alignment, XTREME-style fine-tuning and the evaluation protocols.

Each reads as its shell script did: the same recipes, overrides, starts and budgets. Their measurements were
saved by those scripts (bench/results/NAME.json and its folder, kept as they are) and copied into the harness's
section files (bench/results/NAME/sections/*.json, each naming its source); what people concluded from them is
in bench/studies/notes/NAME.json.
"""

from __future__ import annotations

from bench.arm import SMALL_BASE, Arm, Budget
from bench.claim import claim
from bench.studies.evidence.common import ALIGNED_START, CONTINUED
from bench.study import Comparison, Rule, Setup, Study

LOSS = Rule(close=0.1, floor=0.0)  # losses in nats: no test-set sampling error, a second seed under 0.1
ISSUE = "the issue's question (no paper number)"


def versus(study, section, setup, pairs, metric, direction, statement, paper=None, paper_number=ISSUE, rule=Rule(),
           **fields):  # fmt: skip
    """One claim per (baseline, method) on the same metric, named after the method (and the baseline, when two pairs
    share a method)."""
    setup_fields = {"budget": setup.budget, "start": setup.start, "languages": setup.languages, "data": setup.data,
                    "device": setup.device}  # fmt: skip
    return tuple(
        claim(
            f"{study}-{m.name}" if len(pairs) == len({x for _, x in pairs}) else f"{study}-{m.name}-vs-{b.name}",
            section, paper or study, statement.format(m=m.name, b=b.name), paper_number, b, m, metric, direction,
            close=rule.close, floor=rule.floor, **setup_fields, **fields,
        )
        for b, m in pairs
    )  # fmt: skip


# The best recipe (bench/results/best.md): stage 1 is `polyalign pretrain best-sentences` (50 minutes from random
# init: the sentence-aligned start of the evidence study), stage 2 `best-words` for 60 minutes from it; the arms that
# chose stage 2 run 11 minutes each from stage 1 and are chosen on the dev split.
_best = [
    Arm(f"words-{x}", f"bench/recipes/best-words-{x}.yaml", init_from=ALIGNED_START, seconds_per_step=2.7)
    for x in ("contrast", "tlm", "dwa", "hard")
]
BEST = Study(
    "best",
    "The best aligned encoder 2 CPU-hours can train",
    (
        *versus(
            "best",
            "stage-2",
            Setup(Budget(minutes=60), ALIGNED_START),
            [
                (
                    Arm("start", None, init_from=ALIGNED_START),
                    Arm("best-words", "best-words", init_from=ALIGNED_START, seconds_per_step=3.0),
                )
            ],
            "tatoeba14@dev",
            1,
            "stage 2 ({m}) lifts retrieval over stage 1",
            paper="best",
        ),
        *versus(
            "best",
            "ablation",
            Setup(Budget(minutes=11), ALIGNED_START),
            [(_best[0], arm) for arm in _best[1:]],
            "dev@best",
            1,
            "{m} beats contrast alone at equal minutes (chosen on dev)",
            paper="best",
        ),
    ),
    limit_minutes=240,
    tables=(
        ("Retrieval and word alignment", ("tatoeba14@dev", "dev@best", "aer-ot@default", "steps", "train_minutes")),
    ),
)

# Preset sweep (bench/results/preset.md): `xlm` from scratch for 4 training minutes per config, one seed.
_small = ("model.hidden_size=256", "model.num_heads=4", "model.ffn_size=1024")
_preset = {
    "6x384-5e-4": (),
    "6x384-1e-3": ("trainer.lr=1e-3",),
    "4x256-1e-3": (*_small, "model.num_layers=4", "trainer.lr=1e-3"),
    "4x256-2e-3": (*_small, "model.num_layers=4", "trainer.lr=2e-3"),
    "4x256-1e-3-4k": (
        *_small,
        "model.num_layers=4",
        "trainer.lr=1e-3",
        "data.mono.max_tokens=4096",
        "data.parallel.max_tokens=4096",
    ),
    "2x256-1e-3": (*_small, "model.num_layers=2", "trainer.lr=1e-3"),
}
_configs = [
    Arm(
        n,
        "xlm",
        ("trainer.max_steps=100000", "trainer.warmup_steps=30", "trainer.log_every=5", "trainer.save_every=100000", *o),
        None,
        seconds_per_step=2.0,
    )
    for n, o in _preset.items()
]
PRESET = Study(
    "preset",
    "Preset sweep: the model size, learning rate and batch that learn fastest per CPU-minute",
    versus(
        "preset",
        "sweep",
        Setup(Budget(minutes=4), None),
        [(_configs[0], c) for c in _configs[1:]],
        "mlm-loss@end",
        -1,
        "{m} ends with a lower MLM loss than the `xlm` recipe's {b} after 4 minutes",
        rule=LOSS,
    ),
    limit_minutes=60,
    tables=(("Runs", ("mlm-loss@end", "steps", "tokens_per_s", "parameters")),),
)


# Foundation (bench/results/foundation.md): `mlm` and `xlm` from scratch for the same 30 idle minutes, on the
# XNLI-15 languages (`--data bench/work/prepared-xnli15`).
def _steps_for(steps: int) -> tuple[str, ...]:
    """The minutes of an idle machine as a step budget (measured step times), so that the result does not depend on
    what else shares the machine: the trainer's minute limit is lifted (0)."""
    return (f"trainer.max_steps={steps}", f"trainer.warmup_steps={steps // 10}", "trainer.max_minutes=0")


_scratch = ("trainer.lr=7e-4", "trainer.save_every=100", "trainer.keep_checkpoints=0")
FOUNDATION = Study(
    "foundation",
    "Foundation: `mlm` vs `xlm` pre-trained for the same wall-clock budget",
    versus(
        "foundation",
        "mlm-vs-xlm",
        Setup(Budget(minutes=30), None),
        [
            (
                Arm("mlm", "mlm", (*_scratch, *_steps_for(620)), None, seconds_per_step=2.9),
                Arm("xlm", "xlm", (*_scratch, *_steps_for(545)), None, seconds_per_step=3.3),
            )
        ],
        "tatoeba14@default",
        1,
        "TLM ({m}) aligns better than MLM alone ({b}) at equal minutes",
        paper="XLM",
        paper_number="XLM Table 1: TLM adds 3.6 XNLI points over MLM",
    ),
    limit_minutes=140,
    tables=(("Runs", ("tatoeba14@default", "steps", "train_flops", "final_loss", "tokens_per_s_bf16")),),
)

# PPA's arms (bench/results/ppa.md): `ppa` from small-base for 300 steps, the calibration settings and one change each.
_cal = (
    "trainer.lr=2e-4",
    "trainer.log_every=1",
    "objectives.0.config.queue_size=4096",
    "objectives.0.config.momentum=0.99",
    "objectives.0.config.pooling=mean",
)
_hi, _short, _notlm = ("trainer.lr=1e-3",), ("data.parallel.min_length=1",), ("objectives.0.config.tlm=false",)
_neg, _m90 = ("objectives.0.config.batch_negatives=true",), ("objectives.0.config.momentum=0.9",)
_inbatch = ("objectives.0.name=contrast", "objectives.0.config={temperature: 0.05, pooling: mean}")
_ppa = {
    "base": (),
    "lr": _hi,
    "notlm": _hi + _notlm,
    "short": _hi + _short,
    "inbatch": _hi + _inbatch,
    "nolag": _hi + _notlm + ("objectives.0.config.momentum=0",),
    "noproj": _hi + _notlm + ("objectives.0.config.projection_size=0",),
    "batchneg": _hi + _short + _neg,
    "m90notlm": _hi + _short + _neg + _m90 + _notlm,
    "m90": _hi + _short + _neg + _m90,
    "m90queue": _hi + _short + _m90 + _notlm,
}
RANDOM_INIT = (
    "bench/work/ppa/random-init"  # small-base's size and tokenizer, untrained (best-sentences at lr 0, 1 step)
)
_steps = Budget(steps=300)


def _ppa_from(start: str, section: str, arms: dict[str, tuple[str, ...]], statement: str) -> tuple[Comparison, ...]:
    """`ppa` arms (the calibration settings and each arm's overrides) trained from `start`, against `start`."""
    methods = [Arm(n, "ppa", _cal + o, start, seconds_per_step=3.0) for n, o in arms.items()]
    pairs = [(Arm("start", None, init_from=start), m) for m in methods]
    return versus(
        "ppa", section, Setup(_steps, start), pairs, "tatoeba14@last", 1, statement, paper="PPA", measures=("dev@best",)
    )


PPA = Study(
    "ppa",
    "PPA from small-base: MoCo + TLM on the representation it trains",
    (
        *_ppa_from(SMALL_BASE, "arms", _ppa, "{m} lifts Tatoeba-14 (mean-pooled last layer) over the start"),
        *_ppa_from(ALIGNED_START, "aligned", {"aligned": ()}, "{m}: MoCo + TLM from a sentence-aligned start"),
        *_ppa_from(RANDOM_INIT, "scratch", {"scratch": _hi + _inbatch}, "{m}: in-batch ranking from random init"),
    ),
    limit_minutes=420,
)

# ERNIE-M Table 6 at 40 steps of 2,048 tokens from small-base (bench/results/ernie-m.md); 120 and 250 steps with a
# second seed are the evidence study's.
_ern = ("trainer.lr=2e-4", "trainer.log_every=5", "data.mono.max_tokens=2048", "data.parallel.max_tokens=2048")
_exp = [
    Arm(
        f"exp{i}",
        f"ernie-m-exp{i}",
        _ern + (("objectives.2.start_step={half}",) if i == 4 else ()),
        seconds_per_step=0.6,
    )
    for i in range(1, 5)
]
ERNIE_M = Study(
    "ernie-m",
    "ERNIE-M at our scale: Table 6 ablation",
    versus(
        "ernie-m",
        "table-6",
        Setup(Budget(steps=40)),
        [(_exp[0], _exp[1]), (_exp[1], _exp[2]), (_exp[1], _exp[3]), (_exp[2], _exp[3])],
        "tatoeba14@default",
        1,
        "{m} beats {b} on retrieval (Table 6)",
        paper="ERNIE-M",
        paper_number="Table 6 XNLI: exp2 76.3, exp3 76.1, exp4 76.6",
        measures=("aer-ot@default",),
    ),
    tables=(("Table 6 runs", ("tatoeba14@default", "aer-ot@default", "pseudo", "pseudo-copy", "steps")),),
)

# VECO's recipe as it ships, continued from small-base for 60 steps (cross-attention alone for the first 6, §4),
# then plug-in fine-tuning on XNLI (§3.1) at smoke scale, against small-base's zero-shot XNLI at the same scale.
VECO = Study(
    "veco",
    "VECO continued from small-base, and plug-in fine-tuning (smoke scale)",
    versus(
        "veco",
        "plug-in",
        Setup(Budget(steps=60)),
        [
            (
                Arm("start", None),
                Arm(
                    "veco",
                    "veco",
                    (*CONTINUED[1:], "trainer.lr=5e-4", "trainer.train_only_until={warmup}"),
                    seconds_per_step=1.4,
                ),
            )
        ],
        "xnli-plug-in",
        1,
        "plug-in fine-tuning of {m} (translate-train-all) beats the start's zero-shot XNLI",
        paper="VECO",
        paper_number="Table 2: XNLI translate-train-all 79.9 (large)",
        baseline_metric="xnli",
        rule=Rule(floor=1.5),
    ),
    tables=(("Runs", ("xnli", "xnli-plug-in", "xnli-plug-in/gap", "steps")),),
)

# Word alignment (bench/results/alignment.md): the foundation `xlm` run continued 3 idle minutes with MLM + TLM and
# with MLM + TLM + DWA (same seed and batches), AER of all three on the 7 gold sets (and eflomal's, in its JSON).
FOUNDATION_XLM = "bench/work/runs/xlm"
_cont = ("trainer.lr=2e-4", "trainer.save_every=1000")
ALIGNMENT = Study(
    "alignment",
    "Word alignment: AER of polyalign models and eflomal",
    limit_minutes=60,
    comparisons=tuple(
        c
        for metric in ("aer-ot@default", "aer-argmax@default", "aer-itermax@default")
        for c in versus(
            f"alignment-{metric.split('@')[0]}",
            "continued",
            Setup(Budget(minutes=3), FOUNDATION_XLM),
            [
                (
                    Arm("xlm-continued", "xlm", (*_cont, *_steps_for(54)), FOUNDATION_XLM, seconds_per_step=3.3),
                    Arm("xlm-align", "xlm-align", (*_cont, *_steps_for(46)), FOUNDATION_XLM, seconds_per_step=3.85),
                )
            ],
            metric,
            -1,
            "DWA ({m}) lowers AER vs MLM + TLM continued for the same minutes",
            paper="XLM-Align",
            paper_number="Table 2 OT AER avg: XLM-R 22.64 -> XLM-Align 21.05",
        )
    ),
)

# XTREME-style fine-tuning of the foundation checkpoints (bench/results/xtreme.md): measured, not trained.
XTREME = Study(
    "xtreme",
    "XTREME-style fine-tuning: foundation checkpoints `mlm` vs `xlm` (cross-lingual transfer)",
    tuple(
        c
        for task in ("xnli", "ner", "pos", "pawsx", "qa")
        for c in versus(
            f"xtreme-{task}",
            "foundation",
            Setup(Budget(steps=0), None),
            [(Arm("mlm", None, init_from="bench/work/runs/mlm"), Arm("xlm", None, init_from="bench/work/runs/xlm"))],
            f"xtreme-{task}",
            1,
            f"{task}: TLM ({{m}}) transfers better than MLM alone ({{b}})",
            paper="XLM",
            paper_number="XLM Table 1: TLM adds 3.6 XNLI points over MLM",
            measures=(f"xtreme-{task}",),
        )
    ),
    limit_minutes=150,
)

# Evaluation protocols on small-base (bench/results/evaluation.md): ratio-margin against cosine retrieval.
EVALUATION = Study(
    "evaluation",
    "Evaluation protocols, measured on small-base",
    versus(
        "evaluation",
        "protocols",
        Setup(Budget(steps=0), None),
        [(Arm("small-base", None, init_from=SMALL_BASE), Arm("small-base", None, init_from=SMALL_BASE))],
        "tatoeba14-margin@default",
        1,
        "ratio-margin scores retrieve better than cosine on {m}",
        paper="Artetxe & Schwenk 2019",
        paper_number="Table 1 (BUCC): margin beats cosine",
        baseline_metric="tatoeba14@default",
        measures=("bucc-f1",),
    ),
)

STUDIES = (BEST, PRESET, FOUNDATION, PPA, ERNIE_M, VECO, ALIGNMENT, XTREME, EVALUATION)
