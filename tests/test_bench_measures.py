"""Measures (bench/measures.py): a registry entry each, its commands, what it reads from an evaluation's JSON."""

import dataclasses
import json
from pathlib import Path

import pytest

from bench.measures import (
    MEASURES,
    METRICS,
    ONE_CLASS,
    Measure,
    Target,
    aer_metrics,
    current_key,
    protocol_version,
    retrieval_metrics,
    xnli_reader,
)
from bench.reporting import page_text, table_rows
from bench.sections import KEY, SectionRun, run_dir, run_key, run_section
from bench.studies import evidence as E
from bench.study import Section
from polyalign.align.aligner import PROTOCOL_VERSION
from tests.bench_sections import STUDY


def test_a_new_measure_is_one_registry_entry(tmp_path, monkeypatch, capsys):
    def read(t):
        return json.loads(path.read_text()) if (path := t.evals / "toy" / "toy.json").is_file() else {}

    toy = Measure(0.5, {"toy@x": "a toy"}, (("toy/toy.json", "evaluate toy --model {model} --out {out}"),), read)
    monkeypatch.setitem(MEASURES, "toy", toy)
    monkeypatch.setitem(METRICS, "toy@x", ("toy", "a toy"))
    c = dataclasses.replace(STUDY.comparison("ppa-vs-start"), metric="toy@x", id="toy")
    ctx = SectionRun(Section("toy", [c]), tmp_path, tmp_path / "runs", tmp_path, "py", dry_run=True)
    run_section(ctx, "toy")
    assert (
        f"-m polyalign.cli evaluate toy --model {E.SMALL_BASE} --out {tmp_path}/runs/start-" in capsys.readouterr().out
    )
    with pytest.raises(KeyError, match="unknown@x"):
        dataclasses.replace(c, metric="unknown@x")


def test_each_measure_s_wall_minutes_are_kept_with_its_run_and_listed_once_per_run(tmp_path, monkeypatch):
    from bench.page import minutes_table
    from bench.sections import run_seed

    def read(t):
        return json.loads(path.read_text()) if (path := t.evals / "toy" / "toy.json").is_file() else {}

    def fake_sh(ctx, command):  # the toy measure's job: write its JSON
        ran.append(command)
        out = Path(command[command.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        (out / "toy.json").write_text('{"toy@x": 1.0}')

    ran: list = []
    toy = Measure(0.5, {"toy@x": "a toy"}, (("toy/toy.json", "evaluate toy --model {model} --out {out}"),), read)
    monkeypatch.setitem(MEASURES, "toy", toy)
    monkeypatch.setitem(METRICS, "toy@x", ("toy", "a toy"))
    monkeypatch.setattr("bench.sections.sh", fake_sh)
    c = dataclasses.replace(STUDY.comparison("ppa-vs-start"), metric="toy@x", id="toy", measures=())
    ctx = SectionRun(Section("toy", [c]), tmp_path, tmp_path / "runs", tmp_path, "py", dry_run=False)
    first = run_seed(ctx, c.baseline, 0)
    again = run_seed(ctx, c.baseline, 0)  # cached: nothing runs, the minutes are read back
    assert len(ran) == 1 and first["toy@x"] == 1.0
    assert (run_dir(ctx, c.baseline, 0) / KEY).read_text() == run_key(ctx, c.baseline) + "\n"  # what it holds
    assert set(first["minutes"]) == {"toy"} and again["minutes"] == first["minutes"]
    shared = {"results": {"start": {"0": again}, "ppa": {"0": {"train": {"seconds": 600.0}}}}}
    table = page_text(minutes_table({"a": shared, "b": shared}))
    assert table.count("`start`") == 1 and table.count("`ppa`") == 1  # a run two sections share: one row
    assert ["a: `ppa`", "0", "10.0", "-", "10.0"] in table_rows(table)
    assert minutes_table({"a": {"results": {"start": {"0": {"toy@x": 1.0}}}}}) == []  # nothing timed: no table


def test_a_measure_repeats_its_command_for_every_gold_set_of_the_trained_languages(tmp_path):
    t = Target("a", "m", tmp_path, tmp_path, tmp_path / "eval", ("en", "de", "fr"), "py")
    jobs = MEASURES["aer-ot"].jobs(t)
    assert [done.parent.name for done, _ in jobs] == ["de-en", "en-fr"]
    assert (
        jobs[0][1][:4] == ["py", "-m", "polyalign.cli", "evaluate"]
        and f"{tmp_path}/eval/word_alignment/de-en" in jobs[0][1]
    )
    assert MEASURES["aer-ot"].minutes_for(("en", "de", "fr")) == pytest.approx(3.0 * 2 / 7)
    mt = MEASURES["mt-veco"].jobs(t)[0][1]
    assert mt[:5] == ["py", "-m", "bench.run", "veco-translation", "--"] and mt[-1] == f"{tmp_path}/eval/mt-veco.json"


def sweep(values):
    return [{"layer": i, "average": {"both": v}} for i, v in enumerate(values)]


def test_the_tatoeba_layer_is_chosen_on_the_dev_split_not_the_test_set():
    dev = {"sweep": sweep([10.0, 50.0, 30.0, 20.0])}  # dev's best: layer 1
    test = {"sweep": sweep([1.0, 2.0, 3.0, 9.0]), "reported": {"layer": 2}}  # test's best: layer 3
    m = retrieval_metrics(dev, test)
    assert (m["tatoeba14@dev"], m["layer@dev"], m["tatoeba14@last"], m["tatoeba14@default"], m["dev@best"]) == (
        2.0,
        1,
        9.0,
        3.0,
        50.0,
    )


def test_aer_means_over_gold_sets_and_the_self_labeling_layer():
    def gold(aers, reported, version=PROTOCOL_VERSION):
        return {"aer": reported, "sweep": [{"aer": a} for a in aers], "protocol_version": version}

    m = aer_metrics("ot", {"de-en": gold([80, 60, 70, 75, 90], 70), "en-fr": gold([60, 40, 50, 55, 70], 50)})
    assert (m["aer-ot@default"], m["aer-ot@best"], m["aer-ot@label"]) == (60, 50, 65)  # depth 4: layer round(10*4/12)=3
    assert m[current_key("aer-ot")] is True
    one_old = {"de-en": gold([1], 1), "en-fr": gold([1], 1, version=2)}  # before the one pair layout
    assert aer_metrics("ot", one_old)[current_key("aer-ot")] is True
    assert aer_metrics("ot", one_old, language_embeddings=True)[current_key("aer-ot")] is False


def target(tmp_path, embeddings=False) -> Target:
    return Target("a", "model", tmp_path, tmp_path, tmp_path, None, "py", embeddings)


def test_aer_of_an_older_protocol_is_measured_again(tmp_path):
    ot, argmax = MEASURES["aer-ot"].current, MEASURES["aer-argmax"].current
    t, with_embeddings = target(tmp_path), target(tmp_path, embeddings=True)
    version = lambda v: {"aer": 80.0, "protocol_version": v}  # noqa: E731
    assert ot(t, version(PROTOCOL_VERSION)) and argmax(with_embeddings, version(PROTOCOL_VERSION))
    assert not ot(t, version(1)) and argmax(t, version(1))  # 2: the released Itermax filtering
    assert ot(t, version(2)) and not argmax(with_embeddings, version(2))  # 3: one pair layout for every model


def test_results_written_before_the_protocol_version_read_as_the_version_their_tags_name(tmp_path):
    ot, t, with_embeddings = MEASURES["aer-ot"].current, target(tmp_path), target(tmp_path, embeddings=True)
    untagged, filtered = {"aer": 80.0}, {"ot_filtering": "itermax on A* (XLM-Align's released iter_max)"}
    laid_out = filtered | {"pair_layout": "<s> x </s> y </s>, positions running on, for every model"}
    assert [protocol_version(r) for r in (untagged, filtered, laid_out)] == [1, 2, 3]
    assert protocol_version(laid_out | {"bare_boundaries": "..."}) == 4
    assert not ot(t, untagged) and ot(t, filtered)
    assert not ot(with_embeddings, filtered) and ot(with_embeddings, laid_out)


def test_the_runner_flags_an_xnli_classifier_that_scores_the_same_in_every_language(tmp_path):
    t = target(tmp_path)
    (t.evals / "xnli").mkdir(parents=True)

    def write(per_language):
        result = {"average": {"mean": 40.0}, "per_language": {k: {"mean": v} for k, v in per_language.items()}}
        (t.evals / "xnli" / "finetune.json").write_text(json.dumps({"results": [result]}))
        return xnli_reader("xnli")(t)[ONE_CLASS]

    assert write({"en": 33.3, "de": 33.3}) and not write({"en": 40.0, "de": 35.0})


def test_a_run_s_summary_keeps_its_tokens_loss_quarters_and_head_warmup(tmp_path):
    from bench.sections import head_warmup_summary, log_summary

    lines = [{"step": s, "loss": 20.0 - s, "mlm/loss": 9.0, "tokens": 100 * s, "seconds": 2.0 * s} for s in range(1, 9)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    summary = log_summary(tmp_path / "metrics.jsonl")
    assert summary["tokens"] == 800 and summary["steps"] == 8 and summary["seconds"] == 16.0
    assert summary["loss_quarters"] == {"mlm": [9.0, 9.0, 9.0, 9.0]}  # per objective (the total mixes stages)
    warm = [{"step": s, "head_warmup/g/loss": 10.0 - s, "head_warmup/h/loss": 12.0 - s} for s in (1, 2)]
    (tmp_path / "head_warmup.jsonl").write_text("".join(json.dumps(r) + "\n" for r in warm))
    assert head_warmup_summary(tmp_path / "head_warmup.jsonl") == {"steps": 2, "loss": [9.5, 9.5]}  # older logs
    warm[-1] |= {"tokens": 512, "seconds": 3.0}
    (tmp_path / "head_warmup.jsonl").write_text("".join(json.dumps(r) + "\n" for r in warm))
    assert head_warmup_summary(tmp_path / "head_warmup.jsonl")["tokens"] == 512


def test_a_first_pass_with_one_seed_keeps_a_section_s_finished_second_seeds(tmp_path, monkeypatch):
    from bench.sections import run_dir

    c = STUDY.comparison("ppa-vs-start")
    ctx = SectionRun(Section("toy", [c]), tmp_path, tmp_path / "runs", tmp_path, "py", dry_run=False)
    monkeypatch.setattr("bench.sections.run_seed", lambda ctx, arm, seed: {"seed": seed})
    trained = [a for a in ctx.section.arms if a.trained]
    assert all("1" not in r for r in run_section(ctx, "toy", max_seeds=1)["results"].values())
    finished = run_dir(ctx, trained[0], 1)
    finished.mkdir(parents=True)
    (finished / "done").write_text("200\n")
    results = run_section(ctx, "toy", max_seeds=1)["results"]
    assert results[trained[0].name]["1"] == {"seed": 1}  # not dropped from the section by a one-seed pass


def record_commands(monkeypatch) -> list:
    """bench.run's commands, recorded instead of run; each writes the folder it names (`--run-dir` or `--out`), as
    the CLI's atomic writes do on success."""

    def fake_sh(ctx, command):
        ran.append(command)
        flag = "--run-dir" if "--run-dir" in command else "--out"
        Path(command[command.index(flag) + 1]).mkdir(parents=True, exist_ok=True)

    ran: list = []
    monkeypatch.setattr("bench.sections.sh", fake_sh)
    return ran


def test_a_run_cut_with_its_sitting_resumes_from_its_last_checkpoint_and_a_finished_one_is_not_retrained(
    tmp_path, monkeypatch
):
    from bench.sections import SITTING_STEPS, run_dir, train
    from bench.study import Budget

    ran = record_commands(monkeypatch)
    c = STUDY.comparison("ppa-vs-start")
    long = dataclasses.replace(c, setup=dataclasses.replace(c.setup, budget=Budget(steps=3 * SITTING_STEPS)))
    ctx = SectionRun(Section("toy", [long]), tmp_path, tmp_path / "runs", tmp_path, "py", dry_run=False)
    out = run_dir(ctx, long.method, 0)
    train(ctx, long.method, 0)
    assert "--resume" not in ran[-1] and f"trainer.save_every={SITTING_STEPS}" in ran[-1]
    (out / "done").unlink()  # as if the session had ended after the first sitting's checkpoint
    (out / "checkpoints" / f"step-{SITTING_STEPS}").mkdir(parents=True)
    (out / "metrics.jsonl").write_text("{}\n")
    train(ctx, long.method, 0)
    assert ran[-1][-1] == "--resume" and (out / "metrics.jsonl").is_file()  # continued, not cleared
    (out / "done").unlink()  # cut after its last checkpoint: nothing left to train
    (out / "checkpoints" / f"step-{3 * SITTING_STEPS}").mkdir()
    train(ctx, long.method, 0)
    assert len(ran) == 2 and (out / "done").read_text() == f"{3 * SITTING_STEPS}\n"


def test_a_resumed_veco_run_plugs_out_once_and_again_only_when_no_plugged_out_folder_was_written(tmp_path, monkeypatch):
    from bench.sections import run_dir, train
    from bench.study import Arm

    ran = record_commands(monkeypatch)
    veco = Arm("veco-toy", "veco", ("trainer.train_only_until=1",))
    c = dataclasses.replace(STUDY.comparison("ppa-vs-start"), method=veco)
    ctx = SectionRun(Section("toy", [c]), tmp_path, tmp_path / "runs", tmp_path, "py", dry_run=False)
    out = run_dir(ctx, veco, 0)
    train(ctx, veco, 0)
    assert [cmd[cmd.index("plug-out") + 2] for cmd in ran if "plug-out" in cmd] == [str(out)]
    (out / "done").unlink()  # cut after plug-out: the plugged-out encoder is kept, not rewritten over itself
    (out / "checkpoints" / f"step-{c.setup.budget.steps}").mkdir(parents=True)
    train(ctx, veco, 0)
    assert sum("plug-out" in cmd for cmd in ran) == 1
    (out / "done").unlink()  # cut during plug-out: its atomic write left no folder, so it runs again
    (out / "plugged-out").rmdir()
    train(ctx, veco, 0)
    assert sum("plug-out" in cmd for cmd in ran) == 2 and (out / "plugged-out").is_dir()
