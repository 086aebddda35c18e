"""Settings from the environment and their device-dependent defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from server.settings import Settings


def test_env_lists_json_or_comma_separated(monkeypatch):
    monkeypatch.setenv("LSMT_API_KEYS", "k1, k2")
    monkeypatch.setenv("LSMT_WARMUP_ROUTES", '["en-de"]')
    monkeypatch.setenv("LSMT_BUNDLES", "/a,/b")
    monkeypatch.setenv("LSMT_MAX_TEXTS", "7")
    s = Settings()
    assert s.api_keys == ["k1", "k2"] and s.warmup_routes == ["en-de"]
    assert s.bundles == [Path("/a"), Path("/b")] and s.max_texts == 7


def test_cpu_defaults_suit_two_cores():
    s = Settings(device="cpu")
    assert s.resolved_compute_type == "int8"
    assert (s.resolved_inter_threads, s.resolved_intra_threads) in {(2, 1), (2, 2)}
    assert s.api_keys == [] and s.warmup_routes is None
    assert s.bundle_dirs == [s.default_bundle_dir]
    assert s.default_bundle_dir.parts[-2:] == ("models", "default")


def test_cuda_defaults():
    s = Settings(device="cuda")
    assert s.resolved_compute_type == "int8_float16" and s.resolved_inter_threads == 1
    assert s.resolved_device_budget > Settings(device="cpu").resolved_device_budget


def test_the_express_lane_is_one_engine_worker_more():
    assert Settings(device="cpu").engine_workers == 3  # the lane is on by default
    assert Settings(device="cpu", express_batch_size=0).engine_workers == 2
    assert Settings(device="cuda", inter_threads=1, express_batch_size=2).engine_workers == 2


def test_inconsistent_limits_are_rejected():
    with pytest.raises(ValidationError):
        Settings(default_beam_size=9, max_beam_size=8)
    with pytest.raises(ValidationError):
        Settings(queue_size=0)
