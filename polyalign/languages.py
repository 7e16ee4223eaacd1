"""Language codes: training data uses ISO 639-1 (`de`), Tatoeba uses ISO 639-3 (`deu`)."""

from __future__ import annotations

# ISO 639-1 -> the code of the LASER Tatoeba test set for that language.
TATOEBA_CODES: dict[str, str] = {
    "af": "afr", "ar": "ara", "bg": "bul", "bn": "ben", "cs": "ces", "de": "deu", "el": "ell",
    "es": "spa", "et": "est", "eu": "eus", "fa": "pes", "fi": "fin", "fr": "fra", "he": "heb",
    "hi": "hin", "hu": "hun", "id": "ind", "it": "ita", "ja": "jpn", "jv": "jav", "ka": "kat",
    "kk": "kaz", "ko": "kor", "ml": "mal", "mr": "mar", "nl": "nld", "pt": "por", "ro": "ron",
    "ru": "rus", "sw": "swh", "ta": "tam", "te": "tel", "th": "tha", "tl": "tgl", "tr": "tur",
    "ur": "urd", "vi": "vie", "zh": "cmn", "en": "eng",
}  # fmt: skip

TATOEBA_TO_ISO1 = {v: k for k, v in TATOEBA_CODES.items()}

# The 14 non-English XNLI languages present in Tatoeba: the headline average (Tatoeba-14).
TATOEBA_14 = ("ara", "bul", "deu", "ell", "fra", "hin", "rus", "spa", "swh", "tha", "tur", "urd", "vie", "cmn")

XNLI_LANGUAGES = ("en", "ar", "bg", "de", "el", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh")


def to_tatoeba(code: str) -> str:
    """Accept either code form and return the Tatoeba (ISO 639-3) code."""
    if code in TATOEBA_TO_ISO1:
        return code
    if code in TATOEBA_CODES:
        return TATOEBA_CODES[code]
    return code  # an unknown code is used as is; the file lookup reports it if absent
