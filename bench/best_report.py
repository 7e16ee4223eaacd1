"""Write bench/results/best.md and best.json from the runs and evaluations of bench/best.sh.

Layer choice follows the protocol: the Tatoeba layer of each model is the one with the best dev-split retrieval
(both directions averaged), never the test set's; AER is reported at the aligner's default layer (two thirds
up) and, labelled as an oracle, at the best layer of each gold set.
"""

from __future__ import annotations

import argparse
import shutil
from datetime import date
from pathlib import Path

from reporting import machine, markdown_table, provenance, read_json, records, write_json  # bench/ is on sys.path

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
# The stage runs of 2026-11-24 were trained and evaluated with the code of these commits (stage 1 at the first).
RUNS_FROM = "a32c947..acc3ead"
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


def words_per_english_sentence(folder: Path, languages: list[str]) -> float:
    """Mean whitespace words per English sentence over the Tatoeba-layout files of `languages`."""
    files = [folder / f"tatoeba.{c}-eng.eng" for c in languages if (folder / f"tatoeba.{c}-eng.eng").is_file()]
    counts = [len(line.split()) for f in files for line in f.open(encoding="utf-8")]
    return sum(counts) / max(1, len(counts))


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work")
    parser.add_argument(
        "--words", choices=sorted(ARMS), help="the stage-2 arm the recipe ships (default: the best dev retrieval)"
    )
    parser.add_argument("--dev", type=Path, help="the dev split folder (default: WORK/prepared-all24/dev)")
    args = parser.parse_args()
    runs = args.work / "runs"
    stage1 = summarise(runs / "best-sentences")
    arms = {arm: summarise(runs / f"best-words-{arm}") for arm in ARMS if (runs / f"best-words-{arm}").is_dir()}
    # The shipped arm is chosen on the dev split only (both directions, each arm at its dev-chosen layer).
    args.words = args.words or max(arms, key=lambda a: dev_both(arms[a]))
    best = arms[args.words]
    eflomal = {g: v["aer"] for g, v in read_json(RESULTS / "alignment.json")["eflomal"].items()}
    minutes = stage1["train_minutes"] + best["train_minutes"]
    command = "flock /tmp/polyalign-cpu.lock bench/best.sh"
    report = {
        "date": str(date.today()),
        "machine": machine(),
        "command": command,
        "provenance": provenance(command, RUNS_FROM),
        "model": f"bench/work/runs/best-words-{args.words}",  # the folder bench/best.sh writes
        "measured_run": str((runs / f"best-words-{args.words}").resolve()),
        "recipe": ["best-sentences", f"bench/best/words-{args.words}.yaml"],
        "train_minutes": minutes,
        "stages": {"best-sentences": stage1["train_minutes"], f"words-{args.words}": best["train_minutes"]},
        "layer": best["retrieval"]["layer"],
        "tatoeba14": {k: best["retrieval"]["tatoeba14"][k] for k in ("xx_to_en", "en_to_xx")},
        "tatoeba_all_visible": best["retrieval"]["all"],
        "dev": best["retrieval"]["dev"],
        "aer": {g: v["aer"] for g, v in best["alignment"].items()},
        "aer_best_layer": {g: v["best_aer"] for g, v in best["alignment"].items()},
        "eflomal": eflomal,
        "probe_aer": PROBE_AER,
        "stage1": stage1,
        "arms": arms,
    }
    out = RESULTS / "best"
    out.mkdir(parents=True, exist_ok=True)
    for name, run in (("stage1", runs / "best-sentences"), ("best", runs / f"best-words-{args.words}")):
        for plot in ("eval-dev/tatoeba_layers.png", "eval-test/tatoeba_layers.png"):
            if (run / plot).is_file():
                shutil.copy(run / plot, out / f"{name}-{plot.replace('/', '-')}")
    dev_dir = args.dev or args.work / "prepared-all24" / "dev"
    t14 = list(TATOEBA_14)
    report["sentence_length"] = {  # the English sides of the visible Tatoeba-14 languages
        "dev_split_words_per_english_sentence": words_per_english_sentence(dev_dir, t14),
        "tatoeba_words_per_english_sentence": words_per_english_sentence(ROOT.parent / "shared/data/eval/tatoeba", t14),
    }
    report["final_metrics"] = {arm: train_log_last(runs / f"best-words-{arm}") for arm in arms}
    write_json(RESULTS / "best.json", report)
    (RESULTS / "best.md").write_text(page(report), encoding="utf-8")
    print(f"wrote {RESULTS / 'best.md'} and best.json")


def page(r: dict) -> str:
    best, arms, stage1 = r["arms"][r["recipe"][1].split("words-")[1].removesuffix(".yaml")], r["arms"], r["stage1"]
    per_lang = best["retrieval"]["per_language"]
    order = [c for c in TATOEBA_14 if c in per_lang] + sorted(c for c in per_lang if c not in TATOEBA_14)
    lang_rows = [[c, per_lang[c]["xx_to_en"], per_lang[c]["en_to_xx"]] for c in order]
    lang_rows.append(["**average (visible 14)**", r["tatoeba14"]["xx_to_en"], r["tatoeba14"]["en_to_xx"]])
    models = [("stage 1 alone (best-sentences)", stage1)] + [(ARMS[a], s) for a, s in arms.items()]
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
            sum(v["aer"] for v in s["alignment"].values()) / max(1, len(s["alignment"])),
        ]
        for label, s in models
    ]
    aer_rows = [[label, *(s["alignment"].get(g, {}).get("aer") for g in GOLD_SETS)] for label, s in models]
    aer_rows += [
        [f"{label}, best layer (oracle)", *(s["alignment"].get(g, {}).get("best_aer") for g in GOLD_SETS)]
        for label, s in models[-len(arms) :]
    ]
    aer_rows += [
        ["20-min contrastive probe, best layer (issue 22)", *(PROBE_AER[g] for g in GOLD_SETS)],
        ["eflomal on the same bitext (bench/results/alignment.json)", *(r["eflomal"].get(g) for g in GOLD_SETS)],
    ]
    return (
        "\n\n".join(
            [
                "# The best aligned encoder 2 CPU-hours can train",
                f"{r['provenance']} Page: `bench/best_report.py`, {r['date']}.",
                "## The recipe\n\n"
                f"1. `polyalign pretrain best-sentences` ({r['stages']['best-sentences']:.1f} min): in-batch "
                "translation ranking (symmetric InfoNCE, LaBSE Eq. 1-2, temperature 0.05) over mean-pooled "
                "last-layer vectors, "
                "512 pairs of mixed languages per batch, each side cut to 32 tokens, AdamW lr 5e-4, from random "
                "initialisation with small-base's 4x256 architecture and tokenizer.\n"
                f"2. `polyalign pretrain {r['recipe'][1]} --init-from <stage 1>` "
                f"({list(r['stages'].values())[1]:.1f} min): {ARMS[r['recipe'][1].split('words-')[1][:-5]]}.\n\n"
                f"Total training: {r['train_minutes']:.1f} minutes on 2 CPU cores; `prepare` not counted. "
                f"Model folder: `{r['model']}`.",
                "## Tatoeba acc@1 (%), test set, every training language with a visible Tatoeba file\n\n"
                f"XTREME protocol: mean-pooled layer {r['layer']} (chosen on the dev split), cosine, both "
                "directions. The other nine training languages (cs, fi, id, it, ja, ko, nl, pt, ro) have no "
                "visible Tatoeba file.\n\n" + markdown_table(["language", "xx→en", "en→xx"], lang_rows),
                "## Word alignment AER (%), 7 gold sets\n\nOT aligner (XLM-Align §3.1), pair encoding, default layer "
                "(two thirds up) unless marked.\n\n" + markdown_table(["model", *GOLD_SETS], aer_rows),
                "## Reading (every number from the tables above or best.json)\n\n" + reading(r),
                "## Ablations at equal minutes (stage 2 arms from the same stage-1 model)\n\n"
                "dev = 1,000 held-out training pairs per language, retrieval among them (23 languages).\n\n"
                + markdown_table(
                    [
                        "model",
                        "train min",
                        "steps",
                        "layer (dev)",
                        "dev xx→en",
                        "dev en→xx",
                        "T14 xx→en",
                        "T14 en→xx",
                        "mean AER (7 sets)",
                    ],
                    ablation,
                ),
            ]
        )
        + "\n"
    )


def reading(r: dict) -> str:
    arms, s1 = r["arms"], r["stage1"]
    control = arms["contrast"]

    def t14(s: dict) -> str:
        t = s["retrieval"]["tatoeba14"]
        return f"{t['xx_to_en']:.1f} / {t['en_to_xx']:.1f}"

    lines = [
        f"- Stage 1 alone ({s1['train_minutes']:.0f} min of translation ranking from random initialisation) reaches "
        f"Tatoeba-14 {t14(s1)} (xx→en / en→xx) and dev-split retrieval {s1['retrieval']['dev']['xx_to_en']:.1f} / "
        f"{s1['retrieval']['dev']['en_to_xx']:.1f}; {control['train_minutes']:.0f} more minutes of the same "
        f"(control arm) move Tatoeba-14 to {t14(control)}: the curve is flattening, far below the 40 this issue "
        "asks for and XLM-R base's 57.6 / 59.5.",
        f"- Dev-split retrieval (~{dev_both(control):.0f}) is far above Tatoeba-14 on the same languages: the bitext "
        "(Bible, captions, news, subtitles) is not Tatoeba's kind of sentence. Measured on the Tatoeba-14 "
        f"languages: {r['sentence_length']['dev_split_words_per_english_sentence']:.1f} words per English dev "
        f"sentence against {r['sentence_length']['tatoeba_words_per_english_sentence']:.1f} in Tatoeba. "
        "That the domain gap, not the method, caps Tatoeba here is a hypothesis this page does not test.",
    ]
    for arm in ("tlm", "dwa", "hard"):
        if arm not in arms:
            continue
        a = arms[arm]
        lines.append(
            f"- {ARMS[arm]}: mean AER {mean_aer(a):.1f} vs the control's {mean_aer(control):.1f}; Tatoeba-14 "
            f"{t14(a)} vs {t14(control)}; dev retrieval {dev_both(a):.1f} vs {dev_both(control):.1f} (both "
            "directions averaged)."
        )
    m = r["final_metrics"]
    if "tlm" in m and "tlm/accuracy" in m["tlm"]:
        lines.append(
            f"- TLM had barely started: at the end of its arm its masked-token accuracy was "
            f"{100 * m['tlm']['tlm/accuracy']:.1f}% (loss {m['tlm']['tlm/loss']:.2f}); stage 1 trained no LM head. "
            "Word alignment stays far from eflomal's, which uses the whole bitext."
        )
    lines.append(
        f"- Shipped arm: `{r['recipe'][1]}`, chosen by dev-split retrieval alone (no word-alignment dev set exists, so "
        "the AER columns did not choose it)."
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
