"""Write bench/results/evaluation.md and evaluation.json from the outputs of bench/evaluation.sh."""

from __future__ import annotations

import argparse
from datetime import date
from pathlib import Path

from reporting import machine, markdown_table, provenance, read_json, write_json  # bench/ is on sys.path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
COMMAND = (
    "flock /tmp/polyalign-cpu.lock bench/evaluation.sh ../shared/models/small-base bench/work/runs/best-words-hard"
)
RUNS_FROM = "e08c260..3ed2b92"  # the evaluations of 2026-11-24 ran with the code of these commits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="../shared/models/small-base")
    args = parser.parse_args()
    out = RESULTS / "evaluation"
    bucc = read_json(out / "bucc" / "bucc.json")
    # Optional: the same mining with a model that aligns (bench/results/best.md), where F1 can say something.
    aligned = out / "bucc-aligned" / "bucc.json"
    bucc_rows = [[args.model, bucc]]
    if aligned.is_file():
        bucc_rows.append(
            ["the best recipe's model (bench/results/best.md: stage 1 + harder negatives)", read_json(aligned)]
        )
    tatoeba = {s: read_json(out / f"tatoeba-{s}" / "tatoeba.json") for s in ("cosine", "margin")}
    rows = []
    for score, result in tatoeba.items():
        for r in result["sweep"]:
            rows.append([score, r["layer"], r["average"]["xx_to_en"], r["average"]["en_to_xx"]])
    qa = read_json(RESULTS / "xtreme.json")["qa"]
    qa_rows = [
        [m, r["metric"], r["per_language"]["en"]["mean"], r["average"]["mean"], r["gap"]["mean"]] for m, r in qa.items()
    ]
    report = {
        "date": str(date.today()),
        "machine": machine(),
        "model": args.model,
        "bucc": bucc,
        "tatoeba": {s: {"protocol": t["protocol"], "sweep": t["sweep"]} for s, t in tatoeba.items()},
    }
    write_json(RESULTS / "evaluation.json", report)
    page = (
        "\n\n".join(
            [
                "# Evaluation protocols, measured on small-base",
                provenance(COMMAND, RUNS_FROM)
                + f" Page: `bench/evaluation_report.py`, {report['date']}. Model: `{args.model}` (at chance on "
                "cross-lingual measures, "
                "see its README): these rows check the protocols, not a method.",
                "## BUCC 2018 zh-en (dev)\n\n"
                + markdown_table(
                    ["model", "layer", "F1", "precision", "recall", "mined", "gold pairs", "threshold"],
                    [
                        [
                            m,
                            b["layer"],
                            b["f1"],
                            b["precision"],
                            b["recall"],
                            b["mined"],
                            b["gold"],
                            f"{b['threshold']:.4f}",
                        ]
                        for m, b in bucc_rows
                    ],
                )
                + "".join(f"\n\nProtocol ({m}): {b['protocol']}." for m, b in bucc_rows),
                "## Tatoeba-14 acc@1 (%), cosine and ratio margin, every layer\n\n"
                + markdown_table(["score", "layer", "xx→en", "en→xx"], rows)
                + "".join(f"\n\nProtocol ({s}): {t['protocol']}." for s, t in tatoeba.items()),
                "## XQuAD F1, official SQuAD v1.1 normalisation (from bench/results/xtreme.json)\n\n"
                + markdown_table(["model", "metric", "en", "avg", "gap"], qa_rows)
                + f"\n\nProtocol: {next(iter(qa.values()))['protocol']}",
            ]
        )
        + "\n"
    )
    (RESULTS / "evaluation.md").write_text(page, encoding="utf-8")
    print(f"wrote {RESULTS / 'evaluation.md'}")


if __name__ == "__main__":
    main()
