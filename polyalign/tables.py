"""What the commands print: result tables on stdout, summary lines on stderr (where progress goes too)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

console = Console(stderr=True)


def print_prepared(meta: dict, out: Path) -> None:
    """What `prepare` made: lines and tokens per stream, the vocabulary, what was skipped or dropped."""
    table = Table(title=f"prepared {out}")
    for col in ("stream", "lines", "tokens"):
        table.add_column(col)
    for lang, s in meta["mono"].items():
        table.add_row(f"mono {lang}", f"{s['lines']:,}", f"{s['tokens']:,}")
    for name, s in meta["parallel"].items():
        table.add_row(f"parallel {name}", f"{s['lines']:,}", " / ".join(f"{t:,}" for t in s["tokens"]))
    console.print(table)
    console.print(f"vocabulary {meta['vocab_size']:,}; languages {', '.join(meta['languages'])}")
    if meta["skipped_lines"]:
        details = ", ".join(
            f"{n} {r} (first at {meta['skipped_first_at'][r]})" for r, n in meta["skipped_lines"].items()
        )
        console.print(f"[yellow]warning: skipped {details}[/yellow]")
    if meta["excluded_as_eval_overlap"]:
        console.print(f"dropped {meta['excluded_as_eval_overlap']:,} lines/pairs that occur in evaluation data")


def print_tatoeba(result, title: str) -> None:
    """The reported layer's acc@1 per language (stdout), then the protocol and the best layer (stderr)."""
    row = result.row(result.layer)
    table = Table(title=f"Tatoeba acc@1 (%), {title}, layer {result.layer}")
    for col in ("language", "sentences", "xx→en", "en→xx"):
        table.add_column(col, justify="right")
    for lang, acc in row["per_language"].items():
        table.add_row(lang, str(result.sizes.get(lang, "")), f"{acc['xx_to_en']:.1f}", f"{acc['en_to_xx']:.1f}")
    avg = row["average"]
    table.add_row("average", "", f"{avg['xx_to_en']:.1f}", f"{avg['en_to_xx']:.1f}")
    Console().print(table)
    best = max(result.layers, key=lambda i: result.row(i)["average"]["both"])
    console.print(
        result.protocol() + f"; best layer on this set: {best} "
        f"({result.row(best)['average']['both']:.1f} average of both directions)"
    )


def print_coverage(report: dict) -> None:
    """What trim-vocab kept, per file: tokens, the share kept, the share now <unk>, lines segmented as before."""
    pieces = report["pieces"]
    table = Table(title=f"{pieces['kept']:,} of {pieces['before']:,} pieces kept")
    for col in ("file", "tokens", "kept %", "<unk> %", "segmented as before %"):
        table.add_column(col, justify="left" if col == "file" else "right")
    for c in report["coverage"]:
        shares = (f"{100 * c[k]:.2f}" for k in ("kept", "unknown", "same_lines"))
        table.add_row(c["file"], f"{c['tokens']:,}", *shares)
    Console().print(table)
