"""From text pairs to homogeneous, token-budgeted batches.

- :class:`SourceEncoder` turns a source sentence into model ids through
  :func:`lsmt_core.tags.tag_source` (the one place that places language tags), so training,
  export and serving build identical inputs. Target side: decoder input = [BOS] + ids, gold =
  ids + [EOS].
- :class:`RouteData` holds one direction's tokenized pairs as flat arrays.
- :class:`RouteSampler` draws one route per micro-batch with temperature sampling
  (p ~ n_route ** (1/T)) and serves that route's batches, which are rebuilt each epoch of the
  route (shuffle, sort by length with random tie order, pack under a padded-token budget,
  shuffle the batch order). It is deterministic given its seed, its state is a small dict
  (saved in checkpoints for exact resume), and under DDP every rank draws the same route at
  every micro-step but takes a different batch of it (rank r takes batch ``cursor + r``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, Protocol

import numpy as np
import torch

from lsmt_core.routes import Route, route_key
from lsmt_core.tags import BOS_ID, EOS_ID, PAD_ID, UNK_ID, TagScheme, tag_source

_SENTINEL = "\u2063SENTENCE\u2063"


class TokenizerLike(Protocol):
    def encode_ids(self, text: str) -> list[int]: ...
    def decode_ids(self, ids: list[int]) -> str: ...
    def piece_to_id(self, piece: str) -> int: ...


def model_proto(tokenizer: Any) -> bytes | None:
    """The SentencePiece model of an LSMT tokenizer (``lsmt_text.tokenizer.Tokenizer``) or of a
    bare processor; None for anything else."""
    sp = getattr(tokenizer, "sp", tokenizer)
    serialized = getattr(sp, "serialized_model_proto", None)
    return serialized() if callable(serialized) else None


class SourceEncoder:
    """Source text -> ids ``tag_source(scheme, pieces, src, tgt, quality)`` mapped to ids.

    The tags ``tag_source`` adds around the sentence are mapped once per route, and the
    sentence's ids come from ``encode_ids`` (identical to mapping its pieces one by one).
    A language in ``language_tokenizers`` is written with its own tokenizer (its own
    vocabulary); LSMT tokenizers give the reserved pieces the same ids, so tags map alike.
    """

    def __init__(
        self,
        tokenizer: TokenizerLike,
        scheme: TagScheme | str,
        quality: str = "<HQ>",
        language_tokenizers: dict[str, TokenizerLike] | None = None,
    ):
        self.tokenizer = tokenizer
        self.language_tokenizers = dict(language_tokenizers or {})
        self.scheme = TagScheme(scheme)
        self.quality = quality
        self._affixes: dict[Route, tuple[list[int], list[int]]] = {}

    def tokenizer_of(self, lang: str) -> TokenizerLike:
        """The tokenizer that writes ``lang``: its own, else the shared one."""
        return self.language_tokenizers.get(lang, self.tokenizer)

    def affixes(self, route: Route) -> tuple[list[int], list[int]]:
        """(ids before the sentence, ids after it) for ``route``."""
        if route not in self._affixes:
            tagged = tag_source(self.scheme, [_SENTINEL], route.src, route.tgt, self.quality)
            if tagged.count(_SENTINEL) != 1:
                raise AssertionError("tag_source must keep the sentence pieces contiguous")
            i = tagged.index(_SENTINEL)
            ids = []
            for piece in tagged[:i] + tagged[i + 1 :]:
                pid = self.tokenizer_of(route.src).piece_to_id(piece)
                if pid == UNK_ID:
                    raise ValueError(
                        f"tag {piece!r} is not a piece of the tokenizer (route "
                        f"{route_key(route)}): was the tokenizer trained with this language?"
                    )
                ids.append(pid)
            self._affixes[route] = (ids[:i], ids[i:])
        return self._affixes[route]

    def fingerprint(self, routes: Iterable[Route]) -> str | None:
        """Digest of what decides the ids of ``routes``' sources: each tokenizer's model and
        every route's tag ids (training.token_cache); None for a tokenizer that is not
        SentencePiece's (its model cannot be read)."""
        h = hashlib.sha256()
        for route in sorted(set(routes), key=route_key):
            h.update(f"{route_key(route)} {self.affixes(route)}\0".encode())
        for lang, tok in sorted({"": self.tokenizer, **self.language_tokenizers}.items()):
            proto = model_proto(tok)
            if proto is None:
                return None
            h.update(f"tokenizer {lang}\0".encode() + hashlib.sha256(proto).digest())
        return h.hexdigest()

    def encode(self, text: str, route: Route, max_len: int | None = None) -> list[int]:
        """Tagged source ids; with ``max_len``, the sentence is truncated to fit (tags kept)."""
        prefix, suffix = self.affixes(route)
        body = self.tokenizer_of(route.src).encode_ids(text)
        if max_len is not None and len(prefix) + len(body) + len(suffix) > max_len:
            body = body[: max(0, max_len - len(prefix) - len(suffix))]
        return [*prefix, *body, *suffix]


@dataclass
class RouteData:
    """Tokenized pairs of one direction; source ids are tagged, target ids are bare."""

    route: Route
    src: np.ndarray  # flat int32
    src_offsets: np.ndarray  # (n + 1,) int64
    tgt: np.ndarray
    tgt_offsets: np.ndarray

    @classmethod
    def from_lists(
        cls, route: Route, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]]
    ) -> RouteData:
        if len(src) != len(tgt):
            raise ValueError(f"{route_key(route)}: {len(src)} sources but {len(tgt)} targets")

        def flat(seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
            # map and chain iterate in C: a Python generator here took most of the time of
            # loading a corpus of millions of pairs
            lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
            offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            values = np.fromiter(chain.from_iterable(seqs), dtype=np.int32, count=int(offsets[-1]))
            return values, offsets

        s, so = flat(src)
        t, to = flat(tgt)
        return cls(route, s, so, t, to)

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    @property
    def src_lengths(self) -> np.ndarray:
        return np.diff(self.src_offsets)

    @property
    def tgt_lengths(self) -> np.ndarray:
        return np.diff(self.tgt_offsets)

    def cost(self) -> np.ndarray:
        """Padded length of each pair in a batch: max(source, target + 1)."""
        return np.maximum(self.src_lengths, self.tgt_lengths + 1)

    def source(self, i: int) -> np.ndarray:
        return self.src[self.src_offsets[i] : self.src_offsets[i + 1]]

    def target(self, i: int) -> np.ndarray:
        return self.tgt[self.tgt_offsets[i] : self.tgt_offsets[i + 1]]

    def subset(self, indices: Iterable[int]) -> RouteData:
        idx = list(indices)
        return RouteData.from_lists(
            self.route, [self.source(i) for i in idx], [self.target(i) for i in idx]
        )


@dataclass
class Batch:
    route: Route
    src: torch.Tensor  # (B, S) tagged source ids, PAD-padded
    tgt_in: torch.Tensor  # (B, T) [BOS] + target
    gold: torch.Tensor  # (B, T) target + [EOS]
    ntokens: int  # non-pad gold tokens
    src_tokens: int  # non-pad source tokens

    def to(self, device: torch.device | str) -> Batch:
        return Batch(
            self.route,
            self.src.to(device, non_blocking=True),
            self.tgt_in.to(device, non_blocking=True),
            self.gold.to(device, non_blocking=True),
            self.ntokens,
            self.src_tokens,
        )

    def __len__(self) -> int:
        return self.src.shape[0]

    def rows(self, start: int, stop: int) -> Batch:
        """Rows ``start:stop`` (padding columns kept)."""
        gold = self.gold[start:stop]
        src = self.src[start:stop]
        return Batch(
            self.route,
            src,
            self.tgt_in[start:stop],
            gold,
            int((gold != PAD_ID).sum()),
            int((src != PAD_ID).sum()),
        )


def collate(data: RouteData, indices: Sequence[int], pad_to_multiple: int = 1) -> Batch:
    """Padded tensors for the pairs ``indices`` of ``data``."""
    return make_batch(
        data.route,
        [data.source(i) for i in indices],
        [data.target(i) for i in indices],
        pad_to_multiple,
    )


def make_batch(
    route: Route,
    sources: Sequence[Sequence[int]],
    targets: Sequence[Sequence[int]],
    pad_to_multiple: int = 1,
) -> Batch:
    """A batch from tagged source ids (end-of-sentence included) and plain target ids:
    decoder input [BOS] + target, gold target + [EOS], padded (widths rounded up to
    ``pad_to_multiple``)."""
    m = max(1, pad_to_multiple)
    s_len = -(-max(len(s) for s in sources) // m) * m
    t_len = -(-(max(len(t) for t in targets) + 1) // m) * m
    b = len(sources)
    src = np.full((b, s_len), PAD_ID, dtype=np.int64)
    tgt_in = np.full((b, t_len), PAD_ID, dtype=np.int64)
    gold = np.full((b, t_len), PAD_ID, dtype=np.int64)
    for row, (s, t) in enumerate(zip(sources, targets, strict=True)):
        src[row, : len(s)] = s
        tgt_in[row, 0] = BOS_ID
        tgt_in[row, 1 : len(t) + 1] = t
        gold[row, : len(t)] = t
        gold[row, len(t)] = EOS_ID
    ntok = sum(len(t) + 1 for t in targets)
    return Batch(
        route,
        torch.from_numpy(src),
        torch.from_numpy(tgt_in),
        torch.from_numpy(gold),
        ntok,
        sum(len(s) for s in sources),
    )


def pack(order: np.ndarray, cost: np.ndarray, batch_tokens: int, max_sentences: int | None):
    """Split ``order`` (indices sorted by ascending cost) into consecutive batches whose
    padded size ``len(batch) * max(cost)`` stays within ``batch_tokens``."""
    batches: list[np.ndarray] = []
    start, n = 0, len(order)
    cap = max_sentences or n
    costs = cost[order]
    while start < n:
        end = start + 1
        # costs ascending: the last element of a batch is its longest
        while end < n and end - start < cap and (end + 1 - start) * costs[end] <= batch_tokens:
            end += 1
        batches.append(order[start:end])
        start = end
    return batches


def route_probabilities(sizes: dict[str, int], temperature: float) -> dict[str, float]:
    """p(route) proportional to (n_route / N) ** (1 / T)."""
    total = sum(sizes.values())
    w = {k: (n / total) ** (1.0 / temperature) for k, n in sizes.items()}
    z = sum(w.values())
    return {k: v / z for k, v in w.items()}


class RouteSampler:
    """Temperature sampling over routes; token-budgeted homogeneous batches; resumable."""

    def __init__(
        self,
        datasets: dict[str, RouteData] | Iterable[RouteData],
        batch_tokens: int,
        max_sentences: int | None = None,
        temperature: float = 5.0,
        seed: int = 1,
        rank: int = 0,
        world_size: int = 1,
        pad_to_multiple: int = 1,
    ):
        if not isinstance(datasets, dict):
            datasets = {route_key(d.route): d for d in datasets}
        empty = [k for k, d in datasets.items() if len(d) == 0]
        if empty or not datasets:
            raise ValueError(f"no training pairs for routes {empty or 'at all'}")
        self.keys = sorted(datasets)
        self.data = datasets
        self.batch_tokens = batch_tokens
        self.max_sentences = max_sentences
        self.seed = seed
        self.rank, self.world_size = rank, world_size
        self.pad_to_multiple = pad_to_multiple
        self.costs = {k: datasets[k].cost() for k in self.keys}
        self.probs = route_probabilities({k: len(datasets[k]) for k in self.keys}, temperature)
        self._p = np.array([self.probs[k] for k in self.keys])
        self._rng = np.random.default_rng(seed)
        self.epoch = dict.fromkeys(self.keys, 0)
        self.cursor = dict.fromkeys(self.keys, 0)
        self.draws = 0
        self._batches: dict[str, tuple[int, list[np.ndarray]]] = {}

    def epoch_batches(self, key: str, epoch: int) -> list[np.ndarray]:
        """The batches of route ``key`` in epoch ``epoch`` (a pure function of the seed)."""
        cached = self._batches.get(key)
        if cached is not None and cached[0] == epoch:
            return cached[1]
        rng = np.random.default_rng([self.seed, self.keys.index(key), epoch])
        cost = self.costs[key]
        perm = rng.permutation(len(cost))
        order = perm[np.argsort(cost[perm], kind="stable")]
        batches = pack(order, cost, self.batch_tokens, self.max_sentences)
        batches = [batches[i] for i in rng.permutation(len(batches))]
        self._batches[key] = (epoch, batches)
        return batches

    def next_indices(self) -> tuple[str, np.ndarray]:
        """(route key, pair indices) of this rank's next micro-batch."""
        key = self.keys[int(self._rng.choice(len(self.keys), p=self._p))]
        batches = self.epoch_batches(key, self.epoch[key])
        if self.cursor[key] + self.world_size > len(batches) and self.cursor[key] > 0:
            self.epoch[key] += 1
            self.cursor[key] = 0
            batches = self.epoch_batches(key, self.epoch[key])
        idx = batches[(self.cursor[key] + self.rank) % len(batches)]
        self.cursor[key] += self.world_size
        self.draws += 1
        return key, idx

    def next_batch(self) -> Batch:
        key, idx = self.next_indices()
        return collate(self.data[key], idx, self.pad_to_multiple)

    def state_dict(self) -> dict[str, Any]:
        return {
            "rng": self._rng.bit_generator.state,
            "epoch": dict(self.epoch),
            "cursor": dict(self.cursor),
            "draws": self.draws,
            "keys": list(self.keys),
            "seed": self.seed,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["keys"] != self.keys:
            raise ValueError(f"sampler state is for routes {state['keys']}, not {self.keys}")
        self.seed = state["seed"]
        self._rng.bit_generator.state = state["rng"]
        self.epoch = dict(state["epoch"])
        self.cursor = dict(state["cursor"])
        self.draws = state["draws"]
        self._batches.clear()


def encode_corpus(
    pairs: dict[Route, list[tuple[str, str]]],
    encoder: SourceEncoder,
    max_len: int | None = None,
    progress: bool = False,
    target_encoder: Callable[[str, list[str]], list[list[int]]] | None = None,
) -> tuple[dict[str, RouteData], dict[str, int]]:
    """Tokenize text pairs per route; drop pairs longer than ``max_len`` (after tagging).

    Returns the datasets and the number of dropped pairs per route. Each distinct sentence is
    encoded once (multi-parallel corpora repeat sentences across directions).
    ``target_encoder(lang, texts)`` segments the target side per target language (train-time
    vocabulary filtering, ``training.vocab``); by default both sides are written with
    their language's tokenizer (``encoder.tokenizer_of``). The trainer keeps the result
    between runs (``training.token_cache``).
    """

    def encode_all(tok: TokenizerLike, texts: set[str]) -> dict[str, list[int]]:
        unique = sorted(texts)
        if hasattr(tok, "encode_batch"):  # SentencePiece's multi-threaded batch encoder
            encoded = tok.encode_batch(unique)
        else:
            encoded = [tok.encode_ids(t) for t in unique]
        return dict(zip(unique, encoded, strict=True))

    # The texts each tokenizer writes (one, the shared, unless a language has its own): a
    # sentence on both sides of a multi-parallel corpus is encoded once.
    writers: dict[int, tuple[TokenizerLike, set[str]]] = {}

    def texts_of(lang: str) -> set[str]:
        tok = encoder.tokenizer_of(lang)
        return writers.setdefault(id(tok), (tok, set()))[1]

    for route, route_pairs in pairs.items():
        texts_of(route.src).update(s for s, _ in route_pairs)
        if target_encoder is None:
            texts_of(route.tgt).update(t for _, t in route_pairs)
    encoded = {key: encode_all(tok, texts) for key, (tok, texts) in writers.items()}

    def ids_of(lang: str) -> dict[str, list[int]]:
        return encoded[id(encoder.tokenizer_of(lang))]

    if target_encoder is None:
        tgt_ids = {route.tgt: ids_of(route.tgt) for route in pairs}
    else:
        tgt_ids = {}
        for lang in sorted({route.tgt for route in pairs}):
            texts = sorted({t for r, rp in pairs.items() if r.tgt == lang for _, t in rp})
            tgt_ids[lang] = dict(zip(texts, target_encoder(lang, texts), strict=True))

    datasets: dict[str, RouteData] = {}
    dropped: dict[str, int] = {}
    items = sorted(pairs.items(), key=lambda kv: route_key(kv[0]))
    if progress:
        from tqdm import tqdm

        items = tqdm(items, desc="tokenize", unit="route")
    for route, route_pairs in items:
        prefix, suffix = encoder.affixes(route)
        src_ids, route_tgt_ids = ids_of(route.src), tgt_ids[route.tgt]
        srcs, tgts = [], []
        n_drop = 0
        for s, t in route_pairs:
            src = [*prefix, *src_ids[s], *suffix]
            tgt = route_tgt_ids[t]
            if max_len is not None and (len(src) > max_len or len(tgt) + 1 > max_len):
                n_drop += 1
                continue
            srcs.append(src)
            tgts.append(tgt)
        datasets[route_key(route)] = RouteData.from_lists(route, srcs, tgts)
        dropped[route_key(route)] = n_drop
    return datasets, dropped
