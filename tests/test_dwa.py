"""Denoising word alignment (XLM-Align §3.2): pointer loss, self-labeling, the objective, the recipe."""

import json

import numpy as np
import torch
from safetensors.torch import load_file

from polyalign.data.streams import ParallelBatch
from polyalign.model import MaskedLanguageModel
from polyalign.objectives import build_objective
from polyalign.objectives.dwa import PointerNetwork, default_label_layer, pointer_loss
from polyalign.tokenizer import SpecialTokens
from tests.conftest import tiny_config, tiny_recipe_overrides

SP = SpecialTokens(pad=1, cls=0, sep=2, mask=4, unk=3, vocab_size=99, first_normal=5)


def test_pointer_loss_falls_on_a_toy_batch_whose_alignment_is_the_identity():
    torch.manual_seed(0)
    B, n, C = 8, 7, 16
    source = torch.randn(B, n, C)
    target = source + 0.1 * torch.randn(B, n, C)  # token i of the target is the translation of source token i
    identity = torch.eye(n, dtype=torch.bool).expand(B, n, n)
    every_query = torch.ones(B, n, dtype=torch.bool)
    pointer = PointerNetwork(C)
    optimizer = torch.optim.Adam(pointer.parameters(), lr=1e-2)
    curve = []
    for _ in range(60):
        total, count, _ = pointer_loss(pointer(source, target, every_query), identity, every_query)
        loss = total / count
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        curve.append(loss.item())
    assert abs(curve[0] - np.log(n)) < 0.5  # starts near chance
    assert curve[-1] < 0.1 * curve[0]
    _, count, hits = pointer_loss(pointer(source, target, every_query), identity, every_query)
    assert hits == count  # every query now points at its own translation


def test_pointer_loss_counts_only_aligned_and_masked_queries():
    log_probs = torch.log(torch.tensor([[[0.7, 0.2, 0.1], [0.3, 0.3, 0.4], [0.1, 0.1, 0.8]]]))
    links = torch.tensor([[[True, False, False], [False, False, False], [False, True, True]]])
    masked = torch.tensor([[True, True, False]])  # row 1 is masked but unaligned, row 2 aligned but not masked
    total, count, hits = pointer_loss(log_probs, links, masked)
    assert count == 1 and hits == 1 and abs(float(total) + np.log(0.7)) < 1e-6
    # A query linked to two positions gets a uniform target over both.
    total, count, _ = pointer_loss(log_probs, links, torch.tensor([[False, False, True]]))
    assert count == 1 and abs(float(total) + (np.log(0.1) + np.log(0.8)) / 2) < 1e-6


def test_self_labeling_layer_scales_with_depth():
    assert [default_label_layer(L) for L in (12, 6, 4, 2, 1)] == [10, 5, 3, 2, 1]


def toy_objective(**config):
    torch.manual_seed(0)
    model = MaskedLanguageModel(tiny_config(num_languages=2, dropout=0.3))
    objective = build_objective("dwa", config, SP, model.config)
    rng = np.random.default_rng(0)
    raw = ParallelBatch(
        [rng.integers(5, 99, size=k) for k in (6, 9, 4)],
        [rng.integers(5, 99, size=k) for k in (7, 5, 8)],
        np.zeros(3, dtype=np.int64),
        np.ones(3, dtype=np.int64),
    )
    return model, objective, raw


def test_dwa_objective_trains_encoder_and_pointer_and_labels_the_clean_pair():
    model, objective, raw = toy_objective(mask_prob=0.4)
    model.train()
    batch = objective.make_batch(raw, np.random.default_rng(1))
    out = objective(model, batch)
    assert torch.isfinite(out.loss) and out.metrics["queries_per_pair"] > 0 and out.flops > 0
    out.loss.backward()
    assert model.encoder.layers[0].attention.qkv.weight.grad.abs().sum() > 0
    assert objective.pointer.query.weight.grad.abs().sum() > 0 and objective.pointer.key.weight.grad.abs().sum() > 0
    assert model.training  # self-labeling switched dropout off and back on

    # Self-labels come from the clean pair without dropout: other maskings of the same pairs, in train mode
    # with dropout 0.3, give the same labels.
    objective.config.swap_prob = 0.0  # keep the side order fixed so label sets are comparable
    labels = [objective.self_label(model, objective.make_batch(raw, np.random.default_rng(s))) for s in (2, 3)]
    assert torch.equal(labels[0], labels[1]) and labels[0].sum() > 0


def test_xlm_align_recipe_continues_an_xlm_run(sample_prepared, tmp_path):
    from polyalign.config import load_recipe
    from polyalign.train import pretrain

    overrides = tiny_recipe_overrides(sample_prepared, steps=2)
    pretrain(load_recipe("xlm", overrides), tmp_path / "xlm", progress=False)
    recipe = load_recipe("xlm-align", [*overrides, f"init_from={tmp_path / 'xlm'}", "trainer.max_steps=3"])
    pretrain(recipe, tmp_path / "xlm-align", progress=False)
    records = [json.loads(line) for line in (tmp_path / "xlm-align" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(np.isfinite(r["dwa/dwa_loss"]) and np.isfinite(r["dwa/tlm_loss"]) for r in records)
    saved = load_file(str(tmp_path / "xlm-align" / "checkpoints" / "step-0000003" / "objectives.safetensors"))
    assert "dwa.pointer.query.weight" in saved and "dwa.pointer.key.weight" in saved
