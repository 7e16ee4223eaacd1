"""The measures: name -> the commands that measure a model (each writes one JSON) and how its metrics are read back.

A new measure is one entry of MEASURES: its metric keys with a line each, its commands as templates, a reader. A
template is a `polyalign` command line (or `-m MODULE ...` for a Python module) whose fields are filled for each
model: {model} {run} {out} (the JSON's folder) {data} {eval} {dev_langs} {arm}, and {gold}, which repeats the
command for every gold set of the trained languages. The runner skips a command whose JSON is there and current.
"""

from __future__ import annotations

import json
import shlex
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

GOLD_SETS = {  # ../shared/data/eval/word_alignment: folder -> its two languages
    "de-en": ("de", "en"),
    "en-fr": ("en", "fr"),
    "en-hi": ("en", "hi"),
    "ja-en": ("ja", "en"),
    "ro-en": ("ro", "en"),
    "ro-en-wpt05": ("ro", "en"),
    "zh-en": ("zh", "en"),
}
ONE_CLASS = "xnli/one-class"
"""True when the XNLI classifier scored the same in every language: the test rows are the same in each, so one
accuracy everywhere is a classifier that ignores its input, whatever that accuracy is."""
LEGACY_PROTOCOLS = (("bare_boundaries", 4), ("pair_layout", 3), ("ot_filtering", 2))
"""Alignment results from before `protocol_version` recorded each rule by a key of its own: the newest key they
hold names their version (polyalign/align/aligner.py PROTOCOL_VERSION); none of them, version 1."""
SMOKE = "--seeds 1 --max-train 2000 --max-select 100 --max-eval 100 --set finetune.epochs=1"
"""Fine-tuning at smoke scale: 2,000 English pairs, one epoch, 100 test pairs per language."""


def gold_sets_for(languages: tuple[str, ...] | None) -> list[str]:
    """The gold sets whose two languages were both trained (all 7 when every language was)."""
    return [g for g, pair in GOLD_SETS.items() if languages is None or set(pair) <= set(languages)]


@dataclass(frozen=True)
class Target:
    """One model to measure."""

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
    def evals(self) -> Path:
        return self.run / "eval"

    def fill(self, template: str, out: Path, gold: str = "") -> list[str]:
        dev_langs = "all" if self.languages is None else ",".join(x for x in self.languages if x != "en")
        fields = dict(model=self.model, run=self.run, out=out, data=self.data, eval=self.eval_root, arm=self.arm)
        args = shlex.split(template.format(**fields, dev_langs=dev_langs, gold=gold))  # a quoted prefix keeps its space
        return [self.python, *args] if args[0] == "-m" else [self.python, "-m", "polyalign.cli", *args, "--no-progress"]


def load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


@dataclass(frozen=True)
class Measure:
    minutes: float
    """Estimated wall minutes per small-base-sized model on the 2-core machine (sizes the sections)."""
    metrics: dict[str, str]
    """Metric key -> what it is."""
    commands: tuple[tuple[str, str], ...]
    """(the JSON it writes, relative to the run's eval/ folder, with {gold} where per gold set; the template)."""
    read: Callable[[Target], dict]
    """The metrics from those JSONs (empty while one is missing: never guessed)."""
    of_start: bool = True
    """Measured on the untrained start model too (translation from a start model is not)."""
    seeded: bool = False
    """The measure trains (fine-tuning) and so varies with a seed even on an untrained arm."""
    current: Callable[[Target, dict], bool] = lambda target, result: True
    """Whether a saved result is current (an older one is measured again)."""

    def jobs(self, t: Target) -> list[tuple[Path, list[str]]]:
        """The (JSON, command) pairs for one model."""
        out = []
        for path, template in self.commands:
            for gold in gold_sets_for(t.languages) if "{gold}" in path else [""]:
                done = t.evals / path.format(gold=gold)
                out.append((done, t.fill(template, done.parent, gold)))
        return out

    def minutes_for(self, languages: tuple[str, ...] | None) -> float:
        per_gold = any("{gold}" in path for path, _ in self.commands)
        return self.minutes * (len(gold_sets_for(languages)) / len(GOLD_SETS) if per_gold else 1.0)


# --------------------------------------------------------------------------------------------------------
# Readers


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


def read_retrieval(t: Target) -> dict:
    dev, test = load(t.evals / "dev" / "tatoeba.json"), load(t.evals / "test" / "tatoeba.json")
    return retrieval_metrics(dev, test) if dev and test else {}


def protocol_version(result: dict) -> int:
    """The alignment protocol an evaluation was computed under."""
    if "protocol_version" in result:
        return result["protocol_version"]
    return next((version for key, version in LEGACY_PROTOCOLS if key in result), 1)


def oldest_current_protocol(method: str, language_embeddings: bool) -> int:
    """The oldest alignment protocol whose AER the bench reads as current: the released Itermax filtering (2)
    for `ot`; the one pair layout (3) for a model with language embeddings, the only models whose layout it
    changed. Older results are measured again and their comparisons called stale."""
    return max(2 if method == "ot" else 1, 3 if language_embeddings else 1)


def current_key(metric: str) -> str:
    """A seed's key that says whether an AER metric (`aer-ot@best`, `sweep/aer-ot`) was measured under a current
    protocol on every gold set."""
    return metric.removeprefix("sweep/").partition("@")[0] + "/current"


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
    oldest = oldest_current_protocol(method, language_embeddings)
    out[current_key(f"aer-{method}")] = all(protocol_version(g) >= oldest for g in golds)
    return out


def aer_measure(method: str, what: str, minutes: float) -> Measure:
    """AER on every gold set of the trained languages, pair encoding, every layer; a result of an older protocol
    than `oldest_current_protocol` is measured again."""

    def read(t: Target) -> dict:
        golds = {g: load(t.evals / f"aer-{method}" / g / "alignment.json") for g in gold_sets_for(t.languages)}
        return aer_metrics(method, golds, t.language_embeddings) if golds and all(golds.values()) else {}

    def current(t: Target, result: dict) -> bool:
        return protocol_version(result) >= oldest_current_protocol(method, t.language_embeddings)

    metrics = {
        f"aer-{method}@default": f"AER, {what}, pair encoding, default layer, mean over the gold sets",
        f"aer-{method}@best": f"AER, {what}, best layer (chosen on the gold sets), mean over the gold sets",
    }
    if method == "ot":
        metrics["aer-ot@label"] = "AER, OT aligner at DWA's self-labeling layer round(10 L / 12): its self-labels"
    command = f"evaluate alignment --model {{model}} --gold {{eval}}/word_alignment/{{gold}} --method {method} "
    command += "--encoding pair --layers all --out {out}"
    return Measure(minutes, metrics, ((f"aer-{method}/{{gold}}/alignment.json", command),), read, current=current)


def xnli_reader(name: str) -> Callable[[Target], dict]:
    """The average over the languages and whether the classifier is one-class."""

    def read(t: Target) -> dict:
        if not (data := load(t.evals / name / "finetune.json")):
            return {}
        result = data["results"][0]
        per_language = {k: v["mean"] for k, v in result["per_language"].items()}
        one_class = len(per_language) > 1 and len(set(per_language.values())) == 1
        return {name: result["average"]["mean"], ONE_CLASS: one_class}

    return read


def read_pseudo(t: Target) -> dict:
    if not (data := load(t.evals / "pseudo.json")):
        return {}
    result = data["results"][t.arm]
    out = {"pseudo": 100 * result["precision"], "pseudo-copy": 100 * result["copy_precision"]}
    for key in ("frequent", "mismatched"):  # baselines, where the probe's JSON has them
        if f"{key}_precision" in result:
            out[f"pseudo-{key}"] = 100 * result[f"{key}_precision"]
    if "most_common_share" in result:
        out["pseudo-top-share"] = 100 * result["most_common_share"]
    return out


def translation_measure(init: str, loss: str, bleu: str) -> Measure:
    """60 steps of de-en translation fine-tuning (a 3-point loss curve) from the run's weights as `init` has it."""
    name = f"mt-{init}"

    def read(t: Target) -> dict:
        if not (data := load(t.evals / f"{name}.json")):
            return {}
        return {
            f"{name}-loss": data["heldout_loss"],
            f"{name}-bleu": data["heldout"]["bleu"],
            f"curve/{name}": data["train_curve"],
        }

    metrics = {f"{name}-loss": f"held-out de-en {loss}", f"{name}-bleu": f"held-out de-en sacreBLEU, {bleu}"}
    command = f"-m bench.run veco-translation -- --model {{run}} --init {init} --pair de-en --steps 60 "
    command += f"--test-size 200 --out {{out}}/{name}.json"
    return Measure(1.3, metrics, ((f"{name}.json", command),), read, of_start=False)


# --------------------------------------------------------------------------------------------------------

TATOEBA = "evaluate tatoeba --model {model} --layers all --out {out}"
MEASURES: dict[str, Measure] = {
    "retrieval": Measure(
        1.5,
        {
            "tatoeba14@dev": "Tatoeba-14 acc@1 (both directions) at the layer with the best dev retrieval",
            "tatoeba14@last": "Tatoeba-14 acc@1 (both directions), mean-pooled last layer",
            "tatoeba14@default": "Tatoeba-14 acc@1 (both directions) at the evaluator's default layer",
            "dev@best": "dev-split retrieval acc@1 at its best layer",
        },
        (
            ("dev/tatoeba.json", f"{TATOEBA} --data {{data}}/dev --langs {{dev_langs}}"),
            ("test/tatoeba.json", f"{TATOEBA} --data {{eval}}/tatoeba --langs tatoeba14"),
        ),
        read_retrieval,
    ),
    "aer-ot": aer_measure("ot", "OT aligner", 3.0),
    "aer-argmax": aer_measure("argmax", "SimAlign argmax", 2.5),
    "aer-itermax": aer_measure("itermax", "SimAlign itermax", 2.5),
    "xnli": Measure(
        3.0,
        {"xnli": "XNLI zero-shot accuracy (smoke: 2,000 English pairs, 1 epoch, 100 per language)"},
        (("xnli/finetune.json", f"finetune xnli --model {{model}} --data {{eval}} {SMOKE} --out {{out}}"),),
        xnli_reader("xnli"),
        seeded=True,
    ),
    "pseudo": Measure(
        1.0,
        {
            "pseudo": "BTMLM pseudo-token precision in the true translation (%)",
            "pseudo-copy": "the copy baseline: source tokens found in the translation (%)",
            "pseudo-frequent": "the frequency baseline: the target language's most frequent tokens, as many (%)",
            "pseudo-mismatched": "the model's pseudo-tokens scored against another pair's translation (%)",
            "pseudo-top-share": "share of the pseudo-tokens that are the single most common piece (%)",
        },
        (
            (
                "pseudo.json",
                "-m bench.run ernie-m-pseudo-tokens -- --data {data}/dev --langs {dev_langs} --max-pairs 100 "
                "--out {out}/pseudo.json --model {arm}={model}",
            ),
        ),
        read_pseudo,
    ),
    "mt-veco": translation_measure(
        "veco", "translation loss, encoder-decoder from the VECO weights", "from the VECO weights"
    ),
    "mt-encoder": translation_measure(
        "encoder", "loss, encoder-only init (encoder-decoder attention new)", "encoder-only init"
    ),
    "mt-random": translation_measure("random", "loss, random init", "random init"),
}
METRICS: dict[str, tuple[str, str]] = {k: (name, d) for name, m in MEASURES.items() for k, d in m.metrics.items()}
"""Metric key -> (its measure, what it is)."""


def measure_of(metric: str) -> str:
    if metric not in METRICS:
        raise KeyError(f"metric {metric!r}: known {', '.join(METRICS)}")
    return METRICS[metric][0]
