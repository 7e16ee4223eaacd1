"""Fine-tune a sequence-to-sequence Transformer for translation and score it with sacreBLEU (VECO §3.2).

The model is initialised from a pre-trained polyalign model (`--init veco`: every weight from VECO; `--init
encoder`: an encoder without cross-attention, e.g. XLM, leaving the encoder-decoder attention new) or randomly
with the same configuration (`--init random`). Training pairs come from ../shared/data/train/parallel (one
language pair); the test set is a held-out slice at the end of that file. It trains through the fine-tuning loop's step
(`polyalign.finetune.loop.training_steps`). Greedy decoding; sacreBLEU on detokenised text.

  python -m bench.run veco-translation -- --model bench/work/runs/veco --init veco --steps 300 --out results.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import numpy as np
import sacrebleu
import torch

from polyalign.checkpoint import load_model
from polyalign.config import TrainerConfig
from polyalign.data.batching import length_batches, pad_sequences
from polyalign.data.masking import IGNORE
from polyalign.finetune.loop import FinetuneConfig, training_steps
from polyalign.model.seq2seq import Seq2SeqTransformer
from polyalign.objectives.mlm import masked_lm_loss

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
CURVE_EVERY = 20  # steps per point of the training curve


def read_lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def read_pairs(src: str, tgt: str) -> tuple[list[str], list[str]]:
    """The en-xx file pair of ../shared/data/train/parallel, as (source side, target side)."""
    other = src if tgt == "en" else tgt
    folder = DATA / "train" / "parallel"
    return read_lines(folder / f"en-{other}.{src}.gz"), read_lines(folder / f"en-{other}.{tgt}.gz")


def make_batch(pairs, idx, sp, src_lang, tgt_lang) -> tuple[dict, dict, torch.Tensor]:
    """Source `<s> x </s>`, decoder input `<s> y`, labels `y </s>`."""
    src_ids, src_mask = pad_sequences([[sp.cls, *pairs[i][0], sp.sep] for i in idx], sp.pad)
    tgt_ids, tgt_mask = pad_sequences([[sp.cls, *pairs[i][1]] for i in idx], sp.pad)
    labels, _ = pad_sequences([[*pairs[i][1], sp.sep] for i in idx], IGNORE)
    source = {"input_ids": src_ids, "attention_mask": src_mask}
    target = {"input_ids": tgt_ids, "attention_mask": tgt_mask}
    if src_lang is not None:
        source["language_ids"] = torch.full_like(src_ids, src_lang)
        target["language_ids"] = torch.full_like(tgt_ids, tgt_lang)
    return source, target, labels


def random_batches(lengths: np.ndarray, batch_tokens: int, rng: np.random.Generator):
    """Endless batches of random pairs whose padded source + target size fits `batch_tokens`."""
    while True:
        batch, longest = [], 0
        for i in rng.permutation(len(lengths)):
            longest_if_added = max(longest, int(lengths[i]))
            if batch and longest_if_added * (len(batch) + 1) > batch_tokens:
                yield batch
                batch, longest_if_added = [], int(lengths[i])
            batch.append(int(i))
            longest = longest_if_added


def fine_tune(
    model, train, sp, languages, steps: int, batch_tokens: int, lr: float, seed: int, t0: float
) -> list[dict]:
    """Train `model` on `train` pairs (source ids, target ids) through the fine-tuning loop's step
    (polyalign.finetune.loop): AdamW with weight decay 0.01 and pre-training's betas and eps (a sequence-to-sequence
    model from scratch or half-new wants beta2 = 0.98, not BERT fine-tuning's 0.999), linear warmup (10%) and decay,
    bf16 autocast, clipping at 1. Returns the mean loss of every CURVE_EVERY steps."""
    config = FinetuneConfig(lr=lr, weight_decay=0.01, layer_decay=1.0, warmup_fraction=0.1, clip_norm=1.0)
    lengths = np.array([max(len(s), len(t)) * 2 + 3 for s, t in train])
    batches = random_batches(lengths, batch_tokens, np.random.default_rng(seed))

    def loss_of(idx: list[int]) -> torch.Tensor:
        source, target, labels = make_batch(train, idx, sp, *languages)
        return masked_lm_loss(model, model(source, target), labels)[0]

    model.train()
    curve, window = [], []
    adam = TrainerConfig()
    steps_run = training_steps(model, loss_of, batches, config, steps, model.config.num_layers, adam.betas, adam.eps)
    for step, loss in steps_run:
        window.append(loss.item())
        if step % CURVE_EVERY == 0 or step == steps:
            curve.append({"step": step, "loss": float(np.mean(window))})
            print(f"step {step} loss {curve[-1]['loss']:.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)
            window = []
    return curve


@torch.no_grad()
def translate(model, tokenizer, sources: list[list[int]], src_lang, tgt_lang, max_length: int) -> list[str]:
    model.eval()
    sp = tokenizer.special
    out: list[str] = [""] * len(sources)
    for idx in length_batches([len(s) for s in sources], 2048):
        source, _, _ = make_batch([(sources[i], []) for i in idx], range(len(idx)), sp, src_lang, tgt_lang)
        # Without a key/value cache each new token re-runs the decoder on the prefix, so cap the length.
        limit = min(max_length, int(1.5 * max(len(sources[i]) for i in idx)) + 5)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            hyps = model.greedy(source, sp.cls, sp.sep, limit, tgt_lang)
        for i, h in zip(idx, hyps, strict=True):
            out[i] = tokenizer.decode(h)
    return out


@torch.no_grad()
def test_loss(model, pairs, sp, src_lang, tgt_lang) -> float:
    model.eval()
    total, count = 0.0, 0
    for idx in length_batches([len(s) + len(t) for s, t in pairs], 4096):
        source, target, labels = make_batch(pairs, idx, sp, src_lang, tgt_lang)
        loss, _, n = masked_lm_loss(model, model(source, target), labels)
        total, count = total + float(loss) * n, count + n
    return total / count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="pre-trained model folder/run (its tokenizer and config)")
    ap.add_argument("--init", choices=["veco", "encoder", "random"], required=True)
    ap.add_argument("--pair", default="de-en", help="source-target, one of them English")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--max-length", type=int, default=62, help="tokens per side in training and test")
    ap.add_argument("--test-size", type=int, default=300, help="held-out pairs from the end of the file")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True, help="JSON file for the results (hypotheses next to it)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()

    # 1) data: the last 1,000 pairs of the file are held out; the test set is the first --test-size of them
    #    that fit --max-length on both sides. Everything before them is training data.
    loaded = load_model(args.model)
    tokenizer, sp = loaded.tokenizer, loaded.tokenizer.special
    src, tgt = args.pair.split("-")
    src_lang, tgt_lang = loaded.language_id(src), loaded.language_id(tgt)
    src_text, tgt_text = read_pairs(src, tgt)
    src_ids, tgt_ids = tokenizer.encode_batch(src_text), tokenizer.encode_batch(tgt_text)
    held = len(src_text) - 1000
    fits = [i for i in range(held, len(src_text)) if max(len(src_ids[i]), len(tgt_ids[i])) <= args.max_length]
    test = fits[: args.test_size]
    train = [(s[: args.max_length], t[: args.max_length]) for s, t in zip(src_ids[:held], tgt_ids[:held], strict=True)]
    test_pairs = [(src_ids[i], tgt_ids[i]) for i in test]

    # 2) model
    torch.manual_seed(args.seed)
    if args.init == "random":
        from dataclasses import replace

        model = Seq2SeqTransformer(replace(loaded.model.config, cross_attention=True))
    else:
        if (args.init == "veco") != bool(loaded.model.config.cross_attention):
            has = loaded.model.config.cross_attention
            raise SystemExit(f"--init {args.init} does not match {args.model} (cross_attention={has})")
        model = Seq2SeqTransformer.from_encoder(loaded.model)

    # 3) fine-tune through the one fine-tuning loop
    curve = fine_tune(model, train, sp, (src_lang, tgt_lang), args.steps, args.batch_tokens, args.lr, args.seed, t0)
    train_seconds = time.perf_counter() - t0

    # 4) evaluate: teacher-forced test loss, then greedy decoding and sacreBLEU
    result = {
        "model": str(loaded.folder),
        "init": args.init,
        "pair": args.pair,
        "steps": args.steps,
        "batch_tokens": args.batch_tokens,
        "lr": args.lr,
        "seed": args.seed,
        "train_pairs": len(train),
        "train_curve": curve,
        "train_seconds": train_seconds,
        "parameters": sum(p.numel() for p in model.parameters()),
        "layers": model.config.num_layers,
        "hidden_size": model.config.hidden_size,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    sets = {"heldout": ([s for s, _ in test_pairs], [tgt_text[i] for i in test])}
    result["heldout_loss"] = test_loss(model, test_pairs, sp, src_lang, tgt_lang)
    bleu_metric, chrf_metric = sacrebleu.BLEU(), sacrebleu.CHRF()
    for name, (sources, references) in sets.items():
        hypotheses = translate(model, tokenizer, sources, src_lang, tgt_lang, args.max_length + 10)
        bleu = bleu_metric.corpus_score(hypotheses, [references])
        chrf = chrf_metric.corpus_score(hypotheses, [references])
        result[name] = {"sentences": len(sources), "bleu": bleu.score, "chrf": chrf.score, "bleu_text": str(bleu)}
        (out.parent / f"{out.stem}.{name}.hyp.txt").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
        print(f"{name}: {bleu}  chrF {chrf.score:.1f}", flush=True)
    result["sacrebleu_signature"] = str(bleu_metric.get_signature())
    result["seconds"] = time.perf_counter() - t0
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
