"""The server image's install steps, replayed from the Dockerfile in a fresh virtualenv.

No Docker engine runs here, so this test reads the ``server`` target (and the ``server-build``
stage it copies its virtualenv from) and performs their ENV, WORKDIR, COPY and RUN lines on this
machine, each stage in its own directory standing in for its filesystem: the same pip command
on a copy of the same files, not an editable install. Then it checks what the image promises:
no torch and no training code, the server starting on the bundled default model, /readyz 200
(and the HEALTHCHECK command agreeing), a translation, and a clean exit on SIGTERM.

Deviations from a real build, each needed to run outside a container: the pip cache is the
host's (the Dockerfile's cache mounts are dropped), ``python`` is this interpreter's base
Python 3.11, the base stage's ``useradd`` is not run (USER is checked in test_deploy.py), and
the server listens on a free loopback port instead of 0.0.0.0:8000. A new RUN line in the base
stage is replayed like the others (and fails here if it cannot run outside a container: map it).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.dockerfile import Instruction, Stage, chain, parse

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
# Container paths the replayed stages may use; anything else fails the test, so a new path in
# the Dockerfile is mapped here deliberately rather than written to this machine's real /.
CONTAINER_DIRS = ("/app", "/opt/venv")
SKIPPED_RUNS = {"useradd"}  # base stage: creating the image's user needs root


class StageFS:
    """One stage's filesystem: container paths map into ``root``."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = dict(env)
        self.workdir = "/"

    def host(self, container_path: str) -> Path:
        path = os.path.normpath(os.path.join(self.workdir, container_path))
        assert any(path == d or path.startswith(d + "/") for d in CONTAINER_DIRS), (
            f"{container_path}: not under {CONTAINER_DIRS}; map it in this test"
        )
        return self.root / path.lstrip("/")

    def map_text(self, text: str) -> str:
        """Container paths inside a command or an ENV value, mapped to this stage's root."""
        for d in CONTAINER_DIRS:
            text = re.sub(rf"(?<![\w/.]){re.escape(d)}(?=/|\b|$)", str(self.root) + d, text)
        return text

    def expand(self, value: str) -> str:
        """``$VAR`` and ``${VAR}`` as Docker expands them in ENV."""
        return re.sub(
            r"\$\{?(\w+)\}?", lambda m: self.env.get(m.group(1), ""), self.map_text(value)
        )


def _copy(src: Path, dst: Path, into_dir: bool, link: bool) -> None:
    if into_dir:
        dst.mkdir(parents=True, exist_ok=True)
        dst = dst / src.name
    if src.is_dir():
        copy = _link_or_copy if link else shutil.copy2
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True, copy_function=copy)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def _link_or_copy(src: str, dst: str) -> None:
    """Hard link where possible: copying a whole virtualenv byte by byte only costs time (only
    between stages: files of the build context are copied, so nothing can write through)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def replay(stage: Stage, fs: StageFS, built: dict[str, StageFS]) -> None:
    """Perform one stage's WORKDIR, ENV, COPY and RUN lines in ``fs``."""
    for ins in stage.instructions:
        if ins.cmd == "WORKDIR":
            fs.workdir = ins.args
            fs.host(fs.workdir).mkdir(parents=True, exist_ok=True)
        elif ins.cmd == "ENV":
            for k, v in ins.env().items():
                fs.env[k] = fs.expand(v)
        elif ins.cmd == "COPY":
            _replay_copy(ins, fs, built)
        elif ins.cmd == "RUN":
            _replay_run(ins, fs)


def _replay_copy(ins: Instruction, fs: StageFS, built: dict[str, StageFS]) -> None:
    *sources, dest = ins.args.split()
    into_dir = dest.endswith("/") or len(sources) > 1
    for s in sources:
        src = built[ins.flags["from"]].host(s) if "from" in ins.flags else ROOT / s
        assert src.exists(), f"Dockerfile:{ins.line}: COPY source {s} does not exist"
        # A file into "./" lands in the workdir under its own name.
        into = into_dir or (src.is_file() and dest in (".", "./"))
        _copy(src, fs.host(dest), into, link="from" in ins.flags)


def _replay_run(ins: Instruction, fs: StageFS) -> None:
    if ins.args.split()[0] in SKIPPED_RUNS:
        return
    assert set(ins.flags) <= {"mount"}, f"Dockerfile:{ins.line}: unexpected RUN flags"
    assert all("type=cache" in v for v in [ins.flags.get("mount", "type=cache")])
    cwd = fs.host(fs.workdir)
    proc = subprocess.run(
        ["bash", "-euc", fs.map_text(ins.args)],
        cwd=cwd,
        env=fs.env,
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert proc.returncode == 0, f"Dockerfile:{ins.line}: {ins.args}\n{proc.stdout}{proc.stderr}"


def _base_env(tmp: Path) -> dict[str, str]:
    """A clean environment whose ``python`` is this interpreter's base Python 3.11 (the
    python:3.11-slim image's), with no LSMT_* settings and no virtualenv leaking in."""
    bin_dir = tmp / "base-python"
    bin_dir.mkdir()
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    (bin_dir / "python").symlink_to(base)
    keep = ("HOME", "LANG", "LC_ALL", "TMPDIR", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["PATH"] = f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"
    return env


def _server_command(stage: Stage, fs: StageFS) -> list[str]:
    """The stage's CMD with the container's fixed port replaced by a free loopback one."""
    cmd = stage.last("CMD").json_or_shell()
    port = stage.last("EXPOSE").args.split("/")[0]
    assert cmd[cmd.index("--port") + 1] == port, "CMD --port and EXPOSE disagree"
    python = shutil.which(cmd[0], path=fs.env["PATH"])
    assert python, f"{cmd[0]} is not on the image's PATH"
    # argparse takes the last value: port 0 = any free port (read back from the log).
    return [python, *cmd[1:], "--host", "127.0.0.1", "--port", "0"]


def _health_command(stage: Stage, fs: StageFS, port: int) -> list[str]:
    """The HEALTHCHECK's command, told the free port: here the server is not process 1,
    whose command line the check reads in a container (test_deploy.py checks that part)."""
    hc = stage.last("HEALTHCHECK").health_command()
    assert hc[1:] == ["-m", "server.healthcheck"], hc
    return [shutil.which(hc[0], path=fs.env["PATH"]), *hc[1:], "--port", str(port)]


def _wait_for_port(proc: subprocess.Popen, log: Path, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", log.read_text())
        if m:
            return int(m.group(1))
        assert proc.poll() is None, f"server exited early:\n{log.read_text()}"
        time.sleep(0.1)
    raise AssertionError(f"server did not start:\n{log.read_text()}")


@pytest.mark.timeout(600)
def test_server_image_install_steps_in_a_fresh_venv(tmp_path):
    # Long on purpose: it replays the image's build stages in order, each step reading what
    # the one before left, as the Dockerfile does.
    stages = parse(DOCKERFILE)
    server = stages["server"]
    copied_from = {i.flags["from"] for i in server.all("COPY") if "from" in i.flags}
    assert copied_from == {"server-build"}, copied_from

    built: dict[str, StageFS] = {}
    env = _base_env(tmp_path)
    for name in [*sorted(copied_from), "server"]:
        fs = StageFS(tmp_path / name, env)
        for st in chain(stages, name):  # base first, then the stage itself
            replay(st, fs, built)
        built[name] = fs
    fs = built["server"]

    # What serving must not have: torch, and any training code.
    python = shutil.which("python", path=fs.env["PATH"])
    assert python and Path(python).is_relative_to(fs.root), python
    probe = (
        "import importlib.util as u, server, lsmt_core; f = u.find_spec;"
        "print(f('torch') is None, f('training') is None, server.__file__)"
    )
    no_torch, no_training, server_file = subprocess.run(
        [python, "-c", probe],
        cwd=fs.host(fs.workdir),
        env=fs.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert no_torch == "True", "torch is installed in the server image"
    assert no_training == "True", "training code is in the server image"
    assert "site-packages" in server_file, f"server imported from {server_file}, not the venv"

    log = tmp_path / "server.log"
    with log.open("w") as log_f:
        proc = subprocess.Popen(
            _server_command(server, fs),
            cwd=fs.host(fs.workdir),
            env=fs.env,
            stdout=log_f,
            stderr=subprocess.STDOUT,
        )
    try:
        port = _wait_for_port(proc, log)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while (r := httpx.get(f"{url}/readyz", timeout=10)).status_code != 200:
            assert r.status_code == 503 and time.monotonic() < deadline, r.text
            time.sleep(0.2)
        assert r.json()["status"] == "ready", r.json()
        assert r.json()["bundles"] == {"default": "ok"}, r.json()

        health = subprocess.run(_health_command(server, fs, port), env=fs.env, timeout=30)
        assert health.returncode == 0

        r = httpx.post(
            f"{url}/v1/translate",
            json={"text": "The Lord is my shepherd.", "source": "en", "target": "es"},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        t = r.json()["translations"][0]
        assert t["text"].strip() and t["engine"].startswith("default:"), t

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
        # The same health command fails once nothing answers (it can tell the difference).
        health = subprocess.run(_health_command(server, fs, port), env=fs.env, timeout=30)
        assert health.returncode != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
