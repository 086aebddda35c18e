"""`make image-check`: the images built and run on a real container engine, step by step.

    python -m scripts.image_check [--steps server|all] [--keep-images]

Docker or podman, whichever answers (scripts/container_engine.py). Steps, each printed with
PASS, FAIL or SKIP and its time; the first failure or skip stops the ones after it (not the
clean-up). A step is skipped, not failed, where this machine cannot do it (no engine, no base
image to be had, an engine that cannot run a container here):

  engine      the engine and its version (Docker >= 25, podman >= 4.3)
  base        python:3.11-slim-bookworm found, pulled, or built from Debian (kept for next time)
  container   a container of the base image runs (`run --rm ... true`)
  expected    the answers of a server from this checkout on loopback (the host install), to
              compare with the container's
  build       the `server` image (podman: --format docker, which keeps the HEALTHCHECK)
  ready       the image running: /readyz 200, and the engine's own health check healthy
  translate   the container's answers equal the host install's
  user        the server runs as uid 10001
  loadtest    the `loadtest` image built and run headless against the server for a few seconds
  stop        20 requests in flight during `stop -t 40`: each answered 200, exit code 0
  compose     docker-compose.yml's `lsmt` service up (plus Prometheus and Grafana where their
              images can be had), ready, translating, stopped with exit 0, and down

`--steps server` runs engine..user and stop: the server image only (what CI runs). Images
this builds are removed at the end unless --keep-images; the base image stays.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtests.server_process import ServerProcess, free_port
from scripts.container_engine import (
    Engine,
    Unavailable,
    can_run_containers,
    ensure_base_image,
    find_engine,
)
from scripts.image_compose import compose_up_down
from scripts.image_requests import REQUESTS, answers, same_answers, stop_under_load, wait_ready

ROOT = Path(__file__).resolve().parents[1]
SERVER_IMAGE = "lsmt:image-check"
LOADTEST_IMAGE = "lsmt-loadtest:image-check"
CONTAINER = "lsmt-image-check"
IMAGE_USER = "10001"
STOP_TIMEOUT_S = 40
AFTER_FAILURE, AFTER_SKIP = "after a failure", "after a skipped step"
SERVER_STEPS = (
    "engine", "base", "container", "expected", "build", "ready", "translate", "user", "stop",
)  # fmt: skip


@dataclass
class Check:
    engine: Engine
    workdir: Path
    port: int = field(default_factory=free_port)
    expected: list[dict[str, Any]] = field(default_factory=list)
    built: list[str] = field(default_factory=list)
    images_before: set[str] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


# Steps: each returns what it found (printed after PASS) or raises ----------------------------


def step_engine(check: Check) -> str:
    engine = check.engine
    version = ".".join(map(str, engine.version))
    minimum = {"docker": (25, 0), "podman": (4, 3)}[engine.name]
    if engine.version[:2] < minimum:
        raise RuntimeError(f"{engine.name} {version}: needs {'.'.join(map(str, minimum))}+")
    return f"{engine.name} {version}"


def step_base(check: Check) -> str:
    return ensure_base_image(check.engine, check.workdir)


def step_container(check: Check) -> str:
    return can_run_containers(check.engine)


def step_expected(check: Check) -> str:
    """The same requests answered by `python -m server` from this checkout."""
    with ServerProcess([ROOT / "models" / "default"]) as host:
        check.expected = [answers(host.url, body) for body in REQUESTS]
    return f"{len(REQUESTS)} requests answered on the host in {host.startup_s:.1f} s start-up"


def step_build(check: Check) -> str:
    return build(check, "server", SERVER_IMAGE)


def step_ready(check: Check) -> str:
    engine = check.engine
    engine.run("rm", "-f", CONTAINER, check=False)
    started = time.monotonic()
    engine.run(
        "run", "-d", "--name", CONTAINER, "-p", f"127.0.0.1:{check.port}:8000",
        "--stop-timeout", str(STOP_TIMEOUT_S), SERVER_IMAGE,
    )  # fmt: skip
    ready_s = wait_ready(check.url, timeout=180, started=started)
    return f"/readyz 200 after {ready_s:.1f} s; health check: {health(engine, CONTAINER)}"


def step_translate(check: Check) -> str:
    return same_answers(check.url, check.expected)


def step_user(check: Check) -> str:
    uid = check.engine.run("exec", CONTAINER, "id", "-u").stdout.strip()
    configured = check.engine.run("inspect", "--format", "{{.Config.User}}", CONTAINER).stdout
    if uid != IMAGE_USER or not configured.startswith(IMAGE_USER):
        raise RuntimeError(f"runs as uid {uid} (image USER {configured.strip()!r})")
    return f"uid {uid}"


def step_loadtest(check: Check) -> str:
    built = build(check, "loadtest", LOADTEST_IMAGE)
    env = {
        "LOCUST_HOST": "http://127.0.0.1:8000",
        "LOCUST_HEADLESS": "true",
        "LOCUST_USERS": "4",
        "LOCUST_SPAWN_RATE": "4",
        "LOCUST_RUN_TIME": "5s",
        "LSMT_LOCUST_ROUTES": "en-es,en-fr",
    }
    flags = [x for k, v in env.items() for x in ("-e", f"{k}={v}")]
    # In the server container's network: the locust image sees it as localhost:8000.
    run = check.engine.run(
        "run", "--rm", "--network", f"container:{CONTAINER}", *flags, LOADTEST_IMAGE,
        timeout=180, check=False,
    )  # fmt: skip
    # locust prints its table every few seconds: the last one is the whole run's (the
    # percentiles' table has an Aggregated line too, without the failures' "(N%)")
    totals = re.findall(r"Aggregated\s+(\d+)\s+(\d+)\(", run.stdout + run.stderr)
    total = totals[-1] if totals else ("0", "0")
    if run.returncode != 0 or int(total[0]) == 0:
        raise RuntimeError(f"locust exited {run.returncode}:\n{run.stdout[-1500:]}{run.stderr}")
    return f"{built}; locust 5 s headless: {total[0]} requests, {total[1]} failed"


def step_stop(check: Check) -> str:
    engine = check.engine
    stopped = stop_under_load(
        check.url, lambda: engine.run("stop", "-t", str(STOP_TIMEOUT_S), CONTAINER, timeout=120)
    )
    code = engine.run("inspect", "--format", "{{.State.ExitCode}}", CONTAINER).stdout.strip()
    return stopped.verdict(code)


def step_compose(check: Check) -> str:
    return compose_up_down(check.engine, SERVER_IMAGE, check.expected)


STEPS: dict[str, Callable[[Check], str]] = {
    "engine": step_engine,
    "base": step_base,
    "container": step_container,
    "expected": step_expected,
    "build": step_build,
    "ready": step_ready,
    "translate": step_translate,
    "user": step_user,
    "loadtest": step_loadtest,
    "stop": step_stop,
    "compose": step_compose,
}


# Helpers -------------------------------------------------------------------------------------


def build(check: Check, target: str, tag: str) -> str:
    engine = check.engine
    engine.run("build", *engine.build_args(), "--target", target, "-t", tag, ".", timeout=1200)
    check.built.append(tag)
    return f"{tag}: {engine.image_size(tag) / 1e6:.0f} MB"


def health(engine: Engine, container: str) -> str:
    """podman runs health checks only when asked (no systemd timers here); Docker runs them
    itself, the first one an interval (10 s) after the start."""
    if engine.name == "podman":
        probe = engine.run("healthcheck", "run", container, check=False)
        if probe.returncode != 0:
            raise RuntimeError(f"podman healthcheck run: {probe.stdout}{probe.stderr}")
        return "healthy (podman healthcheck run)"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = engine.run("inspect", "--format", "{{.State.Health.Status}}", container).stdout
        if status.strip() == "healthy":
            return "healthy (docker inspect)"
        time.sleep(1)
    raise RuntimeError(f"not healthy within 60 s: {status.strip()}")


# Running -------------------------------------------------------------------------------------


def run_steps(names: list[str], keep_images: bool = False) -> dict[str, str]:
    """Runs the steps, printing each; returns step -> "PASS ..." / "FAIL ..." / "SKIP ..."."""
    results: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="lsmt-image-check-") as tmp:
        engine = find_engine(Path(tmp), ROOT)
        if isinstance(engine, str):
            return {"engine": report("engine", "SKIP", 0.0, engine)}
        check = Check(engine, Path(tmp), images_before=image_ids(engine))
        try:
            for name in names:
                if stopped := first_stop(results):
                    after = AFTER_FAILURE if stopped[1].startswith("FAIL") else AFTER_SKIP
                    results[name] = report(name, "SKIP", 0.0, after)
                    continue
                started, cpu = time.monotonic(), cpu_seconds()
                try:
                    outcome, detail = "PASS", STEPS[name](check)
                except Unavailable as why:
                    outcome, detail = "SKIP", str(why)
                except Exception as error:
                    outcome, detail = "FAIL", f"{type(error).__name__}: {error}"
                seconds = time.monotonic() - started
                results[name] = report(name, outcome, seconds, detail, cpu_seconds() - cpu)
        finally:
            started = time.monotonic()
            removed = clean_up(check, keep_images)
            report("clean-up", "PASS", time.monotonic() - started, removed)
    return results


def first_stop(results: dict[str, str]) -> tuple[str, str] | None:
    """The first step that did not pass (every step after it is skipped), or None."""
    return next(((n, r) for n, r in results.items() if not r.startswith("PASS")), None)


def unavailable(results: dict[str, str]) -> str | None:
    """Why the check could not run here (its first stop was a skip, for this machine's
    sake), or None when every step ran or one failed."""
    stopped = first_stop(results)
    if stopped is None or not stopped[1].startswith("SKIP"):
        return None
    name, result = stopped
    return f"{name}: {result.partition(')  ')[2]}"  # the detail after "SKIP  0.0 s (cpu  0.0 s)"


def image_ids(engine: Engine) -> set[str]:
    return set(engine.run("images", "-a", "-q", "--no-trunc").stdout.split())


def clean_up(check: Check, keep_images: bool) -> str:
    """The container; unless kept, the images built and the untagged stages they left (not
    the base image, nor what was there before)."""
    engine = check.engine
    engine.run("rm", "-f", CONTAINER, check=False)
    if keep_images or not check.built:
        return "container removed"
    engine.run("rmi", "-f", *check.built, check=False)
    for _ in range(3):  # children before parents
        untagged = set(engine.run("images", "-a", "-q", "--no-trunc", "--filter",
                                  "dangling=true").stdout.split())  # fmt: skip
        if not untagged - check.images_before:
            break
        engine.run("rmi", *(untagged - check.images_before), check=False)
    return f"container, {', '.join(check.built)} and their build stages removed"


def cpu_seconds() -> float:
    """CPU time of this process and the commands it waited for (builds included; not the
    detached containers): a measure of cost that a busy machine does not inflate much."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def report(step: str, outcome: str, seconds: float, detail: str, cpu: float = 0.0) -> str:
    line = f"{outcome} {seconds:6.1f} s (cpu {cpu:5.1f} s)"
    print(f"{step:<10} {line}  {detail}", flush=True)
    return f"{line}  {detail}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scripts.image_check", description=__doc__)
    p.add_argument("--steps", choices=["all", "server"], default="all")
    p.add_argument("--keep-images", action="store_true")
    args = p.parse_args(argv)
    names = list(STEPS) if args.steps == "all" else list(SERVER_STEPS)
    started = time.monotonic()
    results = run_steps(names, args.keep_images)
    failed = [name for name, r in results.items() if r.startswith("FAIL")]
    if not failed and (why := unavailable(results)):
        print(f"not checked on this machine: {why}", flush=True)
        return 2
    print(f"{'FAIL' if failed else 'PASS'} in {time.monotonic() - started:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
