"""How a model folder reads best as a word aligner: `alignment.json` beside its weights.

A model's best alignment layer and extraction are properties of the model, found on a dev split (for
multilingual-e5-small and the aligner trained from it: layer 7, awesome-align's softmax extraction at 0.1, chosen on
the gold sets' dev halves in bench/results/e5.md). A folder that carries the file is read that way by default by
`polyalign align`, `fit-aligner` and the Python `Aligner`; any flag given still wins. A folder without it reads with
the generic defaults: SimAlign's argmax two thirds of the way up (layer 8 of 12), each sentence encoded alone.
`polyalign interpolate` and `fit-aligner` pass the start's file on to the folders they write.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from polyalign.align.extract import METHODS, SOFTMAX_THRESHOLD
from polyalign.io import DataError

FILE = "alignment.json"
GENERIC_METHOD = "argmax"
"""Without a folder's own reading: SimAlign's argmax, the method with no threshold to tune."""


@dataclass(frozen=True)
class Reading:
    """The recommended way to read links from a model: method, layer (None: two thirds up), softmax threshold."""

    method: str = GENERIC_METHOD
    layer: int | None = None
    softmax_threshold: float = SOFTMAX_THRESHOLD
    chosen_by: str = ""
    """Where the setting was measured (empty for the generic default)."""

    def describe(self) -> str:
        threshold = f" at {self.softmax_threshold:g}" if self.method == "softmax" else ""
        return f"{self.method}{threshold}" + (f", layer {self.layer}" if self.layer is not None else "")


def read_reading(folder: str | Path) -> Reading:
    """The folder's `alignment.json`, checked; the generic `Reading()` when it has none."""
    path = Path(folder) / FILE
    if not path.is_file():
        return Reading()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: not JSON ({err})") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected an object with method, layer, softmax_threshold")
    unknown = set(data) - set(Reading.__dataclass_fields__)
    if unknown:
        keys = ", ".join(Reading.__dataclass_fields__)
        raise DataError(f"{path}: unknown key {sorted(unknown)[0]!r}; keys are {keys}")
    reading = Reading(**data)
    if reading.method not in METHODS:
        raise DataError(f"{path}: method {reading.method!r}; use one of {', '.join(METHODS)}")
    if reading.layer is not None and (not isinstance(reading.layer, int) or reading.layer < 0):
        raise DataError(f"{path}: layer {reading.layer!r}; use a layer number (0 = the embeddings) or null")
    if not isinstance(reading.softmax_threshold, int | float) or not 0 <= reading.softmax_threshold < 1:
        raise DataError(f"{path}: softmax_threshold {reading.softmax_threshold!r}; use a probability in [0, 1)")
    return reading


def write_reading(folder: str | Path, reading: Reading) -> None:
    (Path(folder) / FILE).write_text(json.dumps(asdict(reading), indent=1) + "\n", encoding="utf-8")


def pass_on(start: str | Path, out: str | Path) -> None:
    """Copy the start folder's reading (if it has one) into a folder made from it."""
    if (Path(start) / FILE).is_file():
        shutil.copyfile(Path(start) / FILE, Path(out) / FILE)
