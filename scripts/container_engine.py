"""The container engine `make image-check` drives, and the base image the Dockerfile names.

Docker when its daemon answers (Docker >= 25), else podman (>= 4.3) with the settings Debian's
podman needs as root without systemd (docs/deploy.md, "What each engine needs"): the runc
runtime and no default ulimits, in a containers.conf of our own that CONTAINERS_CONF points
at, so the machine's own podman configuration is left alone. Every command runs niced.

Where no image registry is reachable, `python:3.11-slim-bookworm` is built from Debian
(one debootstrap with Python 3.11, imported), tagged with that name and kept: a later check
finds it and reuses it. Its pip trusts the CA bundle the host's pip is configured with (pip reaches
PyPI through a TLS-intercepting proxy on some machines).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

BASE_IMAGE = "docker.io/library/python:3.11-slim-bookworm"
BUILD_CERT = "/etc/ssl/certs/pip-build-ca.crt"
MIN_VERSIONS = {"docker": (25, 0), "podman": (4, 3)}
CONTAINERS_CONF = """\
# written by scripts/container_engine.py for one image check
[containers]
default_ulimits = []
[engine]
runtime = "runc"
"""
# What the stand-in adds to Debian's minimal system: Python 3.11 with venv and pip, as the
# python image has them (`python` on the PATH, no EXTERNALLY-MANAGED marker).
STAND_IN_PACKAGES = "python3.11,python3.11-venv,python3-venv,python3-pip,ca-certificates"
STAND_IN_CHANGES = [
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["python3"]',
]


class Unavailable(Exception):
    """This machine cannot do what a step needs (no image to be had, no container can run):
    the check is skipped with the message, not failed. A fault of ours stays a failure."""


@dataclass
class Engine:
    """`engine.run("build", ...)`: one engine command, niced, in the repository."""

    name: str  # "docker" or "podman"
    version: tuple[int, ...]
    env: dict[str, str]
    cwd: Path
    build_flags: list[str] = field(default_factory=list)

    def command(self, *args: str) -> list[str]:
        return ["nice", "-n", "19", self.name, *args]

    def run(
        self, *args: str, timeout: float = 600, check: bool = True, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self.command(*args),
            cwd=self.cwd,
            env=self.env,
            input=stdin.decode() if stdin is not None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"{self.name} {' '.join(args)}: exit {proc.returncode}\n{tail(proc)}"
            )
        return proc

    def image_exists(self, image: str) -> bool:
        return self.run("image", "inspect", image, check=False).returncode == 0

    def build_args(self) -> list[str]:
        """podman's default image format (OCI) drops HEALTHCHECK: Docker's keeps it. Then
        podman's mounts of the host's wheel folders, if any (`local_wheels`)."""
        return ["--format", "docker", *self.build_flags] if self.name == "podman" else []

    def image_size(self, image: str) -> int:
        return int(self.run("image", "inspect", "--format", "{{.Size}}", image).stdout.strip())


def tail(proc: subprocess.CompletedProcess[str], lines: int = 25) -> str:
    return "\n".join((proc.stdout + proc.stderr).splitlines()[-lines:])


def _version(text: str) -> tuple[int, ...]:
    parts = text.strip().split("-")[0].split(".")
    return tuple(int(p) for p in parts if p.isdigit())


def find_engine(workdir: Path, repo: Path) -> Engine | str:
    """A usable engine, or why there is none."""
    reasons = []
    env = dict(os.environ)
    if shutil.which("docker"):
        probe = subprocess.run(
            ["docker", "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if probe.returncode == 0:
            return Engine("docker", _version(probe.stdout), env, repo)
        reasons.append(f"docker: no daemon answers ({probe.stderr.strip()[:120]})")
    if shutil.which("podman"):
        conf = workdir / "containers.conf"
        conf.write_text(CONTAINERS_CONF)
        env["CONTAINERS_CONF"] = str(conf)
        probe = subprocess.run(
            ["podman", "version", "--format", "{{.Client.Version}}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        info = subprocess.run(["podman", "info"], env=env, capture_output=True, timeout=60)
        if probe.returncode == 0 and info.returncode == 0:
            return Engine("podman", _version(probe.stdout), env, repo, local_wheels(workdir))
        reasons.append(f"podman: not usable ({(probe.stderr + info.stderr.decode())[:200]})")
    if not reasons:
        reasons.append("neither docker nor podman is installed")
    return "; ".join(reasons)


def ensure_base_image(engine: Engine, workdir: Path) -> str:
    """BASE_IMAGE present: found, pulled, or built from Debian. Returns how."""
    if engine.image_exists(BASE_IMAGE):
        return "found"
    pull = engine.run("pull", BASE_IMAGE, check=False, timeout=600)
    if pull.returncode == 0:
        return "pulled"
    if not shutil.which("debootstrap") or os.geteuid() != 0:
        raise Unavailable(
            f"{BASE_IMAGE} cannot be pulled ({tail(pull, 2)}) and cannot be built here "
            "(needs debootstrap, as root)"
        )
    build_stand_in(engine, workdir)
    return f"cannot be pulled ({tail(pull, 1)[-60:]}): built from Debian"


def can_run_containers(engine: Engine, image: str = BASE_IMAGE) -> str:
    """`true` run in a container of ``image``: an engine that installs but cannot run one here
    (no user namespaces, a cgroup layout it does not know) raises Unavailable."""
    probe = engine.run("run", "--rm", image, "true", check=False, timeout=300)
    if probe.returncode != 0:
        raise Unavailable(f"{engine.name} cannot run a container here: {tail(probe, 3)}")
    return f"`{engine.name} run --rm {image.rpartition('/')[2]} true` exits 0"


def build_stand_in(engine: Engine, workdir: Path) -> None:
    """Debian bookworm (minbase) with Python 3.11 in one debootstrap, imported as BASE_IMAGE."""
    rootfs = workdir / "rootfs"
    subprocess.run(
        ["nice", "-n", "19", "debootstrap", "--variant=minbase",
         f"--include={STAND_IN_PACKAGES}", "bookworm", str(rootfs)],
        check=True, capture_output=True, timeout=1800,
    )  # fmt: skip
    for name in ("python", "python3"):
        (rootfs / "usr/local/bin" / name).symlink_to("/usr/bin/python3.11")
    (rootfs / "usr/lib/python3.11/EXTERNALLY-MANAGED").unlink(missing_ok=True)
    shutil.copy(host_pip_cert(), rootfs / "etc/ssl/certs/pip-ca.crt")
    (rootfs / "etc/pip.conf").write_text("[global]\ncert = /etc/ssl/certs/pip-ca.crt\n")
    for leftover in ("var/lib/apt/lists", "var/cache/apt/archives"):
        subprocess.run(["find", str(rootfs / leftover), "-type", "f", "-delete"], check=True)
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    changes = [x for change in STAND_IN_CHANGES for x in ("--change", change)]
    imported = subprocess.run(
        engine.command("import", *changes, "-", BASE_IMAGE),
        stdin=tar.stdout, env=engine.env, capture_output=True, timeout=600,
    )  # fmt: skip
    tar.wait()
    shutil.rmtree(rootfs)
    if imported.returncode != 0 or tar.returncode != 0:
        raise RuntimeError(f"import of the Debian rootfs failed: {imported.stderr.decode()}")


def local_wheels(workdir: Path) -> list[str]:
    """`podman build` flags that lend every RUN the host's local wheel folders (pip's
    find-links and file:// indexes in `pip config list`) and a pip.conf naming them, read-only:
    pip takes a wheel from disk instead of downloading it, and the images hold nothing of it.
    Docker's build has no such mounts (it downloads)."""
    folders: dict[str, list[str]] = {"find-links": [], "extra-index-url": []}
    for key, value in _pip_config():
        option = key.rpartition(".")[2]
        if option in ("find-links", "index-url", "extra-index-url"):
            for place in value.split():
                path = place.removeprefix("file://")
                if path.startswith("/") and Path(path).is_dir():
                    folders["find-links" if option == "find-links" else "extra-index-url"].append(
                        place
                    )
    if not any(folders.values()):
        return []
    conf = workdir / "pip-build.conf"
    lines = ["[global]", f"cert = {BUILD_CERT}"]
    lines += [f"{option} = {' '.join(dict.fromkeys(v))}" for option, v in folders.items() if v]
    conf.write_text("\n".join(lines) + "\n")
    shutil.copy(host_pip_cert(), workdir / "pip-ca.crt")
    # An index's pages link to its files beside it (simple/NAME/ -> ../../files/): mount both.
    mounts = {
        p.removeprefix("file://").removesuffix("/simple") for v in folders.values() for p in v
    }
    flags = [f"--volume={workdir / 'pip-build.conf'}:/etc/pip.conf:ro"]
    flags += [f"--volume={workdir / 'pip-ca.crt'}:{BUILD_CERT}:ro"]
    return flags + [f"--volume={m}:{m}:ro" for m in sorted(mounts)]


def _pip_config() -> list[tuple[str, str]]:
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
    ).stdout
    pairs = [line.partition("=") for line in listing.splitlines()]
    return [(key, value.strip("'\"")) for key, _, value in pairs]


def host_pip_cert() -> Path:
    """The CA bundle the host's pip trusts (`pip config list`), else the system's."""
    for key, value in _pip_config():
        if key.endswith(".cert") and Path(value).is_file():
            return Path(value)
    return Path("/etc/ssl/certs/ca-certificates.crt")
