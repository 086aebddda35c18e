"""Locust load test for translation latency, with realistic traffic.

``python -m loadtests.run`` starts a server, writes a traffic file and runs this headless (see
docs/benchmarks.md). By hand, against a running server:

    locust -f loadtests/locustfile.py --headless -u 16 -r 8 -t 60s \\
        --host http://127.0.0.1:8000 --csv runs/locust/translate

Traffic: the routes are the server's own (``GET /v1/languages``) whose source language has
sentences, in a shuffled order with Zipf-like popularity (weight 1/rank^s), so a few routes are
hot and many are cold: lazy loading and eviction happen. A share of requests sends
``source: "auto"``. Tasks (weights): one sentence (6), a list of 2-4 texts (2), a paragraph of
three sentences with a blank line (1), the LibreTranslate endpoint (1). 429 answers count as
failures named "queue full", so overload is visible in the report.

Self-contained (the compose ``loadtest`` image holds only this file). Environment:

- ``LSMT_LOCUST_TRAFFIC``: a JSON file ``{"sentences": {"en": [...], ...}}`` (what
  ``loadtests.run`` writes from the corpus's held-out test split); without it the built-in
  English sentences below (so only routes from ``en``) or ``LSMT_LOCUST_SENTENCES`` (a file,
  one sentence per line, used for every source language);
- ``LSMT_LOCUST_ROUTES``: comma-separated routes instead of the server's, most popular first;
- ``LSMT_LOCUST_ZIPF`` (exponent s, default 1.0), ``LSMT_LOCUST_AUTO`` (share of requests
  with source ``auto``, default 0.1), ``LSMT_LOCUST_SEED`` (route order, default 0),
  ``LSMT_LOCUST_BEAM`` (default: the server's), ``LSMT_API_KEY``;
- ``LSMT_LOCUST_MODE=libretranslate``: only LibreTranslate's ``POST /translate`` (a sentence,
  weight 3; a short paragraph, 1), which LSMT and LibreTranslate both answer: the traffic of
  ``python -m loadtests.peer``; routes come from ``LSMT_LOCUST_ROUTES``;
- ``LSMT_LOCUST_MODE=page``: only ``POST /translate`` of one to three sentences (as many
  requests of each), the traffic of a busy web page: ``python -m loadtests.peer --stepped``;
- ``LSMT_LOCUST_THROUGHPUT``: requests per second per user (locust's
  ``constant_throughput``): users x this = a fixed offered rate;
- ``LSMT_LOCUST_STAGES``: a file to which each answer carrying a ``Server-Timing`` header
  (LSMT's stages) appends a JSON line: route, latency, the header as sent (where a slow
  request's time went: ``python -m loadtests.peer``).
"""

from __future__ import annotations

import json
import os
import random
import urllib.request
from typing import ClassVar

from locust import FastHttpUser, between, constant_throughput, events, task

# King James Version (public domain): the fallback when no traffic file is given.
SENTENCES_EN = [
    "And Jesus said unto them, Follow me.",
    "And they straightway left their nets, and followed him.",
    "Blessed are the meek: for they shall inherit the earth.",
    "Ye are the salt of the earth.",
    "Ye are the light of the world.",
    "A city that is set on an hill cannot be hid.",
    "Love your enemies, bless them that curse you.",
    "Man shall not live by bread alone.",
    "And his fame went throughout all Syria.",
    "Repent: for the kingdom of heaven is at hand.",
]


def _sentences() -> dict[str, list[str]]:
    if os.environ.get("LSMT_LOCUST_TRAFFIC"):
        with open(os.environ["LSMT_LOCUST_TRAFFIC"], encoding="utf-8") as f:
            return {k: v for k, v in json.load(f)["sentences"].items() if v}
    if os.environ.get("LSMT_LOCUST_SENTENCES"):
        with open(os.environ["LSMT_LOCUST_SENTENCES"], encoding="utf-8") as f:
            lines = [line.strip() for line in f if line.strip()]
        return {"*": lines}
    return {"en": SENTENCES_EN}


SENTENCES = _sentences()
ZIPF = float(os.environ.get("LSMT_LOCUST_ZIPF", "1.0"))
AUTO_SHARE = float(os.environ.get("LSMT_LOCUST_AUTO", "0.1"))
BEAM = os.environ.get("LSMT_LOCUST_BEAM")
LIBRETRANSLATE_ONLY = os.environ.get("LSMT_LOCUST_MODE") == "libretranslate"
PAGE_ONLY = os.environ.get("LSMT_LOCUST_MODE") == "page"
THROUGHPUT = os.environ.get("LSMT_LOCUST_THROUGHPUT")
HEADERS = {"X-API-Key": os.environ["LSMT_API_KEY"]} if os.environ.get("LSMT_API_KEY") else {}
STAGES_FILE = os.environ.get("LSMT_LOCUST_STAGES")


class Traffic:
    """Routes with their popularity, and the sources that may be sent as ``auto``."""

    routes: ClassVar[list[tuple[str, str]]] = []
    weights: ClassVar[list[float]] = []
    auto_sources: ClassVar[set[str]] = set()

    @classmethod
    def setup(cls, host: str) -> None:
        catalogue = {"routes": [], "auto_detect": []}
        try:
            req = urllib.request.Request(f"{host}/v1/languages", headers=HEADERS)
            with urllib.request.urlopen(req, timeout=30) as r:
                catalogue = json.load(r)
        except OSError as exc:
            if not os.environ.get("LSMT_LOCUST_ROUTES"):
                raise RuntimeError(f"cannot read {host}/v1/languages: {exc}") from exc
        if os.environ.get("LSMT_LOCUST_ROUTES"):
            names = os.environ["LSMT_LOCUST_ROUTES"].split(",")
        else:
            names = sorted(catalogue["routes"])
            random.Random(int(os.environ.get("LSMT_LOCUST_SEED", "0"))).shuffle(names)
        routes = [tuple(n.strip().split("-")) for n in names if n.strip()]
        cls.routes = [r for r in routes if r[0] in SENTENCES or "*" in SENTENCES]
        if not cls.routes:
            raise RuntimeError(f"no route has sentences for its source: {names}")
        cls.weights = [1.0 / (rank + 1) ** ZIPF for rank in range(len(cls.routes))]
        cls.auto_sources = set(catalogue.get("auto_detect", []))

    @classmethod
    def pick(cls) -> tuple[str, str, str]:
        """(source as sent, real source, target)."""
        src, tgt = random.choices(cls.routes, cls.weights)[0]
        sent = "auto" if src in cls.auto_sources and random.random() < AUTO_SHARE else src
        return sent, src, tgt


@events.test_start.add_listener
def _on_test_start(environment, **kwargs) -> None:
    Traffic.setup(environment.host.rstrip("/"))


def _texts(src: str, k: int) -> list[str]:
    pool = SENTENCES.get(src) or SENTENCES["*"]
    return random.sample(pool, min(k, len(pool)))


def _record_stages(body: dict, seconds: float, headers) -> None:
    line = {"route": f"{body['source']}-{body['target']}", "seconds": seconds,
            "server_timing": headers["server-timing"]}  # fmt: skip
    with open(STAGES_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


class Translator(FastHttpUser):
    wait_time = constant_throughput(float(THROUGHPUT)) if THROUGHPUT else between(0.0, 0.2)

    def _post(self, path: str, body: dict, name: str) -> None:
        with self.client.post(
            path, json=body, headers=HEADERS, name=name, catch_response=True
        ) as r:
            if r.status_code == 200:
                r.success()
                if STAGES_FILE and r.headers.get("server-timing"):
                    _record_stages(body, r.request_meta["response_time"] / 1000, r.headers)
            elif r.status_code == 429:
                r.failure("queue full")
            else:
                r.failure(f"{r.status_code}: {r.text[:200]}")

    def _translate(self, texts, name: str) -> None:
        sent, src, tgt = Traffic.pick()
        text = texts(src)
        body = {"text": text, "source": sent, "target": tgt}
        if BEAM:
            body["beam_size"] = int(BEAM)
        self._post("/v1/translate", body, name + (" auto" if sent == "auto" else ""))

    def on_start(self) -> None:
        if LIBRETRANSLATE_ONLY:  # the tasks both servers answer (LibreTranslateTraffic)
            self.tasks = [LibreTranslateTraffic.sentence] * 3 + [LibreTranslateTraffic.paragraph]
        elif PAGE_ONLY:
            self.tasks = [LibreTranslateTraffic.page]

    @task(6)
    def one_sentence(self) -> None:
        self._translate(lambda src: _texts(src, 1)[0], "v1 sentence")

    @task(2)
    def list_of_texts(self) -> None:
        self._translate(lambda src: _texts(src, random.randint(2, 4)), "v1 list")

    @task(1)
    def paragraph(self) -> None:
        def para(src: str) -> str:
            a, b, c = (_texts(src, 3) * 3)[:3]
            return f"{a} {b}\n\n{c}"

        self._translate(para, "v1 paragraph")

    @task(1)
    def libretranslate(self) -> None:
        _, src, tgt = Traffic.pick()
        body = {"q": _texts(src, 1)[0], "source": src, "target": tgt, "format": "text"}
        self._post("/translate", body, "libretranslate")


class LibreTranslateTraffic:
    """LibreTranslate's ``/translate`` only: a sentence or a short paragraph of two."""

    @staticmethod
    def sentence(user: Translator) -> None:
        _, src, tgt = Traffic.pick()
        body = {"q": _texts(src, 1)[0], "source": src, "target": tgt, "format": "text"}
        user._post("/translate", body, "translate sentence")

    @staticmethod
    def paragraph(user: Translator) -> None:
        _, src, tgt = Traffic.pick()
        a, b = (_texts(src, 2) * 2)[:2]
        body = {"q": f"{a} {b}", "source": src, "target": tgt, "format": "text"}
        user._post("/translate", body, "translate paragraph")

    @staticmethod
    def page(user: Translator) -> None:
        """One to three short sentences in one request: a busy web page's traffic."""
        _, src, tgt = Traffic.pick()
        body = {"q": " ".join(_texts(src, random.randint(1, 3))), "source": src, "target": tgt,
                "format": "text"}  # fmt: skip
        user._post("/translate", body, "translate page")
