"""Bundles re-read while serving (``POST /v1/admin/reload``): languages added to a bundle
(``python -m model_export add-language``) are served without a restart.

Why an endpoint rather than a watch on the manifests: the operator (or the deployment that
wrote the bundle) says when the bundle is complete and gets the outcome in the answer, it
works on read-only volumes and network filesystems where file events are unreliable, and
nothing polls the disk while serving.

A bundle is re-opened from its directory and checked whole: the manifest (written last,
atomically, by the exporter), the tokenizer, every file's size, and the contents of every file
the served version did not have. Anything wrong, or a file the served version has that changed
(its engines may be loaded: that takes a restart), and the bundle is refused: the server keeps
serving the version it had. An accepted bundle replaces the served
one in place; requests in flight finish on the bundle and engines they started with, the
engines of unchanged modules stay loaded (their keys are the same), and new routes load
lazily like any other.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from lsmt_bundle import Bundle, BundleError
from lsmt_core.routes import Route, route_key

from .bundles import ServedBundle, load_served_bundle
from .schemas import BundleReload
from .state import AppState

log = logging.getLogger("server.reload")


async def reload_bundles(state: AppState) -> list[BundleReload]:
    """Re-open every served bundle from its directory, and retry those that could not be
    opened at start; one outcome per bundle. The checks run in a worker thread (they read
    files); the swaps happen on the event loop, one reload at a time."""
    async with state.reload_lock:
        outcomes = []
        for i, served in enumerate(list(state.bundles)):
            try:
                fresh = await asyncio.to_thread(_checked_bundle, served)
            except (BundleError, OSError, ValueError) as exc:
                log.error("reload of bundle %s refused: %s", served.name, exc)
                outcomes.append(BundleReload(name=served.name, status="refused", reason=str(exc)))
                continue
            if fresh is None:
                outcomes.append(BundleReload(name=served.name, status="unchanged"))
                continue
            state.bundles[i] = fresh  # the service reads the same list
            outcomes.append(_served(state, fresh, served.languages, served.route_set))
        for path in list(state.bundle_errors):
            outcomes.append(await _retry_invalid(state, Path(path)))
        return outcomes


async def _retry_invalid(state: AppState, path: Path) -> BundleReload:
    """A bundle directory that could not be opened at start, tried again."""
    try:
        fresh = await asyncio.to_thread(load_served_bundle, path)
        if any(b.name == fresh.name for b in state.bundles):
            raise BundleError(f"a bundle named {fresh.name!r} is already served")
    except (BundleError, OSError, ValueError) as exc:
        state.bundle_errors[str(path)] = f"{type(exc).__name__}: {exc}"
        return BundleReload(name=path.name, status="refused", reason=str(exc))
    del state.bundle_errors[str(path)]
    state.bundles.append(fresh)
    return _served(state, fresh, [], set())


def _served(
    state: AppState, fresh: ServedBundle, languages: list[str], routes: set[Route]
) -> BundleReload:
    for key in fresh.engine_keys:
        state.metrics.init_engine(key)
    added = sorted(set(fresh.languages) - set(languages))
    new_routes = sorted(route_key(r) for r in set(fresh.routes) - routes)
    log.info("bundle %s reloaded: languages +%s, routes +%s", fresh.name, added, new_routes)
    return BundleReload(
        name=fresh.name, status="reloaded", added_languages=added, added_routes=new_routes
    )


def _checked_bundle(served: ServedBundle) -> ServedBundle | None:
    """The bundle as its directory holds it now, checked whole; None when it is the one
    being served."""
    if not isinstance(served.bundle, Bundle):
        return None  # a ready model is read once; a new or changed one takes a restart
    fresh = load_served_bundle(Path(served.path))
    assert isinstance(fresh.bundle, Bundle)
    old, new = served.bundle.manifest, fresh.bundle.manifest
    if new == old:
        return None
    if fresh.name != served.name:
        raise BundleError(f"the directory now holds bundle {fresh.name!r}, not {served.name!r}")
    for rel, file_digest in old.files.items():
        if new.files.get(rel) != file_digest:
            # its engines may be loaded: serving a rewritten module takes a restart
            raise BundleError(
                f"{rel} changed since it was loaded: a reload adds languages and routes; "
                "restart the server to serve rewritten modules"
            )
    problems = fresh.bundle.check_sizes()
    if problems:
        raise BundleError(f"incomplete: {problems}")
    for rel, file_digest in new.files.items():
        if old.files.get(rel) != file_digest:  # new or rewritten: read and check it now
            report = fresh.bundle.verify_file(rel)
            if report != "ok":
                raise BundleError(f"{rel}: {report}")
    return fresh
