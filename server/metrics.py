"""Prometheus metrics, one CollectorRegistry per app (several apps in one process never clash).

Label cardinality is bounded: ``endpoint`` is the route template (or ``unmatched``),
``status`` the numeric HTTP status, ``engine`` an engine key (bounded by the bundles), ``tier``
one of device/host, ``stage`` one of four, ``reason`` one of a few fixed words, as are ``flag`` and
``outcome``.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from lsmt_bundle.engine_cache import CACHE_ERRORS

from .keys import LIMIT_NAMES
from .output_checks import FLAGS

LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TOKEN_BUCKETS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
STAGES = ("queue_wait", "tokenize", "translate", "check", "detokenize")
REJECT_REASONS = ("queue_full", "timeout", "engine_unavailable")
TIERS = ("device", "host")
BULK_TWIN_EVENTS = ("opened", "dropped", "skipped", "failed")
RETRY_OUTCOMES = ("improved", "kept", "not_run")
CALLER_KINDS = ("key", "anonymous")


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self._declare_http(r)
        self._declare_readiness(r)
        self._declare_batching(r)
        self._declare_output_checks(r)
        self._declare_engines(r)
        self._declare_engine_cache(r)
        self._declare_bulk_twins(r)
        self._declare_memory(r)
        self._create_known_series()

    def _declare_http(self, r: CollectorRegistry) -> None:
        """Requests as the middleware sees them."""
        self.requests = Counter(
            "lsmt_http_requests", "HTTP requests answered.", ["endpoint", "status"], registry=r
        )
        self.request_latency = Histogram(
            "lsmt_http_request_duration_seconds",
            "HTTP request latency.",
            ["endpoint", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "lsmt_http_requests_in_flight", "HTTP requests being handled.", registry=r
        )
        # Callers (server.auth): labels are bounded (never a key or an address).
        self.limit_rejections = Counter(
            "lsmt_limit_rejections", "Requests refused by a caller's limit.", ["limit"], registry=r
        )
        self.caller_requests = Counter(
            "lsmt_caller_requests", "Translation requests admitted, by caller kind.", ["kind"],
            registry=r,
        )  # fmt: skip
        self.caller_characters = Counter(
            "lsmt_caller_characters", "Characters of the requests admitted, by caller kind.",
            ["kind"], registry=r,
        )  # fmt: skip

    def _declare_readiness(self, r: CollectorRegistry) -> None:
        """Readiness as /readyz judges it, read at each collection (``watch_readiness``)."""
        self.ready = Gauge(
            "lsmt_ready",
            "1 while the server is ready (/readyz answers 200), 0 while it is not.",
            registry=r,
        )

    def watch_readiness(self, is_ready: Callable[[], bool]) -> None:
        """``lsmt_ready`` follows ``is_ready`` at every collection: a scrape, or the cluster's
        reports, never a stale value set at the last /readyz call."""
        self.ready.set_function(lambda: float(is_ready()))

    def _declare_batching(self, r: CollectorRegistry) -> None:
        """The translation pipeline: stages, batches, tokens, queues, refusals."""
        self.stage_latency = Histogram(
            "lsmt_stage_duration_seconds",
            "Time per stage: queue_wait, tokenize, check (output checks) and detokenize per "
            "request; translate per batch.",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "lsmt_batch_size",
            "Sentences per translate_batch call.",
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.batch_tokens = Histogram(
            "lsmt_batch_tokens",
            "Source tokens per translate_batch call.",
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.batch_requests = Histogram(
            "lsmt_batch_requests",
            "Requests sharing one translate_batch call.",
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "lsmt_tokens",
            "Tokens translated (input: source, output: best hypothesis).",
            ["direction"],
            registry=r,
        )
        self.pivoted_sentences = Counter(
            "lsmt_pivoted_sentences",
            "Sentences translated through a pivot language (no direct route), by pivot; each "
            "is decoded twice, and both legs count in the batch and token metrics.",
            ["pivot"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "lsmt_queue_depth",
            "Requests waiting for a batch, per engine.",
            ["engine"],
            registry=r,
        )
        self.rejected = Counter(
            "lsmt_rejected_requests",
            "Requests refused by the server: queue_full, timeout, engine_unavailable.",
            ["reason"],
            registry=r,
        )

    def _declare_output_checks(self, r: CollectorRegistry) -> None:
        """Flags on translated texts and the retries they cause."""
        self.output_flags = Counter(
            "lsmt_output_flags",
            "Translated texts' flags (server.output_checks): sentences flagged repetition, "
            "length_ratio or off_target before any retry; texts whose source language was "
            "uncertain_language.",
            ["flag"],
            registry=r,
        )
        self.output_retries = Counter(
            "lsmt_output_retries",
            "Flagged sentences decoded again: improved (fewer flags, the retry is kept), kept "
            "(the first output stays), not_run (no time or no queue room left).",
            ["outcome"],
            registry=r,
        )

    def _declare_engines(self, r: CollectorRegistry) -> None:
        """Engine loads, evictions and what each tier holds."""
        self.engine_loads = Counter(
            "lsmt_engine_loads",
            "Engine loads completed (assembled or restored).",
            ["engine"],
            registry=r,
        )
        self.engine_load_failures = Counter(
            "lsmt_engine_load_failures", "Engine loads that failed.", ["engine"], registry=r
        )
        self.engine_load_seconds = Histogram(
            "lsmt_engine_load_seconds",
            "Time to assemble and load an engine.",
            ["engine"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.engine_eviction_seconds = Histogram(
            "lsmt_engine_eviction_seconds",
            "Time to move an engine out of a tier (unload to host, or drop).",
            ["tier"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.engine_evictions = Counter(
            "lsmt_engine_evictions",
            "Engines moved out of a tier: device (to host or dropped) and host (dropped).",
            ["tier"],
            registry=r,
        )
        self.engine_evicted_busy = Counter(
            "lsmt_engine_evicted_busy",
            "Evictions that found the engine's runtime still running a batch after waiting for "
            "it (a cancelled request's batch): it cannot move to the host, and its memory is "
            "freed only when that batch ends.",
            registry=r,
        )
        self.engines_loaded = Gauge(
            "lsmt_engines_loaded", "Engines resident per tier.", ["tier"], registry=r
        )
        self.engine_bytes = Gauge(
            "lsmt_engine_bytes", "Bytes of resident engines per tier.", ["tier"], registry=r
        )
        self.engines_failed = Gauge(
            "lsmt_engines_failed",
            "Engines whose load failed, refused until their retry is due (/readyz lists them).",
            registry=r,
        )
        self.engine_budget_bytes = Gauge(
            "lsmt_engine_budget_bytes",
            "Byte budget of each tier (LSMT_DEVICE_BUDGET_BYTES, LSMT_HOST_BUDGET_BYTES).",
            ["tier"],
            registry=r,
        )
        self.engine_resident = Gauge(
            "lsmt_engine_resident",
            "1 while the engine is resident in the tier (which keys a process or cluster "
            "replica holds).",
            ["engine", "tier"],
            registry=r,
        )

    def _declare_bulk_twins(self, r: CollectorRegistry) -> None:
        """The CPU's bulk twins (server/bulk_twin.py)."""
        self.bulk_twin_events = Counter(
            "lsmt_bulk_twin_events",
            "Bulk twins (a route's niced second translator for its documents' batches while "
            "short requests share it): opened, dropped (documents stopped, the engine evicted, "
            "or a load needed the bytes), skipped (no room in the device budget) or failed.",
            ["event"],
            registry=r,
        )
        self.bulk_twins = Gauge("lsmt_bulk_twins", "Bulk twins open.", registry=r)
        self.bulk_twin_bytes = Gauge(
            "lsmt_bulk_twin_bytes",
            'Bytes of the open bulk twins (counted in lsmt_engine_bytes{tier="device"} too).',
            registry=r,
        )

    def _declare_memory(self, r: CollectorRegistry) -> None:
        """The process's memory (server/idle_trim.py)."""
        self.memory_trims = Counter(
            "lsmt_memory_trims",
            "Times freed memory was given back to the system after the translations paused "
            "(server/idle_trim.py).",
            registry=r,
        )

    def _declare_engine_cache(self, r: CollectorRegistry) -> None:
        """The engine cache on disk (lsmt_bundle.engine_cache)."""
        self.engine_cache_errors = Counter(
            "lsmt_engine_cache_errors",
            "Engines the engine cache could not store (full: no space left; unwritable: "
            "read-only, not a directory, no permission): built apart and served all the same.",
            ["reason"],
            registry=r,
        )
        self.engine_cache_fills = Counter(
            "lsmt_engine_cache_fills",
            "Engines the background fill of the engine cache visited (server.cache_fill): "
            "built (stored now), present (there already) or failed.",
            ["outcome"],
            registry=r,
        )

    def _create_known_series(self) -> None:
        """Every series with a known label set exists from the start (at zero), so a
        dashboard or an alert on rate() sees it before its first event."""
        for tier in TIERS:
            self.engines_loaded.labels(tier)
            self.engine_bytes.labels(tier)
            self.engine_evictions.labels(tier)
            self.engine_eviction_seconds.labels(tier)
        for reason in REJECT_REASONS:
            self.rejected.labels(reason)
        for stage in STAGES:
            self.stage_latency.labels(stage)
        for d in ("input", "output"):
            self.tokens.labels(d)
        for flag in FLAGS:
            self.output_flags.labels(flag)
        for outcome in RETRY_OUTCOMES:
            self.output_retries.labels(outcome)
        for limit in LIMIT_NAMES:
            self.limit_rejections.labels(limit)
        for kind in CALLER_KINDS:
            self.caller_requests.labels(kind)
            self.caller_characters.labels(kind)
        for reason in CACHE_ERRORS:
            self.engine_cache_errors.labels(reason)
        for outcome in ("built", "present", "failed"):
            self.engine_cache_fills.labels(outcome)
        for event in BULK_TWIN_EVENTS:
            self.bulk_twin_events.labels(event)

    def init_engine(self, key: str) -> None:
        """Create an engine's series at zero (engine keys are known once bundles are open)."""
        self.engine_loads.labels(key)
        self.engine_load_failures.labels(key)
        self.engine_load_seconds.labels(key)
        self.queue_depth.labels(key)
