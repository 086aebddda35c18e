"""A child process killed with SIGKILL at a chosen point of its work, deterministically.

The child runs ``target(pause, *args)`` (a module-level function: the child is spawned, not
forked, as the test process has threads) and calls ``pause()`` where it is to be killed:
``pause`` tells the parent over a pipe and blocks, and the parent kills it then, or lets it go
on. The pipe is the only synchronisation: no sleeps.

    with PausedChild(write_entry, root) as child:
        child.wait_paused()
        child.kill()
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

PAUSED = "paused"


class Pause:
    """What the child calls: ``pause()`` at the kill point; ``pause.tell(value)`` to send the
    parent something without stopping (a port, a path)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def __call__(self) -> None:
        self.conn.send(PAUSED)
        self.conn.recv()  # until the parent lets it go on (or kills it)

    def tell(self, value: Any) -> None:
        self.conn.send(value)


class PausedChild:
    def __init__(self, target: Callable[..., object], *args: Any) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, theirs = context.Pipe()
        self.process = context.Process(target=target, args=(Pause(theirs), *args), daemon=True)
        self.process.start()
        theirs.close()  # ours closed: a child that dies early ends the pipe (EOFError)

    def __enter__(self) -> PausedChild:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(30)
        self.conn.close()

    def heard(self, timeout: float = 120) -> Any:
        """The next thing the child sent."""
        if not self.conn.poll(timeout):
            raise TimeoutError(f"the child sent nothing in {timeout} s")
        try:
            return self.conn.recv()
        except EOFError:
            self.process.join(30)
            raise RuntimeError(
                f"the child ended first (exit code {self.process.exitcode})"
            ) from None

    def wait_paused(self, timeout: float = 120) -> None:
        said = self.heard(timeout)
        assert said == PAUSED, f"the child said {said!r} before reaching its kill point"

    def kill(self) -> None:
        """SIGKILL, as the kernel's OOM killer or ``kill -9`` would: nothing runs after it."""
        assert self.process.pid is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(30)
        assert self.process.exitcode == -signal.SIGKILL

    def go_on(self) -> None:
        """Let the paused child finish its work; it must end well."""
        self.conn.send("go on")
        self.process.join(120)
        assert self.process.exitcode == 0, f"the child ended with {self.process.exitcode}"
