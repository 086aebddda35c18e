"""The container's health check: ``python -m server.healthcheck [--host H] [--port P]`` exits 0
when the server of this container answers ``/readyz`` with 200, and 1 (with the reason) when it
does not.

Without ``--host``/``--port`` it probes the address the server was started with, read from the
command line of process 1 (the server itself under the image's exec-form CMD), so ``docker run
IMAGE python -m server --port 9000`` stays healthy; where process 1 says nothing (another init,
or the image's own CMD without ``--port``) it probes the default port, 8000. A host of 0.0.0.0
or :: is probed on loopback.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from pathlib import Path

DEFAULT_PORT = 8000
TIMEOUT_S = 4.0


def server_address(argv: list[str]) -> tuple[str, int]:
    """(host, port) to probe for a server started with ``argv`` (argparse's rules: the last
    ``--port P`` or ``--port=P`` wins; any other command means the defaults)."""
    host, port = "127.0.0.1", DEFAULT_PORT
    if "server" not in argv[:3]:  # not `python -m server ...`
        return host, port
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name not in ("--port", "--host"):
            continue
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) else ""
        if name == "--port" and value.isdigit():
            port = int(value)
        elif name == "--host" and value not in ("", "0.0.0.0", "::"):
            host = value
    return host, port


def process_argv(pid: int = 1) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m server.healthcheck", description=__doc__)
    p.add_argument("--host", help="default: the server's, from process 1's command line")
    p.add_argument("--port", type=int, help="default: the server's, else 8000")
    args = p.parse_args(argv)
    host, port = server_address(process_argv())
    host, port = args.host or host, args.port or port
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:
            status = r.status
    except urllib.error.HTTPError as e:
        status = e.code
    except OSError as e:
        print(f"{url}: {e}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"{url}: {status}", file=sys.stderr)
    return 0 if status == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
