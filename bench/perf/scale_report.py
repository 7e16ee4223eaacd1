"""Summarise bench/perf/scale.sh: peak RSS 1x vs 10x corpus, DDP vs accumulation loss curves -> bench/results/scale.*

python -m bench.perf.scale_report              # from bench/work/scale (what scale.sh measured)
python -m bench.perf.scale_report --page-only  # the page again from bench/results/scale.json
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from bench.reporting import commit, cpu_name, page_text, read_json, records, table

ROOT = Path(__file__).resolve().parents[2]
W = ROOT / "bench" / "work" / "scale"
OUT = ROOT / "bench" / "results"


def corpus_size(name: str) -> dict:
    files = [p for p in (W / f"corpus-{name}").rglob("*.gz")]
    prepared = read_json(W / f"prepared-{name}" / "meta.json")
    tokens = sum(s["tokens"] for s in prepared["mono"].values())
    tokens += sum(sum(s["tokens"]) for s in prepared["parallel"].values())
    return {"gz_mb": round(sum(p.stat().st_size for p in files) / 2**20, 1), "tokens": tokens}


def main() -> None:
    rss = {r["label"]: r for r in records(W / "rss.jsonl")}
    sizes = {s: corpus_size(s) for s in ("1x", "10x")}
    memory = {
        phase: {
            "1x_mb": rss[f"{phase}-1x"]["peak_rss_mb"],
            "10x_mb": rss[f"{phase}-10x"]["peak_rss_mb"],
            "ratio": rss[f"{phase}-10x"]["peak_rss_mb"] / rss[f"{phase}-1x"]["peak_rss_mb"],
            "seconds": [rss[f"{phase}-1x"]["seconds"], rss[f"{phase}-10x"]["seconds"]],
        }
        for phase in ("prepare", "train")
    }
    ddp, single = records(W / "ddp" / "metrics.jsonl"), records(W / "single" / "metrics.jsonl")
    steps = [
        {"step": a["step"], "ddp": a["loss"], "single": b["loss"], "rel_diff": abs(a["loss"] / b["loss"] - 1)}
        for a, b in zip(ddp, single, strict=True)
    ]
    worst = max(s["rel_diff"] for s in steps)
    result = {
        "code": commit(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {cpu_name()}, {os.cpu_count()} cores",
        "corpus": sizes,
        "peak_rss": memory,
        "ddp": {"steps": steps, "max_rel_diff": worst},
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "scale.json").write_text(json.dumps(result, indent=2) + "\n")
    write_page(result, OUT)


def code_of(result: dict) -> str:
    """The commit the measurement ran; runs from before it was recorded name the last commit before their date."""
    if "code" in result:
        return result["code"]
    before = subprocess.run(
        ["git", "log", f"--before={result['date']}", "-1", "--format=%h"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return f"{before} (the last commit before the run's date; the run did not record its commit)"


def write_page(result: dict, out: Path) -> Path:
    """scale.md in `out` from the result scale.json holds."""
    sizes, memory = result["corpus"], result["peak_rss"]
    steps, worst = result["ddp"]["steps"], result["ddp"]["max_rel_diff"]
    lines = [
        "# Scale: memory flat in corpus size; DDP equals gradient accumulation",
        "",
        f"Produced by `PY=/path/to/python bench/perf/scale.sh` (each heavy step under `flock "
        f"/tmp/polyalign-cpu.lock`; the page by `python -m bench.perf.scale_report`, again from scale.json with "
        f"`--page-only`) at commit {code_of(result)}; {result['machine']}; {result['date']}.",
        "",
        "## Peak RSS, corpus 1x vs 10x",
        "",
        "Corpus 1x: `../shared/data/train` mono en + de and parallel en-de; 10x: each file concatenated 10 times "
        f"({sizes['1x']['gz_mb']} MB -> {sizes['10x']['gz_mb']} MB gzip, {sizes['1x']['tokens']:,} -> "
        f"{sizes['10x']['tokens']:,} tokens). `prepare`: SentencePiece vocabulary 8000 trained on 100,000 sampled "
        "lines, then every line tokenized into shards. Training: recipe `xlm` (MLM + TLM, 6 layers, hidden 384), "
        "10 steps and one checkpoint. Peak RSS from `getrusage(RUSAGE_CHILDREN)` (bench/perf/peak_rss.py).",
        "",
        table(
            ["phase", "peak RSS 1x (MB)", "peak RSS 10x (MB)", "ratio", "goal", "wall s (1x / 10x)"],
            [
                [
                    phase,
                    f"{m['1x_mb']:.0f}",
                    f"{m['10x_mb']:.0f}",
                    f"{m['ratio']:.3f}",
                    "< 1.2",
                    f"{m['seconds'][0]:.0f} / {m['seconds'][1]:.0f}",
                ]
                for phase, m in memory.items()
            ],
            align="lrrrrr",
        ),
        "## DDP (2 gloo processes) vs 1 process with 2 accumulation steps",
        "",
        "Recipe `mlm` at its size (6 layers, hidden 384, vocabulary 32000, 8192-token micro-batches) on "
        "bench/work/prepared-xnli15, 20 steps, bf16 autocast, dropout 0 (each process draws dropout masks from "
        "its own generator, so with dropout the two layouts differ by design), 1 thread per process for DDP. "
        "Data: micro-batch slot s = rank x A + a reads the same seeded stream in both layouts.",
        "",
        f"Tolerance: relative loss difference < 1e-3 per logged step (bf16 autocast; only the order of "
        f"floating-point reductions differs). Measured: max {worst:.2e}.",
        "",
        table(
            ["step", "DDP 2x1 loss", "1 process x 2 accumulation loss", "relative difference"],
            [[s["step"], f"{s['ddp']:.5f}", f"{s['single']:.5f}", f"{s['rel_diff']:.1e}"] for s in steps],
            align="rrrr",
        ),
    ]
    (out / "scale.md").write_text(page_text(lines))
    return out / "scale.md"


if __name__ == "__main__":
    if "--page-only" in sys.argv:
        print(write_page(read_json(OUT / "scale.json"), OUT).read_text())
    else:
        main()
