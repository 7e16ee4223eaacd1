"""The measures: name -> how to measure a model (CLI commands, each writing a JSON) and how to read the metrics back.

A new measure is one entry of MEASURES; its metric keys come with a line of description each. The runner skips a
command whose JSON is there (and current: `Measure.current`), so a rerun measures only what is missing.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from polyalign.align.aligner import PAIR_LAYOUT
from polyalign.align.extract import OT_FILTERING

GOLD_SETS = {  # ../shared/data/eval/word_alignment: folder -> its two languages
    "de-en": ("de", "en"),
    "en-fr": ("en", "fr"),
    "en-hi": ("en", "hi"),
    "ja-en": ("ja", "en"),
    "ro-en": ("ro", "en"),
    "ro-en-wpt05": ("ro", "en"),
    "zh-en": ("zh", "en"),
}
MT_STEPS = 60  # translation fine-tuning steps of the mt-* measures (a 3-point loss curve)
ONE_CLASS = "xnli/one-class"
"""True when the XNLI classifier scored the same in every language: the test rows are the same in each, so one
accuracy everywhere is a classifier that ignores its input, whatever that accuracy is."""
RELEASED_FILTERING = "aer-ot/released-filtering"
"""True when every OT evaluation of the run used the released Itermax filtering."""
ONE_PAIR_LAYOUT = "aer/one-pair-layout"
"""True when the AER was measured in every model's one pair layout (polyalign/align/aligner.py PAIR_LAYOUT) or the
model has no language embeddings (its layout never changed); missing in results from before: read as stale."""


def gold_sets_for(languages: tuple[str, ...] | None) -> list[str]:
    """The gold sets whose two languages were both trained (all 7 when every language was)."""
    return [g for g, pair in GOLD_SETS.items() if languages is None or set(pair) <= set(languages)]


@dataclass(frozen=True)
class Target:
    """One model to measure: everything a measure's commands and reader need."""

    arm: str
    model: str
    """The model folder the measure reads (a run, the start model, VECO's plugged-out encoder)."""
    run: Path
    """The run folder (a trained arm) or the folder its measures go to (the start model)."""
    data: Path
    """The prepared folder (its dev/ split holds the held-out training pairs)."""
    eval_root: Path
    languages: tuple[str, ...] | None
    python: str
    language_embeddings: bool = False

    @property
    def run_model(self) -> str:
        """The run itself (VECO's plug-in fine-tuning reads the cross-attention that `model` leaves out)."""
        return str(self.run) if self.model.endswith("plugged-out") else self.model

    @property
    def evals(self) -> Path:
        return self.run / "eval"

    @property
    def cli(self) -> list[str]:
        return [self.python, "-m", "polyalign.cli"]

    @property
    def dev_languages(self) -> str:
        return "all" if self.languages is None else ",".join(x for x in self.languages if x != "en")


def load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


@dataclass(frozen=True)
class Measure:
    minutes: float
    """Estimated wall minutes per small-base-sized model on the 2-core machine (sizes the sections)."""
    metrics: dict[str, str]
    """Metric key -> what it is."""
    commands: Callable[[Target], list[tuple[Path, list[str]]]]
    """The (JSON it writes, command) pairs."""
    read: Callable[[Target], dict]
    """The metrics from those JSONs (empty while one is missing: never guessed)."""
    of_start: bool = True
    """Measured on the untrained start model too (translation from a start model is not)."""
    per_gold_set: bool = False
    """Its time scales with the number of gold sets the languages allow."""
    current: Callable[[Target, dict], bool] = field(default=lambda target, result: True)
    """Whether a saved result is current (an older one is measured again)."""
    seeded: bool = False
    """The measure trains (fine-tuning) and so varies with a seed even on an untrained arm."""

    def minutes_for(self, languages: tuple[str, ...] | None) -> float:
        share = len(gold_sets_for(languages)) / len(GOLD_SETS) if self.per_gold_set else 1.0
        return self.minutes * share


# --------------------------------------------------------------------------------------------------------
# Retrieval: Tatoeba-14 (test) and the held-out training pairs (dev), every layer; the layer chosen on dev


def best_layer(dev: dict) -> int:
    """The layer with the best dev retrieval (both directions): the protocol's layer choice, never the test's."""
    return max(dev["sweep"], key=lambda r: r["average"]["both"])["layer"]


def retrieval_metrics(dev: dict, test: dict) -> dict:
    by_layer = {r["layer"]: r["average"]["both"] for r in test["sweep"]}
    layer = best_layer(dev)
    return {
        "tatoeba14@dev": by_layer[layer],
        "tatoeba14@last": by_layer[max(by_layer)],
        "tatoeba14@default": by_layer[test["reported"]["layer"]],
        "dev@best": max(r["average"]["both"] for r in dev["sweep"]),
        "layer@dev": layer,
        "sweep/tatoeba14": [by_layer[k] for k in sorted(by_layer)],
    }


def retrieval_commands(t: Target) -> list[tuple[Path, list[str]]]:
    return [
        (
            t.evals / split / "tatoeba.json",
            [*t.cli, "evaluate", "tatoeba", "--model", t.model, "--data", str(data), "--langs", langs]
            + ["--layers", "all", "--out", str(t.evals / split), "--no-progress"],
        )
        for split, data, langs in (
            ("dev", t.data / "dev", t.dev_languages),
            ("test", t.eval_root / "tatoeba", "tatoeba14"),
        )
    ]


def read_retrieval(t: Target) -> dict:
    dev, test = load(t.evals / "dev" / "tatoeba.json"), load(t.evals / "test" / "tatoeba.json")
    return retrieval_metrics(dev, test) if dev and test else {}


# --------------------------------------------------------------------------------------------------------
# Word alignment: AER on every gold set of the trained languages, pair encoding, every layer


def aer_metrics(method: str, per_gold: dict[str, dict], language_embeddings: bool = False) -> dict:
    """Means over the gold sets: at the evaluator's default layer, at the best layer of the mean sweep, and at
    DWA's self-labeling layer round(10 L / 12) (XLM-Align Table 11 scaled to the depth L)."""
    golds = list(per_gold.values())
    sweep = [statistics.mean(g["sweep"][i]["aer"] for g in golds) for i in range(len(golds[0]["sweep"]))]
    out = {
        f"aer-{method}@default": statistics.mean(g["aer"] for g in golds),
        f"aer-{method}@best": min(sweep),
        f"sweep/aer-{method}": sweep,
        f"per-gold/aer-{method}": {name: g["aer"] for name, g in per_gold.items()},
    }
    if method == "ot":
        out["aer-ot@label"] = sweep[round(10 * (len(sweep) - 1) / 12)]
        out[RELEASED_FILTERING] = all(g.get("ot_filtering") == OT_FILTERING for g in golds)
    out[ONE_PAIR_LAYOUT] = not language_embeddings or all(g.get("pair_layout") == PAIR_LAYOUT for g in golds)
    return out


def aer_current(method: str) -> Callable[[Target, dict], bool]:
    """An OT result from before the released Itermax filtering, or a result of a model with language embeddings
    from before the one pair layout, is measured again."""

    def current(t: Target, result: dict) -> bool:
        if method == "ot" and result.get("ot_filtering") != OT_FILTERING:
            return False
        return not t.language_embeddings or result.get("pair_layout") == PAIR_LAYOUT

    return current


def aer_measure(method: str, minutes: float) -> Measure:
    def commands(t: Target) -> list[tuple[Path, list[str]]]:
        out = t.evals / f"aer-{method}"
        return [
            (
                out / gold / "alignment.json",
                [
                    *t.cli,
                    "evaluate",
                    "alignment",
                    "--model",
                    t.model,
                    "--gold",
                    str(t.eval_root / "word_alignment" / gold),
                ]
                + [
                    "--method",
                    method,
                    "--encoding",
                    "pair",
                    "--layers",
                    "all",
                    "--out",
                    str(out / gold),
                    "--no-progress",
                ],
            )
            for gold in gold_sets_for(t.languages)
        ]

    def read(t: Target) -> dict:
        golds = {g: load(t.evals / f"aer-{method}" / g / "alignment.json") for g in gold_sets_for(t.languages)}
        return aer_metrics(method, golds, t.language_embeddings) if golds and all(golds.values()) else {}

    what = {"ot": "OT aligner", "argmax": "SimAlign argmax", "itermax": "SimAlign itermax"}[method]
    metrics = {
        f"aer-{method}@default": f"AER, {what}, pair encoding, default layer, mean over the gold sets",
        f"aer-{method}@best": f"AER, {what}, best layer (chosen on the gold sets), mean over the gold sets",
    }
    if method == "ot":
        metrics["aer-ot@label"] = "AER, OT aligner at DWA's self-labeling layer round(10 L / 12): its self-labels"
    return Measure(minutes, metrics, commands, read, per_gold_set=True, current=aer_current(method))


# --------------------------------------------------------------------------------------------------------
# Fine-tuning, pseudo-tokens and translation


def xnli_commands(t: Target) -> list[tuple[Path, list[str]]]:
    smoke = ["--seeds", "1", "--max-train", "2000", "--max-select", "100", "--max-eval", "100", "--set", "epochs=1"]
    out = t.evals / "xnli"
    cmd = [*t.cli, "finetune", "xnli", "--model", t.model, "--data", str(t.eval_root), *smoke, "--out", str(out)]
    return [(out / "finetune.json", [*cmd, "--no-progress"])]


def read_xnli(t: Target) -> dict:
    if not (data := load(t.evals / "xnli" / "finetune.json")):
        return {}
    per_language = [v["mean"] for v in data["results"][0]["per_language"].values()]
    one_class = len(per_language) > 1 and len(set(per_language)) == 1
    return {"xnli": data["results"][0]["average"]["mean"], ONE_CLASS: one_class}


def pseudo_commands(t: Target) -> list[tuple[Path, list[str]]]:
    out = t.evals / "pseudo.json"
    return [
        (
            out,
            [t.python, "-m", "bench.probes.ernie_m_pseudo_tokens", "--data", str(t.data / "dev")]
            + ["--langs", t.dev_languages, "--max-pairs", "100", "--out", str(out), "--model", f"{t.arm}={t.model}"],
        )
    ]


def read_pseudo(t: Target) -> dict:
    if not (data := load(t.evals / "pseudo.json")):
        return {}
    result = data["results"][t.arm]
    return {"pseudo": 100 * result["precision"], "pseudo-copy": 100 * result["copy_precision"]}


def translation_measure(init: str, loss: str, bleu: str) -> Measure:
    name = f"mt-{init}"

    def commands(t: Target) -> list[tuple[Path, list[str]]]:
        out = t.evals / f"{name}.json"
        args = [
            "--init",
            init,
            "--pair",
            "de-en",
            "--steps",
            str(MT_STEPS),
            "--test-size",
            "200",
            "--tatoeba-size",
            "0",
        ]
        return [
            (out, [t.python, "-m", "bench.probes.veco_translation", "--model", str(t.run), *args, "--out", str(out)])
        ]

    def read(t: Target) -> dict:
        if not (data := load(t.evals / f"{name}.json")):
            return {}
        return {
            f"{name}-loss": data["heldout_loss"],
            f"{name}-bleu": data["heldout"]["bleu"],
            f"curve/{name}": data["train_curve"],
        }

    metrics = {f"{name}-loss": f"held-out de-en {loss}", f"{name}-bleu": f"held-out de-en sacreBLEU, {bleu}"}
    return Measure(1.3, metrics, commands, read, of_start=False)


def finetune_measure(task: str, what: str, options: tuple[str, ...], minutes: float, plug_in: bool = False) -> Measure:
    """XTREME-style zero-shot transfer (`polyalign finetune TASK`; plug_in: VECO §3.1 translate-train-all): the
    average over the test languages and the transfer gap (English - the others)."""
    name = f"{task}-plug-in" if plug_in else f"xtreme-{task}"
    extra = ("--plug-in", "--setting", "translate-train-all") if plug_in else ()

    def commands(t: Target) -> list[tuple[Path, list[str]]]:
        out = t.evals / name
        cmd = [*t.cli, "finetune", task, *extra, "--model", t.run_model, "--data", str(t.eval_root), *options]
        return [(out / "finetune.json", [*cmd, "--out", str(out), "--no-progress"])]

    def read(t: Target) -> dict:
        if not (data := load(t.evals / name / "finetune.json")):
            return {}
        result = data["results"][0] if "results" in data else data
        return {name: result["average"]["mean"], f"{name}/gap": (result.get("gap") or {}).get("mean")}

    return Measure(minutes, {name: what}, commands, read, of_start=False, seeded=True)


def read_training_loss(t: Target) -> dict:
    """The MLM loss at the end of a run trained for minutes: the mean over the last 10% of its logged windows."""
    if not (t.run / "metrics.jsonl").is_file():
        return {}
    values = [
        r["mlm/loss"] for r in map(json.loads, (t.run / "metrics.jsonl").read_text().splitlines()) if "mlm/loss" in r
    ]
    tail = values[-max(1, len(values) // 10) :]
    return {"mlm-loss@end": statistics.mean(tail)}


def protocol_measures() -> dict[str, Measure]:
    """Evaluation protocols (issue 16): Tatoeba-14 with ratio-margin scores, BUCC 2018 zh-en mining (dev)."""

    def margin(t: Target) -> list[tuple[Path, list[str]]]:
        out = t.evals / "tatoeba-margin"
        cmd = [*t.cli, "evaluate", "tatoeba", "--model", t.model, "--langs", "tatoeba14", "--layers", "all"]
        return [(out / "tatoeba.json", [*cmd, "--score", "margin", "--out", str(out), "--no-progress"])]

    def bucc(t: Target) -> list[tuple[Path, list[str]]]:
        out, data = t.evals / "bucc", t.eval_root / "bucc2018"
        cmd = [*t.cli, "evaluate", "bucc", "--model", t.model, "--data", str(data), "--pair", "zh-en", "--split", "dev"]
        return [(out / "bucc.json", [*cmd, "--out", str(out), "--no-progress"])]

    def read_margin(t: Target) -> dict:
        data = load(t.evals / "tatoeba-margin" / "tatoeba.json")
        return {"tatoeba14-margin@default": data["reported"]["average"]["both"]} if data else {}

    def read_bucc(t: Target) -> dict:
        return {"bucc-f1": 100 * data["f1"]} if (data := load(t.evals / "bucc" / "bucc.json")) else {}

    return {
        "tatoeba-margin": Measure(
            1.0,
            {"tatoeba14-margin@default": "Tatoeba-14 acc@1, ratio-margin scores, default layer"},
            margin,
            read_margin,
        ),
        "bucc": Measure(
            2.0, {"bucc-f1": "BUCC 2018 zh-en (dev) F1 of mined pairs at the oracle threshold"}, bucc, read_bucc
        ),
    }


XTREME = (  # (task, seeds and options: bench/results/xtreme.md's smoke budgets, minutes per model)
    ("xnli", ("--seeds", "3", "--set", "epochs=2", "--max-eval", "400"), 12.0),
    (
        "ner",
        ("--seeds", "3", "--set", "epochs=1", "--max-train", "3000", "--max-select", "1000", "--max-eval", "500"),
        10.0,
    ),
    (
        "pos",
        ("--seeds", "1", "--set", "epochs=2", "--max-train", "4000", "--max-select", "1000", "--max-eval", "400"),
        6.0,
    ),
    ("pawsx", ("--seeds", "1", "--set", "epochs=3"), 4.0),
    (
        "qa",
        (
            "--seeds",
            "1",
            "--set",
            "max_length=128",
            "--set",
            "doc_stride=64",
            "--set",
            "max_query_length=32",
            "--max-eval",
            "200",
        ),
        8.0,
    ),
)

MEASURES: dict[str, Measure] = {
    "retrieval": Measure(
        1.5,
        {
            "tatoeba14@dev": "Tatoeba-14 acc@1 (both directions) at the layer with the best dev retrieval",
            "tatoeba14@last": "Tatoeba-14 acc@1 (both directions), mean-pooled last layer",
            "tatoeba14@default": "Tatoeba-14 acc@1 (both directions) at the evaluator's default layer",
            "dev@best": "dev-split retrieval acc@1 at its best layer",
        },
        retrieval_commands,
        read_retrieval,
    ),
    "aer-ot": aer_measure("ot", 3.0),
    "aer-argmax": aer_measure("argmax", 2.5),
    "aer-itermax": aer_measure("itermax", 2.5),
    "xnli": Measure(
        3.0,
        {"xnli": "XNLI zero-shot accuracy (smoke: 2,000 English pairs, 1 epoch, 100 per language)"},
        xnli_commands,
        read_xnli,
        seeded=True,
    ),
    "pseudo": Measure(
        1.0,
        {
            "pseudo": "BTMLM pseudo-token precision in the true translation (%)",
            "pseudo-copy": "the copy baseline: source tokens found in the translation (%)",
        },
        pseudo_commands,
        read_pseudo,
    ),
    "mt-veco": translation_measure(
        "veco", "translation loss, encoder-decoder from the VECO weights", "from the VECO weights"
    ),
    "mt-encoder": translation_measure(
        "encoder", "loss, encoder-only init (encoder-decoder attention new)", "encoder-only init"
    ),
    "mt-random": translation_measure("random", "loss, random init", "random init"),
    **{
        f"xtreme-{task}": finetune_measure(
            task, f"{task} zero-shot transfer, average over the test languages", options, minutes
        )
        for task, options, minutes in XTREME
    },
    "xnli-plug-in": finetune_measure(
        "xnli",
        "XNLI accuracy, plug-in fine-tuning, translate-train-all (smoke: 2,000 pairs, 1 epoch)",
        ("--seeds", "1", "--max-train", "2000", "--max-select", "100", "--max-eval", "100", "--set", "epochs=1"),
        4.0,
        plug_in=True,
    ),
    **protocol_measures(),
    "training-loss": Measure(
        0.0,
        {"mlm-loss@end": "MLM training loss, mean over the last 10% of the logged windows"},
        lambda t: [],
        read_training_loss,
        of_start=False,
    ),
}
METRICS: dict[str, tuple[str, str]] = {k: (name, d) for name, m in MEASURES.items() for k, d in m.metrics.items()}
"""Metric key -> (its measure, what it is)."""


def measure_of(metric: str) -> str:
    if metric not in METRICS:
        raise KeyError(f"metric {metric!r}: known {', '.join(METRICS)}")
    return METRICS[metric][0]
