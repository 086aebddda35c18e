"""Evaluation: scores match sacreBLEU, copy baseline, off-target rate, averages, the CLI."""

from __future__ import annotations

import json

import pytest
import sacrebleu
import torch

from lsmt_core.langid import LanguageIdentifier
from lsmt_core.scoring import averages, bleu_tokenize, category, score
from lsmt_text.data import load_split
from training.evaluate import main as evaluate_main
from training.model import Route

pytestmark = pytest.mark.slow

HYPS = ["The cat sat on the mat.", "There is a house in New Orleans.", "Hello world"]
REFS = ["The cat is sitting on the mat.", "There is a house in New Orleans!", "Hi, world"]


def test_scores_match_sacrebleu():
    s = score(HYPS, REFS, "en")
    assert s["chrf"] == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert s["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert 0 < s["chrf"] < 100 and 0 < s["bleu"] < 100
    assert score(REFS, REFS, "en") == {"chrf": pytest.approx(100), "bleu": pytest.approx(100)}
    zh_h, zh_r = ["我爱北京天安门。"], ["我爱北京的天安门。"]
    assert score(zh_h, zh_r, "zh")["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(zh_h, [zh_r], tokenize="zh").score
    )
    assert bleu_tokenize("ja") == "char" and bleu_tokenize("de") == "13a"
    with pytest.raises(ValueError):
        score(HYPS, REFS[:2], "en")


def test_off_target_rate():
    lid = LanguageIdentifier(["de", "en", "fr", "xx"])
    assert lid.unsupported == ["xx"] and lid.languages == ["de", "en", "fr"]
    hyps = [
        "Und Gott sprach: Es werde Licht! und es ward Licht.",
        "And God said, Let there be light: and there was light.",
        "",
    ]
    assert lid.off_target_rate(hyps, "de") == pytest.approx(2 / 3)
    assert lid.off_target_rate(hyps, "en") == pytest.approx(2 / 3)
    assert lid.off_target_rate(hyps[:1], "de") == 0.0
    assert lid.off_target_rate(hyps, "xx") is None


def test_averages_by_category():
    rows = {
        "de-en": {"chrf": 40.0, "bleu": 10.0, "off_target": 0.1},
        "fr-en": {"chrf": 50.0, "bleu": 20.0, "off_target": None},
        "en-de": {"chrf": 30.0, "bleu": 5.0, "off_target": 0.3},
        "de-fr": {"chrf": 20.0, "bleu": 2.0, "off_target": 0.5},
    }
    avg = averages(rows)
    assert avg["x->en"]["chrf"] == 45.0 and avg["x->en"]["directions"] == 2
    assert avg["x->en"]["off_target"] == pytest.approx(0.1)  # None is skipped
    assert avg["en->x"]["chrf"] == 30.0 and avg["non-en"]["chrf"] == 20.0
    assert avg["all"]["chrf"] == 35.0 and avg["all"]["copy_chrf"] is None
    assert category(Route("de", "fr")) == "non-en"


@pytest.mark.parametrize("beam", [1, 3])
def test_cli_on_trained_checkpoint(tiny_run, toy_data, tmp_path, capsys, beam):
    data, _ = toy_data
    out, hyps = tmp_path / "results.json", tmp_path / "hyps.jsonl"
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rc = evaluate_main(
            [
                "--checkpoint",
                str(tiny_run),
                "--testset",
                "test",
                "--beam",
                str(beam),
                "--max-sentences",
                "10",
                "--batch-size",
                "4",
                "--out",
                str(out),
                "--outputs",
                str(hyps),
                "--device",
                "cpu",
            ]
        )
    finally:
        torch.set_num_threads(n_threads)
    assert rc == 0
    printed = capsys.readouterr().out
    assert "avg x->en" in printed and "avg en->x" in printed and "de-en" in printed
    res = json.loads(out.read_text())
    assert set(res["directions"]) == {"de-en", "en-de", "en-fr", "fr-en"}
    assert set(res["averages"]) == {"x->en", "en->x", "all"}
    assert res["beam"] == beam and res["testset"] == "test"
    test = load_split(data, "test")
    rows = [json.loads(x) for x in hyps.read_text().splitlines()]
    for key, r in res["directions"].items():
        src, tgt = key.split("-")
        pairs = test[(src, tgt)][:10]
        assert r["sentences"] == 10
        # copy baseline == sacreBLEU of the source against the reference
        copy = sacrebleu.corpus_chrf([s for s, _ in pairs], [[t for _, t in pairs]]).score
        assert r["copy_chrf"] == pytest.approx(copy)
        # the reported chrF is sacreBLEU's on the written hypotheses
        mine = [x["hypothesis"] for x in rows if x["route"] == key]
        assert len(mine) == 10
        assert r["chrf"] == pytest.approx(
            sacrebleu.corpus_chrf(mine, [[t for _, t in pairs]]).score
        )
        assert 0.0 <= r["off_target"] <= 1.0
