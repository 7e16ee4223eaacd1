"""What the bench tests share: the evidence study, saved sections of it built in memory, and their rows."""

from bench import verdict as V
from bench.measures import ONE_PAIR_LAYOUT, RELEASED_FILTERING
from bench.studies import STUDIES
from bench.studies import evidence as E
from bench.study import Comparison

STUDY = E.STUDY
ALL = [c for s in STUDIES.values() for c in s.comparisons]  # every comparison of every study
CURRENT_AER = {RELEASED_FILTERING: True, ONE_PAIR_LAYOUT: True}  # an AER measured the way the code measures now


def section_of(cid: str, results: dict, floors: dict | None = None, study=STUDY) -> tuple[Comparison, dict]:
    """Comparison `cid` and a saved section holding `results` (arm -> seed -> metrics), as the runner writes it."""
    c = study.comparison(cid)
    return c, {"section": c.section, "code": "abc", "results": results, "floors": floors or {}}


def rows_of(loaded: dict) -> dict:
    return {c.id: V.comparison_row(c, loaded.get(c.section)) for c in STUDY.comparisons}
