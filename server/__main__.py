"""``python -m server [--host H] [--port P] [BUNDLE_DIR ...]``; ``python -m server keys ...``
manages the API keys with limits (``server.keys``).

Without a bundle directory the default model (``models/default`` under the repository root,
or ``LSMT_DEFAULT_BUNDLE_DIR``) is served. Settings come from ``LSMT_*`` environment variables;
the command-line options override them. SIGTERM/SIGINT shut down gracefully: stop accepting
connections, finish in-flight requests (up to ``LSMT_GRACEFUL_TIMEOUT_S``), then exit.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from .settings import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI

    from .bundles import ServedBundle


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m server",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("bundles", nargs="*", type=Path, help="bundle directories to serve")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free)")
    p.add_argument("--device", choices=["cpu", "cuda", "auto"], default=None)
    p.add_argument("--log-level", default=None, help="debug, info, warning, error")
    return p.parse_args(argv)


def build_settings(args: argparse.Namespace) -> Settings:
    overrides = {}
    if args.bundles:
        overrides["bundles"] = args.bundles
    if args.device:
        overrides["device"] = args.device
    if args.log_level:
        overrides["log_level"] = args.log_level
    base = Settings()
    return base.model_copy(update=overrides) if overrides else base


def open_bundles(settings: Settings) -> tuple[list[ServedBundle], dict[str, str]]:
    """Open every bundle or exit with a message saying what is missing or wrong; also the
    ready models that could not be opened (name -> reason: the app's ``disabled_models``)."""
    from .bundles import open_bundle_dirs

    if not settings.bundles and not settings.default_bundle_dir.is_dir():
        sys.exit(
            f"error: no bundle directory given and the default model "
            f"{settings.default_bundle_dir} does not exist.\n"
            f"Export a bundle there (see model_export) or run: python -m server BUNDLE_DIR "
            f"(or set LSMT_BUNDLES / LSMT_DEFAULT_BUNDLE_DIR)."
        )

    def fail(path: Path, exc: Exception) -> None:
        if not path.is_dir():
            sys.exit(f"error: bundle directory {path} does not exist.")
        sys.exit(f"error: bundle {path} is not valid: {exc}")

    disabled: dict[str, str] = {}

    def disable(path: Path, exc: Exception) -> None:
        disabled[path.name] = str(exc)
        logging.getLogger("server").error("model %s is not served: %s", path, exc)

    return open_bundle_dirs(settings.bundle_dirs, fail, disable), disabled


def serve(
    app: FastAPI,
    host: str,
    port: int,
    settings: Settings,
    *,
    sockets: list[socket.socket] | None = None,
) -> None:
    import uvicorn

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=settings.log_level.lower(),
        # uvicorn annotates an int but waits with asyncio.wait_for: fractions of a second work
        # (the shutdown test uses 0.5 s)
        timeout_graceful_shutdown=settings.graceful_timeout_s,  # type: ignore[arg-type]
        lifespan="on",
        access_log=False,
        # h11 (not httptools) because it bounds the request line and headers; its cost per
        # request is far below a translation's.
        http="h11",
        h11_max_incomplete_event_size=settings.max_header_bytes,
    )
    server = uvicorn.Server(config)
    # uvicorn handles SIGTERM/SIGINT itself (stop accepting, drain, lifespan shutdown) and
    # re-raises the signal afterwards; these handlers turn that into a clean exit status 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_cleanly)
    server.run(sockets=sockets)


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    sys.exit(0)


def block_torch() -> None:
    """Make ``import torch`` fail in this process. ctranslate2.specs (used to build engines in
    memory) imports torch when it is installed, as it is in a development environment; the
    server never needs it (int8/float16 conversion is numpy), so it must not pay for it."""
    if "torch" not in sys.modules:
        # None in sys.modules makes the import raise ImportError (the documented way)
        sys.modules["torch"] = None  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["keys"]:  # python -m server keys add|list|remove|set-limits
        from .keys.cli import main as keys_main

        sys.exit(keys_main(argv[1:]))
    block_torch()
    args = parse_args(argv)
    settings = build_settings(args)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    bundles, disabled = open_bundles(settings)
    from .app import create_app

    app = create_app(settings, bundles=bundles)
    app.state.lsmt.disabled_models.update(disabled)  # /readyz and /v1/models say why
    serve(app, args.host, args.port, settings)


if __name__ == "__main__":
    main()
