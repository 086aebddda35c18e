"""The engine registry on its own: tiers, eviction order, failures, budgets.

The CUDA host tier is checked with a stand-in translator that behaves like CTranslate2's
(``unload_model(to_cpu=True)`` parks it, ``model_is_loaded`` tells whether that happened,
``load_model`` restores it), so it runs without a GPU; the same flow on a real GPU runs in
``test_cuda_host_tier_on_real_gpu`` where one is present.
"""

from __future__ import annotations

import asyncio

import pytest

from lsmt_core.routes import Route
from server.bundles import load_served_bundle
from server.engine_registry import EngineRegistry
from server.engine_slots import EngineUnavailable, State
from server.metrics import Metrics
from server.settings import Settings

pytestmark = pytest.mark.integration

SIZE = 1000


class FakeTranslator:
    """CTranslate2's translator as the registry sees it: ``unload_model`` does nothing while
    the pool counts a batch active (``busy``: one runs on; ``lag``: the count still says one
    for that many more looks, as after ``translate_batch`` has just returned)."""

    def __init__(self, route, busy: bool = False, lag: int = 0) -> None:
        self.route = route
        self.model_is_loaded = True
        self.busy = busy
        self.lag = lag
        self.log: list[str] = []

    @property
    def num_active_batches(self) -> int:
        if self.lag:
            self.lag -= 1
            return 1
        return int(self.busy)

    def unload_model(self, to_cpu: bool = False) -> None:
        self.log.append(f"unload(to_cpu={to_cpu})")
        if not self.num_active_batches:
            self.model_is_loaded = False

    def load_model(self) -> None:
        self.log.append("load")
        self.model_is_loaded = True


@pytest.fixture
def served(tiny_bundle):
    return load_served_bundle(tiny_bundle)


def registry(**overrides):
    calls: list = []
    made: dict = {}

    def loader(bundle, route, settings):
        src, tgt = route
        calls.append(tgt)
        if tgt == "xx":
            raise RuntimeError("boom")
        made[tgt] = FakeTranslator(
            (src, tgt),
            busy=overrides.pop("busy_" + tgt, False),
            lag=overrides.pop("lag_" + tgt, 0),
        )
        return made[tgt], SIZE

    settings = Settings(device=overrides.pop("device", "cuda"), compute_type="int8", **overrides)
    return EngineRegistry(settings, Metrics(), loader), calls, made


def served_route(served, src, tgt):
    return served.served_route(Route(src, tgt))


async def use(reg, served, src, tgt):
    e = await reg.acquire(served_route(served, src, tgt))
    reg.release(e)
    return e


def states(reg):
    return {k.rsplit("/", 1)[1]: e.state.value for k, e in reg.slots.items()}


def test_cuda_eviction_moves_to_host_then_drops(served):
    async def run():
        reg, calls, made = registry(
            device_budget_bytes=int(SIZE * 1.5), host_budget_bytes=int(SIZE * 1.5)
        )
        await use(reg, served, "en", "de")
        await use(reg, served, "de", "en")  # de -> host
        assert states(reg) == {"de": "host", "en": "loaded"}
        assert made["de"].log == ["unload(to_cpu=True)"]
        assert reg.device_bytes == SIZE and reg.host_bytes == SIZE
        await use(reg, served, "en", "fr")  # en -> host, host over budget: drop de (LRU)
        assert states(reg) == {"de": "unloaded", "en": "host", "fr": "loaded"}
        assert made["de"].log[-1] == "unload(to_cpu=False)"
        # Back from host: load_model, no new assembly.
        await use(reg, served, "fr", "en")
        assert made["en"].log[-1] == "load" and calls == ["de", "en", "fr"]
        assert states(reg) == {"de": "unloaded", "en": "loaded", "fr": "host"}
        m = reg.metrics
        assert m.engine_evictions.labels("device")._value.get() == 3
        assert m.engine_evictions.labels("host")._value.get() == 1
        reg.update_gauges()
        assert m.engine_bytes.labels("host")._value.get() == SIZE

    asyncio.run(run())


def test_cuda_unload_that_does_not_happen_drops_instead(served):
    async def run():
        reg, _, made = registry(device_budget_bytes=int(SIZE * 1.5), busy_de=True)
        await use(reg, served, "en", "de")
        await use(reg, served, "de", "en")
        # model_is_loaded stayed True: not counted as host memory, dropped.
        assert states(reg)["de"] == "unloaded" and reg.host_bytes == 0
        assert made["de"].log == ["unload(to_cpu=True)", "unload(to_cpu=False)"]
        assert reg.metrics.engine_evicted_busy._value.get() == 1

    asyncio.run(run())


def test_eviction_waits_for_the_runtime_to_count_the_last_batch_done(served):
    """The race a fresh clone once hit: the batch was released, CTranslate2 still counted it
    active for a moment and ignored the unload. Eviction waits for the count, so the engine
    reaches the host tier (CUDA) or is unloaded (CPU), and nothing is counted busy."""

    async def run():
        reg, _, made = registry(
            device_budget_bytes=int(SIZE * 1.5), host_budget_bytes=SIZE * 2, lag_de=5
        )
        await use(reg, served, "en", "de")
        await use(reg, served, "de", "en")
        assert states(reg) == {"de": "host", "en": "loaded"}
        assert made["de"].log == ["unload(to_cpu=True)"] and not made["de"].model_is_loaded
        cpu, _, made_cpu = registry(device="cpu", device_budget_bytes=int(SIZE * 1.5), lag_de=5)
        await use(cpu, served, "en", "de")
        await use(cpu, served, "de", "en")
        assert states(cpu) == {"de": "unloaded", "en": "loaded"}
        assert not made_cpu["de"].model_is_loaded
        for r in (reg, cpu):
            assert r.metrics.engine_evicted_busy._value.get() == 0

    asyncio.run(run())


def test_a_real_engine_evicted_right_after_its_batch_is_unloaded(served):
    """CTranslate2 on the CPU, evicted the moment its batch is released, again and again."""

    async def run():
        reg = EngineRegistry(Settings(device="cpu", bulk_nice=0), Metrics())
        for _ in range(20):
            e = await reg.acquire(served_route(served, "en", "de"))
            translator = e.translator
            try:
                out = await asyncio.to_thread(
                    translator.translate_batch, [["<2de>", "Follow", "me."]], beam_size=1
                )
            finally:
                reg.release(e)
            assert out[0].hypotheses[0]
            await reg.retire(served_route(served, "en", "de"))
            assert e.state is State.UNLOADED and not translator.model_is_loaded
        assert reg.metrics.engine_evicted_busy._value.get() == 0
        await reg.close()

    asyncio.run(run())


def test_cpu_eviction_is_lru_and_never_takes_engines_in_use(served):
    async def run():
        reg, _, _ = registry(device="cpu", device_budget_bytes=SIZE * 2)
        held = await reg.acquire(served_route(served, "en", "de"))  # in use throughout
        await use(reg, served, "de", "en")
        await use(reg, served, "en", "fr")  # must evict "en" (idle), not "de" (in use)
        assert states(reg) == {"de": "loaded", "en": "unloaded", "fr": "loaded"}
        assert reg.device_bytes <= SIZE * 2
        reg.release(held)

    asyncio.run(run())


def test_retire_waits_for_batches_in_flight_then_evicts(served):
    """The cluster's multiplexer evicting a key (server.cluster): the engine takes no new
    batch meanwhile, is never dropped under one, and goes once the last is released."""

    async def run():
        reg, _, made = registry(device="cpu", device_budget_bytes=SIZE * 4)
        held = await reg.acquire(served_route(served, "en", "de"))
        retiring = asyncio.create_task(reg.retire(served_route(served, "en", "de")))
        await asyncio.sleep(0.05)
        assert not retiring.done() and states(reg) == {"de": "loaded"}
        assert reg.slots[held.key].draining  # a new batch would wait for the eviction
        reg.release(held)
        await asyncio.wait_for(retiring, 60)  # a budget: it ends once released
        assert states(reg) == {"de": "unloaded"} and made["de"].log == ["unload(to_cpu=False)"]
        await reg.retire(served_route(served, "en", "fr"))  # a key never loaded: nothing to do
        again = await use(reg, served, "en", "de")  # and a retired key loads again
        assert again.state is State.LOADED and not again.draining

    asyncio.run(run())


def test_budget_held_by_busy_engines_is_transient_not_a_failure(served):
    async def run():
        reg, calls, _ = registry(device="cpu", device_budget_bytes=SIZE, request_timeout_s=0.3)
        held = await reg.acquire(served_route(served, "en", "de"))
        assert calls == ["de"]
        with pytest.raises(EngineUnavailable) as info:
            await reg.acquire(served_route(served, "de", "en"))
        assert "in use" in info.value.reason and info.value.retry_after == 1.0
        e = reg.slots["tiny:shared+tgt/en"]
        assert e.state == State.UNLOADED and e.failures == 0
        reg.release(held)
        await use(reg, served, "de", "en")  # now it fits (en-de is idle, evicted)
        assert calls == ["de", "en"]  # the refused load never started assembling

    asyncio.run(run())


def test_engine_larger_than_budget_fails_with_reason(served):
    async def run():
        reg, _, _ = registry(device="cpu", device_budget_bytes=SIZE - 1)
        with pytest.raises(EngineUnavailable) as info:
            await reg.acquire(served_route(served, "en", "de"))
        assert "1000 bytes" in info.value.reason and "LSMT_DEVICE_BUDGET_BYTES" in info.value.reason

    asyncio.run(run())


def test_failed_load_backs_off_exponentially(served, monkeypatch):
    import server.engine_registry as engine_registry

    now = [1000.0]
    monkeypatch.setattr(engine_registry.time, "monotonic", lambda: now[0])

    async def run():
        reg, _, _ = registry(device="cpu", load_retry_initial_s=2, load_retry_max_s=5)

        def broken(bundle, route, settings):
            raise OSError("disk on fire")

        reg.loader = broken
        with pytest.raises(EngineUnavailable) as info:
            await reg.acquire(served_route(served, "en", "de"))
        assert info.value.retry_after == 2 and "disk on fire" in info.value.reason
        now[0] += 1.0  # within the backoff: refused without trying
        with pytest.raises(EngineUnavailable):
            reg.check(served_route(served, "en", "de"))
        now[0] += 1.5  # due: tried again, fails again, backoff doubles
        with pytest.raises(EngineUnavailable) as info:
            await reg.acquire(served_route(served, "fr", "de"))  # same key through another route
        assert info.value.retry_after == 4
        now[0] += 10
        with pytest.raises(EngineUnavailable) as info:
            await reg.acquire(served_route(served, "en", "de"))
        assert info.value.retry_after == 5  # capped
        assert reg.slots["tiny:shared+tgt/de"].failures == 3
        # Other keys unaffected.
        reg.loader = lambda bundle, route, settings: (FakeTranslator(route), SIZE)
        await use(reg, served, "de", "en")
        assert reg.slots["tiny:shared+tgt/en"].state == State.LOADED

    asyncio.run(run())


def _cuda_devices() -> int:
    from server.settings import cuda_device_count

    return cuda_device_count()


@pytest.mark.skipif(_cuda_devices() == 0, reason="no CUDA device (CTranslate2 sees none)")
def test_cuda_host_tier_on_real_gpu(make_server):
    import httpx

    probe = make_server(device="cuda")
    body = {"text": "And Jesus said unto them, Follow me.", "source": "en", "beam_size": 1}
    assert httpx.post(f"{probe.url}/v1/translate", json={**body, "target": "de"}).status_code == 200
    size = probe.state.registry.device_bytes
    srv = make_server(
        device="cuda", device_budget_bytes=int(size * 1.5), host_budget_bytes=int(size * 1.5)
    )
    for tgt in ("de", "fr", "de", "fr"):
        r = httpx.post(f"{srv.url}/v1/translate", json={**body, "target": tgt})
        assert r.status_code == 200, r.text
    reg = srv.state.registry
    assert reg.device_bytes <= size * 1.5 and reg.host_bytes <= size * 1.5
    assert srv.state.metrics.engine_evictions.labels("device")._value.get() >= 3
    assert reg.load_count >= 4  # restores from host count as loads


def test_engine_states_are_the_names_the_api_documents():
    """``/v1/models`` reports ``State`` values under the schema's ``EngineState``."""
    from typing import get_args

    from server.schemas import EngineState

    assert {s.value for s in State} == set(get_args(EngineState))
