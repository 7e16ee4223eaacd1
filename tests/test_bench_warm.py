"""The warm variant of a cold-head claim changes only how the MLM head starts."""

from __future__ import annotations

from bench.studies import real_start
from bench.studies.warm import warm_variant


def by_id(claim_id: str):
    return next(c for c in real_start.CLAIMS if c.id == claim_id)


def test_the_warm_variant_drops_only_the_cold_override_and_renames_its_arms():
    cold = by_id("real-ernie-m-camlm")
    warm = warm_variant(cold, real_start.COLD, "ernie-m-warm")
    for before, after in ((cold.baseline, warm.baseline), (cold.method, warm.method)):
        assert real_start.COLD in before.overrides and real_start.COLD not in after.overrides
        assert set(before.overrides) - set(after.overrides) == {real_start.COLD}
        assert after.name == before.name + "-warm" and after.recipe == before.recipe
    assert (warm.metric, warm.setup, warm.direction) == (cold.metric, cold.setup, 1)
    assert cold.measures and warm.measures == ()  # the claim's own metric only: no Tatoeba sweep, no AER
    assert not warm.statement.startswith("cold head") and warm.id == "real-ernie-m-camlm-warm"


def test_the_warm_variants_checks_read_the_warm_arms():
    warm = by_id("real-ernie-m-camlm-warm")
    arms = {warm.baseline.name, warm.method.name}
    assert {k.arm for k in warm.why.checks} <= arms
    assert all(k.label.endswith("-warm") for k in warm.why.checks)  # "MLM loss, exp2-mlm-tlm-warm"
    veco = by_id("real-veco-plug-in-warm")
    assert by_id("real-veco-plug-in").why.diagnostics == ("real-veco-ca-mlm-adds",)
    assert veco.why.diagnostics == () and veco.section == "veco-warm"  # that diagnostic has no warm rerun (below)


def test_every_cold_head_row_has_its_warm_rerun_declared():
    ids = {c.id for c in real_start.CLAIMS}
    cold = [c.id for c in real_start.CLAIMS if c.statement.startswith("cold head")]
    assert cold and [i for i in cold if f"{i}-warm" not in ids and i not in real_start.NO_WARM_RERUN] == []
    for i in real_start.NO_WARM_RERUN:  # an exemption names a cold row, and that row has no warm variant
        assert i in cold and f"{i}-warm" not in ids
