"""A start without a trained MLM head gets it trained alone first: announced, the encoder bit-identical,
outside every budget, not repeated by a resume; `head_warmup_steps=0` says what it means."""

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from polyalign.checkpoint import checkpoint_dirs, load_model, save_model_folder
from polyalign.config import load_recipe
from polyalign.data.prepared import PreparedData
from polyalign.io import DataError, Stopped
from polyalign.model import EncoderConfig, MaskedLanguageModel
from polyalign.objectives import build_objective
from polyalign.train import load_run_recipe, loop, pretrain
from polyalign.train.head_warmup import HEAD_WARMUP_FILE, has_trained_mlm_head, heads_to_warm
from tests.conftest import metrics, special_tokens, tiny_config, tiny_recipe_overrides
from tests.test_distributed import exact_overrides, train_two_processes


@pytest.fixture(scope="module")
def cold_start(sample_prepared, tmp_path_factory) -> Path:
    """A model folder whose MLM head was never trained, as import-e5 writes (e5-small ships no head)."""
    tokenizer = PreparedData(sample_prepared).tokenizer()
    sp = tokenizer.special
    sizes = dict(hidden_size=32, num_layers=2, num_heads=4, ffn_size=64, max_positions=128)
    torch.manual_seed(0)
    model = MaskedLanguageModel(EncoderConfig(vocab_size=sp.vocab_size, pad_token_id=sp.pad, **sizes))
    return save_model_folder(tmp_path_factory.mktemp("cold") / "start", model, tokenizer, [])


def _overrides(prepared: Path, start: Path, steps: int, warmup: int, *extra: str) -> list[str]:
    return [
        *tiny_recipe_overrides(prepared, steps),
        f"init_from={start}",
        f"trainer.head_warmup_steps={warmup}",
        "model.num_languages=0",
        *extra,
    ]


def test_a_fresh_head_is_told_from_a_trained_one():
    model = MaskedLanguageModel(tiny_config())
    assert not has_trained_mlm_head(model)
    params = [p for n, p in model.lm_head.named_parameters() if not n.startswith("decoder.weight")]
    torch.optim.AdamW(params, lr=1e-3).zero_grad()
    model.lm_head(torch.randn(3, 32)).sum().backward()
    torch.optim.AdamW(params, lr=1e-3).step()
    assert has_trained_mlm_head(model)


def test_objectives_name_the_heads_they_read():
    config = tiny_config()

    def heads(name: str, **settings) -> list[str]:
        model = MaskedLanguageModel(config)
        objective = build_objective(name, settings, special_tokens(), config)
        objective.setup(model)
        return list(heads_to_warm(model, {name: objective}))

    assert heads("mlm") == heads("tlm") == heads("dwa") == heads("camlm") == ["lm_head"]
    assert heads("moco", tlm=True) == ["lm_head"] and heads("moco", tlm=False) == []
    assert heads("contrast") == heads("self_align") == []
    assert heads("mrtd", generator_init="model") == ["generator"]  # its generator copies the model's cold head
    assert heads("mrtd") == []  # a `new` generator starts random by design (XLM-E §4.1)


@pytest.mark.integration
def test_a_start_without_a_head_trains_it_alone_first_and_keeps_the_encoder(
    sample_prepared, cold_start, tmp_path, capsys
):
    # lr 0 for the recipe's own steps: whatever moved, the warm-up moved
    overrides = _overrides(sample_prepared, cold_start, 2, 6, "trainer.lr=0.0", "trainer.head_warmup_lr=1e-2")
    pretrain(load_recipe("xlm", overrides), tmp_path / "run", progress=False)
    said = capsys.readouterr().out
    assert f"{cold_start} has no trained MLM head, which mlm, tlm read: training lm_head alone" in said
    assert "head warm-up: 6 steps, MLM loss lm_head" in said
    logged = [json.loads(line) for line in (tmp_path / "run" / HEAD_WARMUP_FILE).read_text().splitlines()]
    assert [r["step"] for r in logged] == [1, 2, 3, 4, 5, 6] and "head_warmup/lm_head/loss" in logged[0]
    # running totals: the log's last line is the warm-up's cost, which the bench's budget table reads
    assert 0 < logged[0]["tokens"] < logged[-1]["tokens"] and 0 < logged[0]["seconds"] <= logged[-1]["seconds"]
    before, after = load_model(cold_start).model.state_dict(), load_model(tmp_path / "run").model.state_dict()
    head = [k for k in before if k.startswith("lm_head.") and k != "lm_head.decoder.weight"]
    assert all(not torch.equal(before[k], after[k]) for k in head), "the head was not trained"
    for name in before.keys() - set(head):  # the encoder (and the decoder tied to its embeddings): bit-identical
        assert torch.equal(before[name], after[name]), name
    assert has_trained_mlm_head(load_model(tmp_path / "run").model)  # a run from this one warms nothing


@pytest.mark.integration
def test_head_warmup_steps_count_toward_no_budget(sample_prepared, cold_start, tmp_path):
    runs = {}
    for warmup in (0, 5):
        overrides = _overrides(sample_prepared, cold_start, 3, warmup, "trainer.max_flops=1e15")
        runs[warmup] = pretrain(load_recipe("mlm", overrides), tmp_path / f"w{warmup}", progress=False)
        assert [r["step"] for r in metrics(tmp_path / f"w{warmup}")] == [1, 2, 3]
        assert not any(k.startswith("head_warmup") for r in metrics(tmp_path / f"w{warmup}") for k in r)
    assert runs[5]["head_warmup"]["steps"] == 5 and runs[5]["head_warmup"]["tokens"] > 0
    # the same batches, tokens and FLOPs as the run without a warm-up: its own are kept apart
    for key in ("step", "tokens", "flops"):
        assert runs[5][key] == runs[0][key], key


@pytest.mark.integration
def test_a_nan_loss_in_the_warmup_names_its_learning_rate_and_its_tenth(sample_prepared, cold_start, tmp_path):
    overrides = _overrides(sample_prepared, cold_start, 2, 4, "trainer.head_warmup_lr=1e30")
    with pytest.raises(DataError) as said:
        pretrain(load_recipe("mlm", overrides), tmp_path / "run", progress=False)
    assert str(said.value).startswith("head warm-up step 2: loss is nan; lower trainer.head_warmup_lr or check")
    assert str(said.value).endswith("run the command again with --set trainer.head_warmup_lr=1e+29")


@pytest.mark.integration
def test_a_warmup_of_zero_is_announced(sample_prepared, cold_start, tmp_path, capsys):
    pretrain(load_recipe("mlm", _overrides(sample_prepared, cold_start, 1, 0)), tmp_path / "run", progress=False)
    said = capsys.readouterr().out
    assert "has no trained MLM head and trainer.head_warmup_steps=0: mlm start with a random head" in said
    assert not (tmp_path / "run" / HEAD_WARMUP_FILE).exists()


@pytest.mark.integration
def test_a_resume_does_not_repeat_the_warmup(sample_prepared, cold_start, tmp_path, capsys):
    overrides = _overrides(sample_prepared, cold_start, 4, 3, "trainer.save_every=100")
    pretrain(load_recipe("mlm", overrides), tmp_path / "straight", progress=False)
    pretrain(load_recipe("mlm", [*overrides, "trainer.stop_at=2"]), tmp_path / "paused", progress=False)
    capsys.readouterr()
    resumed = pretrain(
        load_run_recipe(tmp_path / "paused", ["trainer.stop_at=0"]), tmp_path / "paused", resume=True, progress=False
    )
    assert "alone on MLM first" not in capsys.readouterr().out
    assert resumed["head_warmup"]["steps"] == 3  # read back from the checkpoint
    assert len((tmp_path / "paused" / HEAD_WARMUP_FILE).read_text().splitlines()) == 3
    state = json.loads((checkpoint_dirs(tmp_path / "paused")[-1] / "trainer_state.json").read_text())
    assert state["head_warmup"]["steps"] == 3
    curve = [(r["step"], r["loss"]) for r in metrics(tmp_path / "paused")]
    assert curve == [(r["step"], r["loss"]) for r in metrics(tmp_path / "straight")]  # as if never paused


@pytest.mark.integration
def test_the_warmup_steps_give_the_heads_own_parameters_alone_a_gradient(
    sample_prepared, cold_start, tmp_path, monkeypatch
):
    """Through the warm-up's steps only the head's own parameters (not the encoder, nor the decoder weight tied to
    the word embeddings) take a gradient, and none is left over a step; the run's own steps train every one."""
    step, seen = loop.train_step, []

    def watched(run, item):
        step(run, item)
        trained = sorted(n for n, p in run.module.named_parameters() if p.requires_grad)
        seen.append((run.counted, trained, [n for n, p in run.module.named_parameters() if p.grad is not None]))

    monkeypatch.setattr(loop, "train_step", watched)
    pretrain(load_recipe("mlm", _overrides(sample_prepared, cold_start, 2, 3)), tmp_path / "run", progress=False)
    every = sorted(n for n, _ in MaskedLanguageModel(tiny_config()).named_parameters(prefix="model"))
    head = [n for n in every if n.startswith("model.lm_head.")]
    assert head and "model.lm_head.decoder.weight" not in head  # tied: named once, as the word embeddings
    assert seen == [(False, head, [])] * 3 + [(True, every, [])] * 2


@pytest.mark.integration
def test_a_run_stopped_inside_the_warmup_resumes_to_the_weights_of_one_never_stopped(
    sample_prepared, cold_start, tmp_path, monkeypatch
):
    """SIGTERM after warm-up step 3 of 6 saves the warm-up where it is (its optimizer, schedule, data position and
    the RNG beside the run's); the resume trains warm-up steps 4-6 and the run's own as if never stopped."""
    overrides = _overrides(sample_prepared, cold_start, 3, 6, "trainer.save_every=100", "trainer.grad_accumulation=2")
    pretrain(load_recipe("mlm", overrides), tmp_path / "straight", progress=False)
    step = loop.train_step

    def stopped_after_warmup_step_3(run, item):
        step(run, item)
        if not run.counted and run.step == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(loop, "train_step", stopped_after_warmup_step_3)
    with pytest.raises(Stopped, match="SIGTERM at step 0: kept: checkpoint step-0000000"):
        pretrain(load_recipe("mlm", overrides), tmp_path / "stopped", progress=False)
    state = json.loads((checkpoint_dirs(tmp_path / "stopped")[-1] / "trainer_state.json").read_text())
    assert state["step"] == 0 and state["head_warmup"]["step"] == 3
    monkeypatch.setattr(loop, "train_step", step)
    pretrain(load_run_recipe(tmp_path / "stopped"), tmp_path / "stopped", resume=True, progress=False)

    def warmup_log(run: str) -> list:
        lines = (tmp_path / run / HEAD_WARMUP_FILE).read_text().splitlines()
        return [(r["step"], r["head_warmup/lm_head/loss"]) for r in map(json.loads, lines)]

    assert warmup_log("stopped") == warmup_log("straight") and len(warmup_log("straight")) == 6
    curve = [(r["step"], r["loss"]) for r in metrics(tmp_path / "stopped")]
    assert curve == [(r["step"], r["loss"]) for r in metrics(tmp_path / "straight")]
    final = [load_file(checkpoint_dirs(tmp_path / run)[-1] / "model.safetensors") for run in ("straight", "stopped")]
    assert all(torch.equal(final[0][k], final[1][k]) for k in final[0]), "the resumed weights differ"


@pytest.mark.integration
@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_two_processes_warm_the_head_as_one_process_with_accumulation_even_stopped_inside_the_warmup(
    sharding, sample_prepared, cold_start, tmp_path
):
    """Each process warms on its own slot's batches; the heads' gradients are averaged over both (DDP: by the
    phase itself, which no wrapper reduces; FSDP: by the sharded module it runs through). Stopped after warm-up step
    2 of 4 and resumed, the processes end where one process with accumulation ends, never stopped."""
    overrides = [*exact_overrides(sample_prepared, 2), f"init_from={cold_start}", "trainer.head_warmup_steps=4"]
    overrides += ["model.num_languages=0", f"trainer.distributed={sharding}"]
    train_two_processes([overrides, overrides], tmp_path / "two", warmup_signal=2)
    assert [p.name for p in checkpoint_dirs(tmp_path / "two")] == ["step-0000000"]
    train_two_processes([overrides, overrides], tmp_path / "two", resume=True)
    pretrain(load_recipe("xlm", [*overrides, "trainer.grad_accumulation=2"]), tmp_path / "one", progress=False)

    def warmup_log(run: str) -> list:
        lines = (tmp_path / run / HEAD_WARMUP_FILE).read_text().splitlines()
        return [(r["step"], r["head_warmup/lm_head/loss"], r["tokens"]) for r in map(json.loads, lines)]

    two, one = warmup_log("two"), warmup_log("one")
    assert [(s, t) for s, _, t in two] == [(s, t) for s, _, t in one] and len(one) == 4
    assert [loss for _, loss, _ in two] == pytest.approx([loss for _, loss, _ in one], rel=1e-4)
    heads = [load_model(tmp_path / run).model.lm_head.state_dict() for run in ("two", "one")]
    for name, value in heads[1].items():
        torch.testing.assert_close(heads[0][name], value, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.integration
def test_an_rtd_generator_copied_from_a_start_without_a_head_gets_its_own_head_warmed(
    sample_prepared, cold_start, tmp_path
):
    generator = [f"objectives.{i}.config.{k}" for i in (0, 1) for k in ("generator_layers=1", "generator_init=model")]
    overrides = _overrides(
        sample_prepared,
        cold_start,
        1,
        4,
        "trainer.lr=0.0",
        "model.absolute_positions=true",
        "model.position_bias=none",
        *generator,
    )
    summary = pretrain(load_recipe("xlm-e", overrides), tmp_path / "run", progress=False)
    assert summary["head_warmup"]["heads"] == ["generator"]  # the discriminator reads no MLM head
    start = load_model(cold_start).model.state_dict()
    parts = load_file(checkpoint_dirs(tmp_path / "run")[-1] / "objectives.safetensors")
    copied = {k.split("generator.", 1)[1]: v for k, v in parts.items() if ".generator." in k}
    assert not torch.equal(copied["lm_head.dense.weight"], start["lm_head.dense.weight"])  # warmed
    assert torch.equal(copied["encoder.layers.0.attention.qkv.weight"], start["encoder.layers.0.attention.qkv.weight"])
