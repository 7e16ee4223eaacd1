"""VECO's claims (Tables 3, 5): XNLI and translation from a VECO init against an XLM init."""

from __future__ import annotations

from functools import partial

from bench.arm import Arm, Budget
from bench.claim import claim
from bench.studies.evidence.common import CPU_SMALL, SEQ2SEQ_CODE, XNLI15
from bench.studies.evidence.xlm_e import SCRATCH_XLM
from bench.study import Check, Comparison

# VECO from scratch: every parameter trains from step 1 (the recipe's cross-attention-only start, VECO §4, is
# for a pretrained encoder, and `pretrain` refuses it without one).
SCRATCH_VECO = Arm(
    "veco",
    "veco",
    ("trainer.train_only=[]",),
    None,
    CPU_SMALL,
    seconds_per_step=1.5,
    flops_per_step=0.36e12,
)

VECO_FLOPS = Budget(max_flops=4e13)
_bleu_veco = Check("BLEU, VECO init", "veco", "mt-veco-bleu")
# What the compared encoders learned in pre-training: CA-MLM's loss on the sentence's own context, XLM's MLM loss.
_veco_floor = (
    Check("CA-MLM loss (own context)", "veco", "log:ca_mlm/own_loss", floor="unigram"),
    Check("MLM loss", "xlm", "log:mlm/loss", floor="unigram"),
)
_mt_veco_loss = Check("translation loss, VECO init", "veco", "mt-veco-loss", floor="unigram:en")


def _mt_checks(init: str, arm: str, measure: str) -> tuple[Check, ...]:
    """The translation claims' checks: BLEU and loss of VECO's init and of the other init, and what the encoders
    learned in pre-training."""
    other = (
        Check(f"BLEU, {init}", arm, f"{measure}-bleu"),
        Check(f"translation loss, {init}", arm, f"{measure}-loss", floor="unigram:en"),
    )
    return (_bleu_veco, other[0], _mt_veco_loss, other[1], *_veco_floor)


# What VECO's claims share: from scratch at equal FLOPs on XNLI's languages, VECO as the method.
_veco_claim = partial(
    claim, paper="VECO", section="veco", budget=VECO_FLOPS, start=None, languages=XNLI15, method=SCRATCH_VECO
)
_TRANSLATION_INITS = (  # (claim id, statement, the paper's number, the compared init's arm, its name, its measure)
    (
        "veco-mt-vs-random",
        "an encoder-decoder from VECO learns translation faster than from random",
        "Table 3 (left): VECO init +2.3 BLEU over random init; Table 5 IWSLT 36.0 vs 33.9",
        SCRATCH_VECO,
        "random init",
        "mt-random",
    ),
    (
        "veco-mt-vs-encoder",
        "VECO init learns translation faster than encoder-only (XLM) init",
        "Table 3 (left): VECO leads XLM-R init (decoder attention new) by 1.1 BLEU",
        SCRATCH_XLM,
        "encoder-only init",
        "mt-encoder",
    ),
)


CLAIMS: tuple[Comparison, ...] = (
    # VECO Table 5 (small models: XNLI, IWSLT de-en) and Table 3 (right: translation learning curves).
    _veco_claim(
        "veco-ca-mlm",
        statement="CA-MLM + TLM improves cross-lingual representations over MLM + TLM",
        paper_number="Table 5 (small, bilingual): XNLI 64.5 (MLM+TLM) -> 67.7 (CA-MLM+TLM)",
        baseline=SCRATCH_XLM,
        metric="tatoeba14@dev",
        direction=1,
        measures=("aer-ot@default",),
        checks=_veco_floor,
    ),
    # The translation claims: translation loss after equal fine-tuning steps (lower is the paper's way), VECO's
    # init against another.
    *(
        _veco_claim(
            name,
            statement=statement,
            paper_number=number,
            baseline=baseline,
            baseline_metric=f"{measure}-loss",
            metric="mt-veco-loss",
            direction=-1,
            checks=_mt_checks(init, baseline.name, measure),
            code=SEQ2SEQ_CODE,
            close=0.1,
            floor=0.0,
        )
        for name, statement, number, baseline, init, measure in _TRANSLATION_INITS
    ),
)
