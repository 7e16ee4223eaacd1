"""ERNIE-M: CAMLM and BTMLM attention masks, pseudo-token generation, warm start, and the recipe."""

import numpy as np
import pytest
import torch

from polyalign.checkpoint import LoadedModel, save_model_folder
from polyalign.config import load_recipe
from polyalign.data.masking import IGNORE
from polyalign.data.prepared import PreparedData
from polyalign.data.streams import MonoBatch, ParallelBatch
from polyalign.evaluate.pseudo_tokens import pseudo_token_precision, pseudo_token_precision_on_pairs
from polyalign.io import DataError
from polyalign.model import EncoderConfig, MaskedLanguageModel
from polyalign.model.ernie_m import (
    camlm_attention_mask,
    generate_pseudo_tokens,
    generation_attention_mask,
    placeholder_counts,
)
from polyalign.objectives.base import model_inputs
from polyalign.objectives.btmlm import BTMLM, BTMLMConfig
from polyalign.objectives.ernie_m_camlm import CAMLM, CAMLMConfig
from polyalign.objectives.mlm import MLM, MLMConfig, masked_lm_loss
from polyalign.tokenizer import SpecialTokens
from polyalign.train import build_model, pretrain
from tests.conftest import metrics, tiny_config, tiny_recipe_overrides

SP = SpecialTokens(pad=1, cls=0, sep=2, mask=4, unk=3, vocab_size=99, first_normal=5)
STEPS = 300  # CAMLM steps of the synthetic-translation test
LANGUAGES = ["de", "en", "fr"]


def visible(mask: torch.Tensor, names: list[str]) -> dict[str, set[str]]:
    """Row i of a (T, T) mask as the set of names query i may see."""
    return {names[i]: {names[j] for j in range(len(names)) if mask[i, j]} for i in range(len(names))}


# ---------------------------------------------------------------------------------------------------------
# CAMLM


def test_camlm_mask_reproduces_the_papers_worked_example():
    # ERNIE-M Figure 1c: source x1 M2 x3, target y4 M5 M6 y7 (special tokens left out here).
    names = ["x1", "x2", "x3", "y4", "y5", "y6", "y7"]
    segment = torch.tensor([[0, 0, 0, 1, 1, 1, 1]])
    source_view = torch.tensor([[0, 1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    target_view = torch.tensor([[0, 0, 0, 0, 1, 1, 0]], dtype=torch.bool)
    # Two views (default): p(x2 | M2, y4, y5, y6, y7) and p(y5 | x1, x2, x3, M5, M6), exactly as printed.
    assert visible(camlm_attention_mask(segment, source_view)[0], names)["x2"] == {"x2", "y4", "y5", "y6", "y7"}
    rows = visible(camlm_attention_mask(segment, target_view)[0], names)
    assert rows["y5"] == rows["y6"] == {"x1", "x2", "x3", "y5", "y6"}
    assert rows["y4"] == {"y4", "y7"} and rows["x1"] == {"x1", "x2", "x3"}  # context stays in its sentence
    # Joint masking: masks see only the other side's unmasked tokens, p(x_m | x / (M ∪ X_tgt)).
    joint = visible(camlm_attention_mask(segment, source_view | target_view)[0], names)
    assert joint["x2"] == {"x2", "y4", "y7"} and joint["y5"] == {"x1", "x3", "y5", "y6"}
    alone = visible(camlm_attention_mask(segment, target_view, see_own_masks=False)[0], names)
    assert alone["y5"] == {"x1", "x2", "x3", "y5"}


def _pairs(n: int, seed: int) -> ParallelBatch:
    rng = np.random.default_rng(seed)
    src = [rng.integers(5, 99, rng.integers(4, 9)) for _ in range(n)]
    tgt = [rng.integers(5, 99, rng.integers(4, 9)) for _ in range(n)]
    return ParallelBatch(src, tgt, np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64))


def _camlm_logits(model, batch, ids, see_own_masks):
    mask = camlm_attention_mask(batch["segment"], batch["labels"] != IGNORE, see_own_masks)
    return model.mlm_logits(
        model(**{**model_inputs(batch), "input_ids": ids, "attention_mask": mask}).last_hidden_state
    )


@pytest.mark.parametrize("joint_masking,see_own_masks", [(False, True), (True, True), (True, False)])
def test_camlm_masked_tokens_are_predicted_from_the_other_sentence_only(joint_masking, see_own_masks):
    torch.manual_seed(0)
    model = MaskedLanguageModel(tiny_config(num_languages=2)).eval()
    config = CAMLMConfig(mask_prob=0.3, joint_masking=joint_masking, see_own_masks=see_own_masks)
    batch = CAMLM(config, SP, model.config).make_batch(_pairs(6, 0), np.random.default_rng(0))
    ids, segment, predicted = batch["input_ids"], batch["segment"], batch["labels"] != IGNORE
    assert (ids[predicted] == SP.mask).all()  # always MASK: a kept token would be its own answer
    logits = _camlm_logits(model, batch, ids, see_own_masks)
    for side in (0, 1):
        # Change every token of one side except its MASK positions (specials included).
        changed = ids.clone()
        where = (segment == side) & ~predicted
        changed[where] = torch.randint(5, 99, (int(where.sum()),))
        after = _camlm_logits(model, batch, changed, see_own_masks)
        own, other = predicted & (segment == side), predicted & (segment == 1 - side)
        torch.testing.assert_close(after[own], logits[own], rtol=0, atol=1e-6)
        assert not torch.allclose(after[other], logits[other], atol=1e-3)  # the other side reads it


def test_camlm_two_views_mask_one_side_each_and_the_loss_trains_the_encoder():
    torch.manual_seed(0)
    model = MaskedLanguageModel(tiny_config(num_languages=2))
    camlm = CAMLM(CAMLMConfig(), SP, model.config)
    batch = camlm.make_batch(_pairs(4, 1), np.random.default_rng(0))
    predicted, segment = batch["labels"] != IGNORE, batch["segment"]
    assert batch["input_ids"].shape[0] == 8
    assert not (predicted[:4] & (segment[:4] == 1)).any() and not (predicted[4:] & (segment[4:] == 0)).any()
    assert predicted[:4].any(1).all() and predicted[4:].any(1).all()
    out = camlm(model, batch)
    out.loss.backward()
    assert torch.isfinite(out.loss) and model.encoder.layers[0].attention.qkv.weight.grad.abs().sum() > 0


# ---------------------------------------------------------------------------------------------------------
# BTMLM


def _btmlm_and_camlm_views(see_own_masks: bool = True):
    """A BTMLM batch of three sentences and CAMLM's target view of pairs whose targets have the placeholder
    counts and languages BTMLM chose, every target token masked."""
    config = tiny_config(num_languages=3)
    btmlm = BTMLM(BTMLMConfig(pseudo_ratio=0.5, see_own_masks=see_own_masks), SP, config, ["de", "en", "fr"])
    rng = np.random.default_rng(0)
    raw = MonoBatch([rng.integers(5, 99, n) for n in (8, 5, 11)], np.array([0, 1, 2]))
    batch = btmlm.make_batch(raw, rng)
    counts = batch["placeholder"].sum(1)
    targets = batch["language_ids"][batch["placeholder"]][torch.cumsum(counts, 0) - 1].numpy()  # one per row
    pairs = ParallelBatch(raw.sentences, [rng.integers(5, 99, int(n)) for n in counts], raw.languages, targets)
    camlm = CAMLM(CAMLMConfig(mask_prob=0.999, see_own_masks=see_own_masks), SP, config)
    view = {k: v[3:] for k, v in camlm.make_batch(pairs, rng).items()}  # rows [B, 2B): the target side masked
    return btmlm, batch, view, targets


@pytest.mark.parametrize("see_own_masks", [True, False])
def test_btmlm_placeholders_are_camlms_masked_target_side(see_own_masks):
    # ERNIE-M §3.1: the placeholders carry "the language embedding and position embedding to indicate the
    # language and position we want to predict", so they must sit exactly where CAMLM predicted a target.
    btmlm, batch, view, targets = _btmlm_and_camlm_views(see_own_masks)
    predicted = view["labels"] != IGNORE
    assert torch.equal(
        predicted, (view["segment"] == 1) & (view["input_ids"] != SP.cls) & (view["input_ids"] != SP.sep)
    )
    assert targets.tolist() == [1, 0, 1] or targets.tolist() == [1, 2, 1]  # de->en, en->xx, fr->en (pivot en)
    assert torch.equal(batch["placeholder"], predicted)
    for key in ("position_ids", "language_ids", "segment", "attention_mask"):
        assert torch.equal(batch[key], view[key]), key
    assert torch.equal(batch["generation_ids"], view["input_ids"])  # `<s> x </s> <s> M .. M </s>`
    camlm_mask = camlm_attention_mask(view["segment"], predicted, see_own_masks)
    stage1_mask = generation_attention_mask(batch["segment"], batch["placeholder"], see_own_masks)
    assert torch.equal(stage1_mask, camlm_mask)
    # And functionally: stage 1's pseudo-tokens are CAMLM's predictions for a fully masked target side.
    torch.manual_seed(0)
    model = MaskedLanguageModel(tiny_config(num_languages=3)).eval()
    logits = _camlm_logits(model, view, view["input_ids"], see_own_masks)[predicted]
    logits[:, : SP.first_normal] = float("-inf")
    assert torch.equal(generate_pseudo_tokens(model, batch, SP, see_own_masks), logits.argmax(-1))


TRANSLATION_SP = SpecialTokens(pad=1, cls=0, sep=2, mask=4, unk=3, vocab_size=45, first_normal=5)


def synthetic_sentences(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """de sentences of tokens 5..24; their "translation" is y_i = x_i + 20 (en tokens 25..44)."""
    return [rng.integers(5, 25, rng.integers(3, 7)) for _ in range(n)]


@pytest.fixture(scope="module")
def camlm_translator() -> MaskedLanguageModel:
    """A tiny model trained with CAMLM until it translates masked targets of the synthetic pairs almost perfectly."""
    torch.manual_seed(0)
    # hidden 64: the tiny default (32) does not learn the position-to-position copy in 300 steps
    model = MaskedLanguageModel(tiny_config(vocab_size=45, num_languages=2, hidden_size=64, ffn_size=128))
    camlm = CAMLM(CAMLMConfig(mask_prob=0.5), TRANSLATION_SP, model.config)
    rng = np.random.default_rng(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(STEPS):
        x = synthetic_sentences(rng, 32)
        batch = camlm.make_batch(ParallelBatch(x, [s + 20 for s in x], np.zeros(32, int), np.ones(32, int)), rng)
        out = camlm(model, batch)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    assert out.metrics["accuracy"] > 0.95  # CAMLM has learnt the translation
    return model.eval()


@pytest.mark.integration
def test_btmlm_generates_the_translation_camlm_learnt(camlm_translator):
    # Through BTMLM's stage 1, the CAMLM-trained model must write the translation of a monolingual sentence.
    # Chance is 1/20 per token.
    sp, rng = TRANSLATION_SP, np.random.default_rng(1)
    btmlm = BTMLM(BTMLMConfig(pseudo_ratio=1.0), sp, camlm_translator.config, ["de", "en"])
    x = synthetic_sentences(rng, 64)
    batch = btmlm.make_batch(MonoBatch(x, np.zeros(64, int)), rng)
    pseudo = generate_pseudo_tokens(camlm_translator, batch, sp).split(batch["placeholder"].sum(1).tolist())
    truth = torch.cat([torch.from_numpy(s + 20) for s in x])
    assert (torch.cat(pseudo) == truth).float().mean() > 0.9  # token i of the translation, in place
    assert pseudo_token_precision([p.numpy() for p in pseudo], [s + 20 for s in x]) > 0.9


class NumberTokenizer:
    """Text "7 8 9" is the ids [7, 8, 9]: enough tokenizer for held-out pairs written as numbers."""

    special = TRANSLATION_SP

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [[int(t) for t in text.split()] for text in texts]


@pytest.mark.integration
def test_pseudo_token_precision_on_held_out_pairs_is_high_only_for_the_trained_model(camlm_translator, tmp_path):
    # Held-out pairs in the Tatoeba layout of `prepare --dev-pairs`, scored through the bench's function.
    x = synthetic_sentences(np.random.default_rng(2), 40)
    (tmp_path / "tatoeba.deu-eng.deu").write_text("".join(" ".join(map(str, s)) + "\n" for s in x))
    (tmp_path / "tatoeba.deu-eng.eng").write_text("".join(" ".join(map(str, s + 20)) + "\n" for s in x))
    torch.manual_seed(0)
    untrained = MaskedLanguageModel(camlm_translator.config).eval()
    scores = {}
    for name, model in (("trained", camlm_translator), ("untrained", untrained)):
        loaded = LoadedModel(model, NumberTokenizer(), ["de", "en"], tmp_path)
        result = pseudo_token_precision_on_pairs(loaded, tmp_path, ["deu"], ratio=1.0)
        scores[name] = {r["direction"]: r["precision"] for r in result["directions"]}
        scores[f"{name}, mismatched"] = {r["direction"]: r["precision"] for r in result["mismatched_directions"]}
        scores[f"{name}, one piece"] = result["most_common_share"]
        assert result["copy_precision"] == 0  # x and its translation share no token
        assert result["frequent_precision"] < 0.5  # 20 equally frequent target tokens: frequency alone guesses few
    # de->en is the direction CAMLM trained (the synthetic pairs are de source, en target); an untrained model
    # scores near chance (a few tokens per sentence out of 20 en tokens).
    assert scores["trained"]["deu->eng"] > 0.9 and scores["untrained"]["deu->eng"] < 0.2
    # Against another pair's translation the same pseudo-tokens lose most of their precision: they depend on x.
    assert scores["trained, mismatched"]["deu->eng"] < 0.5
    assert scores["trained, one piece"] < 0.5  # a translator writes many pieces, not one everywhere


def test_pseudo_token_precision_counts_tokens_found_in_the_translation():
    pseudo = [np.array([7, 8, 9]), np.array([5])]
    references = [np.array([9, 7, 7]), np.array([6, 6])]
    assert pseudo_token_precision(pseudo, references) == pytest.approx(2 / 4)  # pooled over rows, order-free
    # Clipped: a reference token matches at most as many pseudo-tokens as it occurs, so repeating a frequent
    # piece does not score.
    assert pseudo_token_precision([np.array([7, 7, 7, 9])], [np.array([7, 9, 9])]) == pytest.approx(2 / 4)
    assert np.isnan(pseudo_token_precision([np.array([], int)], [np.array([1])]))


def test_the_frequency_baseline_guesses_the_tokens_of_the_most_other_references():
    from polyalign.evaluate.pseudo_tokens import frequent_tokens

    references = [np.array([1, 2, 3]), np.array([1, 2, 4]), np.array([1, 5, 5]), np.array([6])]
    guesses = frequent_tokens(references, [2, 2, 1, 2])
    # Token 1 is in 3 references, 2 in 2; leaving row 0 out, 1 and 2 are still in the most others (2 and 1).
    assert [g.tolist() for g in guesses[:2]] == [[1, 2], [1, 2]]
    # Row 2 holds 1 itself: its own sentence must not count, 1 is still in two others.
    assert guesses[2].tolist() == [1]
    # Row 3: 1 (3 others), then 2 (2 others); its own 6 is in no other reference.
    assert guesses[3].tolist() == [1, 2]
    # Leave-one-out decides: a token only this reference holds is never guessed for it.
    assert frequent_tokens([np.array([9, 9, 8]), np.array([7])], [1, 1])[0].tolist() == [7]


def test_placeholder_counts_follow_the_ratio():
    assert placeholder_counts(np.array([3, 10, 40]), 0.15).tolist() == [1, 2, 6]
    assert placeholder_counts(np.array([3, 10]), 0.0).tolist() == [0, 0]


def test_btmlm_generates_only_in_camlms_directions():
    btmlm = BTMLM(BTMLMConfig(), SP, tiny_config(num_languages=3), ["de", "en", "fr"])
    targets = btmlm.draw_targets(np.array([0, 2, 1, 1, 1, 1, 1, 1]), np.random.default_rng(0))
    assert targets[:2].tolist() == [1, 1] and set(targets[2:].tolist()) == {0, 2}  # xx->en, en->xx
    anywhere = BTMLM(BTMLMConfig(pivot=None), SP, tiny_config(num_languages=3), ["de", "en", "fr"])
    assert set(anywhere.draw_targets(np.zeros(20, int), np.random.default_rng(0)).tolist()) == {1, 2}
    with pytest.raises(DataError, match="pivot 'en'"):
        BTMLM(BTMLMConfig(), SP, tiny_config(num_languages=2), ["de", "fr"]).setup(None)


def test_stage_two_reads_the_pseudo_tokens_and_no_gradient_reaches_stage_one():
    torch.manual_seed(0)
    model = MaskedLanguageModel(tiny_config(num_languages=3))
    btmlm = BTMLM(BTMLMConfig(pseudo_ratio=0.5), SP, model.config, ["de", "en", "fr"])
    rng = np.random.default_rng(0)
    raw = MonoBatch([rng.integers(5, 99, n) for n in (8, 5, 11)], np.array([0, 1, 2]))
    batch = btmlm.make_batch(raw, rng)
    placeholder = batch["placeholder"]
    own_language = batch["language_ids"][:, :1].expand_as(placeholder)  # column 0 is the sentence's <s>
    assert (batch["language_ids"][placeholder] != own_language[placeholder]).all()  # another language

    calls = []
    forward = model.forward

    def recording(input_ids, **kwargs):
        calls.append((input_ids.clone(), torch.is_grad_enabled(), model.training))
        return forward(input_ids, **kwargs)

    model.forward = recording
    out = btmlm(model, batch)
    out.loss.backward()
    model.forward = forward
    (stage1_ids, stage1_grad, stage1_training), (stage2_ids, stage2_grad, stage2_training) = calls
    assert not stage1_grad and not stage1_training and stage2_grad and stage2_training
    assert (stage1_ids[placeholder] == SP.mask).all()
    assert torch.equal(stage1_ids[~placeholder], batch["generation_ids"][~placeholder])  # the unmasked sentence
    # Stage-1 pseudo-tokens, recomputed on their own, are what stage 2 reads at the placeholders.
    pseudo = btmlm.generate(model, batch)
    assert torch.equal(stage2_ids, pseudo) and (pseudo[placeholder] >= SP.first_normal).all()
    assert torch.equal(pseudo[~placeholder], batch["input_ids"][~placeholder])  # the MLM-masked sentence
    # The gradient is exactly that of plain MLM on the stage-2 input with the pseudo-tokens as constants.
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    loss = masked_lm_loss(
        model, model(**{**model_inputs(batch), "input_ids": pseudo}).last_hidden_state, batch["labels"]
    )[0]
    loss.backward()
    torch.testing.assert_close(loss, out.loss)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], msg=n)
    assert out.metrics["perplexity"] == pytest.approx(float(torch.exp(out.loss.detach())), rel=1e-5)


def test_btmlm_stage_two_masks_like_mlm_and_without_placeholders_is_mlm():
    torch.manual_seed(0)
    model = MaskedLanguageModel(tiny_config(num_languages=3)).eval()
    rng = np.random.default_rng(0)
    raw = MonoBatch([rng.integers(5, 99, n) for n in (8, 5, 11)], np.array([0, 1, 2]))
    mlm_batch = MLM(MLMConfig(), SP, model.config).make_batch(raw, np.random.default_rng(1))
    for ratio in (0.0, 0.2):
        batch = BTMLM(BTMLMConfig(pseudo_ratio=ratio), SP, model.config, LANGUAGES).make_batch(
            raw, np.random.default_rng(1)
        )
        T0 = mlm_batch["labels"].shape[1]
        assert torch.equal(batch["labels"][:, :T0], mlm_batch["labels"])  # the same targets at every ratio
        assert (batch["labels"][:, T0:] == IGNORE).all()
    no_placeholders = BTMLM(BTMLMConfig(pseudo_ratio=0.0), SP, model.config)
    btmlm = no_placeholders(model, no_placeholders.make_batch(raw, np.random.default_rng(1)))
    torch.testing.assert_close(btmlm.loss, MLM(MLMConfig(), SP, model.config)(model, mlm_batch).loss)


def test_btmlm_needs_language_embeddings_and_known_target_languages():
    with pytest.raises(DataError, match="num_languages: auto"):
        BTMLM(BTMLMConfig(), SP, tiny_config())
    unknown = BTMLM(BTMLMConfig(target_languages=["xx"]), SP, tiny_config(num_languages=2), ["de", "en"])
    with pytest.raises(DataError, match=r"target_languages \['xx'\]"):
        unknown.setup(MaskedLanguageModel(tiny_config(num_languages=2)))
    only_en = BTMLM(BTMLMConfig(target_languages=["en"]), SP, tiny_config(num_languages=2), ["de", "en"])
    assert only_en.draw_targets(np.array([0, 1, 0]), np.random.default_rng(0)).tolist() == [1, 1, 1]


# ---------------------------------------------------------------------------------------------------------
# Warm start and the recipe


def test_warm_start_adds_zero_language_embeddings_and_keeps_the_outputs(sample_prepared, tmp_path):
    prepared = PreparedData(sample_prepared)
    tokenizer = prepared.tokenizer()
    overrides = tiny_recipe_overrides(sample_prepared)
    sizes = {k: yaml_value for k, yaml_value in (o.split("=") for o in overrides if o.startswith("model."))}
    config = EncoderConfig(
        vocab_size=tokenizer.special.vocab_size,
        pad_token_id=tokenizer.special.pad,
        dropout=0.0,
        attention_dropout=0.0,
        **{k.removeprefix("model."): int(v) for k, v in sizes.items()},
    )
    torch.manual_seed(0)
    source = MaskedLanguageModel(config).eval()
    save_model_folder(tmp_path / "mlm", source, tokenizer, [])
    recipe = load_recipe("ernie-m", [*overrides, f"init_from={tmp_path / 'mlm'}", "model.dropout=0.0"])
    model, languages = build_model(recipe, tokenizer, prepared.languages)
    assert languages == prepared.languages and model.config.num_languages == len(languages)
    assert model.encoder.embeddings.language.weight.abs().sum() == 0
    ids = torch.randint(5, 2000, (2, 9))
    expected = source(ids).last_hidden_state
    got = model.eval()(ids, language_ids=torch.full_like(ids, 3)).last_hidden_state
    torch.testing.assert_close(got, expected)


def test_warm_start_without_language_embeddings_numbers_the_new_rows_by_the_data(sample_prepared, tmp_path):
    # A checkpoint trained without language embeddings that still lists more languages than this run trains on
    # (data.languages a subset): the new rows follow the data's languages, not the checkpoint's list.
    prepared = PreparedData(sample_prepared)
    tokenizer = prepared.tokenizer()
    overrides = tiny_recipe_overrides(sample_prepared)
    recipe = load_recipe("xlm", [*overrides, "model.num_languages=0"])
    model, _ = build_model(recipe, tokenizer, prepared.languages)
    save_model_folder(tmp_path / "plain", model, tokenizer, [*prepared.languages, "xx", "yy"])
    recipe = load_recipe("xlm", [*overrides, f"init_from={tmp_path / 'plain'}"])
    subset = prepared.languages[:2]
    model, languages = build_model(recipe, tokenizer, subset)
    assert languages == subset and model.config.num_languages == len(subset)


@pytest.mark.integration
def test_ernie_m_recipe_runs_both_stages(sample_prepared, tmp_path):
    overrides = tiny_recipe_overrides(sample_prepared, steps=2) + ["objectives.3.start_step=1"]
    pretrain(load_recipe("ernie-m", overrides), tmp_path / "run", progress=False)
    first, second = metrics(tmp_path / "run")
    for name in ("mlm", "tlm", "camlm"):
        assert np.isfinite(first[f"{name}/loss"]) and np.isfinite(second[f"{name}/loss"])
    assert "btmlm/loss" not in first  # stage 1: MLM + TLM + CAMLM
    assert np.isfinite(second["btmlm/loss"]) and second["btmlm/perplexity"] > 1  # stage 2 adds BTMLM
    # One logging window over both steps: BTMLM's metrics average over the one step it trained, not two.
    pretrain(load_recipe("ernie-m", [*overrides, "trainer.log_every=2"]), tmp_path / "window", progress=False)
    (both,) = metrics(tmp_path / "window")
    assert both["btmlm/loss"] == pytest.approx(second["btmlm/loss"], rel=1e-5)
    assert both["mlm/loss"] == pytest.approx((first["mlm/loss"] + second["mlm/loss"]) / 2, rel=1e-5)
