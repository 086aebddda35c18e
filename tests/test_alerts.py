"""The Prometheus alert rules (deploy/prometheus/alerts.yml): valid for Prometheus' own checker,
every alert unit-tested by promtool (firing on its trouble, quiet on a healthy server), and
every series and label they name exported by the real server. promtool comes from Debian's
`prometheus` package (`make install-promtool`, part of `make test`)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from tests.prometheus import ROOT, check_names

pytestmark = pytest.mark.integration

PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "alerts.yml"
RULE_TESTS = PROMETHEUS_DIR / "alerts_test.yml"


def _rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool not installed (Debian's prometheus package: make install-promtool)")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120)


def test_promtool_accepts_the_config_and_its_rules():
    r = _promtool("check", "config", str(PROMETHEUS_DIR / "prometheus.yml"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{len(_rules())} rules found" in r.stdout + r.stderr


def test_promtool_unit_tests_pass():
    r = _promtool("test", "rules", str(RULE_TESTS))
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_unit_tests_can_fail(tmp_path):
    """A rule whose threshold is wrong fails its unit test (the tests look at thresholds)."""
    broken = RULES.read_text().replace("> 0.01\n", "> 0.5\n")
    assert broken != RULES.read_text()
    (tmp_path / "alerts.yml").write_text(broken)
    shutil.copy(RULE_TESTS, tmp_path / "alerts_test.yml")
    r = _promtool("test", "rules", str(tmp_path / "alerts_test.yml"))
    assert r.returncode != 0 and "LsmtHighErrorRate" in r.stdout + r.stderr


def test_every_alert_is_tested_firing_and_quiet():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    checks = [c for t in tests for c in t["alert_rule_test"]]
    fired = {c["alertname"] for c in checks if c["exp_alerts"]}
    quiet = {c["alertname"] for c in tests[0]["alert_rule_test"] if not c["exp_alerts"]}
    names = {r["alert"] for r in _rules()}
    assert names - fired == set(), f"alerts never tested firing: {names - fired}"
    assert names - quiet == set(), f"alerts not tested quiet on a healthy server: {names - quiet}"


def test_the_rules_cover_what_production_needs():
    """The issue's list: error rate, latency over a stated target, engine load failures,
    evictions thrashing, budget pressure, readiness lost, quota rejections surging."""
    exprs = " ".join(r["expr"] for r in _rules())
    for series in (
        "lsmt_http_requests_total",
        "lsmt_http_request_duration_seconds_bucket",
        "lsmt_engine_load_failures_total",
        "lsmt_engine_evictions_total",
        "lsmt_engine_budget_bytes",
        "lsmt_ready",
        "lsmt_limit_rejections_total",
        "up",
    ):
        assert series in exprs, f"no alert on {series}"
    for rule in _rules():
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_the_rules_name_series_the_server_exports(exported):
    for rule in _rules():
        check_names(rule["alert"], rule["expr"], exported)
