"""The datasets of a run: tokenizer, training pairs per route (tokenized, target side filtered
by per-language vocabularies when the recipe asks), the fixed dev sample and the route sampler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lsmt_core.routes import Route, route_key
from lsmt_text.paths import resolve_path

from .add_language import TrainedModel
from .batching import RouteData, RouteSampler, SourceEncoder, encode_corpus
from .checkpoint import tokenizer_reference
from .recipe import Recipe
from .token_cache import SAME_TOKENIZERS, TokenCache, encode_cached


def open_tokenizer(path: Path | str):
    from lsmt_text.tokenizer import Tokenizer

    return Tokenizer(resolve_path(path))


def vocab_size_of(tokenizer: Any) -> int:
    v = tokenizer.vocab_size
    return int(v() if callable(v) else v)


def load_pairs(
    data_dir: Path, split: str, routes: list[Route] | None = None
) -> dict[Route, list[tuple[str, str]]]:
    from lsmt_text.data import load_split

    raw = load_split(data_dir, split)
    pairs = {Route(s, t): rows for (s, t), rows in raw.items()}
    if routes is None:
        return pairs
    return {r: pairs[r] for r in routes if r in pairs}


def mix_sources(
    rows: list[tuple[str, str]],
    ids: list[str],
    temperature: float,
    seed: tuple[int, int],
    weights: dict[str, float] | None = None,
) -> list[tuple[str, str]]:
    """The pairs of one direction re-drawn so that source s makes up p_s ~ w_s * n_s ** (1/T)
    of them (``route_probabilities``' rule over sources, times the source's weight, 1 where
    ``weights`` does not name it): T = 1 and no weights keep every pair once, a larger T or
    weight repeats small sources and samples large ones (without replacement while they
    suffice). The direction keeps its size, so direction sampling is unchanged. Deterministic."""
    from lsmt_text.data.formats import source_of

    from .batching import route_probabilities

    by_source: dict[str, list[int]] = {}
    for i, pair_id in enumerate(ids):
        by_source.setdefault(source_of(pair_id), []).append(i)
    probs = route_probabilities({s: len(v) for s, v in by_source.items()}, temperature)
    if weights:
        probs = {s: p * weights.get(s, 1.0) for s, p in probs.items()}
        total = sum(probs.values())
        probs = {s: p / total for s, p in probs.items()}
    rng = np.random.default_rng(list(seed))
    out: list[tuple[str, str]] = []
    for source in sorted(by_source):
        members = np.array(by_source[source])
        want = round(probs[source] * len(rows))
        reps, rest = divmod(want, len(members))
        picked = np.concatenate(
            [np.tile(members, reps), rng.choice(members, size=rest, replace=False)]
        )
        out.extend(rows[i] for i in np.sort(picked))
    return out


def dev_sample(
    pairs: dict[Route, list[tuple[str, str]]], n: int, seed: int
) -> dict[Route, list[tuple[str, str]]]:
    """A fixed random sample of ``n`` pairs per direction (order kept)."""
    out = {}
    for route in sorted(pairs, key=route_key):
        rows = pairs[route]
        if len(rows) > n:
            rng = np.random.default_rng([seed, len(rows)])
            keep = np.sort(rng.choice(len(rows), size=n, replace=False))
            rows = [rows[i] for i in keep]
        out[route] = rows
    return out


@dataclass
class TrainingData:
    tok_ref: dict[str, Any]  # the tokenizer as recorded in checkpoints
    tokenizer: Any
    routes: list[Route]
    languages: list[str]
    encoder: SourceEncoder
    datasets: dict[str, RouteData]  # route key -> tokenized pairs
    dev_pairs: dict[Route, list[tuple[str, str]]]
    sampler: RouteSampler
    stats: dict[str, dict[str, Any]]  # route key -> pairs, dropped, tokens, probability
    target_vocab: Any = None  # training.vocab.TargetVocabularies with data.target_vocab
    # training.eval_testsets: name -> fixed sample of its pairs (learning curves only)
    curve_pairs: dict[str, dict[Route, list[tuple[str, str]]]] = field(default_factory=dict)
    # data.language_tokenizers, as recorded in checkpoints
    language_tok_refs: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def language_vocab_sizes(self) -> dict[str, int]:
        """The languages with their own vocabulary and its size (the model's own embeddings)."""
        return {lang: vocab_size_of(tok) for lang, tok in self.encoder.language_tokenizers.items()}


def build_training_data(
    recipe: Recipe,
    *,
    rank: int,
    world_size: int,
    pad_to_multiple: int,
    progress: bool,
    log: Callable[[str], None],
    keep: TrainedModel | None = None,
    token_cache: TokenCache | None = None,
) -> TrainingData:
    """Everything the loop reads, from the recipe's ``data`` section; each rank samples
    different batches of the same route (``rank``, ``world_size``). When adding languages,
    ``keep`` is the trained model: its languages stay the model's and their target
    vocabularies stay its own (``training.add_language``). ``token_cache``: where the
    tokenized pairs are looked up and kept (``training.token_cache``)."""
    t = recipe.training
    tok_ref = tokenizer_reference(recipe.data.tokenizer)
    tokenizer = open_tokenizer(tok_ref["path"])
    data_dir = resolve_path(recipe.data.dir)
    train_pairs = _training_pairs(recipe, data_dir)
    routes = list(train_pairs)
    languages = sorted(
        set(recipe.data.languages or [])
        | {r.src for r in routes}
        | {r.tgt for r in routes}
        | set(keep.languages if keep else [])
    )
    language_tok_refs = {
        lang: tokenizer_reference(path) for lang, path in recipe.data.language_tokenizers.items()
    }
    unknown = sorted(set(language_tok_refs) - set(languages))
    if unknown:
        raise ValueError(f"data.language_tokenizers names languages the run lacks: {unknown}")
    encoder = SourceEncoder(
        tokenizer,
        recipe.model.tag_scheme,
        recipe.data.quality_tag,
        {lang: open_tokenizer(ref["path"]) for lang, ref in language_tok_refs.items()},
    )
    target_vocab, datasets, dropped = _encoded(
        recipe, tok_ref["path"], encoder, languages, train_pairs, keep, progress, log, token_cache
    )
    dev_pairs: dict[Route, list[tuple[str, str]]] = {}
    if t.eval_every > 0:
        dev_pairs = _dev_pairs(data_dir, routes, t)
    curve_pairs = {name: testset_sample(name, data_dir, routes, t) for name in t.eval_testsets}
    sampler = RouteSampler(
        datasets,
        batch_tokens=t.batch_tokens,
        max_sentences=t.max_sentences,
        temperature=t.temperature,
        seed=t.seed,
        rank=rank,
        world_size=world_size,
        pad_to_multiple=pad_to_multiple,
    )
    stats = {
        route_key(r): _route_stats(datasets[route_key(r)], dropped[route_key(r)])
        | {"probability": sampler.probs[route_key(r)], "dev_pairs": len(dev_pairs.get(r, []))}
        for r in routes
    }
    return TrainingData(
        tok_ref,
        tokenizer,
        routes,
        languages,
        encoder,
        datasets,
        dev_pairs,
        sampler,
        stats,
        target_vocab,
        curve_pairs,
        language_tok_refs,
    )


def _encoded(
    recipe: Recipe,
    tokenizer_path: Any,
    encoder: SourceEncoder,
    languages: list[str],
    train_pairs: dict[Route, list[tuple[str, str]]],
    keep: TrainedModel | None,
    progress: bool,
    log: Callable[[str], None],
    cache: TokenCache | None,
) -> tuple[Any, dict[str, RouteData], dict[str, int]]:
    """(target vocabularies or None, tokenized pairs per route key, pairs dropped as too
    long): the target side segmented with each language's vocabulary when the recipe has one."""
    max_len = recipe.data.max_len or recipe.model.max_positions
    cfg = recipe.data.target_vocab
    vocabs = None
    if cfg is not None:
        from .vocab import target_vocabularies

        fixed = keep.target_vocab if keep else None
        vocabs = target_vocabularies(cfg, tokenizer_path, languages, encoder, log=log, fixed=fixed)
    if vocabs is not None and vocabs.filter_training:
        from .vocab import encode_corpus_filtered

        filtered = vocabs
        target = filtered.fingerprint()  # what writes the target side (the cache's key)

        def build() -> tuple[dict[str, RouteData], dict[str, int]]:
            return encode_corpus_filtered(train_pairs, encoder, filtered, max_len, progress)

    else:
        target = SAME_TOKENIZERS

        def build() -> tuple[dict[str, RouteData], dict[str, int]]:
            return encode_corpus(train_pairs, encoder, max_len=max_len, progress=progress)

    datasets, dropped = encode_cached(cache, train_pairs, encoder, max_len, build, target, log)
    return vocabs, datasets, dropped


def _route_stats(dataset: RouteData, dropped_too_long: int) -> dict[str, Any]:
    return {
        "pairs": len(dataset),
        "dropped_too_long": dropped_too_long,
        "src_tokens": int(dataset.src_lengths.sum()),
        "tgt_tokens": int(dataset.tgt_lengths.sum()),
    }


def _training_pairs(recipe: Recipe, data_dir: Path) -> dict[Route, list[tuple[str, str]]]:
    """The recipe's routes (in route-key order) and their training pairs: sources mixed by
    ``source_temperature`` when set, cut to ``max_pairs_per_route``."""
    t = recipe.training
    train_pairs = load_pairs(data_dir, "train")
    routes = recipe.route_list(sorted(train_pairs, key=route_key))
    train_pairs = {r: train_pairs[r] for r in routes}
    if recipe.data.source_temperature is not None:
        from lsmt_text.data import load_ids

        temperature = recipe.data.source_temperature
        train_pairs = {
            r: mix_sources(
                train_pairs[r],
                load_ids(data_dir, "train", r.src, r.tgt),
                temperature,
                (t.seed, i),
                recipe.data.source_weights,
            )
            for i, r in enumerate(routes)
        }
    if recipe.data.max_pairs_per_route:
        train_pairs = {r: v[: recipe.data.max_pairs_per_route] for r, v in train_pairs.items()}
    return train_pairs


def _dev_pairs(data_dir: Path, routes: list[Route], t: Any) -> dict[Route, list[tuple[str, str]]]:
    """The fixed dev sample evaluated during training (none where the corpus has no dev)."""
    try:
        dev = load_pairs(data_dir, "dev", routes)
    except FileNotFoundError:
        dev = {}
    return dev_sample(dev, t.eval_sentences, t.seed)


def testset_sample(
    name: str, data_dir: Path, routes: list[Route], t: Any
) -> dict[Route, list[tuple[str, str]]]:
    """A fixed sample of ``eval_sentences`` pairs per route of a named test set."""
    from lsmt_text.data.testsets import load_testset

    pairs = load_testset(name, data_dir, [(r.src, r.tgt) for r in routes])
    return dev_sample({Route(s, t_): p for (s, t_), p in pairs.items()}, t.eval_sentences, t.seed)
