"""Code or scale for replaced token detection from scratch: polyalign's MRTD against an independent ELECTRA
built from transformers' ElectraForMaskedLM (generator) and ElectraForPreTraining (discriminator), trained side
by side on the same batches with the same optimizer, schedule, clipping, λ and sampling (XLM-E).

From scratch at our budgets polyalign's discriminator never beats predicting "original" everywhere and its
generator stays above the unigram floor (bench/results/evidence.md, xlm-e-3). If the reference does the same on
the same data, that is what the algorithm does at this size and step count (scale); if it learns where ours does
not, the difference is in our code.

The two share polyalign's batches and its three small pure functions for the draw from the generator, the
replaced labels and the detection loss (Eqs. 2-3, pinned by tests/test_xlm_e.py); the models, the heads and the
embedding sharing of the reference are transformers'; it trains through the speed bench's peer step
(bench.perf.speed.training_step) with our run's optimizer settings, clipping and schedule, ours through the
trainer's own step.

Usage: flock /tmp/polyalign-cpu.lock .venv/bin/python -m bench.probes.rtd_reference \
    --data bench/work/prepared-all24 --steps 1200 --every 25 --out bench/results/rtd_reference.json
(21 minutes on 2 cores). Writes the JSON, a markdown page beside it and a plot of both runs' curves;
`--report-only` rewrites the page and plot from the JSON.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.floors import unigram_floor
from bench.perf.speed import training_step
from bench.reporting import page_text, provenance, read_json, table, write_json
from bench.studies.evidence.common import XNLI15  # xlm-e-3's languages
from bench.verdict import (
    MAJORITY_MARGIN,
    first_step_beating_majority,
    majority_floor,
)
from polyalign.config import load_recipe
from polyalign.data.masking import IGNORE
from polyalign.device import to_device
from polyalign.evaluate.plots import plot_series
from polyalign.objectives.rtd import (
    detection_loss,
    replaced_token_labels,
    sample_replacements,
)
from polyalign.train import Window, build_run, learning_rate_factor, start_loader, train_step

ROOT = Path(__file__).resolve().parents[2]

KEYS = ("generator_loss", "discriminator_loss", "discriminator_accuracy", "replaced")


def reference_models(config, generator_layers: int, dropout: float):
    """transformers' ELECTRA at polyalign's sizes: the generator shares the discriminator's embeddings (token,
    position, LayerNorm: ELECTRA §3.2) and its output layer is tied to the token embeddings."""
    from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

    from polyalign.model.hf import hf_sizes

    common = dict(
        hf_sizes(config),
        embedding_size=config.hidden_size,
        max_position_embeddings=config.max_positions + 2,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=config.attention_dropout,
        initializer_range=config.initializer_range,
        layer_norm_eps=config.layer_norm_eps,
    )
    discriminator = ElectraForPreTraining(ElectraConfig(**common))
    generator = ElectraForMaskedLM(ElectraConfig(**{**common, "num_hidden_layers": generator_layers}))
    generator.electra.embeddings = discriminator.electra.embeddings
    generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
    return generator, discriminator


def reference_step(generator, discriminator, batch: dict[str, torch.Tensor], weight: float) -> dict[str, torch.Tensor]:
    """ELECTRA's loss on one MRTD batch: L_G + λ·L_D (λ = `weight`), with the same sampling and labels as
    polyalign."""
    inputs, labels, mask = batch["input_ids"], batch["labels"], batch["attention_mask"]
    masked = labels != IGNORE
    hidden = generator.electra(input_ids=inputs, attention_mask=mask).last_hidden_state  # (B, T, C)
    # ElectraForMaskedLM's head, applied at the masked positions only (the loss reads nothing else)
    logits = generator.generator_lm_head(generator.generator_predictions(hidden[masked]))  # (N, V)
    generator_loss = F.cross_entropy(logits.float(), labels[masked])
    original = torch.where(masked, labels, inputs)
    corrupted = original.masked_scatter(masked, sample_replacements(logits))  # x^corrupt, as ELECTRA's code
    replaced = replaced_token_labels(original, corrupted)
    detection = discriminator(input_ids=corrupted, attention_mask=mask).logits  # (B, T)
    discriminator_loss, accuracy = detection_loss(detection, replaced, mask)
    real = mask.bool()
    return {
        "loss": generator_loss + weight * discriminator_loss,
        "generator_loss": generator_loss.detach(),
        "discriminator_loss": discriminator_loss.detach(),
        "discriminator_accuracy": accuracy,
        "replaced": replaced[real].mean(),
    }


def run(
    data: Path, steps: int, max_tokens: int, seed: int, languages: str, every: int, sizes: tuple[str, ...] = ()
) -> dict:
    """Both trained side by side for `steps` on `data`; `sizes`: more recipe overrides (a test's tiny model)."""
    overrides = [
        f"trainer.max_steps={steps}",
        f"trainer.warmup_steps={max(1, steps // 10)}",
        f"trainer.seed={seed}",
        f"data.languages=[{languages}]",
        f"data.mono.max_tokens={max_tokens}",
        # the reference has absolute positions only: ours the same, so the two differ in their code alone
        "model.absolute_positions=true",
        "model.position_bias=none",
        *sizes,
    ]
    recipe = load_recipe("xlm-e-mono", overrides, preset="cpu-small")
    recipe.data.prepared = str(data)
    cfg = recipe.trainer
    with tempfile.TemporaryDirectory() as tmp:
        ours, _ = build_run(recipe, Path(tmp))
        loader = start_loader(ours)
        objective = ours.module.objectives["mrtd"]
        config = ours.module.model.config
        torch.manual_seed(seed)
        generator, discriminator = reference_models(config, objective.parts.generator.config.num_layers, config.dropout)
        reference = torch.nn.ModuleDict({"generator": generator, "discriminator": discriminator}).to(ours.device)
        # the reference: the speed bench's peer step with ours' optimizer settings, clipping and schedule
        last: dict[str, torch.Tensor] = {}

        def reference_loss(batch: dict[str, torch.Tensor]) -> torch.Tensor:
            batch = to_device(batch, ours.device)
            last.update(reference_step(generator, discriminator, batch, objective.config.discriminator_weight))
            return last["loss"]

        autocast = torch.autocast(ours.device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16")
        schedule = partial(learning_rate_factor, config=cfg)
        step_reference = training_step(reference.train(), reference_loss, cfg.lr, autocast, cfg, schedule)
        curves: dict[str, list[dict]] = {"polyalign": [], "transformers": []}
        window: dict[str, list[dict]] = {"polyalign": [], "transformers": []}
        for item in loader:
            if item.step >= steps:
                break
            # ours: polyalign's own training step (its objective, optimizer, schedule and clipping)
            train_step(ours, item)
            window["polyalign"].append({k: float(ours.window.metrics[f"mrtd/{k}"]) for k in KEYS})
            ours.window = Window(ours.device)
            step_reference(item.slots[0]["mrtd"])  # the same batch
            window["transformers"].append({k: float(last[k]) for k in KEYS})
            if (item.step + 1) % every == 0:
                for name, rows in window.items():
                    mean = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
                    curves[name].append({"step": item.step + 1, **mean})
                    rows.clear()
                print(
                    f"step {item.step + 1}: "
                    + "; ".join(
                        f"{n} acc {c[-1]['discriminator_accuracy']:.3f} (majority "
                        f"{majority_floor(c[-1]['replaced']):.3f}) gen {c[-1]['generator_loss']:.2f}"
                        for n, c in curves.items()
                    ),
                    flush=True,
                )
    floor = unigram_floor("unigram", data, tuple(languages.split(",")))
    return {
        "steps": steps,
        "max_tokens": max_tokens,
        "seed": seed,
        "languages": languages,
        "unigram_floor": floor,
        "curves": curves,
    }


def report(result: dict, out: Path, produced_by: str) -> None:
    """The page and the plot beside `out` (the JSON); `produced_by`: the run's provenance line."""
    rows = []
    for name, curve in result["curves"].items():
        first, last = curve[0], curve[-1]
        above = first_step_beating_majority(curve)
        rows.append(
            [
                name,
                "never" if above is None else str(above),
                f"{first['discriminator_accuracy']:.3f} -> {last['discriminator_accuracy']:.3f}",
                f"{majority_floor(last['replaced']):.3f}",
                f"{first['discriminator_loss']:.3f} -> {last['discriminator_loss']:.3f}",
                f"{first['generator_loss']:.2f} -> {last['generator_loss']:.2f}",
            ]
        )
    figure = out.with_suffix(".png")
    ours = result["curves"]["polyalign"]
    plot_series(
        {
            **{
                f"{name} discriminator accuracy": ([p["step"] for p in c], [p["discriminator_accuracy"] for p in c])
                for name, c in result["curves"].items()
            },
            "majority class (predicting 'original')": (
                [p["step"] for p in ours],
                [majority_floor(p["replaced"]) for p in ours],
            ),
        },
        figure,
        "step",
        "MRTD discriminator accuracy",
        "polyalign vs transformers ELECTRA, same batches",
    )
    lines = [
        "# Replaced token detection from scratch: polyalign against transformers' ELECTRA",
        "",
        produced_by,
        "",
        f"MRTD from scratch, cpu-small sizes (absolute positions in both), {result['steps']} steps of "
        f"{result['max_tokens']} tokens, languages {result['languages']}, seed {result['seed']}; both trained on "
        "the same batches with AdamW, the same warmup and linear decay, clipping and λ = 50; they share polyalign's "
        "functions for the draw from the generator, the replaced labels and the detection loss (Eqs. 2-3), and "
        "nothing else of its model or training loop. First and last "
        f"logged windows ({result['curves']['polyalign'][1]['step'] - result['curves']['polyalign'][0]['step']} steps "
        f"each); a discriminator counts as above the majority class from the first window it beats it by more than "
        f"{MAJORITY_MARGIN:g} (as the evidence page's premise). Unigram floor of the generator loss: "
        f"{result['unigram_floor']:.2f} nats.",
        "",
        table(
            [
                "implementation",
                "above the majority class from step",
                "discriminator accuracy",
                "majority class",
                "discriminator loss",
                "generator loss",
            ],
            rows,
        ),
        f"![curves]({figure.name})",
        "",
    ]
    out.with_suffix(".md").write_text(page_text(lines))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="prepared folder (bench.run's); not for --report-only")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--languages", default=",".join(XNLI15))
    parser.add_argument("--every", type=int, default=20, help="log a mean over this many steps")
    parser.add_argument("--out", type=Path, default=Path("bench/results/rtd_reference.json"))
    parser.add_argument("--report-only", action="store_true", help="rewrite the page and plot from --out")
    args = parser.parse_args(argv)
    if args.report_only:
        result = read_json(args.out)
        report(result, args.out, result["provenance"])
        return
    if args.data is None:
        parser.error("--data: the prepared folder to train on (or --report-only)")
    result = run(args.data, args.steps, args.max_tokens, args.seed, args.languages, args.every)
    given = sys.argv[1:] if argv is None else argv
    command = "flock /tmp/polyalign-cpu.lock .venv/bin/python -m bench.probes.rtd_reference " + " ".join(given)
    write_json(args.out, {"provenance": provenance(command), **result})
    report(result, args.out, provenance(command))


if __name__ == "__main__":
    main()
