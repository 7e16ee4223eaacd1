"""Step 4 of the GPU check: `polyalign align` against the same computation written plainly with transformers
(SimAlign's way), and `polyalign evaluate alignment` on gold links."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import sys
import time
from pathlib import Path

from bench.perf.gpu.step import (
    ENTRY,
    NO_CUDA,
    ROOT,
    SAMPLE,
    SHARED,
    UNFINISHED,
    Step,
    device_name,
    one_line,
    polyalign_cli,
    run_command,
    sample_prepared,
)

E5_FOLDER = ROOT / "models" / "multilingual-e5-small"


def step_alignment(step: Step) -> None:
    import torch

    if not torch.cuda.is_available() and not step.dry_run:
        step.part("all", status=NO_CUDA)
        return
    model = alignment_model(step)
    if model is None:
        return
    src, tgt, origin = write_pairs(step.work / "pairs", step.sizes.pairs)
    s = step.sizes
    step.note(
        f"{s.pairs:,} sentence pairs from {origin}; argmax (SimAlign), layer {s.align_layer}, bf16; pairs/s of whole "
        "commands, start-up and model loading included; links_f1 = agreement of the two sides' links"
    )
    device = device_name(step)
    ours = step.work / "polyalign.links"
    args = ["align", "--model", str(model), "--src", str(src), "--tgt", str(tgt), "--method", "argmax"]
    args += ["--layer", str(s.align_layer), "--device", device, "--no-progress"]
    status, seconds = run_command(step, "align", polyalign_cli(*args), stdout=ours)
    step.part("polyalign align", status=status, seconds=seconds, **rate(status, s.pairs, seconds))

    theirs = step.work / "transformers.links"
    hf = hf_folder(step, model)
    if hf is not None:
        command = [sys.executable, str(ENTRY), "--hf-align", str(hf), str(src), str(tgt)]
        command += [str(theirs), str(s.align_layer), device]
        status, seconds = run_command(step, "hf-align", command)
        step.part("transformers (SimAlign's way)", status=status, seconds=seconds, **rate(status, s.pairs, seconds))
        if ours.is_file() and theirs.is_file():
            step.part("transformers (SimAlign's way)", **link_agreement(ours, theirs))
    evaluate_alignment_part(step, model, device)


def rate(status: str, pairs: int, seconds: float) -> dict:
    """pairs/s of a whole command, start-up included; none for a command that did not finish."""
    return {"pairs_per_s": pairs / seconds} if status == "ok" else {}


def alignment_model(step: Step) -> Path | None:
    """The model steps 4 and 5 share, made once (its path and how it was found are kept in the work folder)."""
    record = step.work / "alignment-model.json"
    if record.is_file():
        found = json.loads(record.read_text())
        step.note(f"model: {found['description']}")
        return Path(found["path"])
    step.part("model", status=UNFINISHED)
    path, description = find_alignment_model(step)
    step.part("model", status="ok" if path else description, description=description)
    if path is None:
        return None
    record.write_text(json.dumps({"path": str(path), "description": description}))
    step.note(f"model: {description}")
    return path


def find_alignment_model(step: Step) -> tuple[Path | None, str]:
    if not step.dry_run and E5_FOLDER.is_dir():
        return E5_FOLDER, f"multilingual-e5-small ({E5_FOLDER.relative_to(ROOT)})"
    reason = "dry run"
    if not step.dry_run:
        out = step.work / "multilingual-e5-small"
        status, seconds = run_command(step, "import-e5", polyalign_cli("import-e5", "--out", str(out)))
        if status == "ok":
            return out, f"multilingual-e5-small (`polyalign import-e5`, {seconds:.0f} s; {E5_FOLDER.name} absent)"
        reason = f"{E5_FOLDER.relative_to(ROOT)} absent, import-e5 {status}"
    try:
        return random_model(step), f"randomly initialised, {shape(step.sizes.align_model)} ({reason})"
    except Exception as e:  # noqa: BLE001
        return None, f"failed: random model: {type(e).__name__}: {one_line(str(e))}"


def shape(m: dict) -> str:
    return f"{m['num_layers']} layers x {m['hidden_size']}, {m['num_heads']} heads, FFN {m['ffn_size']}"


def random_model(step: Step) -> Path:
    """A model folder of multilingual-e5-small's shape with random weights and an existing tokenizer (its ids
    all lie inside the vocabulary: the vocabulary is at least the tokenizer's)."""
    import torch

    from polyalign.checkpoint import save_model_folder
    from polyalign.model import EncoderConfig, MaskedLanguageModel
    from polyalign.tokenizer import load_tokenizer

    folder = SHARED / "models" / "small-base" / "tokenizer"
    tokenizer = load_tokenizer(folder if folder.is_dir() else sample_prepared(step) / "tokenizer")
    special = tokenizer.special
    m = dict(step.sizes.align_model)
    m["vocab_size"] = max(m["vocab_size"], special.vocab_size + 37)  # + 37: a model wider than its tokenizer
    config = EncoderConfig(**m, max_positions=128 if step.dry_run else 512, pad_token_id=special.pad)
    torch.manual_seed(0)
    out = step.work / "random-model"
    save_model_folder(out, MaskedLanguageModel(config), tokenizer, [], overwrite=True)
    return out


def hf_folder(step: Step, model: Path) -> Path | None:
    """The model as transformers loads it: a Hugging Face folder as it is, a polyalign folder exported."""
    config = json.loads((model / "config.json").read_text())
    if "polyalign" not in config:
        return model
    from polyalign.checkpoint import load_model
    from polyalign.hf_folders import export_hf

    out = step.work / "hf-export"
    step.part("export_hf", status=UNFINISHED)
    t0 = time.perf_counter()
    try:
        export_hf(load_model(model), out)
    except Exception as e:  # noqa: BLE001
        step.part("export_hf", status=f"failed: {type(e).__name__}: {one_line(str(e))}")
        return None
    step.part("export_hf", status="ok", seconds=time.perf_counter() - t0)
    return out


def write_pairs(folder: Path, n: int) -> tuple[Path, Path, str]:
    """n sentence pairs (en-de, en-es, en-fr, en-ru in turn, repeated as needed) from ../shared/data/train when
    it is here, else from the bundled sample; words are the text split at spaces."""
    shared = SHARED / "data" / "train" / "parallel"
    langs = ("de", "es", "fr", "ru")
    if all((shared / f"en-{x}.{x}.gz").is_file() for x in langs):
        origin, read = shared, lambda p: gzip.open(f"{p}.gz", "rt", encoding="utf-8")
    else:
        origin, read = SAMPLE / "parallel", lambda p: open(p, encoding="utf-8")
    per_language = []
    for x in langs:
        with read(origin / f"en-{x}.{x}") as fx, read(origin / f"en-{x}.en") as fe:
            per_language.append(
                [(a.strip(), b.strip()) for a, b in itertools.islice(zip(fx, fe, strict=True), n // len(langs))]
            )
    interleaved = [p for group in itertools.zip_longest(*per_language) for p in group if p and p[0] and p[1]]
    pairs = list(itertools.islice(itertools.cycle(interleaved), n))
    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = folder / "src.txt", folder / "tgt.txt"
    src.write_text("".join(a + "\n" for a, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(b + "\n" for _, b in pairs), encoding="utf-8")
    return src, tgt, shown(origin)


def shown(path: Path) -> str:
    """A path as a person at the repository root would type it."""
    return os.path.relpath(path, ROOT) if path.is_relative_to(ROOT.parent) else str(path)


def link_agreement(ours: Path, theirs: Path) -> dict:
    """How far the two computations agree: pairs with the same links, and F1 of one's links against the other's."""
    a = [set(line.split()) for line in ours.read_text().splitlines()]
    b = [set(line.split()) for line in theirs.read_text().splitlines()]
    if len(a) != len(b):
        return {"agreement": f"{len(a)} vs {len(b)} lines"}
    both = sum(len(x & y) for x, y in zip(a, b, strict=True))
    total = sum(len(x) + len(y) for x, y in zip(a, b, strict=True))
    same = sum(x == y for x, y in zip(a, b, strict=True))
    return {"same_links_pairs": same / max(len(a), 1), "links_f1": 2 * both / max(total, 1)}


def evaluate_alignment_part(step: Step, model: Path, device: str) -> None:
    shared = SHARED / "data" / "eval" / "word_alignment" / "de-en"
    gold = shared if shared.is_dir() and not step.dry_run else SAMPLE / "word_alignment" / "de-en"
    out = step.work / "evaluate-alignment"
    args = ["evaluate", "alignment", "--model", str(model), "--gold", str(gold), "--layers", "all"]
    status, seconds = run_command(
        step, "evaluate-alignment", polyalign_cli(*args, "--out", str(out), "--device", device, "--no-progress")
    )
    found = {}
    if status == "ok":
        r = json.loads((out / "alignment.json").read_text())
        found = {
            "gold": shown(gold),
            "sentences": r["sentences"],
            "layer": r["layer"],
            "aer": r["aer"],
        }
    step.part("polyalign evaluate alignment", status=status, seconds=seconds, **found)


def hf_align(folder: Path, src: Path, tgt: Path, out: Path, layer: int, device: str, batch_pairs: int = 64) -> None:
    """SimAlign's argmax with transformers, written plainly: a batch of pairs (both sides as rows, padded),
    hidden states at `layer`, then per pair cosine similarity of the subwords, argmax both ways, their
    intersection, and a word link wherever two of their subwords are linked."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from polyalign.align.words import pharaoh

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder, dtype=torch.bfloat16).to(device).eval()
    pairs = list(
        zip(src.read_text(encoding="utf-8").splitlines(), tgt.read_text(encoding="utf-8").splitlines(), strict=True)
    )
    with open(out, "w", encoding="utf-8") as f, torch.inference_mode():
        for i in range(0, len(pairs), batch_pairs):
            chunk = [(a.split(), b.split()) for a, b in pairs[i : i + batch_pairs]]
            B = len(chunk)
            words = [a for a, _ in chunk] + [b for _, b in chunk]
            enc = tokenizer(words, is_split_into_words=True, padding=True, truncation=True, return_tensors="pt")
            hidden = model(**enc.to(device), output_hidden_states=True).hidden_states[layer].float()  # (2B, T, C)
            for b in range(B):
                f.write(pharaoh(simalign_argmax(hidden[b], hidden[B + b], enc.word_ids(b), enc.word_ids(B + b))) + "\n")


def simalign_argmax(source, target, source_words: list, target_words: list) -> list[tuple[int, int]]:
    import torch
    import torch.nn.functional as F

    s_pos = [k for k, w in enumerate(source_words) if w is not None]  # subwords, not <s> </s> <pad>
    t_pos = [k for k, w in enumerate(target_words) if w is not None]
    if not s_pos or not t_pos:
        return []
    sim = F.normalize(source[s_pos], dim=-1) @ F.normalize(target[t_pos], dim=-1).T  # (n, m)
    forward = torch.zeros_like(sim, dtype=torch.bool)
    forward[torch.arange(len(s_pos)), sim.argmax(1)] = True
    backward = torch.zeros_like(sim, dtype=torch.bool)
    backward[sim.argmax(0), torch.arange(len(t_pos))] = True
    linked = (forward & backward).nonzero().tolist()
    return sorted({(source_words[s_pos[i]], target_words[t_pos[j]]) for i, j in linked})
