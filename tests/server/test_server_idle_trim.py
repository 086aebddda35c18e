"""Freed memory given back once the translations pause (server/idle_trim.py), on a real
server: the tiny bundle's CTranslate2 engines behind uvicorn on loopback."""

from __future__ import annotations

import time

import httpx
import pytest

from server.idle_trim import resident_bytes
from tests.server.conftest import scrape, wait_for

pytestmark = pytest.mark.integration

SHORT = {"text": "Where is the station?", "source": "en", "target": "de", "beam_size": 1}


def translate(url: str) -> None:
    r = httpx.post(f"{url}/v1/translate", json=SHORT, timeout=120)
    assert r.status_code == 200, r.text


def trims(url: str) -> float:
    return scrape(url)["lsmt_memory_trims_total"]


def test_freed_memory_is_returned_once_after_each_pause(make_server):
    srv = make_server(memory_trim_idle_s=0.3)
    time.sleep(1.0)  # nothing translated yet: nothing to give back
    assert trims(srv.url) == 0
    translate(srv.url)
    wait_for(lambda: trims(srv.url) == 1, "no trim after the translations paused")
    time.sleep(1.0)  # still quiet (scrapes are not translations): no second trim
    assert trims(srv.url) == 1
    translate(srv.url)
    translate(srv.url)
    wait_for(lambda: trims(srv.url) >= 2, "no trim after the second pause")


def test_no_trim_when_it_is_turned_off(make_server):
    srv = make_server(memory_trim_idle_s=0)
    translate(srv.url)
    time.sleep(1.0)
    assert trims(srv.url) == 0


def test_resident_memory_is_read_from_the_kernel():
    assert resident_bytes() > 10 * 2**20  # this Python process, torch and all
