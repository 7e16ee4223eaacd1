"""Training objectives. The registry is an explicit dict: adding an objective is one file and one line."""

from __future__ import annotations

from polyalign.model import EncoderConfig
from polyalign.objectives.base import Objective, ObjectiveOutput
from polyalign.objectives.btmlm import BTMLM
from polyalign.objectives.contrast import SentenceContrast
from polyalign.objectives.dwa import DWA
from polyalign.objectives.ernie_m_camlm import CAMLM
from polyalign.objectives.head_warmup import HeadMLM, head_parameters, head_warmup_objective
from polyalign.objectives.mlm import MLM
from polyalign.objectives.moco import MoCo
from polyalign.objectives.rtd import MRTD, TRTD, share_generator
from polyalign.objectives.self_align import SelfAlign
from polyalign.objectives.tlm import TLM
from polyalign.objectives.veco_ca_mlm import AdjacentCrossAttentionMLM, CrossAttentionMLM
from polyalign.schema import RecipeError, build_dataclass
from polyalign.tokenizer import SpecialTokens

OBJECTIVES: dict[str, type[Objective]] = {
    "mlm": MLM,
    "tlm": TLM,
    "ca_mlm": CrossAttentionMLM,  # VECO
    "ca_mlm_adjacent": AdjacentCrossAttentionMLM,
    "dwa": DWA,
    "mrtd": MRTD,
    "trtd": TRTD,
    "camlm": CAMLM,  # ERNIE-M
    "btmlm": BTMLM,
    "moco": MoCo,
    "contrast": SentenceContrast,  # in-batch translation ranking (LaBSE; PPA's sentence alignment without a queue)
    "self_align": SelfAlign,  # awesome-align's self-training: word alignments labelled by the model itself
}

__all__ = [
    "OBJECTIVES",
    "HeadMLM",
    "Objective",
    "ObjectiveOutput",
    "build_objective",
    "head_parameters",
    "head_warmup_objective",
    "objective_config",
    "setup_objectives",
]


def objective_config(name: str, settings: dict, key: str) -> tuple[type[Objective], object]:
    """The objective registered as `name` and its Config built from `settings`: the one check of both, for
    recipes and for `build_objective`; a RecipeError keyed `{key}.name` or `{key}.config...` otherwise."""
    if name not in OBJECTIVES:
        raise RecipeError(f"{key}.name", f"{name!r} is not an objective; known: {', '.join(OBJECTIVES)}")
    cls = OBJECTIVES[name]
    return cls, build_dataclass(cls.Config, settings, f"{key}.config")


def build_objective(
    name: str, settings: dict, special: SpecialTokens, model_config: EncoderConfig, languages: list[str] | None = None
) -> Objective:
    cls, config = objective_config(name, settings, f"objective {name}")
    objective = cls(config, special, model_config)
    objective.languages = list(languages or [])  # set here, so subclasses need not pass it through __init__
    return objective


def setup_objectives(objectives: dict[str, Objective], model) -> None:
    """Set every objective up on the built model (weights loaded), once: first the parts several of them train
    together are built and handed out (MRTD and TRTD's one generator and detection head, XLM-E §3.2), then each
    objective's own `setup`."""
    share_generator(objectives.values(), model)
    for objective in objectives.values():
        objective.setup(model)
