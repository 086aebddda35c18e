"""Translation directions (routes) and their one string form, ``src-tgt``."""

from __future__ import annotations

from typing import Literal, NamedTuple

Index = Literal["src", "tgt"]


class Route(NamedTuple):
    """A translation direction; every training batch is homogeneous in its route. A named
    pair: it equals, hashes and sorts as the tuple ``(src, tgt)``, so a route read from a
    manifest or a request and one built here are the same key."""

    src: str
    tgt: str

    def lang(self, index: Index) -> str:
        return self.src if index == "src" else self.tgt


def parse_route(text: str) -> Route:
    parts = text.split("-")
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise ValueError(f"route {text!r} is not of the form 'src-tgt' (e.g. 'de-en')")
    return Route(parts[0], parts[1])


def route_key(route: tuple[str, str]) -> str:
    """``Route("de", "en")`` (or the plain pair) -> ``"de-en"``."""
    src, tgt = route
    return f"{src}-{tgt}"
