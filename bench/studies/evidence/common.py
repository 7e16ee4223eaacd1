"""What every paper's claims share: the start and its continued baseline, the
languages, and the tests that check the code a claim runs."""

from __future__ import annotations

from bench.arm import Arm
from bench.study import Rule

XNLI_SMOKE_FLOOR = 1.5
"""Points: the XNLI smoke measure scores 100 test pairs in each of 15 languages; one binomial standard error of an
accuracy near chance over those 1,500 pairs is 1.2 points, so differences up to 1.5 are that test's own error."""
CLOSE, NOISE_FLOOR = Rule().close, Rule().floor


# The arms. Continued runs: 4,096 tokens per objective and step (the recipes' 8,192 halved for time, as in the
# veco study, bench/results/veco.md); lr 2e-4 for every continued arm (ERNIE-M Table 10 BASE; XLM-Align Table 11),
# 10% warmup.
CONTINUED = ("trainer.lr=2e-4", "data.mono.max_tokens=4096", "data.parallel.max_tokens=4096")
START = Arm("start", None)
# 60 steps in 1 min: `git show edb6cd0:bench/results/veco.json`
MLM_TLM = Arm("mlm-tlm", "xlm", CONTINUED, seconds_per_step=1.0)

# From scratch: the `cpu-small` preset (model size, batch and peak lr that learned fastest per CPU-minute in
# bench/results/preset.md: 2 x 256, lr 1e-3), the same for both arms of a section. FLOPs per step and speed at
# that size: the preset sweep's run for xlm (0.25e12 FLOPs and 1.13 s per step); xlm-e and veco scaled from the
# runs of `git show 1e2ccae:bench/results/xlm-e.md` and `git show edb6cd0:bench/results/veco.json` (xlm-e 1.25x
# the FLOPs and 1.9x the time of xlm per step, veco 1.44x and 1.33x). The FLOP probe of bench/sections.py measures
# the real FLOPs per step; these only size the sections.
CPU_SMALL = "cpu-small"

ALIGN_LANGUAGES = ("en", "de", "fr", "hi", "ja", "ro", "zh")  # every gold set's languages
XNLI15 = ("en", "ar", "bg", "de", "el", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh")

# DWA's premise is an aligned start (§3.3, §6: poor self-labels from a weak model). The section below measures
# it on small-base (the self-labels' AER); `xlm-align-aligned` repeats the A/B from a sentence-aligned model of
# the same tokenizer, stage 1 of the best recipe (bench/results/best.md), stated as the start in its protocol.
ALIGNED_START = "bench/work/runs/best-sentences"

OT_CODE = (
    "tests/test_align.py::test_sinkhorn_matches_the_plain_iteration_of_eq_6_and_survives_huge_scores",
    "tests/test_align.py::test_ot_filtering_is_the_released_iter_max",
)
DWA_CODE = (
    *OT_CODE,
    "tests/test_dwa.py::test_self_labels_are_the_ot_alignment_of_the_label_layer",
    "tests/test_dwa.py::test_query_set_is_aligned_and_masked_tokens_only",
    "tests/test_dwa.py::test_pointer_loss_falls_on_a_toy_batch_whose_alignment_is_the_identity",
)
RTD_CODE = (
    "tests/test_xlm_e.py::test_discriminator_reads_the_generator_samples_at_masked_positions_and_the_originals_elsewhere",
    "tests/test_xlm_e.py::test_replaced_labels_in_a_training_step_are_exactly_the_changed_positions",
    "tests/test_xlm_e.py::test_mrtd_and_trtd_share_one_generator_and_detection_head",
    "tests/test_xlm_e.py::test_discriminator_learns_to_detect_replacements_that_only_context_gives_away",
)
SEQ2SEQ_CODE = (
    "tests/test_veco.py::test_seq2seq_takes_every_weight_from_the_veco_layers",
    "tests/test_veco.py::test_seq2seq_every_decoder_layer_attends_to_the_final_encoder_output",
)
