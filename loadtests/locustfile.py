"""Locust load test for translation latency.

Start a server (``python -m server BUNDLE_DIR``), then for example:

    locust -f loadtests/locustfile.py --headless -u 16 -r 8 -t 60s \\
        --host http://127.0.0.1:8000 --csv runs/locust/translate

Environment: ``LSMT_LOCUST_ROUTES`` (comma-separated routes, default ``en-de,en-fr``; the
built-in sentences are English, set ``LSMT_LOCUST_SENTENCES`` to a file with one sentence per
line for other sources), ``LSMT_LOCUST_BEAM`` (default: server default), ``LSMT_API_KEY``.

Tasks (weights): one sentence (6), a paragraph of three sentences with a blank line (2), a
list of four texts (1), the LibreTranslate endpoint (1). 429 answers are counted as failures
named "queue full" so overload is visible in the report.
"""

from __future__ import annotations

import os
import random

from locust import FastHttpUser, between, task

SENTENCES = [
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
if os.environ.get("LSMT_LOCUST_SENTENCES"):
    with open(os.environ["LSMT_LOCUST_SENTENCES"]) as f:
        SENTENCES = [line.strip() for line in f if line.strip()]
ROUTES = [r.split("-") for r in os.environ.get("LSMT_LOCUST_ROUTES", "en-de,en-fr").split(",")]
BEAM = os.environ.get("LSMT_LOCUST_BEAM")
HEADERS = {"X-API-Key": os.environ["LSMT_API_KEY"]} if os.environ.get("LSMT_API_KEY") else {}


class Translator(FastHttpUser):
    wait_time = between(0.0, 0.2)

    def _post(self, path: str, body: dict, name: str) -> None:
        with self.client.post(
            path, json=body, headers=HEADERS, name=name, catch_response=True
        ) as r:
            if r.status_code == 200:
                r.success()
            elif r.status_code == 429:
                r.failure("queue full")
            else:
                r.failure(f"{r.status_code}: {r.text[:200]}")

    def _body(self, text) -> dict:
        src, tgt = random.choice(ROUTES)
        body = {"text": text, "source": src, "target": tgt}
        if BEAM:
            body["beam_size"] = int(BEAM)
        return body

    @task(6)
    def one_sentence(self) -> None:
        self._post("/v1/translate", self._body(random.choice(SENTENCES)), "v1 sentence")

    @task(2)
    def paragraph(self) -> None:
        a, b, c = random.sample(SENTENCES, 3)
        self._post("/v1/translate", self._body(f"{a} {b}\n\n{c}"), "v1 paragraph")

    @task(1)
    def batch_of_texts(self) -> None:
        self._post("/v1/translate", self._body(random.sample(SENTENCES, 4)), "v1 list of 4")

    @task(1)
    def libretranslate(self) -> None:
        src, tgt = random.choice(ROUTES)
        self._post(
            "/translate",
            {"q": random.choice(SENTENCES), "source": src, "target": tgt, "format": "text"},
            "libretranslate",
        )
