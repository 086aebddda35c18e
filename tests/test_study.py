"""The study driver (lsmt_study) end to end on the toy corpus: arms trained for equal time
through the CLI (one of two chained stages, one leaving a direction out), exported, evaluated
through their engines, resumed where a call was cut short, and reported."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
import yaml
from pydantic import ValidationError

from lsmt_study.cli import main
from lsmt_study.study import Study, load_study

MINUTES = 0.08  # 4.8 s of training per arm


@pytest.fixture(scope="module")
def study_file(toy_data, tmp_path_factory):
    data, tok = toy_data
    study = {
        "name": "toy",
        "description": "the driver on the toy corpus",
        "data": str(data),
        "tokenizer": str(tok),
        "minutes": MINUTES,
        "set": ["training.max_steps=100000", "training.eval_every=10", "training.save_every=0"],
        "testsets": ["test"],
        "max_sentences": 6,
        "beam": 1,
        "arms": {
            # no dev evaluation: its first (language identifier loaded) would overrun the
            # short first call of the resume test
            "dense": {"stages": [{"recipe": "tiny", "set": ["training.eval_every=0"]}]},
            "two_stage": {
                "stages": [
                    {"recipe": "tiny", "share": 0.5},
                    {"recipe": "tiny", "share": 0.5, "set": ["init_from={previous}/last.pt"]},
                ]
            },
            "held_out": {  # fr-en left out of training: served zero-shot
                "stages": [{"recipe": "tiny", "set": ["data.routes=[de-en,en-de,en-fr]"]}],
                "all_directions": True,
            },
        },
        "comparisons": [
            {
                "title": "Two stages",
                "paper": "(none)",
                "arms": ["dense", "two_stage"],
                "baseline": "dense",
                "speed": True,
            },
            {
                "title": "Zero-shot",
                "paper": "(none)",
                "arms": ["dense", "held_out"],
                "baseline": "dense",
            },
        ],
    }
    path = tmp_path_factory.mktemp("study") / "toy.yaml"
    path.write_text(yaml.safe_dump(study))
    return path


def test_the_study_file_is_checked(study_file, capsys):
    raw = yaml.safe_load(study_file.read_text())
    assert load_study(study_file) == Study.model_validate(raw)
    bad = json.loads(json.dumps(raw))
    bad["comparisons"][1]["arms"].append("absent")
    with pytest.raises(ValidationError, match=r"unknown arms \['absent'\]"):
        Study.model_validate(bad)
    bad = json.loads(json.dumps(raw))
    bad["arms"]["two_stage"]["stages"][1]["share"] = 0.6
    with pytest.raises(ValidationError, match=r"add up to 1\.1"):
        Study.model_validate(bad)
    bad = json.loads(json.dumps(raw))
    bad["comparisons"][0]["baseline"] = "held_out"
    with pytest.raises(ValidationError, match="baseline 'held_out' is not one of its arms"):
        Study.model_validate(bad)
    assert main(["run", "no_such_study"]) == 2
    assert "built-in studies: quality" in capsys.readouterr().out
    # the shipped study parses, and every stage's recipe loads with its overrides
    from training.recipe import load_recipe, parse_overrides

    shipped = load_study("quality")
    for name, arm in shipped.arms.items():
        for stage in arm.stages:
            sets = [x.replace("{previous}", "runs/x") for x in [*shipped.set, *stage.set]]
            recipe = load_recipe(stage.recipe, parse_overrides(sets))
            assert recipe.training.eval_every == 250, name


@pytest.fixture(scope="module")
def ran(study_file, tmp_path_factory):
    """The study run twice: first with an eighth of the time (a call cut short), then whole."""
    out = tmp_path_factory.mktemp("study_runs")
    args = ["run", str(study_file), "--out", str(out), "--device", "cpu"]
    assert main([*args, "--arms", "dense", "--minutes", str(MINUTES / 8)]) == 0
    first = json.loads((out / "dense" / "result.json").read_text())
    assert main(args) == 0
    return out, first


def test_arms_train_for_equal_time_and_resume_where_cut_short(ran):
    out, first = ran
    budget = MINUTES * 60
    assert budget / 8 <= first["stages"][0]["train_seconds"] < budget
    for arm in ("dense", "two_stage", "held_out"):
        res = json.loads((out / arm / "result.json").read_text())
        total = sum(s["train_seconds"] for s in res["stages"])
        assert total >= budget - 0.02, (arm, res["stages"])
        for s in res["stages"]:
            assert s["train_seconds"] >= s["seconds_budget"] - 0.01 and s["step"] > 0
    dense = json.loads((out / "dense" / "result.json").read_text())
    assert dense["stages"][0]["step"] > first["stages"][0]["step"]  # resumed, not restarted
    log = (out / "dense" / "stage0" / "train.log").read_text()
    assert log.count("--resume") == 1 and "resumed at step" in log
    # the first call's bundle and scores were replaced by the resumed checkpoint's
    made_from = json.loads((out / "dense" / "bundle.json").read_text())["made_from"]
    assert made_from["step"] == dense["stages"][0]["step"]
    assert (out / "dense" / "export.log").read_text().count("$ python -m model_export") == 2
    assert (out / "dense" / "eval.log").read_text().count("$ python") == 2
    # the second stage started from the first, and its curve continues the first's in time
    two = json.loads((out / "two_stage" / "result.json").read_text())
    assert "init_from=" in (out / "two_stage" / "stage1" / "train.log").read_text()
    times = [t for t, _ in two["dev_curve"]]
    assert times == sorted(times) and times[-1] > two["stages"][0]["train_seconds"]


def test_a_finished_arm_is_not_trained_again(ran, study_file):
    out, _ = ran
    logs = {p: p.read_text() for p in out.rglob("*.log")}  # training, export, evaluation
    assert main(["run", str(study_file), "--out", str(out), "--device", "cpu",
                 "--arms", "dense,two_stage"]) == 0  # fmt: skip
    assert {p: p.read_text() for p in out.rglob("*.log")} == logs


def test_held_out_directions_are_served_and_scored_zero_shot(ran):
    out, _ = ran
    res = json.loads((out / "held_out" / "result.json").read_text())
    assert res["trained_routes"] == ["de-en", "en-de", "en-fr"]
    directions = res["evaluations"]["test"]["directions"]
    assert set(directions) == {"de-en", "en-de", "en-fr", "fr-en"}  # the toy test split's
    manifest = json.loads((out / "held_out" / "bundle" / "manifest.json").read_text())
    assert {"fr-en", "fr-de", "de-fr"} <= {f"{s}-{t}" for s, t in manifest["routes"]}
    for d in directions.values():
        assert d["sentences"] == 6 and 0 <= d["chrf"] <= 100 and d["copy_chrf"] is not None


def test_the_report(ran):
    out, _ = ran
    assert main(["report", str(out)]) == 0
    report = (out / "report.md").read_text()
    two, zero = report.split("### Two stages")[1].split("### Zero-shot")
    assert "| dense (baseline) |" in two and "| two_stage |" in two
    assert "decoding, sentences/s" in two and "zero-shot" not in two
    assert "copy the source" in two
    dense_row = next(line for line in two.splitlines() if line.startswith("| dense (baseline) |"))
    cells = [c.strip() for c in dense_row.split("|")[1:-1]]
    assert float(cells[3]) > 0 and float(cells[4]) > 0  # parameters trained, engine served
    assert "zero-shot chrF (test)" in zero and "| held_out |" in zero
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 * 3  # 4 test directions, 3 arms
    held = {r["direction"]: r["trained"] for r in rows if r["arm"] == "held_out"}
    assert held == {"de-en": "True", "en-de": "True", "en-fr": "True", "fr-en": "False"}
    assert (out / "curves.png").stat().st_size > 0


def test_python_m_lsmt_study_runs_the_command_line():
    r = subprocess.run(
        [sys.executable, "-m", "lsmt_study", "--help"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and "python -m lsmt_study" in r.stdout, r.stderr
