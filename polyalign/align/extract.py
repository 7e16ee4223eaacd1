"""From a score matrix to alignment links: argmax both ways, iterative filtering, softmax thresholds, four methods.

- `ot` (XLM-Align §3.1): Sinkhorn plan of f_sim = log max(eps, h·h), then iterative alignment filtering
  (Eqs. 7-9, as the released code runs them: Itermax on the plan). Defaults from XLM-Align Table 11: mu = 1,
  2 Sinkhorn iterations, 2 filtering iterations, alpha = 0.9. With filtering `disable` (§5.4), the union of
  the plan's forward and backward argmax instead.
- `argmax` (SimAlign): links where the forward and backward argmax of cosine similarity agree.
- `itermax` (SimAlign): argmax, then further rounds that favour still-unaligned rows and columns.
- `softmax` (awesome-align, Dou & Neubig 2021): softmax of the dot products over the target tokens (rows) and
  over the source tokens (columns); links where both probabilities exceed a threshold (awesome-align's 1e-3).
Link probabilities (`link_probabilities`) are awesome-align's for every method (see there).
All functions take padded (..., n, m) matrices and a boolean mask of real token pairs; links are booleans.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from polyalign.align.transport import EPSILON, at_least_fp32, dot_products, log_dot_similarity, sinkhorn

METHODS = ("ot", "argmax", "itermax", "softmax")
SOFTMAX_THRESHOLD = 1e-3
"""awesome-align's default threshold (its `--softmax_threshold`); AccAlign uses 0.1."""
FILTERINGS = ("iterative", "disable")


def mutual_argmax(scores: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """XLM-Align Eq. (7): forward links (i, argmax_k A_ik) and backward links (argmax_k A_kj, j), as (..., n, m)
    booleans restricted to the mask. Ties go to the lowest index."""
    return _mutual_argmax(scores.masked_fill(~mask, float("-inf")), mask)


def _mutual_argmax(s: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`mutual_argmax` of scores already -inf outside the mask."""
    n, m = s.shape[-2:]
    forward = torch.arange(m, device=s.device) == s.argmax(-1, keepdim=True)  # (..., n, m)
    backward = torch.arange(n, device=s.device)[:, None] == s.argmax(-2, keepdim=True)  # (..., n, m)
    return forward & mask, backward & mask


def filter_alignments(
    log_scores: torch.Tensor, mask: torch.Tensor, iterations: int = 2, alpha: float = 0.9
) -> torch.Tensor:
    """Iterative alignment filtering (XLM-Align Eqs. 8-9) on log A*; returns the links (..., n, m).

    §3.1 says each round "follows the procedure of Itermax", and XLM-Align's released code (`iter_max` in
    infoxlm/tasks/xlm_align.py, which made the paper's Table 2) runs exactly SimAlign's Itermax on A*: round 1
    is Eq. (8) on Eq. (7)'s argmaxes; each further round weighs A* by clip(alpha [row i free] + alpha [column
    j free], 0, 1), i.e. Eq. (9)'s alpha beside a link, 0 where the row and the column are both aligned, and
    adds mutual argmax links that touch a free row or column. Read literally, Eq. (9) discounts both-aligned
    entries by alpha only, which lets later rounds link aligned words to each other again: on planted
    alignments that reading cost 9 AER points against the released procedure.
    """
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha={alpha}: the discount factor must lie in (0, 1]")
    if iterations < 1:
        raise ValueError(f"filter_iterations={iterations}: filtering needs at least 1 iteration (0 gives no links)")
    plan = at_least_fp32(log_scores).exp().masked_fill(~mask, 0.0)  # A* in [0, 1]: rows or columns sum to 1
    return simalign_itermax(plan, mask, iterations, alpha)


def union_argmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """XLM-Align §5.4, alignment filtering disabled: the union of the forward and backward argmax of A*
    (Eq. 7), so every token is aligned at least once; returns the links (..., n, m)."""
    forward, backward = mutual_argmax(scores, mask)
    return forward | backward


def cosine_similarity(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """SimAlign's similarity, (cos + 1) / 2 in [0, 1]: source (..., n, C), target (..., m, C) -> (..., n, m)."""
    s, t = F.normalize(at_least_fp32(source), dim=-1), F.normalize(at_least_fp32(target), dim=-1)
    return (s @ t.transpose(-1, -2) + 1.0) / 2.0


def simalign_itermax(similarity: torch.Tensor, mask: torch.Tensor, iterations: int = 2, alpha: float = 0.9):
    """SimAlign Itermax (Jalili Sabet et al. 2020, §2.3, as in their released code), batched.

    Round 1 is argmax. Each further round re-weights the similarity by clip(alpha·[row i free] +
    alpha·[column j free], 0, 1) and adds mutual-argmax links that touch a free row or column. Pairs with at
    most 2 tokens on a side keep plain argmax, and a round adds nothing once every row or every column is
    aligned, as in SimAlign.
    """
    forward, backward = mutual_argmax(similarity, mask)
    links = forward & backward
    rows, cols = mask.any(-1), mask.any(-2)  # (..., n), (..., m)
    large = torch.minimum(rows.sum(-1), cols.sum(-1)) > 2  # (...,)
    for _ in range(iterations - 1):
        row_free = (~links.any(-1) & rows)[..., :, None]  # (..., n, 1)
        col_free = (~links.any(-2) & cols)[..., None, :]  # (..., 1, m)
        weight = (alpha * row_free.float() + alpha * col_free.float()).clamp(max=1.0)  # (..., n, m)
        go_on = large & row_free.any((-2, -1)) & col_free.any((-2, -1))  # (...,)
        forward, backward = mutual_argmax(similarity * weight, mask)
        links |= forward & backward & (row_free | col_free) & go_on[..., None, None]
    return links


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax of scores (..., n, m) along `dim` over the real entries only; 0 outside the mask."""
    s = at_least_fp32(scores).masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=dim).nan_to_num(0.0)  # a padding row or column is all -inf: its NaNs become 0


def directional_softmaxes(scores: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """awesome-align's two alignment matrices: scores (..., n, m) as probabilities source -> target (each row
    over the target tokens) and target -> source (each column over the source tokens)."""
    return masked_softmax(scores, mask, -1), masked_softmax(scores, mask, -2)


def softmax_links(scores: torch.Tensor, mask: torch.Tensor, threshold: float = SOFTMAX_THRESHOLD) -> torch.Tensor:
    """awesome-align's extraction: links (..., n, m) where both directional probabilities exceed
    `threshold`, so a link needs each word to pick the other."""
    if not 0 <= threshold < 1:
        raise ValueError(f"softmax threshold {threshold}: use a probability in [0, 1), e.g. awesome-align's 1e-3")
    forward, backward = directional_softmaxes(scores, mask)
    return (forward > threshold) & (backward > threshold) & mask


def link_probabilities(source: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The probability awesome-align writes with each link (its `--output_prob_file`), for every method here:
    the harmonic mean 2pq / (p + q) of the two directional softmaxes of the dot products, each tempered by the
    square root of the number of tokens it normalises over (the heuristic of awesome-align's released code).
    A word link takes the largest probability of its token links (as awesome-align). (..., n, m) in [0, 1], 0
    outside the mask."""
    dots = dot_products(source, target)
    rows = mask.sum(-1, keepdim=True).clamp(min=1).float()  # (..., n, 1): real target tokens of each row
    cols = mask.sum(-2, keepdim=True).clamp(min=1).float()  # (..., 1, m): real source tokens of each column
    p = masked_softmax(dots / rows.sqrt(), mask, -1)
    q = masked_softmax(dots / cols.sqrt(), mask, -2)
    return (2 * p * q / (p + q).clamp(min=1e-9)).masked_fill(~mask, 0.0)


@dataclass(frozen=True)
class OTSettings:
    """The optimal-transport aligner's settings, defaults from XLM-Align Table 11. Frozen: the default instance
    is shared by every call that takes `settings=OTSettings()`."""

    mu: float = 1.0
    """Entropic regularisation (Eq. 3)."""
    sinkhorn_iterations: int = 2
    """Sinkhorn iterations (Eq. 6), each a row and then a column normalisation of the plan."""
    filter_iterations: int = 2
    """Rounds of iterative filtering (Eqs. 8-9), at least 1."""
    alpha: float = 0.9
    """Discount of entries beside an existing link (Eq. 9)."""
    eps: float = EPSILON
    """Floor of the dot product in f_sim (Eq. 1)."""
    filtering: str = "iterative"
    """`iterative` (Eqs. 7-9: high-precision links) or `disable` (§5.4: the union of forward and backward
    argmax, every token aligned; filter_iterations and alpha are then unused)."""

    def __post_init__(self) -> None:
        if self.filtering not in FILTERINGS:
            raise ValueError(f"filtering={self.filtering!r}: use one of {', '.join(FILTERINGS)}")
        if self.filtering == "iterative" and self.filter_iterations < 1:
            raise ValueError(
                f"filter_iterations={self.filter_iterations}: iterative filtering needs at least 1 (0 gives no "
                "links); to keep every argmax link use filtering: disable (XLM-Align §5.4)"
            )


def ot_links(source: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, settings: OTSettings = OTSettings()):
    """XLM-Align §3.1 end to end: hidden states (..., n, C), (..., m, C) -> links (..., n, m)."""
    similarity = log_dot_similarity(source, target, settings.eps)  # Eq. (1)
    log_plan = sinkhorn(similarity, mask, settings.mu, settings.sinkhorn_iterations)  # Eqs. (3)-(6)
    if settings.filtering == "disable":
        return union_argmax(log_plan, mask)
    return filter_alignments(log_plan, mask, settings.filter_iterations, settings.alpha)


def subword_links(
    method: str,
    source: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor,
    settings: OTSettings = OTSettings(),
    softmax_threshold: float = SOFTMAX_THRESHOLD,
) -> torch.Tensor:
    """Links between the tokens of each pair by `method` (`ot`, `argmax`, `itermax`, `softmax`)."""
    mask = mask.expand(*source.shape[:-2], *mask.shape[-2:])  # (..., n, m), e.g. layers x batch
    if mask.shape[-1] == 0 or mask.shape[-2] == 0:  # a batch of empty sentences on one side
        return torch.zeros_like(mask)
    if method == "ot":
        return ot_links(source, target, mask, settings)
    if method == "argmax":
        forward, backward = mutual_argmax(cosine_similarity(source, target), mask)
        return forward & backward
    if method == "itermax":
        return simalign_itermax(cosine_similarity(source, target), mask)
    if method == "softmax":
        return softmax_links(dot_products(source, target), mask, softmax_threshold)
    raise ValueError(f"unknown alignment method {method!r}; use one of {METHODS}")
