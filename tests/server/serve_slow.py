"""Run the real server in its own process, with translate_batch slowed down (shutdown test).

    python tests/server/serve_slow.py BUNDLE_DIR DELAY_S

Prints ``PORT <n>`` once the socket is bound, then serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from conftest import slow_loader  # noqa: E402

from server.__main__ import block_torch, serve  # noqa: E402
from server.app import create_app  # noqa: E402
from server.settings import Settings  # noqa: E402


def main() -> None:
    block_torch()
    bundle, delay = Path(sys.argv[1]), float(sys.argv[2])
    defaults = {
        "device": "cpu",
        "warmup_routes": ["en-de"],
        "inter_threads": 1,
        "max_batch_size": 2,
        "graceful_timeout_s": 30,
        "log_level": "info",
        "output_checks": False,  # the tiny model's outputs would be decoded twice (conftest)
    }
    # An LSMT_* variable in the environment overrides the default here.
    settings = Settings(
        bundles=[bundle],
        **{k: v for k, v in defaults.items() if f"LSMT_{k.upper()}" not in os.environ},
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    app = create_app(settings, loader=slow_loader(delay))
    serve(app, "127.0.0.1", 0, settings, sockets=[sock])


if __name__ == "__main__":
    main()
