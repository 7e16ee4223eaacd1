"""How a model is read as a word aligner, resolved in one place: the folder's `alignment.json`, then the user's
flags, then the fallbacks.

A model's best alignment layer and extraction are properties of the model, found on a dev split (for
multilingual-e5-small and the aligner trained from it: layer 7, awesome-align's softmax extraction at 0.1, chosen on
the gold sets' dev halves, by the lowest mean AER). `resolve_reading` is the one function that turns a folder and the
flags given into the reading every consumer uses (`polyalign align`, `evaluate alignment`, `fit-aligner`, the Python
`Aligner`, the bench): each flag given wins; a field no flag names comes from the folder's file; a field neither
names falls back to the generic default (SimAlign's argmax two thirds of the way up, layer 8 of 12; awesome-align's
softmax threshold 1e-3; each sentence encoded alone, or the concatenated pair for `ot`, as XLM-Align).
`polyalign interpolate` and `fit-aligner` pass the file on to the folders they write.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from polyalign.align.extract import METHODS, SOFTMAX_THRESHOLD
from polyalign.checkpoint import CONFIG_FILE, resolve_model_folder
from polyalign.io import DataError, atomic_write_text, read_json, read_text
from polyalign.layers import check_layer, simalign_word_layer

FILE = "alignment.json"
GENERIC_METHOD = "argmax"
"""Without a folder's own reading: SimAlign's argmax, the method with no threshold to tune."""
ENCODINGS = ("separate", "pair")


def default_encoding(method: str) -> str:
    """`pair` for `ot` (XLM-Align's evaluation encodes the concatenated pair), `separate` for SimAlign's and
    awesome-align's methods."""
    return "pair" if method == "ot" else "separate"


@dataclass(frozen=True)
class Reading:
    """A way to read links from a model. In a folder's `alignment.json` a field may be left to the fallback
    (layer None: two thirds up; encoding None: the method's own); `resolve_reading` returns every field set."""

    method: str = GENERIC_METHOD
    layer: int | None = None
    softmax_threshold: float = SOFTMAX_THRESHOLD
    encoding: str | None = None
    chosen_by: str = ""
    """Where the setting was measured (empty for the generic default); `resolve_reading` adds the flags given."""

    def describe(self) -> str:
        """`softmax at 0.1, layer 7, separate encoding`: the setting alone."""
        threshold = f" at {self.softmax_threshold:g}" if self.method == "softmax" else ""
        layer = f", layer {self.layer}" if self.layer is not None else ""
        encoding = f", {self.encoding} encoding" if self.encoding else ""
        return f"{self.method}{threshold}{layer}{encoding}"

    def announce(self) -> str:
        """The setting and where it comes from: what the commands print before they work."""
        return self.describe() + (f" ({self.chosen_by})" if self.chosen_by else "")


@dataclass(frozen=True)
class ReadingFlags:
    """What the user asked for (a command's flags, the Python `Aligner`'s arguments); None: not given."""

    method: str | None = None
    layer: int | None = None
    softmax_threshold: float | None = None
    encoding: str | None = None

    def given(self) -> list[str]:
        """The flags given, as a command line writes them."""
        named = [(f.name, getattr(self, f.name)) for f in fields(self)]
        return [f"--{name.replace('_', '-')} {value}" for name, value in named if value is not None]


def check_flags(flags: ReadingFlags) -> None:
    """One line for a flag no model could read with (the layer is checked against the model's depth)."""
    if flags.method is not None and flags.method not in METHODS:
        raise DataError(f"--method {flags.method}: unknown alignment method; use one of {', '.join(METHODS)}")
    if flags.encoding is not None and flags.encoding not in ENCODINGS:
        raise DataError(f"--encoding {flags.encoding}: use one of {', '.join(ENCODINGS)}")
    threshold = flags.softmax_threshold
    if threshold is not None and (type(threshold) not in (int, float) or not 0 <= threshold < 1):
        raise DataError(f"--softmax-threshold {threshold}: use a probability in [0, 1), e.g. 0.001")


def resolve_reading(folder: str | Path | None, num_layers: int, flags: ReadingFlags = ReadingFlags()) -> Reading:
    """The reading to use: each flag given, else the folder's `alignment.json` (None: no folder), else the fallback;
    every field set and checked against the model's `num_layers`."""
    check_flags(flags)
    own = read_reading(folder) if folder is not None else Reading()
    method = flags.method or own.method
    layer = flags.layer if flags.layer is not None else own.layer
    layer = simalign_word_layer(num_layers) if layer is None else layer
    check_layer(layer, num_layers)
    threshold = own.softmax_threshold if flags.softmax_threshold is None else flags.softmax_threshold
    # The folder's encoding only goes with its own method: a flagged method reads with that method's encoding.
    encoding = flags.encoding or (own.encoding if flags.method is None else None) or default_encoding(method)
    origin = [f"the folder's {FILE}: {own.chosen_by}"] if own.chosen_by else []
    given = ["flags " + " ".join(flags.given())] if flags.given() else []
    return Reading(method, layer, threshold, encoding, "; ".join(origin + given))


def model_depth(folder: str | Path) -> int:
    """The number of layers of a model folder (polyalign or Hugging Face), read from its config without loading it,
    so that a bad --layer is refused before any work."""
    config = read_json(resolve_model_folder(folder) / CONFIG_FILE)
    encoder = config.get("encoder", config) if isinstance(config, dict) else None
    for key in ("num_layers", "num_hidden_layers"):
        value = encoder.get(key) if isinstance(encoder, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    raise DataError(f"{folder}: its {CONFIG_FILE} names no number of layers (a positive whole number)")


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
    if reading.layer is not None and (type(reading.layer) is not int or reading.layer < 0):
        raise DataError(f"{path}: layer {reading.layer!r}; use a layer number (0 = the embeddings) or null")
    if type(reading.softmax_threshold) not in (int, float) or not 0 <= reading.softmax_threshold < 1:
        raise DataError(f"{path}: softmax_threshold {reading.softmax_threshold!r}; use a probability in [0, 1)")
    if reading.encoding is not None and reading.encoding not in ENCODINGS:
        raise DataError(f"{path}: encoding {reading.encoding!r}; use one of {', '.join(ENCODINGS)} or null")
    return reading


def write_reading(folder: str | Path, reading: Reading) -> None:
    data = {k: v for k, v in asdict(reading).items() if not (k == "encoding" and v is None)}
    atomic_write_text(Path(folder) / FILE, json.dumps(data, indent=1) + "\n")


def pass_on(start: str | Path, out: str | Path) -> None:
    """Copy the start folder's reading (if it has one) into a folder made from it."""
    if (Path(start) / FILE).is_file():
        atomic_write_text(Path(out) / FILE, read_text(Path(start) / FILE))
