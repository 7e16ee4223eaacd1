"""polyalign: cross-lingual language-model pre-training with alignment objectives, and the tools to
measure how well a multilingual encoder aligns languages."""

import os

__version__ = "0.1.0"

# oneDNN, which runs bf16 matmuls on CPUs, caches compiled kernels per input shape in two caches of 1024
# entries each (~1 MB an entry); pre-training batches come in hundreds of shapes, so a bf16 CPU run grew by
# gigabytes. 128 entries hold every kernel one step needs. Read at the first bf16 matmul; a user's value wins.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "128")
os.environ.setdefault("LRU_CACHE_CAPACITY", "128")
