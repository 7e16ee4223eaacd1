"""The trainer's named steps (build, one step, log, checkpoint, stop) and its prefetching loader."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch

from polyalign.checkpoint import checkpoint_dirs
from polyalign.config import load_recipe
from polyalign.data.loader import SlotBatches, StepLoader, padding_free
from polyalign.io import DataError
from polyalign.objectives.base import model_inputs
from polyalign.train import (
    active_objectives,
    build_run,
    flops_stop,
    load_run_recipe,
    log_window,
    pretrain,
    save_run,
    start_loader,
    stop_step,
    train_step,
    unused_parameters_possible,
)
from tests.conftest import losses, metrics, tiny_recipe_overrides


def step_items(recipe, run_dir: Path, workers: int, steps: int) -> list:
    run, _ = build_run(recipe, run_dir)
    makers = {name: objective.make_batch for name, objective in run.module.objectives.items()}
    loader = StepLoader(SlotBatches(run.slots, makers, partial(active_objectives, recipe.objectives), 0), workers)
    try:
        return [next(loader) for _ in range(steps)]
    finally:
        loader.close()


def test_loader_output_is_the_same_with_0_and_2_workers(sample_prepared, tmp_path):
    """Two slots (accumulation 2): with 2 workers each builds one slot; batches, token counts and the data
    states a checkpoint would save must be those of the in-process loader."""
    recipe = load_recipe("xlm", tiny_recipe_overrides(sample_prepared) + ["trainer.grad_accumulation=2"])
    inline, workers = step_items(recipe, tmp_path / "a", 0, 3), step_items(recipe, tmp_path / "b", 2, 3)
    for x, y in zip(inline, workers, strict=True):
        assert x.step == y.step and x.tokens == y.tokens and x.slot_states == y.slot_states
        assert len(x.slots) == 2 and [sorted(s) for s in x.slots] == [sorted(s) for s in y.slots]
        for sx, sy in zip(x.slots, y.slots, strict=True):
            for name in sx:
                assert sorted(sx[name]) == sorted(sy[name])
                for k, v in sx[name].items():
                    assert torch.equal(v, sy[name][k]) if torch.is_tensor(v) else v == sy[name][k]
    assert inline[0].slot_states != inline[1].slot_states  # the states move with the steps


@pytest.mark.integration
def test_resume_with_prefetching_workers_continues_the_same_curve(sample_prepared, tmp_path):
    """The workers run ahead of the step; a checkpoint must hold the data position of the steps trained."""
    overrides = tiny_recipe_overrides(sample_prepared, steps=5) + [
        "trainer.save_every=100",
        "trainer.grad_accumulation=2",
        "trainer.loader_workers=2",
    ]
    pretrain(load_recipe("xlm", overrides), tmp_path / "straight", progress=False)
    pretrain(load_recipe("xlm", overrides + ["trainer.stop_at=2"]), tmp_path / "paused", progress=False)
    assert [p.name for p in checkpoint_dirs(tmp_path / "paused")] == ["step-0000002"]
    pretrain(
        load_run_recipe(tmp_path / "paused", ["trainer.stop_at=0"]), tmp_path / "paused", resume=True, progress=False
    )
    assert losses(tmp_path / "paused") == losses(tmp_path / "straight")


@pytest.mark.integration
def test_named_steps_train_log_save_and_stop_without_host_syncs_in_the_step(sample_prepared, tmp_path, monkeypatch):
    recipe = load_recipe("mlm", tiny_recipe_overrides(sample_prepared, steps=3) + ["trainer.loader_workers=0"])
    run, _ = build_run(recipe, tmp_path / "run")
    loader = start_loader(run)
    items = [next(loader) for _ in range(2)]
    loader.close()
    reads = []
    for name in ("item", "tolist", "__float__", "__int__", "__bool__"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _o=original, _n=name: reads.append(_n) or _o(self, *a))
    for item in items:
        train_step(run, item)
    monkeypatch.undo()
    assert reads == []  # a read of a device value makes the host wait for the GPU in every step
    assert run.step == 2 and run.window.steps == 2
    record = log_window(run, None)  # the one read, every log_every steps
    assert record["step"] == 2 and record["tokens"] == sum(i.tokens for i in items) > 0
    assert run.window.steps == 0 and run.counters["tokens"] == record["tokens"]
    assert stop_step(run) == 3
    run.recipe.trainer.stop_at = 2
    assert stop_step(run) == 2
    save_run(run)
    assert [p.name for p in checkpoint_dirs(tmp_path / "run")] == ["step-0000002"]


def test_padding_free_batches_go_without_a_mask():
    full = {"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": torch.ones(2, 3, dtype=torch.bool)}
    padded = {**full, "attention_mask": torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)}
    query_key = {**full, "attention_mask": torch.ones(2, 3, 3, dtype=torch.bool)}  # CAMLM/BTMLM: always kept
    assert padding_free(full) and not padding_free(padded) and not padding_free(query_key)
    assert "attention_mask" not in model_inputs({**full, "padding_free": True})
    assert "attention_mask" in model_inputs(full)


def test_unused_parameters_are_looked_for_only_with_staged_or_alternating_objectives_or_an_unused_part():
    assert not unused_parameters_possible(load_recipe("xlm").objectives)
    assert unused_parameters_possible(load_recipe("veco").objectives)  # alternating (every: 2)
    assert unused_parameters_possible(load_recipe("ernie-m").objectives)  # staged (btmlm's start_step)
    assert unused_parameters_possible(load_recipe("xlm-e").objectives)  # RTD: the MLM head gets no gradient
    assert unused_parameters_possible(load_recipe("best-sentences").objectives)  # translation ranking alone: nor here
    assert not unused_parameters_possible(load_recipe("quickstart").objectives)  # ranking + TLM: TLM trains the head


def test_trainer_switches_are_checked():
    with pytest.raises(DataError, match="loader_workers=-1: must be at least 0"):
        load_recipe("mlm", ["trainer.loader_workers=-1"])
    with pytest.raises(DataError, match="trainer: compile='maybe': use auto, true or false"):
        load_recipe("mlm", ["trainer.compile=maybe"])
    with pytest.raises(DataError, match=r"trainer: max_flops=-1.0: must be at least 0$"):
        load_recipe("mlm", ["trainer.max_flops=-1"])
    with pytest.raises(DataError, match="trainer: distributed='zero': use 'ddp' or 'fsdp'"):
        load_recipe("mlm", ["trainer.distributed=zero"])


def test_a_flops_budget_stops_now_or_at_the_step_the_last_window_predicts():
    assert flops_stop(10, flops=100.0, per_step=10.0, budget=100.0, horizon=5) == 10  # reached: stop now
    assert flops_stop(10, flops=95.0, per_step=10.0, budget=100.0, horizon=5) == 11
    assert flops_stop(10, flops=60.0, per_step=10.0, budget=100.0, horizon=5) == 14  # 4 steps of 10 reach it
    assert flops_stop(10, flops=40.0, per_step=10.0, budget=100.0, horizon=5) is None  # the next check decides
    assert flops_stop(0, flops=0.0, per_step=0.0, budget=100.0, horizon=5) is None  # no window yet


@pytest.mark.integration
def test_max_flops_stops_at_the_step_that_reaches_the_budget(sample_prepared, tmp_path):
    """The budget lies halfway through step 3's FLOPs. Logged every 2 steps, the check at step 2 sees it is not
    reached but predicts it within the next window: the run saves and stops at 3, not at the next log step (4)
    nor at max_steps (6)."""
    overrides = tiny_recipe_overrides(sample_prepared, steps=6) + ["trainer.loader_workers=0", "trainer.save_every=100"]
    pretrain(load_recipe("mlm", overrides), tmp_path / "full", progress=False)
    flops = {r["step"]: r["flops"] for r in metrics(tmp_path / "full")}
    budget = (flops[2] + flops[3]) / 2
    expected = min(s for s, f in flops.items() if f >= budget)
    assert expected == 3 and flops_stop(2, flops[2], flops[2] / 2, budget, horizon=2) == 3  # equal-ish steps
    capped = overrides + [f"trainer.max_flops={budget}", "trainer.log_every=2"]
    summary = pretrain(load_recipe("mlm", capped), tmp_path / "capped", progress=False)
    assert summary["step"] == expected and summary["flops"] == pytest.approx(flops[expected])
    assert [p.name for p in checkpoint_dirs(tmp_path / "capped")] == ["step-0000003"]


@pytest.mark.parametrize("name", ["xlm", "ppa", "quickstart"])
def test_recipes_without_staged_objectives_give_every_parameter_a_gradient(name, sample_prepared, tmp_path):
    """What makes find_unused_parameters=False safe for them: DDP would hang or fail on a parameter without one."""
    recipe = load_recipe(name, tiny_recipe_overrides(sample_prepared) + ["trainer.loader_workers=0"])
    assert not unused_parameters_possible(recipe.objectives)
    run, _ = build_run(recipe, tmp_path / "run")
    loader = start_loader(run)
    item = next(loader)
    loader.close()
    loss, _, _ = run.trained(item.slots[0])
    loss.backward()
    missing = [n for n, p in run.module.named_parameters() if p.requires_grad and p.grad is None]
    assert missing == []


def test_activation_checkpointing_recomputes_each_layer_with_the_same_gradients(monkeypatch):
    from polyalign.model.encoder import Encoder, Layer
    from tests.conftest import tiny_config

    torch.manual_seed(0)
    encoder = Encoder(tiny_config()).train()
    ids = torch.randint(5, 99, (2, 7))
    calls = []
    forward = Layer.forward
    monkeypatch.setattr(Layer, "forward", lambda self, *a, **k: calls.append(1) or forward(self, *a, **k))
    grads, counts = [], []
    for checkpointing in (False, True):
        encoder.checkpoint_layers = checkpointing
        encoder.zero_grad()
        calls.clear()
        encoder(ids).last_hidden_state.square().sum().backward()
        counts.append(len(calls))
        grads.append([p.grad.clone() for p in encoder.parameters()])
    assert counts == [2, 4]  # 2 layers; with checkpointing each runs again in backward
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_veco_streams_of_a_padding_free_batch_need_no_mask():
    """The loader drops the mask of a batch without padding; VECO's paired stream must do without it."""
    from polyalign.model import MaskedLanguageModel
    from polyalign.model.veco import two_streams
    from tests.conftest import tiny_config

    torch.manual_seed(0)
    model = MaskedLanguageModel(tiny_config(cross_attention=True)).eval()
    ids = torch.randint(5, 99, (4, 6))
    with_mask = two_streams(model, {"input_ids": ids, "attention_mask": torch.ones(4, 6, dtype=torch.bool)})
    without = two_streams(model, {"input_ids": ids})
    assert torch.allclose(with_mask.paired, without.paired, atol=1e-5)
    assert torch.allclose(with_mask.own, without.own, atol=1e-5)
