"""polyalign: cross-lingual language-model pre-training with alignment objectives, and the tools to
measure how well a multilingual encoder aligns languages."""

__version__ = "0.1.0"
