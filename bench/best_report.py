"""Write bench/results/best.md and best.json from the runs and evaluations of bench/best.sh.

The recipe is stage 1 (`best-sentences`) then stage 2 (`best-words`); the 11-minute stage-2 arms are the
ablation that chose stage 2's objective. Layer choice follows the protocol: the Tatoeba layer of each model is
the one with the best dev-split retrieval
(both directions averaged), never the test set's; AER is reported at the aligner's default layer (two thirds
up) and, labelled as an oracle, at the best layer of each gold set.
"""

from __future__ import annotations

import argparse
import shutil
from datetime import date
from pathlib import Path

from reporting import machine, markdown_table, provenance, read_json, records, write_json  # bench/ is on sys.path

from polyalign.evaluate.plots import plot_series
from polyalign.languages import TATOEBA_14

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
GOLD_SETS = ("de-en", "en-fr", "en-hi", "ja-en", "ro-en", "ro-en-wpt05", "zh-en")
# The 20-minute contrastive probe of issue 22 (128 pairs, from random init; OT, pair encoding, best layer):
# the AER the recipe has to beat on every gold set.
PROBE_AER = {
    "de-en": 70.5,
    "en-fr": 59.0,
    "en-hi": 77.5,
    "ja-en": 83.5,
    "ro-en": 73.7,
    "ro-en-wpt05": 73.2,
    "zh-en": 78.7,
}
# The stage runs of 2026-11-24 were trained and evaluated with the code of these commits (stage 1 at the first,
# the 60-minute stage 2 at the last).
RUNS_FROM = "a32c947..7ca6164"
ARMS = {  # run folder suffix -> label
    "contrast": "stage 1 + contrast alone (control)",
    "tlm": "stage 1 + contrast + TLM",
    "dwa": "stage 1 + contrast + DWA (XLM-Align, with its TLM)",
    "hard": "stage 1 + contrast with harder negatives (one pair per batch, margin 0.3)",
}


def train_minutes(run: Path) -> tuple[float, int]:
    last = records(run / "metrics.jsonl")[-1]
    return last["seconds"] / 60, last["step"]


def dev_layer(run: Path) -> int:
    dev = read_json(run / "eval-dev" / "tatoeba.json")
    return max(dev["sweep"], key=lambda r: r["average"]["both"])["layer"]


def row_at(result: dict, layer: int) -> dict:
    return next(r for r in result["sweep"] if r["layer"] == layer)


def retrieval(run: Path) -> dict:
    layer = dev_layer(run)
    dev = row_at(read_json(run / "eval-dev" / "tatoeba.json"), layer)
    test = row_at(read_json(run / "eval-test" / "tatoeba.json"), layer)
    t14 = [lang for lang in test["per_language"] if lang in TATOEBA_14]
    mean = lambda key, langs: sum(test["per_language"][lang][key] for lang in langs) / len(langs)  # noqa: E731
    return {
        "layer": layer,
        "dev": dev["average"],
        "per_language": test["per_language"],
        "tatoeba14": {"xx_to_en": mean("xx_to_en", t14), "en_to_xx": mean("en_to_xx", t14), "languages": len(t14)},
        "all": test["average"],
    }


def alignment(run: Path) -> dict:
    out = {}
    for gold in GOLD_SETS:
        path = run / "eval-aer" / gold / "alignment.json"
        if path.is_file():
            result = read_json(path)
            best = min(result["sweep"], key=lambda r: r["aer"])
            out[gold] = {
                "default_layer": result["layer"],
                "aer": result["aer"],
                "best_layer": best["layer"],
                "best_aer": best["aer"],
            }
    return out


def dev_both(summary: dict) -> float:
    return (summary["retrieval"]["dev"]["xx_to_en"] + summary["retrieval"]["dev"]["en_to_xx"]) / 2


def mean_aer(summary: dict) -> float:
    return sum(v["aer"] for v in summary["alignment"].values()) / max(1, len(summary["alignment"]))


def train_log_last(run: Path) -> dict:
    return records(run / "metrics.jsonl")[-1]


def summarise(run: Path) -> dict:
    minutes, steps = train_minutes(run)
    return {
        "run": str(run),
        "train_minutes": minutes,
        "steps": steps,
        "retrieval": retrieval(run),
        "alignment": alignment(run),
    }


def curve(run: Path, layer: int, minutes_before: float) -> list[dict]:
    """Tatoeba-14 at `layer` for every evaluated checkpoint of `run`, against total training minutes."""
    seconds = {r["step"]: r["seconds"] for r in records(run / "metrics.jsonl")}
    points = []
    for folder in sorted((run / "curve").glob("step-*")):
        step = int(folder.name.split("-")[1])
        at = max((s for s in seconds if s <= step), default=None)
        if at is None or not (folder / "tatoeba.json").is_file():
            continue
        t14 = row_at(read_json(folder / "tatoeba.json"), layer)["average"]
        points.append(
            {
                "step": step,
                "minutes": minutes_before + seconds[at] / 60,
                "xx_to_en": t14["xx_to_en"],
                "en_to_xx": t14["en_to_xx"],
            }
        )
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work")
    args = parser.parse_args()
    runs = args.work / "runs"
    stage1, final = summarise(runs / "best-sentences"), summarise(runs / "best-words")
    arms = {arm: summarise(runs / f"best-words-{arm}") for arm in ARMS if (runs / f"best-words-{arm}").is_dir()}
    eflomal = {g: v["aer"] for g, v in read_json(RESULTS / "alignment.json")["eflomal"].items()}
    command = "flock /tmp/polyalign-cpu.lock bench/best.sh"
    layer = final["retrieval"]["layer"]
    report = {
        "date": str(date.today()),
        "machine": machine(),
        "command": command,
        "provenance": provenance(command, RUNS_FROM),
        "model": "bench/work/runs/best-words",  # the folder bench/best.sh writes
        "measured_run": str((runs / "best-words").resolve()),
        "recipe": ["best-sentences", "best-words"],
        "train_minutes": stage1["train_minutes"] + final["train_minutes"],
        "stages": {"best-sentences": stage1["train_minutes"], "best-words": final["train_minutes"]},
        "layer": layer,
        "tatoeba14": {k: final["retrieval"]["tatoeba14"][k] for k in ("xx_to_en", "en_to_xx")},
        "tatoeba_all_visible": final["retrieval"]["all"],
        "dev": final["retrieval"]["dev"],
        "aer": {g: v["aer"] for g, v in final["alignment"].items()},
        "aer_best_layer": {g: v["best_aer"] for g, v in final["alignment"].items()},
        "eflomal": eflomal,
        "probe_aer": PROBE_AER,
        "stage1": stage1,
        "final": final,
        "arms": arms,
        "arm_chosen_on_dev": max(arms, key=lambda a: dev_both(arms[a])) if arms else None,
        "curve": curve(runs / "best-sentences", layer, 0.0)
        + curve(runs / "best-words", layer, stage1["train_minutes"]),
        "final_metrics": {arm: train_log_last(runs / f"best-words-{arm}") for arm in arms},
    }
    if (runs / "best-words" / "length.json").is_file():
        report["length"] = read_json(runs / "best-words" / "length.json")
    out = RESULTS / "best"
    out.mkdir(parents=True, exist_ok=True)
    for name, run in (("stage1", runs / "best-sentences"), ("best", runs / "best-words")):
        for plot in ("eval-dev/tatoeba_layers.png", "eval-test/tatoeba_layers.png"):
            if (run / plot).is_file():
                shutil.copy(run / plot, out / f"{name}-{plot.replace('/', '-')}")
    if report["curve"]:
        minutes = [p["minutes"] for p in report["curve"]]
        plot_series(
            {
                "xx→en": (minutes, [p["xx_to_en"] for p in report["curve"]]),
                "en→xx": (minutes, [p["en_to_xx"] for p in report["curve"]]),
            },
            out / "curve.png",
            "training minutes (2 CPU cores)",
            "Tatoeba-14 acc@1 (%)",
            f"best recipe, layer {layer}: stage 1 then stage 2 at {stage1['train_minutes']:.0f} min",
        )
    write_json(RESULTS / "best.json", report)
    (RESULTS / "best.md").write_text(page(report), encoding="utf-8")
    print(f"wrote {RESULTS / 'best.md'} and best.json")


def t14(s: dict) -> str:
    t = s["retrieval"]["tatoeba14"]
    return f"{t['xx_to_en']:.1f} / {t['en_to_xx']:.1f}"


def page(r: dict) -> str:
    final, arms, stage1 = r["final"], r["arms"], r["stage1"]
    per_lang = final["retrieval"]["per_language"]
    order = [c for c in TATOEBA_14 if c in per_lang] + sorted(c for c in per_lang if c not in TATOEBA_14)
    lang_rows = [[c, per_lang[c]["xx_to_en"], per_lang[c]["en_to_xx"]] for c in order]
    lang_rows.append(["**average (visible 14)**", r["tatoeba14"]["xx_to_en"], r["tatoeba14"]["en_to_xx"]])
    others = [c for c in per_lang if c not in TATOEBA_14]
    if others:
        all_x = sum(per_lang[c]["xx_to_en"] for c in per_lang) / len(per_lang)
        all_e = sum(per_lang[c]["en_to_xx"] for c in per_lang) / len(per_lang)
        lang_rows.append([f"average (all {len(per_lang)})", all_x, all_e])
    models = [
        ("stage 1 alone (best-sentences)", stage1),
        ("**the recipe: stage 1 + best-words (stage 2 minutes)**", final),
    ] + [(f"ablation: {ARMS[a]}", s) for a, s in arms.items()]
    ablation = [
        [
            label,
            s["train_minutes"],
            s["steps"],
            s["retrieval"]["layer"],
            s["retrieval"]["dev"]["xx_to_en"],
            s["retrieval"]["dev"]["en_to_xx"],
            s["retrieval"]["tatoeba14"]["xx_to_en"],
            s["retrieval"]["tatoeba14"]["en_to_xx"],
            mean_aer(s),
        ]
        for label, s in models
    ]
    aer_rows = [[label, *(s["alignment"].get(g, {}).get("aer") for g in GOLD_SETS)] for label, s in models[:2]]
    aer_rows += [
        [
            "the recipe, best layer per gold set (oracle)",
            *(final["alignment"].get(g, {}).get("best_aer") for g in GOLD_SETS),
        ],
        ["20-min contrastive probe, best layer (issue 22)", *(PROBE_AER[g] for g in GOLD_SETS)],
        ["eflomal on the same bitext (bench/results/alignment.json)", *(r["eflomal"].get(g) for g in GOLD_SETS)],
    ]
    curve_rows = [[p["step"], p["minutes"], p["xx_to_en"], p["en_to_xx"]] for p in r["curve"]]
    sections = [
        "# The best aligned encoder 2 CPU-hours can train",
        f"{r['provenance']} Page: `bench/best_report.py`, {r['date']}.",
        "## The recipe\n\n"
        f"1. `polyalign pretrain best-sentences` ({r['stages']['best-sentences']:.1f} min): in-batch "
        "translation ranking (symmetric InfoNCE, LaBSE Eq. 1-2, temperature 0.05) over mean-pooled last-layer "
        "vectors, 512 pairs of mixed languages per batch, each side cut to 32 tokens, AdamW lr 5e-4, from random "
        "initialisation with small-base's 4x256 architecture and tokenizer.\n"
        f"2. `polyalign pretrain best-words --init-from <stage 1>` ({r['stages']['best-words']:.1f} min): the same "
        "ranking with harder negatives: one language pair per batch (512 pairs) and LaBSE's additive margin 0.3, "
        "AdamW lr 3e-4.\n\n"
        "Stage 1's design (random initialisation rather than small-base, mixed-language batches of 512, lr 5e-4) "
        "follows the probe measurements given in issue 22, not rerun here; stage 2's objective was chosen by the "
        "ablation at the end of this page.\n\n"
        f"Total training: {r['train_minutes']:.1f} minutes on 2 CPU cores; `prepare` not counted. "
        f"Model folder: `{r['model']}`.",
        "## Tatoeba acc@1 (%), test set, every training language with a visible Tatoeba file\n\n"
        f"XTREME protocol: mean-pooled layer {r['layer']} (chosen on the dev split), cosine, both "
        "directions. The other nine training languages (cs, fi, id, it, ja, ko, nl, pt, ro) have no "
        "visible Tatoeba file.\n\n" + markdown_table(["language", "xx→en", "en→xx"], lang_rows),
        "## Word alignment AER (%), 7 gold sets\n\nOT aligner (XLM-Align §3.1), pair encoding, default layer "
        "(two thirds up) unless marked.\n\n" + markdown_table(["model", *GOLD_SETS], aer_rows),
        "## Learning curve\n\n"
        f"Tatoeba-14 at layer {r['layer']} at every checkpoint of both stages (stage 2 starts at "
        f"{r['stages']['best-sentences']:.1f} min). Plot: `best/curve.png`.\n\n"
        + markdown_table(["step (of its stage)", "total minutes", "T14 xx→en", "T14 en→xx"], curve_rows),
        "## Reading (every number from the tables above or best.json)\n\n" + reading(r),
    ]
    if "length" in r:
        sections.append(length_section(r["length"], r["curve"]))
    sections.append(
        "## Ablations (stage 2 arms of 11 minutes from the same stage-1 model)\n\n"
        "dev = 1,000 held-out training pairs per language, retrieval among them (23 languages).\n\n"
        + markdown_table(
            [
                "model",
                "train min (of its stage)",
                "steps",
                "layer (dev)",
                "dev xx→en",
                "dev en→xx",
                "T14 xx→en",
                "T14 en→xx",
                "mean AER (7 sets)",
            ],
            ablation,
        )
    )
    return "\n\n".join(sections) + "\n"


def length_section(length: dict, curve: list[dict]) -> str:
    rows = [
        [b["words"], b["pairs"], b["acc"], t["pairs"], t["acc"]]
        for b, t in zip(length["by_length"]["dev"], length["by_length"]["tatoeba"], strict=True)
    ]
    m = length["matched"]
    dev, tat = length["by_length"]["dev"], length["by_length"]["tatoeba"]
    share = lambda rows: sum(r["pairs"] for r in rows[:2]) / sum(r["pairs"] for r in rows)  # noqa: E731
    short_dev, short_tatoeba = share(dev), share(tat)
    a, b = curve[-2], curve[-1]  # the slope at the end of the budget, both directions averaged
    per_10_min = (
        10 * ((b["xx_to_en"] + b["en_to_xx"]) - (a["xx_to_en"] + a["en_to_xx"])) / 2 / (b["minutes"] - a["minutes"])
    )
    return (
        "## What stands between this model and XLM-R's 57.6 / 59.5: length or kind of sentence?\n\n"
        f"`bench/best_length.py`, layer {length['layer']}, Tatoeba-14 languages, acc@1 averaged over both directions, "
        "by the English side's word count (each set retrieving among all its 1,000 pairs per language):\n\n"
        + markdown_table(["English words", "dev pairs", "dev acc", "Tatoeba pairs", "Tatoeba acc"], rows)
        + f"\n\nMatched comparison: dev pairs of at most {length['max_words']} English words retrieving among "
        f"themselves ({min(m['pairs_per_language'].values())}-{max(m['pairs_per_language'].values())} pairs per "
        f"language, {m['languages']} languages) reach {m['dev_short_acc']:.1f}; Tatoeba pairs of the same length "
        f"range, subsampled to the same pool size per language, reach {m['tatoeba_matched_acc']:.1f}.\n\n"
        f"Reading: both matter. Within each set shorter sentences retrieve worse (dev {dev[0]['acc']:.1f} at "
        f"{dev[0]['words']} words against {dev[-1]['acc']:.1f} at {dev[-1]['words']}; Tatoeba {tat[0]['acc']:.1f} "
        f"against {tat[-1]['acc']:.1f}), and {100 * short_tatoeba:.0f}% of Tatoeba's pairs have at most 10 English "
        f"words against {100 * short_dev:.0f}% of the dev split's. At the same length range and pool size the dev "
        f"pairs still retrieve {m['dev_short_acc'] - m['tatoeba_matched_acc']:.1f} points better: the kind of "
        "sentence (in-domain held-out bitext against Tatoeba's everyday phrases; the bitext is Bible, news, captions "
        "and subtitles) accounts for that gap. Short, everyday training sentences are the next lever this suggests "
        f"(not tested here); more minutes are another: the recipe was still gaining {per_10_min:.1f} points per 10 "
        "minutes at the end of its budget (last two checkpoints of the "
        "learning curve)."
    )


def reading(r: dict) -> str:
    arms, s1, final = r["arms"], r["stage1"], r["final"]
    below_probe = [g for g in GOLD_SETS if g in r["aer"] and r["aer"][g] < PROBE_AER[g]]
    below_eflomal = [g for g in GOLD_SETS if g in r["aer"] and r["aer"][g] < r["eflomal"].get(g, 0)]
    tt = r["tatoeba14"]
    lines = [
        f"- The recipe reaches Tatoeba-14 {t14(final)} (xx→en / en→xx) in {r['train_minutes']:.0f} minutes: "
        + ("at or above" if min(tt.values()) >= 40 else "below")
        + f" the issue's minimum of 40 both ways; XLM-R base reaches 57.6 / 59.5. Stage 1 alone: {t14(s1)}.",
        f"- AER at the default layer is below the 20-minute probe's on {len(below_probe)} of 7 gold sets"
        + (f" (not on {', '.join(g for g in GOLD_SETS if g not in below_probe)})" if len(below_probe) < 7 else "")
        + f", and below eflomal's on {len(below_eflomal)} of 7: sentence-level ranking aligns words only a little.",
    ]
    if "contrast" in arms:
        control = arms["contrast"]
        for arm in ("tlm", "dwa", "hard"):
            if arm in arms:
                a = arms[arm]
                lines.append(
                    f"- Ablation, {ARMS[arm]}: mean AER {mean_aer(a):.1f} vs the control's {mean_aer(control):.1f}; "
                    f"Tatoeba-14 {t14(a)} vs {t14(control)}; dev retrieval {dev_both(a):.1f} vs "
                    f"{dev_both(control):.1f} (both directions averaged)."
                )
    m = r["final_metrics"]
    if "tlm" in m and "tlm/accuracy" in m["tlm"]:
        lines.append(
            f"- TLM had barely started in its arm: masked-token accuracy {100 * m['tlm']['tlm/accuracy']:.1f}% "
            f"(loss {m['tlm']['tlm/loss']:.2f}) at the end; stage 1 trains no LM head."
        )
    lines.append(
        f"- Stage 2's objective is the arm with the best dev-split retrieval ({r['arm_chosen_on_dev']}: "
        f"{ARMS.get(r['arm_chosen_on_dev'], '')}); no word-alignment dev set exists, so the AER columns did not "
        "choose it. best-words runs that arm for the rest of the 2-hour budget."
    )
    if r["curve"]:
        last = r["curve"][-3:]
        lines.append(
            "- The last checkpoints of the curve: "
            + ", ".join(f"{p['minutes']:.0f} min {p['xx_to_en']:.1f} / {p['en_to_xx']:.1f}" for p in last)
            + "."
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
