"""The compose step of `make image-check`: docker-compose.yml's stack up, checked, and down.

Docker runs it with Docker Compose v2 (`docker compose`). podman with podman-compose 1.6.0
from PyPI, installed into its own virtualenv under ~/.cache/lsmt (LSMT_PODMAN_COMPOSE names
another one): Debian's 1.0.3 stops with `-t 10` whatever `stop_grace_period` says, and cuts
requests in flight (docs/deploy.md). The server's image is the one the check built
(LSMT_IMAGE); Prometheus and Grafana come up too where their images are present or can be
pulled, and are left out, with the reason, where no registry is reachable.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from loadtests.server_process import free_port
from scripts.container_engine import Engine, tail
from scripts.image_requests import same_answers, stop_under_load, wait_ready

PROJECT = "lsmt-image-check"
PODMAN_COMPOSE = "podman-compose==1.6.0"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lsmt"
OTHER_SERVICES = {"prometheus": "prom/prometheus:v3.5.0", "grafana": "grafana/grafana:12.0.0"}


def compose_command(engine: Engine) -> list[str]:
    if engine.name == "docker":
        return ["nice", "-n", "19", "docker", "compose"]
    if os.environ.get("LSMT_PODMAN_COMPOSE"):
        return ["nice", "-n", "19", os.environ["LSMT_PODMAN_COMPOSE"]]
    venv = CACHE / PODMAN_COMPOSE.replace("==", "-")
    tool = venv / "bin" / "podman-compose"
    if not tool.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", PODMAN_COMPOSE]
        subprocess.run(pip, check=True, timeout=600)
    return ["nice", "-n", "19", str(tool)]


def compose_up_down(engine: Engine, image: str, expected: list[dict[str, Any]]) -> str:
    """Up (the server, and whatever else can run), ready, translating, stopped under load
    with exit 0, down. Returns what it saw."""
    compose = [*compose_command(engine), "-p", PROJECT]
    port = free_port()
    env = {**engine.env, "LSMT_IMAGE": image, "LSMT_PORT": str(port)}

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*compose, *args], cwd=engine.cwd, env=env, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"compose {' '.join(args)}: exit {proc.returncode}\n{tail(proc)}")
        return proc

    services, left_out = ["lsmt"], []
    for service, service_image in OTHER_SERVICES.items():
        if (
            engine.image_exists(service_image)
            or engine.run("pull", service_image, check=False).returncode == 0
        ):
            services.append(service)
        else:
            left_out.append(service)
    listing = run("version").stdout.splitlines()  # podman-compose adds podman's version
    version = next((v for v in listing if "compose" in v.lower()), listing[0]).strip()
    try:
        started = time.monotonic()
        run("up", "-d", *services)
        ready_s = wait_ready(f"http://127.0.0.1:{port}", timeout=180, started=started)
        same = same_answers(f"http://127.0.0.1:{port}", expected)
        stopped = stop_under_load(f"http://127.0.0.1:{port}", lambda: run("stop", "lsmt"))
        verdict = stopped.verdict(exit_code(engine))
    finally:
        run("down", "-v")
    skipped = f"; not started (no image): {', '.join(left_out)}" if left_out else ""
    return (
        f"{version}: {', '.join(services)} up, ready in {ready_s:.1f} s; {same}; "
        f"stop: {verdict}; down{skipped}"
    )


def exit_code(engine: Engine) -> str:
    """The exit code of the project's stopped `lsmt` container ("Exited (N) ..." in ps)."""
    listing = engine.run(
        "ps", "-a", "--filter", f"label=com.docker.compose.project={PROJECT}",
        "--format", "{{.Names}} {{.Status}}",
    ).stdout  # fmt: skip
    for line in listing.splitlines():
        if "lsmt" in line.split()[0].removeprefix(PROJECT):
            found = re.search(r"Exited \((-?\d+)\)", line)
            return found.group(1) if found else line
    raise RuntimeError(f"no lsmt container in the project:\n{listing}")
