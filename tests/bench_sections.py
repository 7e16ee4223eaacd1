"""What the bench tests share: the evidence study, saved sections of it built in memory, and their rows."""

from bench import verdict as V
from bench.measures import current_key
from bench.studies import STUDIES
from bench.studies import evidence as E
from bench.study import Comparison
from polyalign.align.extract import METHODS

STUDY = E.STUDY
ALL = [c for s in STUDIES.values() for c in s.comparisons]  # every comparison of every study
CURRENT_AER = {current_key(f"aer-{m}"): True for m in METHODS}  # every AER measured under a current protocol


def section_of(cid: str, results: dict, floors: dict | None = None, study=STUDY) -> tuple[Comparison, dict]:
    """Comparison `cid` and a saved section holding `results` (arm -> seed -> metrics), as the runner writes it."""
    c = study.comparison(cid)
    return c, {"section": c.section, "code": "abc", "results": results, "floors": floors or {}}


def rows_of(loaded: dict) -> dict:
    return {c.id: V.comparison_row(c, loaded.get(c.section)) for c in STUDY.comparisons}
