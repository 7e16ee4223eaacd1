"""What the e5 study's declaration and its steps share: the start, the shared data, the gold sets, the protocol."""

from __future__ import annotations

from bench.study import Protocol, Reference

E5 = "models/multilingual-e5-small"
SHARED = "../shared"
GOLD_SETS = ("de-en", "en-fr", "en-hi", "ja-en", "ro-en", "ro-en-wpt05", "zh-en")
METHODS = ("argmax", "itermax", "ot", "softmax", "softmax-0.1")
"""`softmax` is scored at awesome-align's threshold (1e-3) and, as `softmax-0.1`, at AccAlign's 0.1."""
PROTOCOL = Protocol(8, "separate", "argmax", methods=METHODS, encodings=("separate", "pair"))
MTEB_TATOEBA = Reference(
    "MTEB",
    "MTEB's Tatoeba for multilingual-e5-small, acc@1 per language",
    {
        "ara": 79.9, "bul": 88.3, "deu": 97.9, "ell": 89.6, "fra": 92.4, "hin": 94.1, "rus": 92.1,
        "spa": 94.5, "swh": 71.5, "tha": 93.1, "tur": 90.9, "urd": 88.2, "vie": 91.3, "cmn": 92.1,
    },
)  # fmt: skip
MODEL_CARD_BUCC = Reference(
    "model card",
    "multilingual-e5-small's model card: BUCC 2018 test F1",
    {"de": 97.9, "fr": 92.7, "ru": 93.5, "zh": 88.8},
)
AWESOME_TABLE_2 = "awesome-align (Dou & Neubig 2021) Table 2: mBERT, layer 8, softmax-threshold extraction"
XLM_ALIGN_TABLE_2 = "XLM-Align (Chi et al. 2021) Table 2: layer 9, OT extraction"
