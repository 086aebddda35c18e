"""Server settings: environment variables with the ``LSMT_`` prefix (pydantic-settings).

Every field can be set as ``LSMT_<FIELD>`` (e.g. ``LSMT_DEVICE=cuda``,
``LSMT_BUNDLES='["models/a","models/b"]'``, ``LSMT_API_KEYS='["k1"]'``). The defaults suit the
2-core CPU machines of this project; on one GPU the device-dependent defaults (compute type,
threads, budgets) switch automatically when ``device`` resolves to ``cuda``.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BUNDLE_DIR = REPO_ROOT / "models" / "default"

GiB = 1 << 30
MiB = 1 << 20


@functools.lru_cache(maxsize=1)
def cuda_device_count() -> int:
    """Number of CUDA devices CTranslate2 can use (0 when built without CUDA or none present)."""
    try:
        import ctranslate2

        return int(ctranslate2.get_cuda_device_count())
    except Exception:  # pragma: no cover - depends on the machine
        return 0


class Settings(BaseSettings):
    """All knobs of the translation server. See docs/server.md for the table."""

    model_config = SettingsConfigDict(env_prefix="LSMT_", extra="ignore")

    # What to serve.
    bundles: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description=(
            "Bundle directories, Argos packages (a folder of them, one, or an .argosmodel) and "
            "CTranslate2 model folders, in the order that picks a pair's model. Empty: the "
            "default model directory."
        ),
    )
    default_bundle_dir: Path = Field(
        DEFAULT_BUNDLE_DIR, description="Used when no bundle is named."
    )

    # Where and how to run engines.
    device: Literal["cpu", "cuda", "auto"] = "auto"
    device_index: int = Field(0, ge=0)
    compute_type: str | None = Field(
        None, description="CTranslate2 compute type; default int8 (CPU), int8_float16 (CUDA)."
    )
    inter_threads: int | None = Field(
        None, ge=1, description="Parallel batches per engine; default 2 on CPU, 1 on CUDA."
    )
    intra_threads: int | None = Field(
        None, ge=0, description="Threads per batch; default 1 on CPU (2 cores), 4 on CUDA."
    )
    device_budget_bytes: int | None = Field(
        None,
        ge=1,
        description="Bytes of loaded engines on the device; default 2 GiB CPU, 8 GiB GPU.",
    )
    host_budget_bytes: int = Field(
        4 * GiB, ge=0, description="CUDA only: bytes of engines parked in host memory."
    )
    engine_cache_dir: Path | None = Field(
        None,
        description="Directory of built engines kept across cold starts and processes "
        "(lsmt_bundle.engine_cache); unset: every cold start assembles.",
    )
    engine_cache_bytes: int = Field(4 * GiB, ge=0, description="Bound of the engine cache.")
    engine_cache_fill: bool = Field(
        True,
        description="With an engine cache: after start and after a reload, build every engine "
        "the cache lacks, one at a time at the lowest CPU priority (server.cache_fill), so "
        "that a route's first request loads instead of assembling.",
    )
    load_workers: int = Field(2, ge=1, description="Threads assembling/loading engines.")
    load_retry_initial_s: float = Field(
        5.0, ge=0, description="First retry delay after a failed engine load (doubles)."
    )
    load_retry_max_s: float = Field(300.0, ge=0)

    # Dynamic batching.
    max_batch_tokens: int = Field(
        4096, ge=1, description="Source tokens per translate_batch call (beam not counted)."
    )
    max_batch_size: int | None = Field(
        None,
        ge=1,
        description="Sentences per translate_batch call; None: 16 on CPU (measured: shorter "
        "waits beside heavy clients and more throughput than 64, docs/benchmarks.md), 64 on "
        "CUDA.",
    )
    batch_wait_ms: float = Field(
        5.0, ge=0, description="How long the first request waits for company."
    )
    batch_policy: Literal["fair", "fifo"] = Field(
        "fair",
        description="How a batch is filled: fair takes sentences round-robin across clients "
        "(API key, else address) and their requests; fifo takes them in arrival order.",
    )
    express_batch_size: int = Field(
        1,
        ge=0,
        description="Sentences per batch of the express lane: a batch slot (and CTranslate2 "
        "worker) beside the inter_threads ones, only for requests of at most this many "
        "sentences (the shortest first), so that a short request starts at once beside the "
        "running batches instead of waiting for one; 0: no express lane.",
    )
    bulk_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="CPU with the express lane: while a route has documents and short requests "
        "at once, its documents' batches run on a second translator (the bulk twin, "
        "server/bulk_twin.py) whose threads run this much nicer, so a short request's batch "
        "gets the cores first; 0: never a twin.",
    )
    bulk_twin_min_sentences: int = Field(
        8,
        ge=1,
        description="CPU with the express lane: the fewest sentences a request needs to count "
        "as a document, whose batches open the route's bulk twin beside short requests (and "
        "run on it); a request of fewer (a web page's few sentences) shares the engine, since "
        "a twin's load and memory cost that traffic more than the niced threads give it "
        "(docs/benchmarks.md).",
    )
    bulk_twin_grace_s: float = Field(
        5.0,
        ge=0,
        description="How long a route's bulk twin stays open after its last document batch "
        "ended (server/bulk_twin.py).",
    )
    memory_trim_idle_s: float = Field(
        2.0,
        ge=0,
        description="After the translations pause this long, the memory they freed is given "
        "back to the system once (glibc's malloc_trim, server/idle_trim.py); 0: never.",
    )
    queue_size: int = Field(
        256, ge=1, description="Requests waiting per engine; beyond it: 429 + Retry-After."
    )
    request_timeout_s: float = Field(30.0, gt=0, description="Per request; exceeded: 504.")
    retry_after_s: int = Field(1, ge=0, description="Retry-After sent with 429.")

    # Request limits.
    max_texts: int = Field(64, ge=1)
    max_chars_per_text: int = Field(5000, ge=1)
    max_request_bytes: int = Field(1 * MiB, ge=1024, description="Body size limit; beyond it: 413.")
    max_header_bytes: int = Field(
        16 * 1024,
        ge=1024,
        description="Request line and headers together; beyond it the connection gets a 400.",
    )
    body_read_timeout_s: float = Field(
        10.0, gt=0, description="Longest wait for the next part of a request body; then 408."
    )
    default_beam_size: int = Field(4, ge=1)
    max_beam_size: int = Field(8, ge=1)
    max_alternatives: int = Field(4, ge=0)
    default_max_length: int = Field(256, ge=1)
    max_length_limit: int = Field(512, ge=1, description="Upper bound of max_length.")

    # Output quality (docs/server.md: the measurements behind the defaults).
    # On NTREX the default model's chrF rises from 16.1 to 18.8 with both, on held-out Acts
    # from 39.8 to 40.2 (docs/server.md, Output checks).
    repetition_penalty: float = Field(
        1.1, ge=1.0, description="CTranslate2 repetition_penalty of every decoding; 1: off."
    )
    no_repeat_ngram_size: int = Field(
        4, ge=0, description="CTranslate2 no_repeat_ngram_size of every decoding; 0: off."
    )
    output_checks: bool = Field(
        True,
        description="Check every translated sentence (repetition, length ratio, off target), "
        "decode a flagged one once more, report what remains in warnings.",
    )
    pivot: bool = Field(
        True,
        description="Translate a pair no bundle serves directly through a pivot language "
        "(English first, then any served language with both routes): decoded twice, the "
        "response names the pivot.",
    )

    # Readiness.
    warmup_routes: Annotated[list[str] | None, NoDecode] = Field(
        None,
        description=(
            'Routes loaded and translated once at start ("en-de"), or "all". '
            "None: the first route of every LSMT bundle (of the first package when only "
            "packages are served). []: no warm-up."
        ),
    )

    # Security.
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Accepted API keys; empty: no authentication."
    )
    keys_db: str | None = Field(
        None,
        description="The database of the API keys with limits (python -m server keys ...) and "
        "of the usage counters: a SQLite file, or a postgresql:// URL (the postgres extra); "
        "unset: only api_keys (no limits).",
    )
    anonymous_access: bool | None = Field(
        None,
        description="Requests without a key; None: allowed when no key is configured "
        "(api_keys empty and no keys_db).",
    )
    anonymous_requests_per_minute: int | None = Field(None, ge=1)
    anonymous_chars_per_minute: int | None = Field(None, ge=1)
    anonymous_chars_per_day: int | None = Field(None, ge=1)
    anonymous_max_request_chars: int | None = Field(None, ge=1)
    admin_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Keys of the administration endpoints (bundle reload); empty: those "
        "endpoints are off.",
    )

    # Files (LibreTranslate's /translate_file).
    files_ttl_s: float = Field(
        1800.0, gt=0, description="How long a translated file stays for download."
    )

    # Web page.
    web_page: bool = Field(True, description="Serve the translation page at /.")

    # Process.
    graceful_timeout_s: float = Field(
        30.0, ge=0, description="How long shutdown waits for in-flight requests."
    )
    log_level: str = "info"

    @field_validator("keys_db", mode="before")
    @classmethod
    def _path_as_text(cls, v: object) -> object:
        return str(v) if isinstance(v, Path) else v

    @field_validator("api_keys", "admin_keys", "warmup_routes", "bundles", mode="before")
    @classmethod
    def _split_list(cls, v: object) -> object:
        """Environment values may be JSON lists or comma-separated."""
        if isinstance(v, str):
            text = v.strip()
            if text.startswith("["):
                return json.loads(text)
            return [x.strip() for x in text.split(",") if x.strip()]
        return v

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.default_beam_size > self.max_beam_size:
            raise ValueError("default_beam_size must not exceed max_beam_size")
        if self.default_max_length > self.max_length_limit:
            raise ValueError("default_max_length must not exceed max_length_limit")
        return self

    # Resolved values -------------------------------------------------------------------

    @property
    def resolved_device(self) -> str:
        if self.device == "auto":
            return "cuda" if cuda_device_count() > 0 else "cpu"
        return self.device

    @property
    def resolved_compute_type(self) -> str:
        if self.compute_type:
            return self.compute_type
        return "int8_float16" if self.resolved_device == "cuda" else "int8"

    @property
    def resolved_inter_threads(self) -> int:
        if self.inter_threads is not None:
            return self.inter_threads
        return 1 if self.resolved_device == "cuda" else 2

    @property
    def engine_workers(self) -> int:
        """CTranslate2 workers per engine: the batch slots, the express lane's included."""
        return self.resolved_inter_threads + (1 if self.express_batch_size else 0)

    @property
    def bulk_twins(self) -> bool:
        """Whether a route may open a niced bulk twin for its documents' batches
        (server/bulk_twin.py): on the CPU, where threads share the cores."""
        return self.resolved_device == "cpu" and self.express_batch_size > 0 and self.bulk_nice > 0

    @property
    def resolved_intra_threads(self) -> int:
        if self.intra_threads is not None:
            return self.intra_threads
        if self.resolved_device == "cuda":
            return 4
        # One thread per batch; inter_threads batches in parallel use the cores.
        return 1 if (os.cpu_count() or 1) <= 4 else 2

    @property
    def resolved_max_batch_size(self) -> int:
        if self.max_batch_size is not None:
            return self.max_batch_size
        return 64 if self.resolved_device == "cuda" else 16

    @property
    def resolved_device_budget(self) -> int:
        if self.device_budget_bytes is not None:
            return self.device_budget_bytes
        return 8 * GiB if self.resolved_device == "cuda" else 2 * GiB

    @property
    def bundle_dirs(self) -> list[Path]:
        return list(self.bundles) if self.bundles else [self.default_bundle_dir]
