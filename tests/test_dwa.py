"""Denoising word alignment (XLM-Align §3.2): pointer loss, self-labeling, the objective, the recipe."""

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from polyalign.align.extract import OTSettings, ot_links, union_argmax
from polyalign.align.words import gather_side
from polyalign.cli import main
from polyalign.config import load_recipe
from polyalign.data.masking import IGNORE
from polyalign.data.streams import ParallelBatch
from polyalign.io import DataError
from polyalign.layers import xlm_align_label_layer
from polyalign.model import MaskedLanguageModel
from polyalign.objectives import build_objective
from polyalign.objectives.base import model_inputs
from polyalign.objectives.dwa import PointerNetwork, pointer_loss
from polyalign.tokenizer import SpecialTokens
from polyalign.train import check_warm_start
from tests.conftest import metrics, tiny_config, tiny_recipe_overrides

SP = SpecialTokens(pad=1, cls=0, sep=2, mask=4, unk=3, vocab_size=99, first_normal=5)


@pytest.mark.integration
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
    assert [xlm_align_label_layer(L) for L in (12, 6, 4, 2, 1)] == [10, 5, 3, 2, 1]


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
    objective.config.tlm.swap_prob = 0.0  # keep the side order fixed so label sets are comparable
    labels = [objective.self_label(model, objective.make_batch(raw, np.random.default_rng(s))) for s in (2, 3)]
    assert torch.equal(labels[0], labels[1]) and labels[0].sum() > 0


def test_query_set_is_aligned_and_masked_tokens_only():
    # Eq. (14): P = aligned ∩ masked, in both directions; many aligned tokens are left unmasked here.
    model, objective, raw = toy_objective(mask_prob=0.4)
    model.eval()
    batch = objective.make_batch(raw, np.random.default_rng(1))
    out = objective(model, batch)
    links = objective.self_label(model, batch)  # (B, n, m)
    masked = batch["labels"] != IGNORE
    _, (s_index, s_mask), (t_index, t_mask) = objective.sides(batch)
    s_aligned, t_aligned = links.any(-1), links.any(-2)  # (B, n), (B, m)
    expected = (s_aligned & masked.gather(1, s_index)).sum() + (t_aligned & masked.gather(1, t_index)).sum()
    assert 0 < expected < s_aligned.sum() + t_aligned.sum()
    assert round(float(out.metrics["queries_per_pair"]) * len(raw.source)) == int(expected)


def clean_hidden_states(model, batch):
    clean = torch.where(batch["labels"] != IGNORE, batch["labels"], batch["input_ids"])
    with torch.no_grad():
        return model(**{**model_inputs(batch), "input_ids": clean}, output_hidden_states=True).hidden_states


@pytest.mark.parametrize("label_layer", [1, 2])
def test_self_labels_are_the_ot_alignment_of_the_label_layer(label_layer):
    model, objective, raw = toy_objective(mask_prob=0.4, label_layer=label_layer)
    batch = objective.make_batch(raw, np.random.default_rng(1))
    _, (s_index, s_mask), (t_index, t_mask) = objective.sides(batch)
    mask = s_mask[:, :, None] & t_mask[:, None, :]
    with torch.no_grad():  # layers that change the states a lot (init std 0.02 barely does), so each labels differently
        for weight in model.encoder.layers.parameters():
            if weight.dim() == 2:
                weight.normal_(0.0, 0.3)
    model.eval()
    hidden = clean_hidden_states(model, batch)  # embeddings, layer 1, layer 2
    by_layer = [ot_links(gather_side(h, s_index), gather_side(h, t_index), mask, OTSettings()) for h in hidden]
    assert not torch.equal(by_layer[0], by_layer[1]) and not torch.equal(by_layer[1], by_layer[2])
    assert torch.equal(objective.self_label(model, batch), by_layer[label_layer])


@pytest.mark.parametrize("tlm_weight", [1.0, 0.5])
def test_loss_is_tlm_of_the_same_pass_plus_dwa(tlm_weight):
    model, objective, raw = toy_objective(mask_prob=0.4, tlm_weight=tlm_weight)
    model.eval()  # no dropout: DWA's TLM term and TLM on its own see the same forward pass
    batch = objective.make_batch(raw, np.random.default_rng(1))
    out = objective(model, batch)
    tlm = build_objective("tlm", {"mask_prob": 0.4}, SP, model.config)(model, batch).loss
    assert tlm.item() > 1.0 and out.metrics["dwa_loss"].item() > 0.1
    torch.testing.assert_close(out.metrics["tlm_loss"], tlm.detach())
    torch.testing.assert_close(out.loss, tlm_weight * tlm + out.metrics["dwa_loss"])
    out.loss.backward()
    assert model.lm_head.dense.weight.grad.abs().sum() > 0  # the MLM head learns only from the TLM term


def test_filtering_disabled_labels_the_union_of_forward_and_backward_argmax():
    # XLM-Align §5.4: rows' argmax (0,0), (1,0), (2,2); columns' argmax (0,0), (2,1), (2,2).
    plan = torch.tensor([[0.5, 0.1, 0.0], [0.3, 0.1, 0.1], [0.1, 0.3, 0.4]])
    links = union_argmax(plan.log(), torch.ones(3, 3, dtype=torch.bool))
    assert links.nonzero().tolist() == [[0, 0], [1, 0], [2, 1], [2, 2]]


def test_dwa_with_filtering_disabled_aligns_every_token():
    model, objective, raw = toy_objective(filtering="disable")
    model.eval()
    batch = objective.make_batch(raw, np.random.default_rng(1))
    _, (_, s_mask), (_, t_mask) = objective.sides(batch)
    links = objective.self_label(model, batch)
    assert torch.equal(links.any(-1), s_mask) and torch.equal(links.any(-2), t_mask)
    objective.ot = OTSettings()  # the default, iterative filtering, leaves tokens unaligned on these pairs
    assert not torch.equal(objective.self_label(model, batch), links)


def test_filter_iterations_0_is_a_recipe_error_that_names_the_disable_variant():
    with pytest.raises(DataError, match="filter_iterations=0: .*use filtering: disable"):
        load_recipe("xlm-align", ["init_from=x", "objectives.1.config.filter_iterations=0"])
    with pytest.raises(DataError, match="filtering='none': use one of iterative, disable"):
        load_recipe("xlm-align", ["init_from=x", "objectives.1.config.filtering=none"])
    recipe = load_recipe("xlm-align", ["init_from=x", "objectives.1.config.filtering=disable"])
    assert recipe.objectives[1].config["filtering"] == "disable"


def test_dwa_without_a_pretrained_start_is_one_line_exit_2_and_creates_nothing(sample_prepared, tmp_path, capsys):
    # XLM-Align §3.3: DWA self-labels with the model it trains, so it must continue a pretrained model.
    tiny = [a for o in tiny_recipe_overrides(sample_prepared, steps=1) for a in ("--set", o)]
    args = ["pretrain", "xlm-align", "--run-dir", str(tmp_path / "run"), "--no-progress", *tiny]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and err.count("\n") == 0, err
    assert "objectives.1 (dwa) needs a pretrained start" in err and "allow_cold_start=true" in err, err
    assert list(tmp_path.iterdir()) == []
    # The explicit override lets it through, and so does a start model.
    check_warm_start(load_recipe("xlm-align", ["objectives.1.config.allow_cold_start=true"]))
    check_warm_start(load_recipe("xlm-align", [f"init_from={tmp_path}"]))


@pytest.mark.integration
def test_xlm_align_recipe_continues_an_xlm_run(sample_prepared, tmp_path):
    from polyalign.train import pretrain

    overrides = tiny_recipe_overrides(sample_prepared, steps=2)
    pretrain(load_recipe("xlm", overrides), tmp_path / "xlm", progress=False)
    recipe = load_recipe("xlm-align", [*overrides, f"init_from={tmp_path / 'xlm'}", "trainer.max_steps=3"])
    pretrain(recipe, tmp_path / "xlm-align", progress=False)
    records = metrics(tmp_path / "xlm-align")
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(np.isfinite(r["dwa/dwa_loss"]) and np.isfinite(r["dwa/tlm_loss"]) for r in records)
    saved = load_file(str(tmp_path / "xlm-align" / "checkpoints" / "step-0000003" / "objectives.safetensors"))
    assert "dwa.pointer.query.weight" in saved and "dwa.pointer.key.weight" in saved


def test_dwa_alone_computes_no_mlm_output(monkeypatch):
    """tlm_weight 0: the loss is DWA's, and the (large-vocabulary) MLM output is never computed."""
    model, objective, raw = toy_objective(mask_prob=0.4, tlm_weight=0.0)
    batch = objective.make_batch(raw, np.random.default_rng(0))

    def no_mlm_output(hidden):
        raise AssertionError("the MLM output was computed for a TLM weight of 0")

    monkeypatch.setattr(model, "mlm_logits", no_mlm_output)
    out = objective(model, batch)
    torch.testing.assert_close(out.loss, out.metrics["dwa_loss"])
    out.loss.backward()
