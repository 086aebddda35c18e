"""A small Dockerfile reader for the deployment tests: stages and their instructions.

Enough of the format for this project's Dockerfile (line continuations, comments, flags, JSON
and shell forms, ``ENV k=v`` lists), not a general parser; hadolint checks the file itself.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Instruction:
    line: int
    cmd: str  # upper case: FROM, RUN, COPY, ...
    flags: dict[str, str]  # leading --name=value options
    args: str  # the rest, continuations joined

    def json_or_shell(self) -> list[str]:
        """CMD/ENTRYPOINT/HEALTHCHECK arguments: the exec (JSON) form, or the shell form split."""
        text = self.args.strip()
        if text.startswith("["):
            return json.loads(text)
        return shlex.split(text)

    def health_command(self) -> list[str]:
        """HEALTHCHECK's command (after ``CMD``); [] for ``HEALTHCHECK NONE``."""
        kind, _, rest = self.args.partition(" ")
        if kind.upper() == "NONE":
            return []
        assert kind.upper() == "CMD", self.args
        return Instruction(self.line, "CMD", {}, rest).json_or_shell()

    def env(self) -> dict[str, str]:
        """``ENV k=v ...`` (or the legacy ``ENV k v``) as a dict, unexpanded."""
        parts = shlex.split(self.args)
        if parts and "=" not in parts[0]:
            return {parts[0]: " ".join(parts[1:])}
        return dict(p.split("=", 1) for p in parts)


@dataclass
class Stage:
    name: str
    base: str  # image or the name of an earlier stage
    line: int
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, cmd: str) -> list[Instruction]:
        return [i for i in self.instructions if i.cmd == cmd]

    def last(self, cmd: str) -> Instruction | None:
        found = self.all(cmd)
        return found[-1] if found else None


_FLAG = re.compile(r"--([a-z-]+)(?:=(\S+))?\s+")


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, instruction text) with continuations joined and comments dropped."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # comment lines may also sit inside a continued instruction
        if not buf:
            start = n
        if stripped.endswith("\\"):
            buf.append(stripped[:-1].strip())
            continue
        buf.append(stripped)
        out.append((start, " ".join(buf)))
        buf = []
    if buf:
        out.append((start, " ".join(buf)))
    return out


def parse(path: Path) -> dict[str, Stage]:
    """Stages by name (an unnamed stage is called by its index), in file order."""
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for line, text in _logical_lines(path.read_text()):
        cmd, _, rest = text.partition(" ")
        cmd = cmd.upper()
        flags: dict[str, str] = {}
        rest = rest.strip() + " "
        while m := _FLAG.match(rest):
            flags[m.group(1)] = m.group(2) or ""
            rest = rest[m.end() :]
        ins = Instruction(line, cmd, flags, rest.strip())
        if cmd == "FROM":
            words = ins.args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(len(stages))
            current = stages[name] = Stage(name, words[0], line)
        elif current is None:
            raise ValueError(f"{path}:{line}: {cmd} before the first FROM")
        current.instructions.append(ins)
    return stages


def chain(stages: dict[str, Stage], name: str) -> list[Stage]:
    """The stage and the stages it is built FROM, the first ancestor first."""
    out = []
    while name in stages:
        out.append(stages[name])
        name = stages[name].base
    return out[::-1]
