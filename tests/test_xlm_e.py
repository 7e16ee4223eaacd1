"""XLM-E: gated relative position bias, replaced token detection (MRTD, TRTD), FLOPs accounting, recipes."""

import json
import math
import statistics

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from polyalign.checkpoint import checkpoint_dirs, load_model, save_model_folder
from polyalign.config import load_recipe
from polyalign.data.prepared import PreparedData
from polyalign.data.streams import MonoBatch, ParallelBatch
from polyalign.flops import replaced_token_detection_flops
from polyalign.io import DataError
from polyalign.model import Encoder, EncoderConfig, MaskedLanguageModel
from polyalign.model.position_bias import GatedRelativePositionBias, RelativePositionBias
from polyalign.objectives import OBJECTIVES, setup_objectives
from polyalign.objectives.rtd import corrupt, replaced_token_labels, sample_replacements
from polyalign.tokenizer import SpecialTokens
from polyalign.train import load_run_recipe, pretrain
from tests.conftest import metrics, tiny_config, tiny_recipe_overrides

SP = SpecialTokens(pad=1, cls=0, sep=2, mask=4, unk=3, vocab_size=99, first_normal=5)


def build(name: str, config=None, **settings):
    """A tiny discriminator (3 layers, so the default generator has 1) and a set-up objective."""
    torch.manual_seed(0)
    config = config or tiny_config(num_layers=3)
    model = MaskedLanguageModel(config)
    objective = OBJECTIVES[name](OBJECTIVES[name].Config(**settings), SP, config)
    objective.setup(model)
    return model, objective


def mono_batch(objective, seed=0, n=6, length=12, vocab=(5, 99)):
    rng = np.random.default_rng(seed)
    sentences = [rng.integers(*vocab, size=int(rng.integers(4, length))) for _ in range(n)]
    return objective.make_batch(MonoBatch(sentences, np.zeros(n, dtype=np.int64)), rng)


# ---------------------------------------------------------------------------------------------------------
# Gated relative position bias (XLM-E §3.3)


def test_gated_bias_equals_the_plain_relative_bias_when_its_gates_are_held_constant():
    torch.manual_seed(0)
    H, hs, T = 4, 8, 9
    plain, gated = RelativePositionBias(H), GatedRelativePositionBias(H, hs)
    gated.relative.table.weight.data.copy_(plain.table.weight.data)
    relative = torch.arange(T).expand(2, T)  # position ids
    q = torch.randn(2, H, T, hs)
    with torch.no_grad():
        gated.gates.weight.zero_()  # u = v = 0: both gates are σ(0) = 1/2 whatever the query
        gated.w.fill_(-2.0)  # r = d·(1 + 1/2 + (1 - 1/2)·w·1/2) = d when w = -2
        torch.testing.assert_close(gated(q, relative), plain(q, relative))
        gated.w.fill_(1.0)  # any constant gates give a constant multiple of d: here 1.75
        torch.testing.assert_close(gated(q, relative), 1.75 * plain(q, relative))
        gated.gates.weight.normal_()  # gates that read q: the bias now depends on the content
        assert not torch.allclose(gated(q, relative), gated(torch.randn_like(q), relative))


def test_gated_bias_for_one_query_and_key_matches_a_hand_computation():
    # XLM-E §3.3: g_update, g_reset = σ(q_i·u), σ(q_i·v), r = d + g_update·d + (1 - g_update)·w·g_reset·d,
    # the gates read from the query i only. Random u, v, w and queries make every gate differ.
    torch.manual_seed(0)
    H, hs, T = 2, 4, 6
    gated = GatedRelativePositionBias(H, hs)
    with torch.no_grad():
        gated.gates.weight.normal_()
        gated.w.copy_(torch.tensor([0.7, -1.3]))
    q = torch.randn(1, H, T, hs)
    bias = gated(q, torch.arange(T)[None])  # position ids (1, T)
    i, j = 1, 4  # j - i = 3 < 8: its own bucket, 16 + 3 (the positive direction's half)
    u, v = gated.gates.weight.tolist()
    for h in range(H):
        d = gated.relative.table.weight[16 + 3, h].item()
        q_i = q[0, h, i].tolist()
        update = 1 / (1 + math.exp(-sum(a * b for a, b in zip(q_i, u, strict=True))))
        reset = 1 / (1 + math.exp(-sum(a * b for a, b in zip(q_i, v, strict=True))))
        r = d + update * d + (1 - update) * gated.w[h].item() * reset * d
        assert abs(update - reset) > 0.05 and abs(bias[0, h, i, j].item() - r) < 1e-5


def test_encoder_with_constant_gates_matches_the_encoder_with_plain_relative_bias():
    torch.manual_seed(0)
    plain = Encoder(tiny_config(position_bias="relative")).eval()
    gated = Encoder(tiny_config(position_bias="gated_relative")).eval()
    state = {k.replace("position_bias.table", "position_bias.relative.table"): v for k, v in plain.state_dict().items()}
    missing, unexpected = gated.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith(("gates.weight", ".w")) for k in missing)
    for layer in gated.layers:
        layer.attention.position_bias.gates.weight.data.zero_()
        layer.attention.position_bias.w.data.fill_(-2.0)
    ids = torch.randint(5, 99, (2, 10))
    torch.testing.assert_close(gated(ids).last_hidden_state, plain(ids).last_hidden_state)


# ---------------------------------------------------------------------------------------------------------
# Absolute positions off (the xlm-e recipes): word order comes from the position bias alone


def no_absolute_positions(position_bias="gated_relative"):
    torch.manual_seed(0)
    return Encoder(tiny_config(absolute_positions=False, position_bias=position_bias)).eval()


def test_without_absolute_positions_there_is_no_table_and_only_relative_positions_matter():
    enc = no_absolute_positions()
    assert not any("embeddings.position" in name for name, _ in enc.named_parameters())
    ids = torch.randint(5, 99, (2, 10))
    positions = torch.arange(10).expand(2, 10)
    shifted = enc(ids, position_ids=positions + 7).last_hidden_state  # every j - i unchanged
    torch.testing.assert_close(shifted, enc(ids, position_ids=positions).last_hidden_state)
    torch.manual_seed(0)
    absolute = Encoder(tiny_config(position_bias="gated_relative")).eval()
    assert not torch.allclose(
        absolute(ids, position_ids=positions + 7).last_hidden_state, absolute(ids).last_hidden_state
    )


def test_without_absolute_positions_word_order_is_seen_only_through_the_relative_bias():
    enc = no_absolute_positions("relative")
    ids = torch.randint(5, 99, (1, 10))
    order = torch.randperm(10)
    permuted = lambda: enc(ids[:, order]).last_hidden_state  # noqa: E731
    assert not torch.allclose(permuted(), enc(ids).last_hidden_state[:, order])  # the bias sees the order
    for layer in enc.layers:
        layer.attention.position_bias.table.weight.data.zero_()
    torch.testing.assert_close(permuted(), enc(ids).last_hidden_state[:, order])  # bias off: a bag of tokens


def test_absolute_positions_off_needs_a_position_bias():
    with pytest.raises(ValueError, match="blind to word order"):
        tiny_config(absolute_positions=False)
    with pytest.raises(DataError, match="blind to word order"):
        load_recipe("xlm-e", ["model.position_bias=none"])


def test_xlm_e_recipes_follow_the_paper_and_other_models_keep_absolute_positions():
    assert load_recipe("xlm-e").model["absolute_positions"] is False
    assert load_recipe("xlm-e-mono").model["absolute_positions"] is False
    assert EncoderConfig().absolute_positions and "absolute_positions" not in load_recipe("mlm").model


def test_checkpoints_round_trip_with_and_without_absolute_positions(sample_prepared, tmp_path):
    tokenizer = PreparedData(sample_prepared).tokenizer()
    ids = torch.randint(5, 99, (2, 9))
    for absolute in (False, True):
        torch.manual_seed(0)
        config = tiny_config(
            vocab_size=tokenizer.special.vocab_size, absolute_positions=absolute, position_bias="relative"
        )
        model = MaskedLanguageModel(config).eval()
        folder = save_model_folder(tmp_path / f"absolute-{absolute}", model, tokenizer, [])
        if absolute:  # a folder written before the switch existed has no such key: it loads with the table
            meta = json.loads((folder / "config.json").read_text())
            del meta["encoder"]["absolute_positions"]
            (folder / "config.json").write_text(json.dumps(meta))
        loaded = load_model(folder).model
        assert loaded.config.absolute_positions is absolute
        assert (loaded.encoder.embeddings.position is not None) is absolute
        torch.testing.assert_close(loaded(ids).last_hidden_state, model(ids).last_hidden_state)


def test_gated_bias_keeps_blocked_keys_out_of_reach():
    torch.manual_seed(0)
    enc = Encoder(tiny_config(position_bias="gated_relative")).eval()
    ids = torch.randint(5, 99, (1, 8))
    mask = torch.zeros(1, 8, 8, dtype=torch.bool)
    mask[0, :4, :4] = mask[0, 4:, 4:] = True  # two blocks that cannot see each other
    changed = ids.clone()
    changed[0, 4:] = torch.randint(5, 99, (4,))
    a, b = enc(ids, attention_mask=mask).last_hidden_state, enc(changed, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(a[0, :4], b[0, :4])


# ---------------------------------------------------------------------------------------------------------
# Replaced token detection


def test_labels_mark_a_position_replaced_only_when_the_sampled_token_differs():
    original = torch.tensor([[0, 7, 8, 9, 2, 1]])
    index, valid = torch.tensor([1, 2, 0]), torch.tensor([True, True, False])  # positions 1 and 2, one padding entry
    corrupted = corrupt(original, index, valid, torch.tensor([7, 5, 3]))  # position 1 sampled its own token back
    assert corrupted.tolist() == [[0, 7, 5, 9, 2, 1]]
    assert replaced_token_labels(original, corrupted).tolist() == [[0, 0, 1, 0, 0, 0]]


def test_replaced_labels_in_a_training_step_are_exactly_the_changed_positions():
    model, objective = build("mrtd")
    # Sentences of tokens 10 and 11 only, and a generator that mostly proposes 10: many masked 10s are
    # sampled back unchanged (label 0), masked 11s are mostly replaced (label 1).
    objective.parts.generator.lm_head.decoder.bias.data[10] = 8.0
    batch = mono_batch(objective, n=40, length=30, vocab=(10, 12))
    d = objective.detect(model, batch)
    masked = batch["labels"] != -100
    real = batch["attention_mask"]
    assert torch.equal(d.replaced.bool(), d.corrupted != d.original)
    assert torch.equal(d.corrupted[~masked], d.original[~masked])  # only masked positions can change
    sampled_back = masked & (d.corrupted == d.original)
    assert sampled_back.sum() > 10 and not d.replaced[sampled_back].any()
    assert (masked & (d.corrupted != d.original)).sum() > 10
    assert torch.equal(d.original[real], torch.where(masked, batch["labels"], batch["input_ids"])[real])


def test_discriminator_reads_the_generator_samples_at_masked_positions_and_the_originals_elsewhere(monkeypatch):
    model, objective = build("mrtd")
    batch = mono_batch(objective, n=8, length=20)
    samples, seen = [], []

    def recorded_samples(logits):
        samples.append(sample_replacements(logits))
        return samples[-1]

    monkeypatch.setattr("polyalign.objectives.rtd.sample_replacements", recorded_samples)
    model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs.get("input_ids", args[0] if args else None)), with_kwargs=True
    )
    objective.detect(model, batch)
    masked = batch["labels"] != -100
    original = torch.where(masked, batch["labels"], batch["input_ids"])
    expected = original.clone()
    # Eqs. (2), (4): x^corrupt, the samples in row-major order of the masked positions (the draws past the masked
    # count are the padding rows of the head's fixed-size index: unused)
    expected[masked] = samples[0][: int(masked.sum())]
    assert len(samples) == 1 and len(seen) == 1  # one draw, one discriminator pass
    assert torch.equal(seen[0], expected)
    assert (expected != original).sum() > 5 and not torch.equal(expected, batch["input_ids"])


def test_discriminator_loss_sends_no_gradient_to_the_generator():
    model, objective = build("mrtd")
    generator = objective.parts.generator
    shared = model.encoder.embeddings.word.weight
    assert generator.encoder.embeddings.word.weight is shared and generator.lm_head.decoder.weight is shared
    d = objective.detect(model, mono_batch(objective))
    d.discriminator_loss.backward(retain_graph=True)
    own = [(n, p) for n, p in generator.named_parameters() if p is not shared]
    assert own and all(p.grad is None or not p.grad.any() for _, p in own)
    assert shared.grad.abs().sum() > 0  # token embeddings are shared with the discriminator by design
    assert model.encoder.layers[0].attention.qkv.weight.grad.abs().sum() > 0
    d.generator_loss.backward()  # and the generator does learn from its own loss
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for n, p in own if "layers.0." in n)


def test_loss_is_generator_loss_plus_lambda_times_discriminator_loss():
    outputs, head_grads = {}, {}
    for weight in (1.0, 50.0):
        model, objective = build("mrtd", discriminator_weight=weight)
        batch = mono_batch(objective)
        torch.manual_seed(1)  # the same generator samples in both runs
        out = objective(model, batch)
        out.loss.backward()
        outputs[weight] = out
        head_grads[weight] = objective.parts.detection_head.logit.weight.grad.clone()
    a, b = outputs[1.0], outputs[50.0]
    assert a.metrics["discriminator_loss"] == b.metrics["discriminator_loss"]
    torch.testing.assert_close(b.loss, b.metrics["generator_loss"] + 50.0 * b.metrics["discriminator_loss"])
    torch.testing.assert_close(a.loss, a.metrics["generator_loss"] + a.metrics["discriminator_loss"])
    torch.testing.assert_close(head_grads[50.0], 50.0 * head_grads[1.0])  # the head only sees λ·L_D


def binary_entropy(rate: float) -> float:
    return -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate))


@pytest.mark.integration
def test_discriminator_learns_to_detect_replacements_that_only_context_gives_away(monkeypatch):
    # Sentences count upwards (t, t+1, t+2, ...) and the "generator" proposes uniform tokens from the same
    # vocabulary, so a token's identity says nothing about whether it was replaced: only its neighbours do. The
    # discriminator must leave the prior (predicting "original" everywhere scores H(rate) nats and 1 - rate) by a
    # wide margin. Fails if it reads the uncorrupted text, if labels and positions disagree, or if L_D's gradient
    # does not reach the encoder and the head. (At our pre-training scale the discriminator never leaves that
    # prior: bench/results/evidence.md, xlm-e rows; this test is the code side of that investigation.)
    model, objective = build("mrtd")
    low, high = 5, 65
    uniform = lambda logits: torch.randint(low, high, (logits.shape[0],))  # noqa: E731
    monkeypatch.setattr("polyalign.objectives.rtd.sample_replacements", uniform)
    rng = np.random.default_rng(0)

    def counting_batch():
        starts = rng.integers(low, high - 20, size=32)
        sentences = [np.arange(s, s + int(rng.integers(12, 20))) for s in starts]
        return objective.make_batch(MonoBatch(sentences, np.zeros(len(sentences), dtype=np.int64)), rng)

    parameters = {id(p): p for p in [*model.parameters(), *objective.parts.parameters()]}  # embeddings are shared
    optimizer = torch.optim.AdamW(list(parameters.values()), lr=3e-3)
    torch.manual_seed(0)
    for _ in range(150):
        optimizer.zero_grad()
        objective(model, counting_batch()).loss.backward()
        optimizer.step()
    with torch.no_grad():
        held_out = [objective.detect(model, counting_batch()) for _ in range(4)]
    rate = statistics.mean(float(d.replaced[d.original != SP.pad].mean()) for d in held_out)
    loss = statistics.mean(float(d.discriminator_loss) for d in held_out)
    accuracy = statistics.mean(float(d.discriminator_accuracy) for d in held_out)
    assert 0.08 < rate < 0.2
    assert loss < 0.75 * binary_entropy(rate) and accuracy > 1 - 0.75 * rate


def test_mrtd_and_trtd_share_one_generator_and_detection_head():
    torch.manual_seed(0)
    config = tiny_config(num_layers=3)
    model = MaskedLanguageModel(config)
    mrtd = OBJECTIVES["mrtd"](OBJECTIVES["mrtd"].Config(), SP, config)
    trtd = OBJECTIVES["trtd"](OBJECTIVES["trtd"].Config(), SP, config)
    setup_objectives({"mrtd": mrtd, "trtd": trtd}, model)
    assert mrtd.parts is trtd.parts and mrtd.parts.generator.config.num_layers == 1
    rng = np.random.default_rng(0)
    pairs = ParallelBatch(
        [rng.integers(5, 99, size=6) for _ in range(3)],
        [rng.integers(5, 99, size=5) for _ in range(3)],
        np.zeros(3, dtype=np.int64),
        np.ones(3, dtype=np.int64),
    )
    batch = trtd.make_batch(pairs, rng)
    assert batch["input_ids"].shape[1] == 6 + 5 + 3  # <s> e </s> f </s>: the pair as one sentence
    out = trtd(model, batch)
    assert torch.isfinite(out.loss) and out.metrics["replaced"] > 0
    fresh = OBJECTIVES["mrtd"](OBJECTIVES["mrtd"].Config(), SP, config)
    other = OBJECTIVES["trtd"](OBJECTIVES["trtd"].Config(generator_layers=2), SP, config)
    with pytest.raises(ValueError, match="share one generator"):
        setup_objectives({"mrtd": fresh, "trtd": other}, model)
    other = OBJECTIVES["trtd"](OBJECTIVES["trtd"].Config(generator_init="model"), SP, config)
    with pytest.raises(ValueError, match="generator_init: MRTD and TRTD share one generator"):
        setup_objectives({"mrtd": fresh, "trtd": other}, model)


def test_a_generator_started_from_the_model_predicts_as_the_model_and_then_trains_apart():
    # generator_init=model: a copy of the model's bottom layers, embeddings and MLM head. The wrong versions: a
    # generator left random (its predictions differ), or one sharing the copied weights (training it would move
    # the discriminator's layers too).
    torch.manual_seed(0)
    config = tiny_config(num_layers=3)
    model = MaskedLanguageModel(config).eval()
    mrtd = OBJECTIVES["mrtd"](OBJECTIVES["mrtd"].Config(generator_layers=3, generator_init="model"), SP, config)
    mrtd.setup(model)
    generator = mrtd.parts.generator.eval()
    ids = torch.randint(5, 99, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(generator(ids).last_hidden_state, model(ids).last_hidden_state)
        torch.testing.assert_close(
            generator.lm_head(generator(ids).last_hidden_state), model.lm_head(model(ids).last_hidden_state)
        )
    assert generator.encoder.embeddings.word is model.encoder.embeddings.word  # still shared (ELECTRA §3.2)
    layer = generator.encoder.layers[0].feed_forward.up.weight
    assert layer is not model.encoder.layers[0].feed_forward.up.weight
    with torch.no_grad():
        layer.add_(1.0)
    assert not torch.equal(layer, model.encoder.layers[0].feed_forward.up.weight)
    shallow = OBJECTIVES["trtd"](OBJECTIVES["trtd"].Config(generator_init="model"), SP, config)
    other = MaskedLanguageModel(config)
    shallow.setup(other)  # a third of the layers: the first one, copied
    torch.testing.assert_close(
        shallow.parts.generator.encoder.layers[0].attention.qkv.weight, other.encoder.layers[0].attention.qkv.weight
    )
    fresh, started = (
        MaskedLanguageModel(config),
        OBJECTIVES["mrtd"](OBJECTIVES["mrtd"].Config(generator_layers=3), SP, config),
    )
    started.setup(fresh)  # the default, generator_init=new: XLM-E's own random start
    assert not torch.equal(
        started.parts.generator.encoder.layers[0].attention.qkv.weight, fresh.encoder.layers[0].attention.qkv.weight
    )
    with pytest.raises(ValueError, match="generator_init='copy': use one of"):
        OBJECTIVES["mrtd"].Config(generator_init="copy")


# ---------------------------------------------------------------------------------------------------------
# FLOPs


def test_flops_match_a_hand_count():
    # Discriminator: hidden 32, 3 layers, FFN 37, vocabulary 99; generator: 1 layer. Batch 2 x 7, 3 masked.
    # One layer on 14 tokens: 14·2·(4·32·32 + 2·32·37) = 180,992 matmul FLOPs + attention 4·2·7·7·32 = 12,544.
    layer = 180_992 + 12_544
    generator = layer + 3 * 2 * (32 * 32 + 32 * 99)  # its MLM head at the 3 masked tokens
    discriminator = 3 * layer + 14 * 2 * (32 * 32 + 32)  # its detection head at all 14 positions
    hand = 3 * (generator + discriminator)  # forward + backward: 3·(218,688 + 610,176)
    config = tiny_config(num_layers=3)
    assert replaced_token_detection_flops(tiny_config(num_layers=1), config, 2, 7, 3) == hand == 2_486_592
    # Gated relative position bias adds q·u and q·v: 14 tokens · 2·32·2 FLOPs per layer, 4 layers in all.
    gated = tiny_config(num_layers=3, position_bias="gated_relative")
    gated_generator = tiny_config(num_layers=1, position_bias="gated_relative")
    assert replaced_token_detection_flops(gated_generator, gated, 2, 7, 3) == hand + 3 * 4 * 14 * 128
    # The objective reports exactly this count for the batch it trained on.
    model, objective = build("mrtd")
    rng = np.random.default_rng(0)
    batch = objective.make_batch(MonoBatch([rng.integers(5, 99, size=5) for _ in range(2)], np.zeros(2)), rng)
    assert tuple(batch["input_ids"].shape) == (2, 7)
    masked = int((batch["labels"] != -100).sum())
    out = objective(model, batch)
    assert out.flops == replaced_token_detection_flops(tiny_config(num_layers=1), config, 2, 7, masked)


# ---------------------------------------------------------------------------------------------------------
# Recipes


@pytest.mark.integration
def test_xlm_e_recipe_trains_exports_the_discriminator_and_resumes_exactly(sample_prepared, tmp_path):
    overrides = tiny_recipe_overrides(sample_prepared, steps=4) + ["model.num_layers=3", "trainer.save_every=100"]
    pretrain(load_recipe("xlm-e", overrides), tmp_path / "straight", progress=False)
    pretrain(load_recipe("xlm-e", overrides + ["trainer.stop_at=2"]), tmp_path / "paused", progress=False)
    pretrain(
        load_run_recipe(tmp_path / "paused", ["trainer.stop_at=0"]), tmp_path / "paused", resume=True, progress=False
    )
    straight, resumed = metrics(tmp_path / "straight"), metrics(tmp_path / "paused")
    assert [r["loss"] for r in resumed] == [r["loss"] for r in straight]  # shared weights restored exactly
    assert {"mrtd/discriminator_loss", "trtd/generator_loss", "trtd/replaced"} <= set(straight[0])
    flops = [r["flops"] for r in straight]
    assert flops[0] > 0 and all(b > a for a, b in zip(flops, flops[1:], strict=False))
    loaded = load_model(tmp_path / "straight")
    assert loaded.model.config.position_bias == "gated_relative" and loaded.model.config.num_layers == 3
    assert not loaded.model.config.absolute_positions  # §3.3: the gated relative bias is the only position signal
    exported = load_file(checkpoint_dirs(tmp_path / "straight")[-1] / "model.safetensors")
    assert not any("generator" in k or "detection" in k for k in exported)  # the discriminator only
    assert not any("embeddings.position" in k for k in exported)


@pytest.mark.integration
def test_xlm_e_mono_recipe_trains_two_steps(sample_prepared, tmp_path):
    recipe = load_recipe("xlm-e-mono", tiny_recipe_overrides(sample_prepared, steps=2))
    pretrain(recipe, tmp_path / "run", progress=False)
    records = metrics(tmp_path / "run")
    assert [r["step"] for r in records] == [1, 2] and "trtd/generator_loss" not in records[0]
    assert all(np.isfinite(r["mrtd/discriminator_loss"]) for r in records)


def test_paper_defaults_lambda_50_and_a_generator_a_third_deep():
    """XLM-E §4.1: discriminator weight λ = 50; Table 6: a 4-layer generator beside a 12-layer discriminator
    (a third; at 12 layers L // 2 = 6 or L - 1 = 11 would fail here, where 3 layers could not tell them apart)."""
    from polyalign.objectives.rtd import generator_config

    assert OBJECTIVES["mrtd"].Config().discriminator_weight == OBJECTIVES["trtd"].Config().discriminator_weight == 50.0
    twelve = EncoderConfig(vocab_size=100, hidden_size=32, num_layers=12, num_heads=2, ffn_size=64)
    assert generator_config(twelve).num_layers == 4
    assert generator_config(twelve, 6).num_layers == 6  # an explicit depth wins
