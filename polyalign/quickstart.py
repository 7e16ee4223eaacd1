"""`polyalign quickstart`: the main job on the bundled sample. 1) prepare it (the retrieval pairs held out),
2) train a tiny model with translation ranking + TLM (recipe `quickstart`), 3) show retrieval on the held-out
pairs and word-alignment AER on the sample's gold links, before and after training."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from polyalign.checkpoint import LoadedModel, load_model
from polyalign.config import Recipe, load_recipe
from polyalign.data.prepare import PrepareConfig, discover_corpus
from polyalign.data.prepare import prepare as run_prepare
from polyalign.data.prepared import PreparedData
from polyalign.evaluate.alignment import evaluate_alignment
from polyalign.evaluate.tatoeba import available_languages, evaluate_tatoeba
from polyalign.io import DataError, write_json
from polyalign.layers import simalign_word_layer
from polyalign.tables import console, print_prepared, print_tatoeba
from polyalign.train import build_model, pretrain

SAMPLE_DATA = Path(__file__).parent / "sample_data"
TATOEBA = SAMPLE_DATA / "tatoeba"
"""The sample's held-out retrieval pairs (excluded from the prepared text)."""


def run_quickstart(out: Path, steps: int, progress: bool) -> None:
    t0 = time.perf_counter()
    if out.exists():
        raise DataError(f"{out}: already exists; remove it or pass another --out")
    gold_sets = sorted((SAMPLE_DATA / "word_alignment").iterdir())
    console.rule("1) prepare the bundled sample corpus (the retrieval pairs are held out)")
    corpus = discover_corpus(SAMPLE_DATA / "mono", SAMPLE_DATA / "parallel")
    config = PrepareConfig(out=out / "prepared", vocab_size=4000, exclude=[TATOEBA], progress=progress)
    print_prepared(run_prepare(corpus, config), out / "prepared")
    recipe = load_recipe("quickstart", [f"data.prepared={out / 'prepared'}", f"trainer.max_steps={steps}"])
    before = scores(untrained_model(recipe, out / "prepared"), gold_sets)

    console.rule("2) train (recipe quickstart: translation ranking + TLM)")
    summary = pretrain(recipe, out / "run", progress=progress)

    console.rule("3) evaluate: retrieval on held-out pairs, word alignment on gold links")
    after = scores(load_model(out / "run"), gold_sets)
    print_tatoeba(after["tatoeba"], "quickstart model")
    after["tatoeba"].write_sweep(out / "report", title="quickstart")
    report = {
        "train": summary,
        "before": {k: v if k != "tatoeba" else v.row(v.layer)["average"] for k, v in before.items()},
        "after": {k: v if k != "tatoeba" else v.to_dict() for k, v in after.items()},
        "minutes": (time.perf_counter() - t0) / 60,
    }
    write_json(out / "report" / "quickstart.json", report)
    print_summary(before, after)
    console.print(f"report: {out / 'report'}; total {report['minutes']:.1f} min", highlight=False)


def untrained_model(recipe: Recipe, prepared_dir: Path) -> LoadedModel:
    """The "before" model: the one training starts from, the same every time (seeded as the run is)."""
    prepared = PreparedData(prepared_dir)
    torch.manual_seed(recipe.trainer.seed)
    model, _ = build_model(recipe, prepared.tokenizer(), prepared.languages)
    return LoadedModel(model.eval(), prepared.tokenizer(), prepared.languages, prepared_dir)


def scores(loaded: LoadedModel, gold_sets: list[Path]) -> dict:
    """Retrieval on the sample's held-out pairs at the layer the recipe trains (the last), and AER of the
    optimal-transport aligner (pair encoding, as XLM-Align evaluates) on each sample gold set."""
    last = loaded.model.config.num_layers
    layer = simalign_word_layer(last)
    retrieval = evaluate_tatoeba(loaded, TATOEBA, available_languages(TATOEBA), layer=last)
    aer = {g.name: evaluate_alignment(loaded, g, "ot", layer, encoding="pair").aer for g in gold_sets}
    return {"tatoeba": retrieval, "aer": aer, "aer_layer": layer}


def print_summary(before: dict, after: dict) -> None:
    b = before["tatoeba"].row(before["tatoeba"].layer)["average"]
    a = after["tatoeba"].row(after["tatoeba"].layer)["average"]
    languages = ", ".join(available_languages(TATOEBA))
    console.print(
        f"\nRetrieval acc@1 (%) on 100 held-out pairs each of {languages}, layer {after['tatoeba'].layer}, "
        f"xx→en / en→xx: untrained {b['xx_to_en']:.1f} / {b['en_to_xx']:.1f} -> trained {a['xx_to_en']:.1f} / "
        f"{a['en_to_xx']:.1f} (chance 1.0)",
        highlight=False,
    )
    aer = ", ".join(f"{g} {before['aer'][g]:.1f} -> {after['aer'][g]:.1f}" for g in after["aer"])
    console.print(f"Word-alignment AER (%, lower is better; ot, pair encoding, layer {after['aer_layer']}): {aer}")
