"""The page (bench/page.py): data in, data out; verdicts.json, the figures it draws, the rows it writes."""

import json

import pytest

from bench import figures, page
from bench import verdict as V
from bench.measures import current_key
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


def test_every_reading_code_has_words_and_a_reading_says_what_it_rests_on_after_it():
    assert set(page.WORDS) == set(V.R)
    part, beside = V.Reading(V.R.GAP_IN, ("token embeddings",)), V.Reading(V.R.INDEPENDENT_ALIKE)
    said = page.words(V.Reading(V.R.PREMISE_NOT_MET, parts=(part, V.Reading(V.R.DIAGNOSTIC_TRAILS)), also=beside))
    assert f"{page.words(part)}; {page.CODE}; {page.words(beside)}" in said and "token embeddings" in said
    assert page.words(V.Reading(V.R.PREMISE_NOT_MET)).endswith(page.SCALE)  # no diagnostic read: scale
