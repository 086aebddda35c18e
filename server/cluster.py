"""The cluster application on Ray Serve: the same FastAPI app as ingress, and translator
replicas multiplexed by engine key, so that a route's sentences go to a replica that already
holds its engine.

- ``Translator`` replicas each keep engines as the single-process server does: an
  ``EngineRegistry`` under the device budget (single-flight loads, draining, the host tier)
  and one batcher per engine key. Serve's model multiplexing (``@serve.multiplexed``) routes a
  request carrying an engine key to a replica that holds or is loading it. Serve's cache
  counts models, ours counts bytes; they agree because Serve's bound is the number of the
  largest engine (measured: built once at the replica's start) that fit in the budget
  (``max_engines``), and Serve's eviction of a key drains its engine first
  (``EngineRegistry.retire``: never dropped with batches in flight).
- ``Ingress`` is ``server.app.create_app`` with ``ClusterDecoders``: the API, keys, limits,
  validation, detection, tokenizing and joining run there, and each engine's sentences go to
  the translators. The answer names the replicas that decoded it (``X-LSMT-Replica``). Keys
  hot on one replica while another idles gain a copy on it (``server.cluster_balance``).
- ``MetricsHub`` holds every replica's latest metrics and engines: an ingress's ``/metrics``
  and ``/v1/models`` answer for the whole application (``server.cluster_metrics``).

Settings: every process reads its ``LSMT_*`` environment as ``python -m server`` does (keys
stay out of Serve's config), then the application's ``settings`` argument overrides it. Start
it with ``make serve-cluster`` (``serve run deploy/serve.yaml``); docs/deploy.md has the rest.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import ray
from fastapi import FastAPI
from prometheus_client import generate_latest
from ray import serve
from ray.exceptions import ActorUnavailableError, RayActorError
from ray.serve import Application
from ray.serve.handle import DeploymentHandle

from .app import create_app
from .batching import DecodeOptions, Hypothesis, QueueFull, ShuttingDown
from .bundles import ServedBundle, ServedRoute, open_bundle_dirs
from .cluster_balance import WINDOW_S, KeySpreader
from .cluster_metrics import (
    MetricsHub,
    ReplicaReport,
    exposition_report,
    merge_engines,
    merge_expositions,
    report_forever,
)
from .decoders import SERVED_BY, LocalDecoders
from .engine_loader import default_loader
from .engine_registry import EngineRegistry
from .engine_slots import EngineUnavailable
from .metrics import Metrics
from .schemas import JSONObject
from .settings import Settings
from .state import AppState, EnginesView, count_engine_cache_errors
from .timing import record_longest

log = logging.getLogger("server.cluster")

# A translator replica that died with a request on it: tries on another replica (Serve
# replaces the dead one meanwhile), then the request is answered 503 with this Retry-After.
REPLICA_FAILURE_TRIES = 3
REPLICA_FAILURE_PAUSE_S = 0.5
REPLICA_FAILURE_RETRY_AFTER_S = 5.0


@dataclass(frozen=True)
class DecodeRequest:
    """One engine's sentences of one request, as the ingress sends them to a translator."""

    key: str
    sources: list[list[str]]
    options: DecodeOptions
    client: str


@dataclass
class DecodeReply:
    """The hypotheses of every sentence, or the batching failure that stopped them."""

    replica: str
    hypotheses: list[list[Hypothesis]] = field(default_factory=list)
    failure: str | None = None  # queue_full, engine_unavailable, shutting_down
    reason: str = ""
    retry_after: float = 0.0


def replica_name() -> str:
    """This replica as its answers and metrics name it: ``Deployment#id`` (the Ray actor is
    ``SERVE_REPLICA::<app>#<name>``)."""
    ctx = serve.get_replica_context()
    return f"{ctx.deployment}#{ctx.replica_id.unique_id}"


def log_through_serve() -> None:
    """Send this project's log records to the replica's Serve log (its file, and stderr with
    ``RAY_SERVE_LOG_TO_STDERR``): Serve configures its own logger only, and the root logger's
    WARNING default dropped our INFO lines (a translator's "up to N engines", engine loads)."""
    serve_logger = logging.getLogger("ray.serve")
    for name in ("server", "lsmt", "lsmt_bundle", "lsmt_core"):
        ours = logging.getLogger(name)
        ours.handlers = list(serve_logger.handlers)
        ours.setLevel(serve_logger.level)
        ours.propagate = False


def make_settings(overrides: JSONObject | None = None) -> Settings:
    """The process's ``LSMT_*`` settings with the application's ``overrides``."""
    # keywords, as BaseSettings reads the environment in its constructor (model_validate
    # does not); untyped, as beside the fields it takes typed options (_env_file, ...)
    fields: dict[str, Any] = dict(overrides or {})
    return Settings(**fields)


def largest_route(bundles: list[ServedBundle]) -> ServedRoute | None:
    """The route with the most module bytes: its engine is what a budget is counted in."""
    routes = [(b.route_bytes(r), b.served_route(r)) for b in bundles for r in b.routes]
    if not routes:
        return None
    return max(routes, key=lambda sized: sized[0])[1]


def largest_engine_bytes(served: ServedBundle, settings: Settings) -> int:
    """The bytes of the bundle's largest engine (``largest_route``), built here and dropped:
    for sizing budgets before deploying (a replica measures it on its own at start)."""
    found = largest_route([served])
    assert found is not None, "a bundle has routes"
    translator, nbytes = default_loader(served.bundle, found.route, settings)
    translator.unload_model()
    return int(nbytes)


def max_engines(budget: int, engine_bytes: int) -> int:
    """How many engines of ``engine_bytes`` a replica's budget holds (at least one)."""
    return max(1, budget // engine_bytes) if engine_bytes > 0 else 1


@serve.deployment(max_ongoing_requests=256, ray_actor_options={"num_cpus": 1})
class Translator:
    """One replica: this process's engines for the keys Serve routes to it."""

    # Serve awaits an async constructor (the metrics report task starts in it).
    async def __init__(  # type: ignore[misc]
        self, settings: JSONObject | None, hub: DeploymentHandle[MetricsHub]
    ) -> None:
        log_through_serve()
        base = make_settings(settings)
        # CTranslate2 threads from this replica's CPUs, not the host's core count.
        resources = ray.get_runtime_context().get_assigned_resources()  # type: ignore[no-untyped-call]
        cpus = resources.get("CPU", 1.0)
        self.settings = base.model_copy(
            update={
                "inter_threads": base.inter_threads or max(1, int(cpus)),
                "intra_threads": base.intra_threads or 1,
            }
        )
        self.replica = replica_name()
        self.metrics = Metrics()
        count_engine_cache_errors(self.settings, self.metrics)  # as long as the replica lives
        self.bundles = self._open_bundles()
        self.registry = EngineRegistry(self.settings, self.metrics)
        # Serve's model ids (an engine key, or a copy of one: server.cluster_balance) -> the
        # route, and each engine key's ids held here: the engine goes when the last one does.
        self.routes_of_ids: dict[str, ServedRoute] = {}
        self.ids_held: dict[str, set[str]] = {}
        self.executor = ThreadPoolExecutor(32, thread_name_prefix="lsmt-translate")
        self.in_flight = 0
        self.decoders = LocalDecoders(
            self.registry,
            self.settings,
            self.metrics,
            self.executor,
            requests_in_flight=lambda: self.in_flight,
        )
        budget = self.settings.resolved_device_budget
        self.max_engines = max_engines(budget, await self._largest_engine_bytes())

        # Decorated here, as a plain function (Serve keeps its cache on the function): the
        # bound comes from the bundles and the budget read above.
        async def hold(model_id: str) -> HeldEngine:
            return await self._hold(model_id)

        self.engine = serve.multiplexed(max_num_models_per_replica=self.max_engines)(hold)
        self.reporting = asyncio.create_task(report_forever(hub, self.replica, self.report))
        log.info("translator %s: up to %d engines", self.replica, self.max_engines)

    async def _largest_engine_bytes(self) -> int:
        """The bytes of the engine of the route with the most module bytes, loaded once at
        start (the replica's warm-up: it stays until the budget needs its room); that route's
        module bytes when it cannot load (its requests will answer why)."""
        found = largest_route(self.bundles)
        if found is None:
            return 0
        try:
            engine = await self.registry.acquire(found)
        except EngineUnavailable as exc:
            log.warning("sizing engine %s did not load: %s", exc.key, exc.reason)
            return found.served.route_bytes(found.route)
        self.registry.release(engine)
        return engine.nbytes

    def _find(self, key: str) -> ServedRoute:
        """A route of ``key``, with its bundle. A key not known yet re-opens the bundles once:
        languages added to a bundle (``POST /v1/admin/reload`` on the ingress) reach the
        replicas on their first request."""
        for reopen in (False, True):
            if reopen:
                self.bundles = self._open_bundles()
            for b in self.bundles:
                routes = b.routes_of_key(key)
                if routes:
                    return b.served_route(routes[0])
        raise EngineUnavailable(key, "no bundle of this replica has this engine key", 60.0)

    def _open_bundles(self) -> list[ServedBundle]:
        def report(path: Path, exc: Exception) -> None:
            log.error("bundle %s: %s", path, exc)

        return open_bundle_dirs(self.settings.bundle_dirs, report, report)

    def report(self) -> ReplicaReport:
        """This replica's metrics and the engines it holds, for the hub."""
        infos = self.registry.engine_infos(self.bundles)
        return ReplicaReport(
            generate_latest(self.metrics.registry).decode(),
            [
                i.model_copy(update={"replica": self.replica})
                for i in infos
                if i.state != "unloaded"
            ],
            self.registry.device_bytes,
            self.registry.host_bytes,
            translator=True,
        )

    async def _hold(self, model_id: str) -> HeldEngine:
        """Serve's loader for ``model_id``: its engine loaded in the registry (single-flight),
        held until Serve drops the last id of its key."""
        served_route = self.routes_of_ids[model_id]
        engine = await self.registry.acquire(served_route)
        self.registry.release(engine)
        self.ids_held.setdefault(served_route.engine_key, set()).add(model_id)
        return HeldEngine(self, model_id, served_route)

    async def drop(self, model_id: str, served_route: ServedRoute) -> None:
        """Serve evicted ``model_id``: the engine goes with its key's last id."""
        held = self.ids_held.get(served_route.engine_key, set())
        held.discard(model_id)
        if not held:
            await self.registry.retire(served_route)

    async def __call__(self, request: DecodeRequest) -> DecodeReply:
        # Multiplexed: Serve routed the model id here and keeps it; key-blind (the benchmark's
        # baseline, ``multiplex: false``): any replica, the registry alone bounds its engines.
        multiplexed = serve.get_multiplexed_model_id()
        self.in_flight += 1
        try:
            served_route = self._find(request.key)
            if multiplexed:
                self.routes_of_ids[multiplexed] = served_route
                await self.engine(multiplexed)
            hypotheses = await self.decoders.decode(
                served_route, request.sources, request.options, request.client
            )
            return DecodeReply(self.replica, hypotheses)
        except QueueFull:
            return DecodeReply(self.replica, failure="queue_full")
        except EngineUnavailable as exc:
            return DecodeReply(
                self.replica,
                failure="engine_unavailable",
                reason=exc.reason,
                retry_after=exc.retry_after,
            )
        except ShuttingDown:
            return DecodeReply(self.replica, failure="shutting_down")
        finally:
            self.in_flight -= 1

    async def __del__(self) -> None:
        # Serve calls it after a failed constructor too: only what was made is closed.
        if hasattr(self, "reporting"):
            self.reporting.cancel()
        if hasattr(self, "decoders"):
            await self.decoders.close()
            await self.registry.close()
            self.executor.shutdown(wait=False, cancel_futures=True)


class HeldEngine:
    """What Serve's multiplexer keeps for a model id. When Serve evicts the id it awaits
    ``__del__`` (an instance attribute, so garbage collection never calls it), which drains
    and drops the engine once no id of its key is left: Serve's view of the replica's keys and
    the registry's stay one."""

    def __init__(self, translator: Translator, model_id: str, served_route: ServedRoute) -> None:
        async def retire() -> None:
            await translator.drop(model_id, served_route)

        self.__del__ = retire


class ClusterDecoders:
    """The ingress's decoders: each engine's sentences to the translator replica Serve
    picks for the engine key, or a copy of it (``multiplex``; ``server.cluster_balance``), or
    to any replica (key-blind balancing, the baseline the cluster benchmark compares with).
    ``translators()`` names the translator replicas alive now."""

    def __init__(
        self,
        translator: DeploymentHandle[Translator],
        translators: Callable[[], Awaitable[set[str]]],
        multiplex: bool = True,
        balance_window_s: float = WINDOW_S,
    ) -> None:
        self.translator = translator
        self.translators = translators
        self.multiplex = multiplex
        self.spreader = KeySpreader(window_s=balance_window_s)
        self.rebalancing: asyncio.Task[None] | None = None

    async def _rebalance(self) -> None:
        try:
            spread = self.spreader.rebalance(await self.translators())
        except Exception as exc:  # the hub restarting: the next decision catches up
            log.warning("rebalancing skipped: %s", exc)
            return
        if spread:
            log.info("keys given one more replica: %s", ", ".join(spread))

    def check(self, served_route: ServedRoute) -> None:
        """Engine failures are the replicas' to know: a failed key answers 503 from there."""

    def is_full(self, served_route: ServedRoute) -> bool:
        return False  # each replica's queue refuses for itself (``queue_full``)

    async def decode(
        self,
        served_route: ServedRoute,
        sources: list[list[str]],
        options: DecodeOptions,
        client: str,
    ) -> list[list[Hypothesis]]:
        key = served_route.engine_key
        request = DecodeRequest(key, sources, options, client)
        handle = self.translator
        model_id = self.spreader.model_id(key) if self.multiplex else key
        if self.multiplex:
            handle = handle.options(multiplexed_model_id=model_id)
        t0 = time.perf_counter()
        for attempt in range(REPLICA_FAILURE_TRIES):
            response = handle.remote(request)
            try:
                reply: DecodeReply = await response
                break
            except asyncio.CancelledError:
                response.cancel()  # type: ignore[no-untyped-call]
                raise
            except (RayActorError, ActorUnavailableError) as exc:
                log.warning("translator replica failed on %s (try %d): %s", key, attempt + 1, exc)
                if attempt + 1 == REPLICA_FAILURE_TRIES:
                    raise EngineUnavailable(
                        key,
                        "the translator replica failed; it is being replaced",
                        REPLICA_FAILURE_RETRY_AFTER_S,
                    ) from None
                await asyncio.sleep(REPLICA_FAILURE_PAUSE_S)
        record_longest("decode", time.perf_counter() - t0)  # the replica's queue included
        served_by = SERVED_BY.get()
        if served_by is not None:
            served_by.add(reply.replica)
        self.spreader.record(reply.replica, key, model_id)
        if self.multiplex and self.spreader.decision_due() and not self._rebalancing():
            self.rebalancing = asyncio.create_task(self._rebalance())
        if reply.failure == "queue_full":
            raise QueueFull()
        if reply.failure == "engine_unavailable":
            raise EngineUnavailable(key, reply.reason, reply.retry_after)
        if reply.failure == "shutting_down":
            raise ShuttingDown()
        return reply.hypotheses

    def _rebalancing(self) -> bool:
        return self.rebalancing is not None and not self.rebalancing.done()

    async def close(self) -> None:
        """The translators close with their replicas; a decision under way is dropped."""
        if self.rebalancing is not None:
            self.rebalancing.cancel()


@serve.deployment(max_ongoing_requests=256, ray_actor_options={"num_cpus": 0.5})
@serve.ingress()
class Ingress:
    """The HTTP API: ``server.app.create_app`` decoding on the translators; its ``/metrics``
    answers for every replica (``server.cluster_metrics``)."""

    async def __init__(  # type: ignore[misc]  # Serve awaits an async constructor
        self,
        translator: DeploymentHandle[Translator],
        hub: DeploymentHandle[MetricsHub],
        settings: JSONObject | None = None,
        multiplex: bool = True,
        balance_window_s: float = WINDOW_S,
    ) -> None:
        log_through_serve()
        self.replica = replica_name()
        self.hub = hub
        self.asgi = create_app(  # not self.app: Serve's ingress classes have that property
            make_settings(settings),
            decoders=lambda state: ClusterDecoders(
                translator, self.live_translators, multiplex, balance_window_s
            ),
        )
        self.state: AppState = self.asgi.state.lsmt
        self.state.metrics_view = self.metrics_view
        self.state.engines_view = self.engines_view
        # Serve's proxy writes X-Request-ID on every response; a second one would repeat it
        self.state.request_id_header = False
        self.reporting = asyncio.create_task(
            report_forever(hub, self.replica, exposition_report(self.state.metrics.registry))
        )

    def __serve_build_asgi_app__(self) -> FastAPI:
        return self.asgi

    async def _from_hub(
        self, ask: Callable[[], Awaitable[dict[str, ReplicaReport]]]
    ) -> dict[str, ReplicaReport]:
        """The hub's answer to ``ask``; no reports while it does not answer."""
        try:
            reports = await ask()
        except Exception as exc:
            log.warning("the metrics hub did not answer: %s", exc)
            reports = {}
        return reports

    async def metrics_view(self) -> bytes:
        """Every replica's latest metrics (and what departed ones left), this one's as of now."""
        reports = await self._from_hub(lambda: self.hub.collect.remote())
        expositions = {r: report.exposition for r, report in reports.items()}
        expositions[self.replica] = generate_latest(self.state.metrics.registry).decode()
        return merge_expositions(expositions)

    async def engines_view(self) -> EnginesView:
        """Every translator's engines, as they last reported them."""
        return merge_engines(
            self.state.bundles, await self._from_hub(lambda: self.hub.engine_reports.remote())
        )

    async def live_translators(self) -> set[str]:
        """The translator replicas that reported within the last two report intervals."""
        names: set[str] = await self.hub.translators.remote()
        return names

    async def __del__(self) -> None:
        if hasattr(self, "reporting"):  # Serve calls it after a failed constructor too
            self.reporting.cancel()


class AppArgs(TypedDict, total=False):
    """``build_app``'s arguments, a Serve config's ``args`` (``deploy/serve.yaml``)."""

    settings: JSONObject
    translators: int
    translator_cpus: float
    multiplex: bool
    balance_window_s: float


def build_app(args: AppArgs) -> Application:
    """The application for ``serve run`` / a Serve config (``import_path:
    server.cluster:build_app``). ``args``: ``settings``, overrides of ``LSMT_*`` for every
    replica (bundles, budgets, limits; never keys: those come from the environment),
    ``translators`` and ``translator_cpus`` (replicas, CPUs each; a Serve config's
    ``deployments`` section may set them too), ``multiplex`` (default true; false routes
    key-blind, for comparison) and ``balance_window_s`` (the traffic window on which hot keys
    gain a replica, ``server.cluster_balance``)."""
    settings = dict(args.get("settings") or {})
    multiplex = bool(args.get("multiplex", True))
    window = float(args.get("balance_window_s", WINDOW_S))
    options: JSONObject = {}
    if "translators" in args:
        options["num_replicas"] = int(args["translators"])
    if "translator_cpus" in args:
        options["ray_actor_options"] = {"num_cpus": float(args["translator_cpus"])}
    # the deployment decorators make the classes Deployments, which mypy does not see
    hub = MetricsHub.bind()  # type: ignore[attr-defined]
    translator = Translator.options(**options).bind(settings, hub)  # type: ignore[attr-defined]
    app: Application = Ingress.bind(translator, hub, settings, multiplex, window)  # type: ignore[attr-defined]
    return app
