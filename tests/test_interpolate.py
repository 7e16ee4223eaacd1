"""WiSE-FT interpolation: the ends are the two models, the middle is the parameter-wise mean, bad input is one
line with nothing written."""

from __future__ import annotations

import pytest
import torch

from polyalign.checkpoint import load_model, save_model_folder
from polyalign.data.prepared import PreparedData
from polyalign.io import DataError
from polyalign.model import MaskedLanguageModel
from polyalign.model.interpolate import interpolate_weights
from tests.conftest import tiny_config


def _pair(vocab_size: int = 2000) -> tuple[MaskedLanguageModel, MaskedLanguageModel]:
    torch.manual_seed(0)
    start = MaskedLanguageModel(tiny_config(vocab_size=vocab_size))
    tuned = MaskedLanguageModel(tiny_config(vocab_size=vocab_size))
    return start, tuned


def test_interpolation_is_linear_in_the_weight():
    start, tuned = _pair()
    a, b = start.state_dict(), tuned.state_dict()
    assert all(torch.equal(v, a[k]) for k, v in interpolate_weights(a, b, 0.0).items())
    assert all(torch.equal(v, b[k]) for k, v in interpolate_weights(a, b, 1.0).items())
    middle = interpolate_weights(a, b, 0.25)
    name = next(k for k in a if "layers.0" in k and a[k].is_floating_point())
    torch.testing.assert_close(middle[name], 0.75 * a[name] + 0.25 * b[name])
    assert not torch.equal(middle[name], a[name]) and not torch.equal(middle[name], b[name])


def test_mismatched_models_and_weights_are_refused():
    start, tuned = _pair()
    with pytest.raises(DataError, match="--weight 1.5"):
        interpolate_weights(start.state_dict(), tuned.state_dict(), 1.5)
    other = MaskedLanguageModel(tiny_config(vocab_size=2000, num_layers=3)).state_dict()
    with pytest.raises(DataError, match="different parameters"):
        interpolate_weights(start.state_dict(), other, 0.5)


def test_cli_writes_the_interpolated_folder_and_never_overwrites(tmp_path, sample_prepared, capsys):
    from polyalign.cli import main

    tokenizer = PreparedData(sample_prepared).tokenizer()
    start, tuned = _pair()
    save_model_folder(tmp_path / "start", start, tokenizer, ["de", "en"])
    save_model_folder(tmp_path / "tuned", tuned, tokenizer, ["de", "en"])
    args = ["interpolate", "--start", str(tmp_path / "start"), "--tuned", str(tmp_path / "tuned")]
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--weight", "0.5", "--out", str(tmp_path / "half")])
    assert exit_info.value.code == 0
    half = load_model(tmp_path / "half")
    for name, value in half.model.state_dict().items():
        torch.testing.assert_close(value, (start.state_dict()[name] + tuned.state_dict()[name]) / 2)
    assert half.languages == ["de", "en"]

    before = sorted(p.name for p in tmp_path.iterdir())
    for weight, out, message in (("2", "new", "--weight 2.0"), ("0.5", "half", "already exists")):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            main([*args, "--weight", weight, "--out", str(tmp_path / out)])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
