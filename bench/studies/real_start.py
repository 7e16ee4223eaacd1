"""The papers' continued-training claims from a real multilingual encoder: multilingual-e5-small
(`polyalign import-e5`), the start the evidence study's small-base could not be (Tatoeba-14 ~90 where small-base
has 1.6; DWA's self-labels at AER ~37 where small-base's are at 81).

Every arm continues the same start for the same steps on the same data (all 24 languages of ../shared/data/train,
prepared with the start's tokenizer); the sections differ only in what they measure. What was concluded from each
is a note in bench/studies/notes/real-start.json.
"""

from __future__ import annotations

from bench.arm import Arm
from bench.studies.evidence.common import DWA_CODE, OT_CODE, RTD_CODE
from bench.studies.evidence.xlm_e import detectors, generators
from bench.studies.real_start_common import COLD, CONTINUED, CONTINUED_COLD, E5, START, XNLI15, claim
from bench.studies.warm import COLD_CLAIMS, WARM_CLAIMS
from bench.study import Check, Study

MLM_TLM = Arm("mlm-tlm", "xlm", CONTINUED_COLD, E5, seconds_per_step=3.2)
DWA = Arm("mlm-tlm-dwa", "xlm-align", CONTINUED_COLD, E5, seconds_per_step=4.5)
# The same two arms from the warm start, the trainer's default (200 head-only steps at lr 1e-2 first).
MLM_TLM_WARM = Arm("mlm-tlm-warm", "xlm", CONTINUED, E5, seconds_per_step=3.2)
DWA_WARM = Arm("mlm-tlm-dwa-warm", "xlm-align", CONTINUED, E5, seconds_per_step=4.5)
# e5 comes without an MLM head. A diagnostic of what the new head does to the encoder: the head trained alone first
# (the encoder frozen, so no gradient reaches it; at lr 1e-2 its MLM loss ends at 8.4 nats, below the 9.1 where
# `MLM_TLM`'s cold head ends: the run's metrics.jsonl), then the same MLM + TLM as `MLM_TLM` from that run.
HEAD_ONLY = Arm(
    "mlm-head-only",
    "xlm",
    (*CONTINUED_COLD, "trainer.lr=1e-2", "trainer.train_only=[lm_head]"),
    E5,
    seconds_per_step=1.2,
)
MLM_TLM_WARM_HEAD = Arm("mlm-tlm-warm-head", "xlm", CONTINUED, E5, seconds_per_step=3.2, continues=HEAD_ONLY)
# XLM-E continued: the discriminator is the encoder, the generator a third of its depth (Table 6: 4 of 12 layers)
# started as a copy of the encoder's first 4 layers; e5's absolute positions kept (the gated relative bias would be
# new weights: `position_bias=none`).
_XLM_E = (
    "model.absolute_positions=true",
    "model.position_bias=none",
    *(f"objectives.{i}.config.{k}" for i in (0, 1) for k in ("generator_layers=4", "generator_init=model")),
)
XLM_E = Arm("mrtd-trtd", "xlm-e", (*CONTINUED_COLD, *_XLM_E), E5, seconds_per_step=4.0)
# The generators' MLM heads (new in a copy of e5's first 4 layers) trained alone first, as MLM_TLM_WARM's
XLM_E_WARM = Arm("mrtd-trtd-warm", "xlm-e", (*CONTINUED, *_XLM_E), E5, seconds_per_step=4.0)
# PPA: MoCo + TLM at PPA's lr 3e-5 and 32 pairs a batch (the paper's 128 for CPU time); the key encoder's momentum
# 0.9 and the batch's own keys as negatives, as the evidence study's `ppa` arm (200 steps are 20 time constants
# at 0.9, as PPA's ~20,000 steps are at 0.999).
_PPA = (
    "trainer.lr=5e-5",
    "data.parallel.max_examples=32",
    "data.parallel.min_length=1",
    "objectives.0.config.queue_size=4096",
    "objectives.0.config.momentum=0.9",
    "objectives.0.config.batch_negatives=true",
)
# Pooling stays the recipe's mean, not PPA's [CLS] (§2.1): e5 was trained to mean-pool (its model card), so its
# first token never learned to sum up a sentence, as small-base's did not (bench/results/ppa.md).
PPA = Arm("moco-tlm", "ppa", (*_PPA, COLD), E5, seconds_per_step=5.0)
_TLM_ONLY = "objectives=[{name: tlm, config: {style: ppa}}]"
PPA_TLM = Arm(  # Table 5's -MoCo: PPA's TLM alone on the same batches
    "tlm", "ppa", (*_PPA[:3], _TLM_ONLY, COLD), E5, seconds_per_step=2.0
)
# TLM's head trained first, on 1,024-token batches as the other arms' (the warm-up reads data.mono)
_WARMUP = "data.mono.max_tokens=1024"
PPA_WARM = Arm("moco-tlm-warm", "ppa", (*_PPA, _WARMUP), E5, seconds_per_step=5.0)
PPA_TLM_WARM = Arm("tlm-warm", "ppa", (*_PPA[:3], _TLM_ONLY, _WARMUP), E5, seconds_per_step=2.0)


_premise = Check(
    "AER of DWA's self-labels (OT at its label layer 10, the start)",
    "start",
    "aer-ot@label",
    "the paper's start XLM-R: 17.7 / 7.5 / 37.8 / 27.5 AER (Table 2)",
    premise_max=37.8,
)
_xnli_reference = Check("XNLI of the start (the reference row; chance 33.3)", "start", "xnli-full")
_start_t14 = Check("Tatoeba-14 of the start (dev-chosen layer)", "start", "tatoeba14@dev")


CLAIMS = (
    claim(  # XLM-E from the warm start (the generators' heads trained first), against MLM_TLM_WARM
        "real-xlm-e-warm",
        "xlm-e-warm",
        "XLM-E",
        "MRTD + TRTD lowers AER vs MLM + TLM, both continued from e5-small with their MLM heads trained first",
        "Table 4 AER avg: XLM-E 19.32 (XLM-R 22.64)",
        MLM_TLM_WARM,
        XLM_E_WARM,
        "aer-ot@default",
        -1,
        # AER only: Tatoeba with a dev-split layer choice reads 46,000 dev sentences, ~8 CPU-minutes per e5 model
        measures=(),
        checks=(*detectors(XLM_E_WARM.name), *generators(XLM_E_WARM.name)),
        code=RTD_CODE,
    ),
    claim(  # PPA from the warm start; its sentence-alignment claim also on retrieval, as e5 is read
        "real-ppa-retrieval-warm",
        "ppa-warm-retrieval",  # apart from the XNLI claims: a third of their CPU time
        "PPA",
        "MoCo + TLM improves Tatoeba-14 retrieval over the start (`query: ` prefix, last layer: e5's own protocol)",
        "Table 3 (Tatoeba, 250k pairs): mBERT 37.4 -> PPA 58.6 avg acc@1 (its 36 languages)",
        START,
        PPA_WARM,
        "tatoeba14-query@last",
        1,
        measures=("bucc-query-f1",),  # the dev-chosen layer's Tatoeba: ~8 CPU-minutes per e5 model, not this claim's
        checks=(Check("BUCC zh-en F1 of the start (`query: `, last layer)", "start", "bucc-query-f1"),),
    ),
    claim(
        "real-ppa-vs-start-warm",
        "ppa-warm",
        "PPA",
        "MoCo + TLM improves XNLI zero-shot over the start, TLM's MLM head trained first",
        "Table 2 zero-shot XNLI avg (8 languages): mBERT 69.6 -> PPA (250k pairs) 73.1",
        START,
        PPA_WARM,
        "xnli-full",
        1,
        # retrieval as e5 is read (the retrieval row's runs, so free); the dev-layer sweep (~8 CPU-min a model) is
        # the cold rows' context
        measures=("tatoeba14-query@last",),
    ),
    claim(
        "real-ppa-no-moco-warm",
        "ppa-warm",
        "PPA",
        "-MoCo (TLM alone) loses some XNLI, both arms with TLM's MLM head trained first",
        "Table 5 (250k) XNLI 77.4 -> 77.4 (-0.0)",
        PPA_WARM,
        PPA_TLM_WARM,
        "xnli-full",
        -1,
        measures=("tatoeba14-query@last", "bucc-query-f1"),
    ),
    claim(  # XLM-Align's claim from the warm start, the trainer's default
        "real-xlm-align-dwa-warm",
        "xlm-align-warm",
        "XLM-Align",
        "MLM + TLM + DWA lowers AER vs MLM + TLM, both continued from e5-small with its MLM head trained first",
        "Table 2 OT AER avg: XLM-R 22.64 -> XLM-Align 21.05",
        MLM_TLM_WARM,
        DWA_WARM,
        "aer-ot@default",
        -1,
        # XLM-Align Table 2's metric and the aligner's argmax beside it; retrieval is not this claim's (CPU time)
        measures=("aer-argmax@default",),
        checks=(
            _premise,
            Check("DWA self-labels per pair", DWA_WARM.name, "log:dwa/labels_per_pair"),
            *(Check(f"MLM loss, {a.name}", a.name, "log:mlm/loss", floor="unigram") for a in (MLM_TLM_WARM, DWA_WARM)),
        ),
        code=DWA_CODE,
    ),
    claim(
        "real-xlm-align-dwa",
        "xlm-align",
        "XLM-Align",
        "cold head (diagnostic: the MLM head new and untrained): "
        "MLM + TLM + DWA lowers AER vs MLM + TLM, both continued from e5-small",
        "Table 2 OT AER avg: XLM-R 22.64 -> XLM-Align 21.05",
        MLM_TLM,
        DWA,
        "aer-ot@default",
        -1,
        measures=("aer-argmax@default", "tatoeba14@dev"),
        checks=(_premise, Check("DWA self-labels per pair", DWA.name, "log:dwa/labels_per_pair"), _xnli_reference),
        code=DWA_CODE,
    ),
    claim(
        "real-xlm-align-ot-vs-argmax",
        "xlm-align",
        "XLM-Align",
        "OT extracts better alignments than SimAlign argmax from the same states (the start's)",
        "Table 2 AER avg on XLM-Align: SimAlign argmax 23.1, itermax 22.55, OT 21.05",
        START,
        START,
        "aer-ot@default",
        -1,
        baseline_metric="aer-argmax@default",
        checks=(
            Check(  # the paper compares the aligners on states that align (XLM-R's, XLM-Align's)
                "AER of the states both aligners read (argmax, layer 8)",
                "start",
                "aer-argmax@default",
                "XLM-Align Table 2, SimAlign on XLM-R: 19 / 7 / 39 / 29 AER, worst pair 39",
                premise_max=39.0,
            ),
        ),
        code=OT_CODE,
        diagnostics=("real-xlm-align-ot-vs-argmax-continued",),
    ),
    claim(  # what the new MLM head does: the drift of MLM + TLM from the start with the head trained first
        "real-mlm-tlm-warm-head",
        "xlm-align",
        "XLM-Align",
        "diagnostic: MLM + TLM moves e5-small off its sentence alignment less when its new MLM head is trained first "
        "(200 head-only steps, then the same MLM + TLM)",
        "no number in the papers: their starts (XLM-R, mBERT) come with their MLM heads",
        MLM_TLM,
        MLM_TLM_WARM_HEAD,
        "tatoeba14@dev",
        1,
        measures=("aer-ot@default",),
        checks=(
            Check("MLM loss, mlm-tlm", MLM_TLM.name, "log:mlm/loss", floor="unigram"),
            Check("MLM loss, mlm-tlm-warm-head", MLM_TLM_WARM_HEAD.name, "log:mlm/loss", floor="unigram"),
        ),
    ),
    claim(  # the same two aligners on other states of the same encoder: whether the ordering is the code's
        "real-xlm-align-ot-vs-argmax-continued",
        "xlm-align",
        "XLM-Align",
        "diagnostic: OT extracts better alignments than SimAlign argmax from the same states (e5-small continued "
        "with MLM + TLM, the XLM-Align section's baseline)",
        "Table 2 AER avg on XLM-Align: SimAlign argmax 23.1, itermax 22.55, OT 21.05",
        MLM_TLM,
        MLM_TLM,
        "aer-ot@default",
        -1,
        baseline_metric="aer-argmax@default",
        measures=(),
        checks=(
            Check(
                "AER of the states both aligners read (argmax, layer 8)",
                MLM_TLM.name,
                "aer-argmax@default",
                "XLM-Align Table 2, SimAlign on XLM-R: 19 / 7 / 39 / 29 AER, worst pair 39",
                premise_max=39.0,
            ),
        ),
    ),
    claim(
        "real-xlm-e",
        "xlm-e",
        "XLM-E",
        "cold head (diagnostic: the MLM head new and untrained): "
        "MRTD + TRTD lowers AER vs MLM + TLM, both continued from e5-small",
        "Table 4 AER avg: XLM-E 19.32 (XLM-R 22.64)",
        MLM_TLM,
        XLM_E,
        "aer-ot@default",
        -1,
        measures=("tatoeba14@dev",),
        checks=(*detectors(XLM_E.name), *generators(XLM_E.name)),
        code=RTD_CODE,
    ),
    claim(
        "real-ppa-vs-start",
        "ppa",
        "PPA",
        "cold head (diagnostic: the MLM head new and untrained): MoCo + TLM improves XNLI zero-shot over the start",
        "Table 2 zero-shot XNLI avg (8 languages): mBERT 69.6 -> PPA (250k pairs) 73.1",
        START,
        PPA,
        "xnli-full",
        1,
        measures=("tatoeba14@dev",),
        checks=(_start_t14,),
    ),
    claim(
        "real-ppa-no-moco",
        "ppa",
        "PPA",
        "cold head (diagnostic: the MLM head new and untrained): -MoCo (TLM alone) loses some XNLI",
        "Table 5 (250k) XNLI 77.4 -> 77.4 (-0.0)",
        PPA,
        PPA_TLM,
        "xnli-full",
        -1,
        measures=("tatoeba14@dev",),
    ),
)

CLAIMS += (*COLD_CLAIMS, *WARM_CLAIMS)  # ERNIE-M's and VECO's, cold and warm (bench/studies/warm.py)

STUDY = Study(
    "real-start",
    "Real start: the papers' continued-training claims from multilingual-e5-small",
    CLAIMS,
    # About 45 CPU-minutes per seed and arm; a section has up to three trained arms and two seeds.
    limit_minutes=270,
    premises_in_table=True,
    tables=(
        (
            "XNLI zero-shot accuracy per language (full test sets, one fine-tuning seed per run)",
            (*(f"xnli-full/{language}" for language in XNLI15), "xnli-full", "xnli-full/gap"),
        ),
        *(
            (
                f"XNLI translate-train-all per language, the VECO arm {how} (full test sets)",
                (*(f"{name}/{language}" for language in XNLI15), name, f"{name}/gap"),
            )
            for how, name in (("plugged out", "xnli-tta-full"), ("plugged in", "xnli-plug-in-full"))
        ),
    ),
)
