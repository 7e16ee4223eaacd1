"""PPA §2.3 code-switching for translate-train fine-tuning (finetune/code_switch.py)."""

import numpy as np
import pytest

from polyalign.finetune.code_switch import batches_keeping_groups, code_switch, code_switched_groups
from polyalign.io import DataError

NLI_ES = {"premise": "p_es", "hypothesis": "h_es", "label": 2}
NLI_EN = {"premise": "p_en", "hypothesis": "h_en", "label": 2}


def test_code_switching_produces_exactly_the_two_mixed_pairs():
    mixed = code_switch(NLI_ES, NLI_EN, first=["premise"], second=["hypothesis"])
    assert mixed == (
        {"premise": "p_es", "hypothesis": "h_en", "label": 2},  # (a_xx, b_en)
        {"premise": "p_en", "hypothesis": "h_es", "label": 2},  # (a_en, b_xx)
    )
    assert NLI_ES not in mixed and NLI_EN not in mixed  # neither original is used
    assert NLI_ES == {"premise": "p_es", "hypothesis": "h_es", "label": 2}  # inputs untouched


def test_a_sides_annotations_move_with_it():
    qa_de = {"question": "q_de", "context": "c_de", "answer_start": 7, "answer": "a_de", "id": "x1"}
    qa_en = {"question": "q_en", "context": "c_en", "answer_start": 3, "answer": "a_en", "id": "x1-en"}
    q_de_c_en, q_en_c_de = code_switch(qa_de, qa_en, ["question"], ["context", "answer_start", "answer"])
    assert q_de_c_en == {"question": "q_de", "context": "c_en", "answer_start": 3, "answer": "a_en", "id": "x1"}
    assert q_en_c_de == {"question": "q_en", "context": "c_de", "answer_start": 7, "answer": "a_de", "id": "x1"}


def test_both_code_switched_versions_land_in_the_same_batch():
    translated = [{"a": f"a{i}_xx", "b": f"b{i}_xx"} for i in range(25)]
    english = [{"a": f"a{i}_en", "b": f"b{i}_en"} for i in range(25)]
    groups = code_switched_groups(translated, english, ["a"], ["b"]) + [({"a": "en", "b": "en"},)]  # a lone one
    batches = batches_keeping_groups(groups, batch_size=8, rng=np.random.default_rng(0))
    assert sorted(len(b) for b in batches)[-1] <= 8
    assert sum(len(b) for b in batches) == 2 * 25 + 1
    for i in range(25):
        homes = [k for k, batch in enumerate(batches) for ex in batch if ex["a"].startswith(f"a{i}_")]
        assert len(homes) == 2 and homes[0] == homes[1]


def test_misaligned_translations_are_refused():
    with pytest.raises(DataError, match="2 translated and 1 English"):
        code_switched_groups([NLI_ES, NLI_ES], [NLI_EN], ["premise"], ["hypothesis"])
