"""The papers' claims as one study: PPA, XLM-Align, ERNIE-M, XLM-E and VECO as A/B at equal compute.

Each claim is a comparison of bench/study.py: the method against the same start continued with the baseline
objectives (MLM + TLM) for the same steps, or trained from scratch at the same training FLOPs. Ablations are
claims too (the full method as baseline, the ablated one as method, expected to lose). What was concluded from
each is a note in bench/studies/notes/evidence.json. The claims are declared by paper, a module each; what they
share is in common.py; the GPU section's arms in bench/studies/gpu_evidence.py, its claims in xlm_e.py.
"""

from __future__ import annotations

from bench.arm import SMALL_BASE  # noqa: F401  (the names the tests read)
from bench.studies.evidence import ernie_m, ppa, veco, xlm_align, xlm_e
from bench.studies.evidence.common import MLM_TLM, NOISE_FLOOR, XNLI_SMOKE_FLOOR  # noqa: F401
from bench.studies.evidence.ppa import PPA, PPA_NO_TLM  # noqa: F401
from bench.studies.evidence.xlm_e import XLM_E_DIAGNOSTIC, XLM_E_DIAGNOSTICS  # noqa: F401
from bench.study import Comparison, Study

CLAIMS: tuple[Comparison, ...] = (
    *ppa.CLAIMS,
    *xlm_align.CLAIMS,
    *ernie_m.CLAIMS,
    *xlm_e.CLAIMS,
    *veco.CLAIMS,
    *xlm_e.GPU_CLAIMS,
)

STUDY = Study("evidence", "Evidence: each paper's claims as A/B at equal compute", CLAIMS)
