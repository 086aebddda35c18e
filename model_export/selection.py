"""What a bundle offers, chosen at export: its languages, routes and target vocabularies.

Used by the export command and by ``add-language`` (which must choose as the export did).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lsmt_core.routes import Route, parse_route, route_key

if TYPE_CHECKING:
    from training.checkpoint import CheckpointMeta
    from training.recipe import Recipe

RouteList = list[Route]


def parse_routes(text: str | None) -> RouteList | None:
    if not text:
        return None
    try:
        return [parse_route(item.strip()) for item in text.split(",")]
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def chosen_routes(
    meta: CheckpointMeta, languages_arg: str | None, routes_arg: str | None
) -> tuple[list[str], RouteList]:
    """The languages asked for (default: the model's) and the routes between them (default:
    every trained route)."""
    languages = languages_arg.split(",") if languages_arg else list(meta.languages)
    unknown = sorted(set(languages) - set(meta.languages))
    if unknown:
        raise SystemExit(f"languages {unknown} not in the model; it has {meta.languages}")
    routes = parse_routes(routes_arg) or [(r.src, r.tgt) for r in meta.routes]
    return languages, [r for r in routes if r[0] in languages and r[1] in languages]


def target_vocabulary(
    meta: CheckpointMeta,
    recipe: Recipe,
    languages: list[str],
    min_count: int | None,
    max_size: int | None,
    tokenizer_dir: Path | None,
) -> tuple[dict[str, list[int]] | None, tuple[int, int] | None]:
    """Each target language's vocabulary ids and the (K, N) rule that chose them: the ones the
    model trained with when the checkpoint has them, else frequency >= K, top N (with N
    given), else none (the full vocabulary)."""
    saved_vocab = meta.extra.get("target_vocab")  # training.vocab: what the model trained with
    if saved_vocab:
        if max_size or min_count:
            print("note: using the target vocabularies saved in the checkpoint, not K/N given")
        target_vocab = {lang: saved_vocab["ids"][lang] for lang in languages}
        return target_vocab, (int(saved_vocab["min_count"]), int(saved_vocab["max_size"]))
    if not max_size:
        return None, None
    from lsmt_bundle import read_pieces
    from lsmt_core.tags import QUALITY_TAGS, lang_tag
    from lsmt_core.target_vocab import select_target_vocab
    from lsmt_text.tokenizer import load_frequencies

    freqs = load_frequencies(tokenizer_dir or recipe.data.tokenizer)
    pieces = read_pieces(meta.tokenizer_model_path())
    keep = (*QUALITY_TAGS, *(lang_tag(lang) for lang in meta.languages))
    k = min_count or 1
    target_vocab = {
        lang: select_target_vocab(freqs[lang], pieces, k, max_size, keep) for lang in languages
    }
    return target_vocab, (k, max_size)


def filter_routes(
    routes: RouteList, evaluation: dict | None, min_chrf_gain: float | None
) -> tuple[RouteList, dict[str, str]]:
    """With ``--min-chrf-gain``: the routes that beat copying the source by that much in
    ``evaluation``, and why each other one is left out."""
    if min_chrf_gain is None:
        return routes, {}
    if evaluation is None:
        raise SystemExit("--min-chrf-gain needs --eval-json")
    routes, dropped = routes_beating_copy(routes, evaluation, min_chrf_gain)
    for key, why in dropped.items():
        print(f"leaving out {key}: {why}")
    if not routes:
        raise SystemExit("no route passes --min-chrf-gain")
    return routes, dropped


def routes_beating_copy(
    routes: RouteList, evaluation: dict, min_gain: float
) -> tuple[RouteList, dict[str, str]]:
    """Routes whose evaluated chrF exceeds the copy baseline by ``min_gain``; why others fail."""
    kept, dropped = [], {}
    for src, tgt in routes:
        result = evaluation.get("directions", {}).get(route_key((src, tgt)))
        if result is None:
            dropped[route_key((src, tgt))] = "not evaluated"
        elif result["chrf"] - result["copy_chrf"] < min_gain:
            dropped[route_key((src, tgt))] = (
                f"chrF {result['chrf']:.1f} vs copy {result['copy_chrf']:.1f} "
                f"(gain below {min_gain:g})"
            )
        else:
            kept.append((src, tgt))
    return kept, dropped
