"""The GPU check's data pack: what the evidence step trains and measures on, in one folder that travels.

The GPU machine gets the working tree and at most 64 MiB of carried files: no ../shared, no network. This builds,
under an ignored folder, the first `--fraction` of every training file of the languages (../shared/data/train)
prepared with small-base's tokenizer (Tatoeba's test sentences excluded, `--dev-pairs` pairs per language held out
as the dev split that chooses the Tatoeba layer), plus the evaluation files the measures read: Tatoeba-14 and the
gold word alignments whose two languages are trained. Refuses to finish over `--max-mb`.

    python -m bench.run gpu-pack                       # bench/work/gpu-pack, the 15 XNLI languages, < 40 MB
    run it on the GPU machine with carry=["bench/work/gpu-pack"]
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.measures import gold_sets_for  # noqa: E402
from polyalign.languages import TATOEBA_14, XNLI_LANGUAGES  # noqa: E402

SHARED = ROOT.parent / "shared"
DEFAULT_PACK = ROOT / "bench" / "work" / "gpu-pack"
TOKENIZER = SHARED / "models" / "small-base"
MAX_MB = 40.0


def head_lines(source: Path, target: Path, fraction: float) -> int:
    """The first `fraction` of a (gzipped) text file's lines, written plain; how many."""
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    kept = lines[: max(1, int(len(lines) * fraction))]
    target.write_bytes(b"".join(kept))
    return len(kept)


def slice_corpus(train: Path, languages: tuple[str, ...], fraction: float, out: Path) -> dict[str, int]:
    """mono/{lang}.txt and parallel/en-{xx}.{side}: the first `fraction` of each (both sides of a pair alike)."""
    counts = {}
    for kind in ("mono", "parallel"):
        (out / kind).mkdir(parents=True)
    for lang in languages:
        mono = train / "mono" / f"{lang}.txt.gz"
        if mono.is_file():
            counts[f"mono {lang}"] = head_lines(mono, out / "mono" / f"{lang}.txt", fraction)
        if lang == "en":
            continue
        for side in ("en", lang):
            source = train / "parallel" / f"en-{lang}.{side}.gz"
            if source.is_file():
                counts[f"parallel en-{lang}.{side}"] = head_lines(
                    source, out / "parallel" / f"en-{lang}.{side}", fraction
                )
    return counts


def copy_eval(eval_root: Path, languages: tuple[str, ...], out: Path) -> list[str]:
    """Tatoeba-14 (its 28 files) and the gold sets of the trained languages, as ../shared/data/eval lays them out."""
    (out / "tatoeba").mkdir(parents=True)
    for code in TATOEBA_14:
        for side in (code, "eng"):
            shutil.copy(eval_root / "tatoeba" / f"tatoeba.{code}-eng.{side}", out / "tatoeba")
    golds = gold_sets_for(languages)
    for gold in golds:
        shutil.copytree(eval_root / "word_alignment" / gold, out / "word_alignment" / gold)
    return golds


def folder_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6


def build_pack(out: Path, languages: tuple[str, ...], fraction: float, dev_pairs: int, max_mb: float = MAX_MB) -> dict:
    """Slice, prepare, copy the evaluation files; the pack's description (also written as pack.json)."""
    train, eval_root = SHARED / "data" / "train", SHARED / "data" / "eval"
    if out.exists():
        raise SystemExit(f"{out}: exists; remove it first (a pack is rebuilt whole)")
    with tempfile.TemporaryDirectory(prefix="gpu-pack") as tmp:
        staging = Path(tmp) / "pack"
        lines = slice_corpus(train, languages, fraction, Path(tmp) / "raw")
        command = [sys.executable, "-m", "polyalign.cli", "prepare", "--mono", f"{tmp}/raw/mono"]
        command += ["--parallel", f"{tmp}/raw/parallel", "--tokenizer-from", str(TOKENIZER)]
        command += ["--exclude", str(eval_root / "tatoeba"), "--dev-pairs", str(dev_pairs)]
        command += ["--out", str(staging / "prepared"), "--no-progress"]
        subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        golds = copy_eval(eval_root, languages, staging / "eval")
        meta = json.loads((staging / "prepared" / "meta.json").read_text())
        tokens = sum(s["tokens"] for s in meta["mono"].values())
        tokens += sum(
            sum(s["tokens"]) if isinstance(s["tokens"], list) else s["tokens"] for s in meta["parallel"].values()
        )
        description = {
            "command": "python -m bench.run gpu-pack -- " + " ".join(sys.argv[1:]),
            "languages": list(languages),
            "fraction": fraction,
            "dev_pairs": dev_pairs,
            "training_tokens": tokens,
            "lines": lines,
            "gold_sets": golds,
            "tatoeba": list(TATOEBA_14),
            "megabytes": round(folder_mb(staging), 1),
        }
        publish(staging, out, description, "pack.json", max_mb * 1e6, "lower --fraction")
    return description


def publish(staging: Path, out: Path, description: dict, name: str, limit_bytes: float, advice: str) -> None:
    """Write the description into the staged pack and move it to `out`, unless it weighs more than it may."""
    (staging / name).write_text(json.dumps(description, indent=2) + "\n")
    if (megabytes := folder_mb(staging)) * 1e6 > limit_bytes:
        raise SystemExit(f"the pack would be {megabytes:.1f} MB > {limit_bytes / 1e6:.1f} MB: {advice}")
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(staging, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_PACK)
    ap.add_argument("--langs", default=",".join(XNLI_LANGUAGES), help="training languages (default: XNLI's 15)")
    ap.add_argument("--fraction", type=float, default=0.27, help="share of every training file's lines kept")
    ap.add_argument("--dev-pairs", type=int, default=1000)
    ap.add_argument("--max-mb", type=float, default=MAX_MB)
    args = ap.parse_args()
    if not (SHARED / "data" / "train").is_dir():
        raise SystemExit(f"{SHARED / 'data' / 'train'}: not found (the pack is built from ../shared/data)")
    unknown = [x for x in args.langs.split(",") if x not in XNLI_LANGUAGES]
    if unknown or "en" not in args.langs.split(","):
        raise SystemExit(f"--langs {args.langs}: English plus XNLI languages ({', '.join(XNLI_LANGUAGES)})")
    pack = build_pack(args.out, tuple(args.langs.split(",")), args.fraction, args.dev_pairs, args.max_mb)
    print(f"{args.out}: {pack['megabytes']} MB, {pack['training_tokens']:,} training tokens, gold {pack['gold_sets']}")
