"""A trimmed vocabulary changes nothing for text whose pieces were kept: multilingual-e5-small trimmed by
`polyalign trim-vocab` (the GPU aligner's start) against the untrimmed model, on the 7 visible gold sets (AER
under the e5 page's protocol: each sentence alone, argmax at layer 8 and the offered softmax at 0.1 at layer 7,
whole sets and dev/test halves) and on Tatoeba-14 (acc@1, mean-pooled, layers 7 and 12, and 12 with E5's
`query: ` prefix).

Rule, fixed before the run: equivalent when every gold set's AER (each method, layer and half) is within 0.1 of
the untrimmed model's and every Tatoeba-14 average (each layer and direction) within 0.2.

    flock /tmp/polyalign-cpu.lock python -m bench.probes.trim_equivalence --trimmed bench/work/e5-trim/model
    python -m bench.probes.trim_equivalence --page        # the page again from bench/results/trim.json
About 10 CPU-minutes on 2 cores. Writes bench/results/trim.json and trim.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench import selection as S
from bench.reporting import commit, machine, page_text, read_json, table, write_json
from bench.selection_run import gold_scores

ROOT = Path(__file__).resolve().parents[2]
EVAL = ROOT.parent / "shared" / "data" / "eval"
RESULTS = ROOT / "bench" / "results"
GOLD_SETS = ("de-en", "en-fr", "en-hi", "ja-en", "ro-en", "ro-en-wpt05", "zh-en")
READINGS = (("argmax", 8), ("softmax-0.1", 7))
"""The e5 page's protocol (argmax at layer 8) and its offered reading (softmax at 0.1, layer 7)."""
TATOEBA_READINGS = (("layer 7", 7, ""), ("layer 12", 12, ""), ("layer 12, `query: `", 12, "query: "))
AER_TOLERANCE, TATOEBA_TOLERANCE = 0.1, 0.2


def aer_scores(folder: Path) -> dict:
    """{"argmax@8": {"all": {"de-en": AER}, "dev": ..., "test": ...}, ...}, each sentence encoded alone."""
    from polyalign.checkpoint import load_model

    methods, layers = [m for m, _ in READINGS], [layer for _, layer in READINGS]
    scores = gold_scores(load_model(folder), EVAL / "word_alignment", GOLD_SETS, methods, layers)
    return {f"{m}@{layer}": {half: scores[f"separate/{m}" + ("" if half == "all" else f"/{half}")][str(layer)]
                             for half in ("all", S.DEV, S.TEST)} for m, layer in READINGS}  # fmt: skip


def tatoeba_scores(folder: Path) -> dict:
    """Tatoeba-14 averages, {reading: {"xx_to_en": %, "en_to_xx": %}}."""
    from polyalign.checkpoint import load_model
    from polyalign.evaluate.tatoeba import evaluate_tatoeba
    from polyalign.languages import TATOEBA_14

    loaded, out, by_prefix = load_model(folder), {}, {}
    for reading, layer, prefix in TATOEBA_READINGS:
        if prefix not in by_prefix:  # one pass reads every layer
            by_prefix[prefix] = evaluate_tatoeba(loaded, EVAL / "tatoeba", list(TATOEBA_14), layer, prefix=prefix)
        average = by_prefix[prefix].row(layer)["average"]
        out[reading] = {k: round(average[k], 2) for k in ("xx_to_en", "en_to_xx")}
    return out


def verdict(full: dict, trimmed: dict) -> dict:
    """The largest differences and whether they stay within the rule's tolerances."""
    aer = [abs(trimmed["aer"][r][h][g] - v) for r, halves in full["aer"].items() for h, sets in halves.items()
           for g, v in sets.items()]  # fmt: skip
    tatoeba = [abs(trimmed["tatoeba"][r][d] - v) for r, row in full["tatoeba"].items() for d, v in row.items()]
    return {
        "largest_aer_difference": round(max(aer), 2),
        "largest_tatoeba_difference": round(max(tatoeba), 2),
        "equivalent": max(aer) <= AER_TOLERANCE and max(tatoeba) <= TATOEBA_TOLERANCE,
    }


def measure(full: Path, trimmed: Path) -> dict:
    out = {"command": "python -m bench.probes.trim_equivalence", "commit": commit(), "machine": machine()}
    for name, folder in (("untrimmed", full), ("trimmed", trimmed)):
        t0 = time.time()
        out[name] = {"model": str(folder), "aer": aer_scores(folder), "tatoeba": tatoeba_scores(folder)}
        out[name]["minutes"] = round((time.time() - t0) / 60, 1)
    out["trim"] = read_json(trimmed / "trim.json")
    out["verdict"] = verdict(out["untrimmed"], out["trimmed"])
    return out


def write_page(result: dict, page: Path) -> Path:
    """The page from what the probe saved (its JSON), drawn by the bench's one table writer."""
    trim, v = result["trim"], result["verdict"]
    aer_rows = [
        [reading, half, name, *(f"{result[name]['aer'][reading][half][g]:.2f}" for g in GOLD_SETS)]
        for reading, halves in result["untrimmed"]["aer"].items()
        for half in halves
        for name in ("untrimmed", "trimmed")
    ]
    tatoeba_rows = [
        [reading, *(f"{result[m]['tatoeba'][reading]['xx_to_en']:.2f} / {result[m]['tatoeba'][reading]['en_to_xx']:.2f}"
                    for m in ("untrimmed", "trimmed"))]
        for reading in result["untrimmed"]["tatoeba"]
    ]  # fmt: skip
    coverage_rows = [
        [Path(c["file"]).name, f"{c['tokens']:,}", f"{100 * c['kept']:.2f}", f"{100 * c['unknown']:.3f}"]
        for c in trim["coverage"]
        if c["file"] in trim["corpus"]
    ]
    lines = [
        "# Vocabulary trimming: multilingual-e5-small trimmed against the untrimmed model",
        "",
        f"Produced by `{result['command']}` (commit {result['commit']}; {result['machine']}). Data: `bench/results/"
        "trim.json`.",
        "",
        f"The trimmed model: `polyalign trim-vocab` kept {trim['pieces']['kept']:,} of {trim['pieces']['before']:,} "
        f"pieces (at most {trim['max_pieces']}: every special piece and every piece of the gold sets and "
        f"Tatoeba-14, then the en-xx training bitext's by frequency); compact start "
        f"{trim.get('compact', {}).get('bytes', 0) / 1e6:.1f} MB.",
        "",
        f"Rule, fixed before the run: equivalent when every AER is within {AER_TOLERANCE} and every Tatoeba-14 "
        f"average within {TATOEBA_TOLERANCE}. Largest differences: AER {v['largest_aer_difference']}, Tatoeba "
        f"{v['largest_tatoeba_difference']}: **{'equivalent' if v['equivalent'] else 'not equivalent'}**.",
        "",
        table(["reading", "half", "model", *GOLD_SETS], aer_rows),
        "Tatoeba-14 averages, acc@1 (%), xx→en / en→xx:",
        "",
        table(["reading", "untrimmed", "trimmed"], tatoeba_rows),
        "Coverage of the training bitext under the trimmed tokenizer (share of tokens whose piece was kept; share of "
        "the trimmed tokenizer's tokens that are `<unk>`):",
        "",
        table(["file", "tokens", "kept %", "<unk> %"], coverage_rows),
    ]
    page.write_text(page_text(lines), encoding="utf-8")
    return page


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trimmed", type=Path, default=ROOT / "bench" / "work" / "e5-trim" / "model")
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "multilingual-e5-small", help="the untrimmed")
    ap.add_argument("--page", action="store_true", help="only write the page from bench/results/trim.json")
    args = ap.parse_args()
    if not args.page:
        write_json(RESULTS / "trim.json", measure(args.model, args.trimmed))
    print(f"wrote {write_page(read_json(RESULTS / 'trim.json'), RESULTS / 'trim.md')}")


if __name__ == "__main__":
    main()
