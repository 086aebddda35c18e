"""Side-by-side training studies (issue 28's quality study): arms trained for the same time
on the same data and tokenizer, each exported and evaluated as it is served, and one table per
comparison beside the paper's own figures.

    python -m lsmt_study run STUDY [--out runs/study] [--arms dense,lsl] [--minutes M]
        [--device auto] [--max-sentences N] [--set key=value ...]
    python -m lsmt_study report RESULTS_DIR [RESULTS_DIR ...] [--study STUDY] [--out DIR]

A study (``lsmt_study/studies/*.yaml``, :class:`Study`) names its data, the minutes every arm
trains, the recipe overrides every stage gets, the test sets, its arms and its comparisons.
An arm is one or more stages, each a recipe trained for its share of the arm's minutes; a
later stage starts from the one before it (``{previous}`` in its overrides is the previous
stage's run directory). The minutes are the trainer's own training time (``train_seconds``:
the loop with its dev evaluations, not the data loading), so arms are compared at equal
time whatever their speed. A stage cut short (a device call's limit, a signal) resumes with
``--resume`` for what is left of its share when ``run`` is called again; a trained stage is
not trained again (a larger ``--minutes`` later extends each stage where it stands: a later
stage keeps the start its earlier stage gave it). A bundle is exported again, and scored again,
only when its checkpoint changed.

Each arm ends in ``ARM/result.json``: its stages' summaries and dev curves, the directions it
trained, its int8 bundle's size, and every test set's scores per direction (chrF, BLEU, the
copy-the-source baseline, off-target rate, decoding time), from the bundle's CTranslate2
engines (``model_export.evaluate``). The results are small where checkpoints are not (a lent
GPU machine returns 64 MiB a call): ``report`` merges result directories from any number of
calls and writes ``report.md`` (one table per comparison, directions the arm never trained
reported apart as zero-shot), ``results.csv`` (every direction of every arm and test set) and
``curves.png`` (dev chrF against training time).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from lsmt_core.routes import parse_route
from lsmt_text.paths import resolve_path


class Stage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    recipe: str  # a path or a name in training/recipes/
    share: float = Field(1.0, gt=0, le=1)  # of the arm's minutes
    set: list[str] = []  # recipe overrides; "{previous}" is the previous stage's run directory


class Arm(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stages: list[Stage] = Field(min_length=1)
    export: list[str] = []  # more `python -m model_export` arguments, e.g. [--lms-path, shared]
    # export every direction between its languages, those it never trained too (zero-shot)
    all_directions: bool = False
    note: str = ""

    @model_validator(mode="after")
    def _shares_fill_the_time(self) -> Arm:
        total = sum(s.share for s in self.stages)
        if abs(total - 1) > 1e-6:
            raise ValueError(f"the stages' shares add up to {total}, not 1")
        return self


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str
    paper: str  # the paper's own figures, as it reports them
    arms: list[str] = Field(min_length=2)
    baseline: str
    speed: bool = False  # also the engines' decoding time (a speed claim)

    @model_validator(mode="after")
    def _baseline_is_an_arm(self) -> Comparison:
        if self.baseline not in self.arms:
            raise ValueError(f"{self.title}: baseline {self.baseline!r} is not one of its arms")
        return self


class Study(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    data: str  # corpus directory
    tokenizer: str
    minutes: float = Field(gt=0)  # each arm's training time
    set: list[str] = []  # overrides for every stage
    testsets: list[str] = Field(min_length=1)  # model_export.evaluate's --testset names
    max_sentences: int | None = 200  # per direction and test set
    beam: int = 4
    arms: dict[str, Arm]
    comparisons: list[Comparison] = []

    @model_validator(mode="after")
    def _comparisons_name_arms(self) -> Study:
        for c in self.comparisons:
            unknown = [a for a in c.arms if a not in self.arms]
            if unknown:
                raise ValueError(f"{c.title}: unknown arms {unknown}")
        return self


STUDIES_DIR = Path(__file__).resolve().parent / "studies"


def load_study(name_or_path: Path | str) -> Study:
    """A study file, or the name of one in ``lsmt_study/studies/``."""
    p = Path(name_or_path)
    if not p.is_file():
        p = STUDIES_DIR / (p.name if p.suffix == ".yaml" else f"{p.name}.yaml")
    if not p.is_file():
        known = ", ".join(sorted(q.stem for q in STUDIES_DIR.glob("*.yaml")))
        raise FileNotFoundError(f"study {name_or_path!s} not found (built-in studies: {known})")
    return Study.model_validate(yaml.safe_load(p.read_text(encoding="utf-8")))


# -- run -------------------------------------------------------------------------------------------


def _python(args: list[str], log_file: Path) -> None:
    """``python -m ...`` in a child (each arm's GPU memory is freed with it); its output goes
    to ``log_file``, whose tail is shown when it fails."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "a", encoding="utf-8") as f:
        f.write(f"$ python {' '.join(args)}\n")
        f.flush()
        rc = subprocess.call([sys.executable, *args], stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        tail = log_file.read_text(encoding="utf-8").splitlines()[-30:]
        raise RuntimeError(f"python {args[1]} failed ({rc}); {log_file}:\n" + "\n".join(tail))


def _summary(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "summary.json"
    return json.loads(path.read_text()) if path.exists() else None


def train_stage(
    study: Study,
    stage: Stage,
    run_dir: Path,
    seconds: float,
    previous: Path | None,
    device: str,
    extra_set: list[str],
) -> dict[str, Any]:
    """Train (or resume) ``stage`` until ``seconds`` of training time; its summary."""
    summary = _summary(run_dir)
    # --time-limit stops a run once its time is spent, so a stage cut short by anything else
    # (a signal, a device call's end) has less than its share; rounding aside
    done = summary is not None and (
        summary["train_seconds"] >= seconds - 0.01 or not summary["stopped_early"]
    )
    if not done:
        left = seconds - (summary["train_seconds"] if summary else 0.0)
        common = ["--out", str(run_dir), "--device", device, "--time-limit", f"{left / 60:.6f}"]
        if (run_dir / "last.pt").exists():
            args = ["-m", "training.train", "--resume", *common, "--no-progress"]
        else:
            overrides = [
                f"data.dir={resolve_path(study.data)}",
                f"data.tokenizer={resolve_path(study.tokenizer)}",
                *study.set,
                *(s.replace("{previous}", str(previous)) for s in stage.set),
                *extra_set,
            ]
            args = ["-m", "training.train", "--config", stage.recipe, *common, "--no-progress",
                    "--set", *overrides]  # fmt: skip
        _python(args, run_dir / "train.log")
        summary = _summary(run_dir)
        assert summary is not None
    return summary


def dev_curve(run_dir: Path, offset: float) -> list[list[float]]:
    """[training seconds from the arm's start, dev chrF] of each evaluation of a stage."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    points = []
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "eval" and "train_seconds" in rec:
            points.append([round(offset + rec["train_seconds"], 1), round(rec["dev_chrf"], 2)])
    return points


def trained_routes(run_dir: Path) -> list[str]:
    return sorted(json.loads((run_dir / "data_stats.json").read_text()))


def export_arm(name: str, arm: Arm, run_dir: Path, arm_dir: Path) -> int:
    """The arm's last checkpoint as an int8 bundle (as served) in ``arm_dir/bundle``; its
    bytes. A bundle (and its scores) made from another checkpoint, or left by an export that
    failed, is replaced."""
    summary = _summary(run_dir)
    assert summary is not None
    made_from = {"checkpoint": str(run_dir / "last.pt"), "step": summary["step"],
                 "train_seconds": summary["train_seconds"]}  # fmt: skip
    bundle, record = arm_dir / "bundle", arm_dir / "bundle.json"
    if not record.exists() or json.loads(record.read_text())["made_from"] != made_from:
        record.unlink(missing_ok=True)
        shutil.rmtree(bundle, ignore_errors=True)
        shutil.rmtree(arm_dir / "eval", ignore_errors=True)
        args = ["-m", "model_export", "--checkpoint", str(run_dir), "--which", "last",
                "--out", str(bundle), "--name", name, "--dtype", "int8", *arm.export]  # fmt: skip
        if arm.all_directions:
            langs = sorted({lang for r in trained_routes(run_dir) for lang in parse_route(r)})
            args += ["--routes", ",".join(f"{a}-{b}" for a in langs for b in langs if a != b)]
        _python(args, arm_dir / "export.log")
        size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
        record.write_text(json.dumps({"made_from": made_from, "bytes": size}) + "\n")
    return int(json.loads(record.read_text())["bytes"])


def evaluate_arm(study: Study, arm_dir: Path, device: str) -> dict[str, Any]:
    """Every test set's scores of the arm's bundle (``python -m model_export.evaluate``: the
    engines as served, on the GPU where CTranslate2 sees one); kept until the bundle is
    replaced (:func:`export_arm`)."""
    out = {}
    for name in study.testsets:
        path = arm_dir / "eval" / f"{name}.json"
        if not path.exists():
            threads = str(min(8, os.cpu_count() or 1))
            engines = "cpu" if device == "cpu" else "auto"
            args = ["-m", "model_export.evaluate", str(arm_dir / "bundle"),
                    "--data", str(resolve_path(study.data)), "--testset", name,
                    "--beam", str(study.beam), "--threads", threads,
                    "--device", engines, "--out", str(path)]  # fmt: skip
            if study.max_sentences:
                args += ["--max-sentences", str(study.max_sentences)]
            _python(args, arm_dir / "eval.log")
        out[name] = json.loads(path.read_text(encoding="utf-8"))
    return out


def run_arm(
    study: Study,
    name: str,
    out: Path,
    device: str,
    extra_set: list[str],
    study_path: str,
) -> dict[str, Any]:
    arm = study.arms[name]
    arm_dir = out / name
    t0 = time.perf_counter()
    stages, curve = [], []
    previous: Path | None = None
    offset = 0.0
    for i, stage in enumerate(arm.stages):
        run_dir = arm_dir / f"stage{i}"
        seconds = study.minutes * 60 * stage.share
        summary = train_stage(study, stage, run_dir, seconds, previous, device, extra_set)
        curve += dev_curve(run_dir, offset)
        offset += summary["train_seconds"]
        kept = ("step", "train_seconds", "parameters", "parameters_per_route", "device_name")
        stages.append(
            {"recipe": stage.recipe, "share": stage.share, "seconds_budget": seconds}
            | {k: summary.get(k) for k in kept}
        )
        previous = run_dir
    assert previous is not None
    bundle_bytes = export_arm(name, arm, previous, arm_dir)
    evaluations = evaluate_arm(study, arm_dir, device)
    result = {
        "arm": name,
        "study": study.name,
        "study_file": study_path,
        "minutes": study.minutes,
        "max_sentences": study.max_sentences,
        "beam": study.beam,
        "stages": stages,
        "trained_routes": trained_routes(previous),
        "bundle_bytes": bundle_bytes,
        "evaluations": evaluations,
        "dev_curve": curve,
        "wall_seconds": time.perf_counter() - t0,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (arm_dir / "result.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result
