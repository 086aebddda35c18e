"""server.healthcheck, the image's HEALTHCHECK: the address it probes, read from the server's
command line, and its answer against a real server (ready, not ready, gone)."""

from __future__ import annotations

import pytest

from server.healthcheck import main, server_address

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("argv", "address"),
    [
        (["python", "-m", "server", "--host", "0.0.0.0", "--port", "8000"], ("127.0.0.1", 8000)),
        (["python", "-m", "server", "--host", "0.0.0.0", "--port", "9000"], ("127.0.0.1", 9000)),
        (["/opt/venv/bin/python", "-m", "server", "--port=9001"], ("127.0.0.1", 9001)),
        (["python", "-m", "server", "--port", "1", "--port", "2"], ("127.0.0.1", 2)),  # argparse
        (["python", "-m", "server", "--host", "::", "/models/x"], ("127.0.0.1", 8000)),
        (["python", "-m", "server", "--host", "10.0.0.5"], ("10.0.0.5", 8000)),
        (["/sbin/tini", "--", "python", "-m", "server", "--port", "9000"], ("127.0.0.1", 8000)),
        (["sleep", "--port", "9"], ("127.0.0.1", 8000)),
        ([], ("127.0.0.1", 8000)),
    ],
)
def test_the_probed_address_follows_the_servers_command_line(argv, address):
    assert server_address(argv) == address


def test_healthy_only_while_the_server_is_ready(make_server, capsys):
    server = make_server()
    server.wait_ready()
    assert main(["--port", str(server.port)]) == 0
    server.state.warmup_errors["en-de"] = "failed, as a failed warm-up records it"
    assert main(["--port", str(server.port)]) == 1
    assert "503" in capsys.readouterr().err
    port = server.port
    server.stop()
    assert main(["--port", str(port)]) == 1
