"""Spreading hot engine keys over the cluster's translator replicas (``server.cluster``).

Serve's multiplexing keeps a key on the replica that loaded it, so traffic goes where engines
happen to be: after a replica is replaced, every key in use stays on the survivor and the new
replica idles (measured before this module: 620 of 620 requests on the survivor). The ingress
counts where its requests were decoded over a sliding window. When the busiest live
translator serves more than ``IMBALANCE`` times its fair share while another serves less than
its fair share divided by ``IMBALANCE``, the busiest replica's hottest keys each gain a copy:
one more multiplexed model id for the same engine (``key``, ``key~1``, ...). Serve's router
sends an id no replica holds to the replica with the fewest ids, the idle one, and the key's
requests then take its ids in turn. Copies are kept (a key popular enough to need two
replicas once is likely to again); a key has at most as many ids as there are translators.
A copy that was decoded on the same replica as another id of its key (Serve placed it there:
that replica had the fewest ids then, e.g. the only one while its peer was being replaced)
brings nothing: while some live translator holds none of the key's ids, it is renamed to a
fresh id, which Serve places anew; the old one is dropped by Serve's LRU when room is needed.

Invariants: a decision is made on a full window of traffic after the last change (never on
traffic routed by the previous state), and only with at least two translators that reported
recently (a dead replica's last report must not read as an idle replica).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

WINDOW_S = 30.0
IMBALANCE = 1.2  # two translators: act above 60 / 40
MIN_REQUESTS = 20  # in a window: fewer say nothing about shares
COPY_MARK = "~"


def copy_id(key: str, copy: int) -> str:
    """The multiplexed model id of ``key``'s ``copy`` (0: the key itself)."""
    return key if copy == 0 else f"{key}{COPY_MARK}{copy}"


@dataclass
class KeySpreader:
    """Which model id a key's next request takes, and when keys gain copies."""

    window_s: float = WINDOW_S
    imbalance: float = IMBALANCE
    min_requests: int = MIN_REQUESTS
    clock: Callable[[], float] = time.monotonic
    decoded: deque[tuple[float, str, str]] = field(default_factory=deque)  # (when, replica, key)
    ids: dict[str, list[str]] = field(default_factory=dict)  # key -> its ids (absent: the key)
    placed: dict[str, str] = field(default_factory=dict)  # model id -> replica last decoding it
    made: Counter[str] = field(default_factory=Counter)  # key -> copies ever named
    turns: Counter[str] = field(default_factory=Counter)
    next_decision: float = 0.0

    def ids_of(self, key: str) -> list[str]:
        return self.ids.get(key) or [key]

    def model_id(self, key: str) -> str:
        """The id for ``key``'s next request: its ids in turn."""
        ids = self.ids_of(key)
        turn = self.turns[key]
        self.turns[key] += 1
        return ids[turn % len(ids)]

    def record(self, replica: str, key: str, model_id: str | None = None) -> None:
        """A request of ``key`` (sent as ``model_id``) was decoded on ``replica``."""
        now = self.clock()
        self.decoded.append((now, replica, key))
        self.placed[model_id or key] = replica
        while self.decoded and self.decoded[0][0] < now - self.window_s:
            self.decoded.popleft()

    def decision_due(self) -> bool:
        return self.clock() >= self.next_decision

    def shares(self, translators: set[str]) -> Counter[str]:
        """Requests per live translator in the window (zero for one that served none)."""
        counts = Counter({replica: 0 for replica in translators})
        counts.update(replica for _, replica, _ in self.decoded if replica in translators)
        return counts

    def rebalance(self, translators: set[str]) -> list[str]:
        """Re-place copies that landed beside their key, else give the busiest translator's
        hottest keys a copy each, as many as bring its predicted share halfway back within
        the bound. Returns the keys changed."""
        if not self.decision_due():
            return []
        self.next_decision = self.clock() + self.window_s / 4  # look again soon
        if len(translators) < 2:
            return []
        changed = self._replace_doubled(translators) or self._spread(translators)
        if changed:
            self.next_decision = self.clock() + self.window_s  # judge on the new routing
        return changed

    def _new_id(self, key: str) -> str:
        self.made[key] += 1
        return copy_id(key, self.made[key])

    def _replace_doubled(self, translators: set[str]) -> list[str]:
        changed = []
        for key, ids in self.ids.items():
            holders = [self.placed.get(i) for i in ids]
            if len(translators - set(holders)) == 0:
                continue  # every live translator holds an id of the key already
            seen: set[str | None] = set()
            for n, holder in enumerate(holders):
                if holder is not None and holder in seen:
                    ids[n] = self._new_id(key)
                    changed.append(key)
                seen.add(holder)
        return changed

    def _spread(self, translators: set[str]) -> list[str]:
        counts = self.shares(translators)
        total = sum(counts.values())
        if total < self.min_requests:
            return []
        fair = total / len(translators)
        busiest, requests = counts.most_common(1)[0]
        most = float(requests)
        least = min(counts.values())
        if most <= self.imbalance * fair or least * self.imbalance >= fair:
            return []
        keys = Counter(key for _, replica, key in self.decoded if replica == busiest)
        target = fair * (1 + self.imbalance) / 2  # the busiest one's share, halfway in bounds
        spread: list[str] = []
        for key, n in keys.most_common():
            ids = self.ids_of(key)
            if len(ids) >= len(translators):
                continue
            self.ids[key] = [*ids, self._new_id(key)]
            spread.append(key)
            most -= n / (len(ids) + 1)  # the share of the key's requests the new id takes
            if most <= target:
                break
        return spread
