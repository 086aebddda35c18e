"""Translation directions (routes) and their one string form, ``src-tgt``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Index = Literal["src", "tgt"]


@dataclass(frozen=True)
class Route:
    """A translation direction; every training batch is homogeneous in its route."""

    src: str
    tgt: str

    def lang(self, index: Index) -> str:
        return self.src if index == "src" else self.tgt


def parse_route(text: str) -> Route:
    parts = text.split("-")
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise ValueError(f"route {text!r} is not of the form 'src-tgt' (e.g. 'de-en')")
    return Route(parts[0], parts[1])


def route_key(route: Route | tuple[str, str]) -> str:
    """``Route("de", "en")`` or ``("de", "en")`` -> ``"de-en"``."""
    src, tgt = (route.src, route.tgt) if isinstance(route, Route) else route
    return f"{src}-{tgt}"
