"""The warm rows of a cold-head claim: the same claim, its arms without the cold override, on its own metric only."""

from __future__ import annotations

import pytest

from bench.studies import real_start, warm
from bench.studies.real_start_common import COLD, COLD_HEAD


def by_id(claim_id: str):
    return next(c for c in real_start.CLAIMS if c.id == claim_id)


@pytest.mark.parametrize("make", [warm.ernie_m_arms, lambda cold: (warm.veco_arm(cold),)])
def test_a_warm_arm_is_its_cold_arm_without_the_cold_override(make):
    for cold, hot in zip(make(True), make(False), strict=True):
        assert COLD in cold.overrides and COLD not in hot.overrides
        assert tuple(o for o in cold.overrides if o != COLD) == hot.overrides  # nothing else moves, order kept
        assert hot.name == cold.name + "-warm" and (hot.recipe, hot.init_from) == (cold.recipe, cold.init_from)


def test_the_warm_row_is_the_cold_claim_on_its_own_metric_with_its_checks_on_the_warm_arms():
    cold, hot = by_id("real-ernie-m-camlm"), by_id("real-ernie-m-camlm-warm")
    assert (hot.metric, hot.setup, hot.direction, hot.paper_number) == (cold.metric, cold.setup, 1, cold.paper_number)
    assert cold.measures and hot.measures == ()  # the claim's own metric only: no Tatoeba sweep, no AER
    assert cold.statement.startswith(COLD_HEAD) and hot.statement.startswith(cold.statement.removeprefix(COLD_HEAD))
    assert {k.arm for k in hot.why.checks} == {hot.baseline.name, hot.method.name}
    assert all(k.label.endswith("-warm") for k in hot.why.checks)  # "MLM loss, exp2-mlm-tlm-warm"
    veco = by_id("real-veco-plug-in-warm")
    assert by_id("real-veco-plug-in").why.diagnostics == ("real-veco-ca-mlm-adds",)
    assert veco.why.diagnostics == () and veco.section == "veco-warm"  # that diagnostic has no warm rerun
    longer = by_id("real-ernie-m-btmlm-warm-600")
    assert longer.setup.budget.steps == 600 and longer.method == by_id("real-ernie-m-btmlm-warm").method


def test_every_cold_head_row_has_its_warm_rerun_declared():
    ids = {c.id for c in real_start.CLAIMS}
    cold = [c.id for c in real_start.CLAIMS if c.statement.startswith(COLD_HEAD)]
    assert cold and [i for i in cold if f"{i}-warm" not in ids and i not in warm.NO_WARM_RERUN] == []
    for i in warm.NO_WARM_RERUN:  # an exemption names a cold row, and that row has no warm variant
        assert i in cold and f"{i}-warm" not in ids
