"""One view over the cluster's replicas (``server.cluster``): their metrics and their engines.

Each replica, ingress or translator, keeps its own Prometheus registry (``server.metrics``) and
reports it to the ``MetricsHub`` deployment every ``REPORT_INTERVAL_S``, a translator with the
engines it holds. Any ingress answers ``/metrics`` with every replica's series merged into one
exposition, each labelled with its ``replica`` (one scrape of the Serve proxy sees the whole
application, and the dashboard's ``sum by (...)`` queries read the same in both modes), and
``/v1/models`` with every translator's engines.

A replica silent for ``STALE_AFTER_S`` (replaced or gone) leaves the live view, but its
counters and histograms stay in ``/metrics`` at their last values (its gauges go): a sum over
replicas of a counter never goes down when a replica dies. The hub keeps the last
``MAX_DEPARTED`` departed replicas; an application replaced by a new deployment starts afresh,
as a restarted single server does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from ray import serve
from ray.serve.handle import DeploymentHandle

from lsmt_core.routes import route_key

from .bundles import ServedBundle
from .schemas import EngineInfo
from .state import EnginesView

log = logging.getLogger("server.cluster")

REPORT_INTERVAL_S = 5.0
STALE_AFTER_S = 30.0
MAX_DEPARTED = 64
# What a departed replica leaves in /metrics: the families that only grow.
CUMULATIVE_TYPES = ("counter", "histogram", "summary")


@dataclass(frozen=True)
class ReplicaReport:
    """What a replica sends the hub: its exposition and, from a translator, its engines (those
    loaded, on the host tier or failed) and the bytes they hold."""

    exposition: str
    engines: list[EngineInfo] = field(default_factory=list)
    device_bytes: int = 0
    host_bytes: int = 0
    translator: bool = False


def cumulative_only(exposition: str) -> str:
    """``exposition`` without its gauges: what stays of a departed replica."""
    families = [f for f in text_string_to_metric_families(exposition) if f.type in CUMULATIVE_TYPES]
    return generate_latest(_Merged(families)).decode()


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0})
class MetricsHub:
    """The latest report of every replica that reported recently, and what the departed ones
    left behind (their counters and histograms)."""

    def __init__(self) -> None:
        self.reports: dict[str, tuple[float, ReplicaReport]] = {}
        self.departed: dict[str, str] = {}  # replica -> its last cumulative series, oldest first

    def report(self, replica: str, report: ReplicaReport) -> None:
        self.departed.pop(replica, None)  # silent for a while, but alive: live again
        self.reports[replica] = (time.monotonic(), report)

    def collect(self) -> dict[str, ReplicaReport]:
        """The live replicas' reports, and each departed replica's as a report of its
        cumulative series alone (no engines)."""
        self._retire_silent()
        live = {replica: report for replica, (_, report) in self.reports.items()}
        return {**{r: ReplicaReport(text) for r, text in self.departed.items()}, **live}

    def engine_reports(self) -> dict[str, ReplicaReport]:
        """The live translators' engines and bytes, without their expositions: what
        ``/v1/models`` needs, a fraction of ``collect``'s answer."""
        self._retire_silent()
        return {
            replica: replace(report, exposition="")
            for replica, (_, report) in self.reports.items()
            if report.translator
        }

    def _retire_silent(self) -> None:
        """Move the replicas silent for ``STALE_AFTER_S`` to the departed, keeping only their
        cumulative series."""
        now = time.monotonic()
        for replica, (heard, report) in list(self.reports.items()):
            if now - heard > STALE_AFTER_S:
                del self.reports[replica]
                self.departed[replica] = cumulative_only(report.exposition)
                log.warning("replica %s stopped reporting: its counters stay", replica)
        while len(self.departed) > MAX_DEPARTED:
            del self.departed[next(iter(self.departed))]

    def translators(self) -> set[str]:
        """The translator replicas heard within two report intervals: alive now (a dead one
        must not read as an idle one to ``server.cluster_balance``)."""
        now = time.monotonic()
        return {
            replica
            for replica, (heard, report) in self.reports.items()
            if report.translator and now - heard <= 2 * REPORT_INTERVAL_S
        }


async def report_forever(
    hub: DeploymentHandle[MetricsHub], replica: str, make_report: Callable[[], ReplicaReport]
) -> None:
    """Send ``make_report()`` to the hub every ``REPORT_INTERVAL_S``, until cancelled."""
    while True:
        try:
            await hub.report.remote(replica, make_report())
        except Exception as exc:  # the hub restarting: the next report catches up
            log.warning("metrics report of %s failed: %s", replica, exc)
        await asyncio.sleep(REPORT_INTERVAL_S)


def exposition_report(registry: CollectorRegistry) -> Callable[[], ReplicaReport]:
    """A report of ``registry`` alone (the ingress: it holds no engine)."""
    return lambda: ReplicaReport(generate_latest(registry).decode())


def merge_engines(bundles: list[ServedBundle], reports: dict[str, ReplicaReport]) -> EnginesView:
    """Every engine key of ``bundles`` in their order, with each translator holding it (a key
    on two replicas is listed twice, each with its ``replica``), or unloaded where none does."""
    held: dict[str, list[EngineInfo]] = {}
    for _, report in sorted(reports.items()):
        for info in report.engines:
            held.setdefault(info.key, []).append(info)
    engines = [
        info
        for served in bundles
        for key in served.engine_keys
        for info in held.get(key)
        or [
            EngineInfo.unloaded(key, served.name, [route_key(r) for r in served.routes_of_key(key)])
        ]
    ]
    return EnginesView(
        engines,
        sum(r.device_bytes for r in reports.values()),
        sum(r.host_bytes for r in reports.values()),
    )


class _Merged:
    """A collector of already merged families (what ``generate_latest`` reads)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def merge_expositions(expositions: dict[str, str]) -> bytes:
    """One exposition of every replica's series, each with a ``replica`` label."""
    families: dict[str, Metric] = {}
    for replica, text in sorted(expositions.items()):
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = Metric(family.name, family.documentation, family.type, family.unit)
                families[family.name] = merged
            merged.samples += [
                s._replace(labels={**s.labels, "replica": replica}) for s in family.samples
            ]
    return generate_latest(_Merged(list(families.values())))
