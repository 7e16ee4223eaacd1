"""The probes that train: they step an optimizer only through the shared loops (the fine-tuning loop's step, the
trainer's step, the speed bench's peer step), and what each compares is trained as it claims."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.probes import veco_translation
from polyalign.model.seq2seq import Seq2SeqTransformer
from tests.conftest import special_tokens, tiny_config

ROOT = Path(__file__).resolve().parents[1]


def optimizer_steps(folder: str) -> dict[str, int]:
    """{file: how often it calls optimizer.step()} for the Python files under `folder`."""
    counts = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        if n := len(re.findall(r"optimizer\.step\(\)", path.read_text(encoding="utf-8"))):
            counts[str(path.relative_to(ROOT))] = n
    return counts


def test_only_the_shared_loops_step_an_optimizer():
    assert optimizer_steps("polyalign/train") == {"polyalign/train/optim.py": 1}  # pre-training and its warm-up
    assert optimizer_steps("polyalign/finetune") == {"polyalign/finetune/loop.py": 1}
    assert optimizer_steps("polyalign") == {"polyalign/train/optim.py": 1, "polyalign/finetune/loop.py": 1}
    # the transformers peer's step, and the gated-bias bench's bare timed step (AdamW beside the encoder alone)
    assert optimizer_steps("bench") == {"bench/perf/speed.py": 1, "bench/perf/gated_bias_step.py": 1}


@pytest.mark.integration
def test_the_translation_probe_learns_a_copy_task_through_the_fine_tuning_step():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(tiny_config(cross_attention=True))
    rng = np.random.default_rng(0)
    sp = special_tokens()
    sources = [rng.integers(sp.first_normal, sp.first_normal + 8, size=rng.integers(3, 8)).tolist() for _ in range(99)]
    train = [(s, s) for s in sources]  # the target is the source, from 8 pieces of the 99
    curve = veco_translation.fine_tune(model, train, sp, (None, None), 40, 256, 3e-3, 0, time.perf_counter())
    assert [p["step"] for p in curve] == [20, 40]
    # an untrained model scores about log(99) = 4.6 nats; the unigram floor of the targets is about log(9)
    assert curve[-1]["loss"] < curve[0]["loss"] - 0.5
