"""Once: saved sections' per-seed AER tags (`aer/one-pair-layout`, `aer-ot/released-filtering`) become one
`aer-METHOD/current` per AER measure, as bench/measures.py's aer_metrics now writes them; the reading is the same."""

import json
import re
import sys
from pathlib import Path

ONE_PAIR_LAYOUT, RELEASED_FILTERING = "aer/one-pair-layout", "aer-ot/released-filtering"
METHOD = re.compile(r"^(?:aer-([a-z]+)@|(?:sweep|per-gold)/aer-([a-z]+)$)")


def rewrite(node):
    if isinstance(node, list):
        return [rewrite(v) for v in node]
    if not isinstance(node, dict):
        return node
    methods = sorted({m.group(1) or m.group(2) for k in node if (m := METHOD.match(k))})
    tags = {
        f"aer-{method}/current": node.get(ONE_PAIR_LAYOUT) is True
        and (method != "ot" or node.get(RELEASED_FILTERING) is True)
        for method in methods
    }
    out = {}
    for k, v in node.items():  # the new tags where the old ones stood
        if k in (ONE_PAIR_LAYOUT, RELEASED_FILTERING):
            out |= tags
        else:
            out[k] = rewrite(v)
    return out


def main(root: Path) -> None:
    for path in sorted(root.rglob("*.json")):
        text = path.read_text(encoding="utf-8")
        if ONE_PAIR_LAYOUT not in text and RELEASED_FILTERING not in text:
            continue
        data = json.loads(text)
        for indent, ascii_ in ((2, True), (2, False), (1, True), (1, False), (None, True)):
            if json.dumps(data, indent=indent, ensure_ascii=ascii_) + "\n" * text.endswith("\n") == text:
                break
        else:
            sys.exit(f"{path}: unknown formatting")
        new = json.dumps(rewrite(data), indent=indent, ensure_ascii=ascii_) + "\n" * text.endswith("\n")
        path.write_text(new, encoding="utf-8")
        print(path)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
