"""Debian packages as a data source: downloaded with ``apt-get download`` and unpacked with
``dpkg-deb -x`` into a cache directory, without root.

The cache (``$LSMT_CACHE`` or ``~/.cache/lsmt``) keeps the ``.deb`` files and their unpacked
trees (``debs/`` and ``unpacked/<package>/``), so a rebuild reads them again without the
network. Where ``apt-get`` has no package lists (a fresh container that never ran ``apt-get
update``), the lists are fetched into the cache with a private apt state directory, which
needs no root either.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ..paths import cache_dir


class PackageError(RuntimeError):
    """A package could not be downloaded or unpacked (the message says why and what to do)."""


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise PackageError(
            f"'{name}' is not installed: the modern corpus sources are Debian packages, read "
            f"with apt-get and dpkg-deb (a Debian or Ubuntu system); build with --sources bible "
            f"to leave them out"
        )
    return path


def _run(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)


def _private_lists_options(cache: Path) -> list[str]:
    """apt options that keep package lists and locks inside the cache (no root needed)."""
    state, archives = cache / "apt" / "lists", cache / "apt" / "archives"
    (state / "partial").mkdir(parents=True, exist_ok=True)
    (archives / "partial").mkdir(parents=True, exist_ok=True)
    return [
        "-o",
        f"Dir::State::Lists={state}",
        "-o",
        f"Dir::Cache::Archives={archives}",
        "-o",
        f"Dir::Cache={cache / 'apt'}",
        "-o",
        "Debug::NoLocking=1",
    ]


def download_deb(package: str, cache: Path | None = None) -> Path:
    """The ``.deb`` of ``package`` in the cache, downloaded when it is not there yet."""
    cache = cache or cache_dir()
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    found = sorted(debs.glob(f"{package}_*.deb"))
    if found:
        return found[-1]
    apt = _tool("apt-get")
    r = _run([apt, "download", package], cwd=debs)
    if r.returncode != 0:
        # No package lists (or none naming it): fetch the lists into the cache and retry.
        opts = _private_lists_options(cache)
        update = _run([apt, *opts, "update"])
        r = _run([apt, *opts, "download", package], cwd=debs)
        if r.returncode != 0:
            raise PackageError(
                f"apt-get could not download {package}: {r.stderr.strip() or r.stdout.strip()}"
                + (f" (apt-get update said: {update.stderr.strip()})" if update.returncode else "")
            )
    found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
        raise PackageError(f"apt-get download {package} wrote no .deb into {debs}")
    return found[-1]


def unpacked(package: str, cache: Path | None = None) -> Path:
    """The root of ``package``'s unpacked files (``<root>/usr/share/...``)."""
    cache = cache or cache_dir()
    deb = download_deb(package, cache)
    root = cache / "unpacked" / deb.stem
    if (root / ".complete").is_file():
        return root
    dpkg = _tool("dpkg-deb")
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    r = _run([dpkg, "-x", str(deb), str(tmp)])
    if r.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PackageError(f"dpkg-deb could not unpack {deb}: {r.stderr.strip()}")
    (tmp / ".complete").write_text(deb.name + "\n", encoding="utf-8")
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return root


def deb_version(package: str, cache: Path | None = None) -> str:
    """The version of the cached ``.deb`` (from its file name, ``%3a`` = ``:``)."""
    deb = download_deb(package, cache)
    return deb.stem.split("_")[1].replace("%3a", ":")
