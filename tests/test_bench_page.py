"""The page (bench/page.py): data in, data out; verdicts.json, the figures it draws, the rows it writes."""

import json

import pytest

from bench import figures, page
from bench import verdict as V
from bench.measures import ONE_CLASS, current_key
from bench.reporting import table_rows
from tests.bench_sections import CURRENT_AER, STUDY, section_of


def test_the_page_shows_not_run_rows_then_verdicts_floors_and_figures(tmp_path):
    sections = tmp_path / "evidence" / "sections"
    sections.mkdir(parents=True)
    page.write(STUDY, tmp_path, "cmd", notes_dir=tmp_path, root=tmp_path)
    rows = json.loads((tmp_path / "evidence" / "verdicts.json").read_text())["rows"]
    assert len(rows) == len(STUDY.comparisons) and {r["verdict"] for r in rows} == {V.NOT_RUN}
    c, section = section_of(
        "veco-mt-vs-encoder",
        {
            "xlm": {
                "0": {
                    "mt-encoder-loss": 6.4,
                    "train": {"mlm/loss": [10.1, 7.8], "flops": 4e13},
                    "tatoeba14@dev": 0.4,
                    "sweep/tatoeba14": [0.4, 0.3],
                }
            },
            "veco": {
                "0": {
                    "mt-veco-loss": 6.6,
                    "tatoeba14@dev": 0.5,
                    "curve/mt-veco": [{"step": 20, "loss": 9.0}],
                    "train": {"ca_mlm/own_loss": [9.5, 7.3], "flops": 4e13},
                }
            },
        },
        {"unigram": 6.6, "unigram:en": 6.6},
    )
    (sections / "veco.json").write_text(json.dumps(section))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "evidence.json").write_text(json.dumps({c.id: {"commit": "abc1234", "note": "N"}}))
    text = page.write(STUDY, tmp_path, "cmd", notes_dir=tmp_path / "notes", root=tmp_path).read_text()
    rows = {r["claim"]: r for r in json.loads((tmp_path / "evidence" / "verdicts.json").read_text())["rows"]}
    assert rows[c.id]["difference"] == pytest.approx(0.2) and rows[c.id]["verdict"] == V.NOT_REPRODUCED
    assert ["translation loss, VECO init", "`veco`", "6.60", "unigram floor 6.60 nats", "-"] in table_rows(text)
    assert page.note({c.id: {"commit": "abc1234", "note": "N"}}, c.id)[0] in text.splitlines()  # the note, shown
    drawn = {p.name for p in (tmp_path / "evidence").glob("*.png")}
    assert drawn == {
        "veco-tatoeba14-layers.png",
        "veco-translation-loss.png",
        "veco-tatoeba14-dev-flops.png",
        "veco-mt-veco-loss-flops.png",
    }


def test_aer_sweeps_of_a_stale_protocol_are_not_drawn(tmp_path):
    section = {
        "results": {
            "xlm": {"0": {"sweep/aer-ot": [82.0, 81.0]}},
            "xlm-e": {"0": {**CURRENT_AER, "sweep/aer-ot": [80.5, 80.0], "sweep/tatoeba14": [1.0, 2.0]}},
        }
    }
    assert {p.name for p in figures.section_curves("s", section, tmp_path)} == {
        "s-aer-ot-layers.png",
        "s-tatoeba14-layers.png",
    }
    section["results"]["xlm-e"]["0"][current_key("aer-ot")] = False
    assert {p.name for p in figures.section_curves("t", section, tmp_path)} == {"t-tatoeba14-layers.png"}


def test_the_real_start_page_puts_each_claims_premise_beside_the_papers_and_flags_one_class_xnli(tmp_path):
    from bench.studies.real_start import STUDY as REAL

    sections = tmp_path / "real-start" / "sections"
    sections.mkdir(parents=True)
    start = {"aer-ot@label": 41.0, "aer-ot@default": 30.0, "aer-argmax@default": 28.0, "xnli-full": 60.1, **CURRENT_AER}
    seeds = {"start": {"0": start}, "mlm-tlm": {"0": {"aer-ot@default": 31.0, **CURRENT_AER}}}
    seeds["mlm-tlm-dwa"] = {"0": {"aer-ot@default": 33.5, **CURRENT_AER}}
    (sections / "xlm-align.json").write_text(json.dumps({"results": seeds, "code": "abc1234", "floors": {}}))
    text = page.write(REAL, tmp_path, "cmd", notes_dir=tmp_path, root=tmp_path).read_text()
    c = REAL.comparison("real-xlm-align-dwa")
    section = json.loads((sections / "xlm-align.json").read_text())
    held = [V.premise(ch, section, {}) for ch in c.why.checks if ch.premise_max is not None]
    assert held == [(41.0, "at most", 37.8, False)]  # the start's self-labeling AER, above the paper's premise
    row = next(r for r in table_rows(text) if f"`{c.id}`" in r[0])
    premises = row[-1].split("<br>")[0]  # the last column: each premise's value beside the papers' references
    assert "41.00" in premises and "37.8" in premises and "17.7 / 7.5 / 37.8 / 27.5" in premises
    assert row[3:6] == ["31.00", "33.50", "+2.50 (1 seed)"] and "models/multilingual-e5-small" in row[7]

    xnli = {
        "start": {"0": {"xnli-full": 33.3, ONE_CLASS: True}},
        "moco-tlm": {"0": {"xnli-full": 40.0, ONE_CLASS: False}},
    }
    (sections / "ppa.json").write_text(json.dumps({"results": xnli, "code": "abc1234", "floors": {}}))
    page.write(REAL, tmp_path, "cmd", notes_dir=tmp_path, root=tmp_path)
    rows = {r["claim"]: r for r in json.loads((tmp_path / "real-start" / "verdicts.json").read_text())["rows"]}
    assert rows["real-ppa-vs-start"]["verdict"] == V.ONE_CLASS_VERDICT


def test_every_reading_code_has_words_and_a_reading_says_what_it_rests_on_after_it():
    assert set(page.WORDS) == set(V.R)
    part, beside = V.Reading(V.R.GAP_IN, ("token embeddings",)), V.Reading(V.R.INDEPENDENT_ALIKE)
    said = page.words(V.Reading(V.R.PREMISE_NOT_MET, parts=(part, V.Reading(V.R.DIAGNOSTIC_TRAILS)), also=beside))
    assert f"{page.words(part)}; {page.CODE}; {page.words(beside)}" in said and "token embeddings" in said
    assert page.words(V.Reading(V.R.PREMISE_NOT_MET)).endswith(page.SCALE)  # no diagnostic read: scale
