"""Language-specific layers (LSL paper, Pires et al. 2023): architecture selection and
parameter accounting.

    # after training a search recipe (model.language_specific.search: true, section 3.2):
    python -m training.lsl select --checkpoint runs/lsl_search --out runs/lsl_selected.yaml \\
        [--checkpoint runs/lsl_search_seed2 ...] [--plot mixing.png] [--json mixing.json] \\
        [--base-recipe lsl_nas] [--name NAME] [--init-from runs/baseline]

    # total and effective (per route) parameters of recipes, next to a dense baseline:
    python -m training.lsl params --config lsl_nas lsl_nas_sd baseline_12-2_separate [--json]

``select`` reads the converged mixing weights (softmax of ``encoder.layers.<i>.mix_logits``,
averaged over the given runs as the paper averages 3), picks the argmax per layer (shared,
source-indexed or target-indexed LSL), and writes the selected architecture as a recipe: the
base recipe (the search run's own, or ``--base-recipe``) with ``encoder_src``/``encoder_tgt``
set and the search switched off, trained from scratch as in the paper, or from a dense
checkpoint with ``--init-from`` (section 3.3: every language copy starts from the dense
layer). It also writes the weights as JSON and a plot like the paper's Figure 3.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from itertools import permutations
from pathlib import Path
from typing import Any

from lsmt_core.routes import route_key

from .model.nas import CHOICES, mixing_weights_from_state, select_architecture
from .recipe import Recipe, RecipeError, dump_recipe, load_recipe, recipe_from_dict

LSL_LANGUAGES = ("de", "en", "es", "fr", "it", "ja", "ko", "pt", "sw", "zh")

# -- selection -----------------------------------------------------------------------------------


def read_mixing_weights(
    checkpoints: list[str | Path], which: str = "last"
) -> tuple[list[dict[str, Any]], list[list[list[float]]]]:
    """(run info, weights per run [run][layer][choice]) of search checkpoints."""
    from .checkpoint import load_checkpoint

    runs, weights = [], []
    for path in checkpoints:
        ckpt = load_checkpoint(path, which)  # type: ignore[arg-type]
        weights.append(mixing_weights_from_state(ckpt["model"]))
        runs.append(
            {
                "checkpoint": ckpt["_path"],
                "step": int(ckpt["step"]),
                "recipe": ckpt["recipe"],
                "dev_chrf": ckpt.get("dev_chrf"),
            }
        )
    depths = {len(w) for w in weights}
    if len(depths) != 1:
        raise ValueError(f"search runs have different encoder depths: {sorted(depths)}")
    return runs, weights


def summarize(weights: list[list[list[float]]]) -> list[dict[str, Any]]:
    """Mean, min, max and standard deviation over runs, and the argmax, per layer."""
    n_runs = len(weights)
    rows = []
    for i in range(len(weights[0])):
        row: dict[str, Any] = {"layer": i + 1}
        for k, name in enumerate(CHOICES):
            vals = [w[i][k] for w in weights]
            mean = sum(vals) / n_runs
            row[name] = mean
            row[f"{name}_min"], row[f"{name}_max"] = min(vals), max(vals)
            row[f"{name}_std"] = (sum((v - mean) ** 2 for v in vals) / n_runs) ** 0.5
        row["choice"] = max(CHOICES, key=lambda c: row[c])
        rows.append(row)
    return rows


def selected_recipe(
    base: Recipe,
    mean_weights: list[list[float]],
    name: str | None = None,
    init_from: str | None = None,
    description: str = "",
) -> Recipe:
    """``base`` with the architecture chosen by argmax of ``mean_weights`` (search off)."""
    if base.model.encoder_layers != len(mean_weights):
        raise ValueError(
            f"the base recipe has {base.model.encoder_layers} encoder layers, the search "
            f"{len(mean_weights)}"
        )
    choice = select_architecture(mean_weights)
    ls = base.model.language_specific.model_copy(update={"search": False, **choice})
    raw = base.model_dump(mode="json")
    raw["model"]["language_specific"] = ls.model_dump(mode="json")
    raw["name"] = name or re.sub(r"_search$", "", base.name) + "_selected"
    raw["description"] = description
    raw["init_from"] = init_from
    raw["init_mode"] = "copy"
    return recipe_from_dict(raw, source="training.lsl select")


def plot_mixing(rows: list[dict[str, Any]], out: Path, title: str) -> None:
    """Mixing weights per layer (the paper's Figure 3); shaded: min..max over runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = [r["layer"] for r in rows]
    colors = {"shared": "tab:gray", "src": "tab:blue", "tgt": "tab:orange"}
    labels = {"shared": "shared", "src": "source LSL", "tgt": "target LSL"}
    fig, ax = plt.subplots(figsize=(max(5.0, 0.45 * len(layers) + 2), 3.4))
    for c in CHOICES:
        ax.plot(layers, [r[c] for r in rows], marker="o", color=colors[c], label=labels[c])
        lo, hi = [r[f"{c}_min"] for r in rows], [r[f"{c}_max"] for r in rows]
        if lo != hi:
            ax.fill_between(layers, lo, hi, color=colors[c], alpha=0.2, linewidth=0)
    for r in rows:  # the selected component of each layer
        ax.annotate(
            {"shared": "sh", "src": "S", "tgt": "T"}[r["choice"]],
            (r["layer"], r[r["choice"]]),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=8,
            color=colors[r["choice"]],
        )
    ax.set_xticks(layers)
    ax.set_xlabel("encoder layer (1 = bottom)")
    ax.set_ylabel("mixing weight")
    ax.set_ylim(0, max(0.6, max(max(r[c] for c in CHOICES) for r in rows) + 0.08))
    ax.axhline(1 / 3, color="black", linewidth=0.5, linestyle=":")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def _header(rows: list[dict[str, Any]], runs: list[dict[str, Any]], recipe: Recipe) -> str:
    ls = recipe.model.language_specific
    lines = [
        "# Selected by `python -m training.lsl select` (LSL paper, section 3.2: argmax of the",
        "# converged mixing weights per encoder layer) from:",
        *(f"#   {r['checkpoint']} (step {r['step']})" for r in runs),
        f"# LSL (src={set(ls.encoder_src) or '{}'} & tgt={set(ls.encoder_tgt) or '{}'})",
        "# layer   shared     src     tgt   choice",
        *(
            f"# {r['layer']:>5} {r['shared']:>8.3f}{r['src']:>8.3f}{r['tgt']:>8.3f}   {r['choice']}"
            for r in rows
        ),
    ]
    return "\n".join(lines) + "\n"


def select_main(args: argparse.Namespace) -> int:
    runs, weights = read_mixing_weights(args.checkpoint, args.which)
    rows = summarize(weights)
    mean = [[r[c] for c in CHOICES] for r in rows]
    base = load_recipe(args.base_recipe) if args.base_recipe else None
    if base is None:
        base = recipe_from_dict(runs[0]["recipe"], source=runs[0]["checkpoint"])
    out = Path(args.out)
    choice = select_architecture(mean)
    description = (
        f"LSL (src={choice['encoder_src']}, tgt={choice['encoder_tgt']}) selected from the "
        f"mixing weights of {len(runs)} search run(s) ({', '.join(r['checkpoint'] for r in runs)})"
    )
    recipe = selected_recipe(base, mean, args.name, args.init_from, description)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_header(rows, runs, recipe) + dump_recipe(recipe), encoding="utf-8")
    load_recipe(out)  # what was written loads
    json_path = Path(args.json) if args.json else out.with_suffix(".mixing.json")
    plot_path = Path(args.plot) if args.plot else out.with_suffix(".mixing.png")
    result = {
        "choices": list(CHOICES),
        "runs": [{k: v for k, v in r.items() if k != "recipe"} for r in runs],
        "weights": weights,
        "layers": rows,
        "encoder_src": choice["encoder_src"],
        "encoder_tgt": choice["encoder_tgt"],
        "recipe": str(out),
    }
    json_path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    title = (
        f"{base.name}: converged mixing weights ({len(runs)} run(s), step "
        f"{', '.join(str(r['step']) for r in runs)})"
    )
    plot_mixing(rows, plot_path, title)
    print(f"{'layer':>5}{'shared':>9}{'src':>8}{'tgt':>8}  choice")
    for r in rows:
        print(f"{r['layer']:>5}{r['shared']:>9.3f}{r['src']:>8.3f}{r['tgt']:>8.3f}  {r['choice']}")
    print(f"selected LSL (src={choice['encoder_src']}, tgt={choice['encoder_tgt']})")
    print(f"recipe -> {out}\nweights -> {json_path}\nplot -> {plot_path}")
    return 0


# -- parameter counts ----------------------------------------------------------------------------


def recipe_languages(recipe: Recipe) -> list[str]:
    """The recipe's languages: ``data.languages``, else the corpus's, else the paper's ten."""
    if recipe.data.languages:
        return sorted(recipe.data.languages)
    if recipe.data.routes:
        return sorted({lang for r in recipe.data.routes for lang in r.split("-")})
    from lsmt_text.paths import resolve_path

    try:
        from lsmt_text.data.formats import languages as corpus_languages

        found = corpus_languages(resolve_path(recipe.data.dir))
        if found:
            return sorted(found)
    except (FileNotFoundError, OSError):
        pass
    return list(LSL_LANGUAGES)


def recipe_vocab_size(recipe: Recipe, default: int) -> int:
    from lsmt_text.paths import resolve_path

    tok = resolve_path(recipe.data.tokenizer)
    if (tok / "spm.model").is_file() or tok.is_file():
        from lsmt_text.tokenizer import Tokenizer

        return Tokenizer(tok).vocab_size
    return default


def parameter_counts(recipe: Recipe, vocab_size: int, languages: list[str]) -> dict[str, Any]:
    """Total and per-route parameters of the recipe's model and of its dense baseline (same
    dimensions and decoder sharing, no language-specific encoder/decoder layers)."""
    import torch

    from .model import Route, build_model

    def counts(cfg) -> tuple[int, dict[str, int]]:
        with torch.device("meta"):
            model = build_model(cfg, vocab_size, languages)
        total = sum(p.numel() for p in model.parameters())
        routes = recipe.data.routes or [route_key((s, t)) for s, t in permutations(languages, 2)]
        per_route = {}
        for key in routes:
            s, t = key.split("-")
            per_route[key] = model.route_parameter_count(Route(s, t))
        return total, per_route

    total, per_route = counts(recipe.model)
    dense_cfg = recipe.model.model_copy(
        update={"language_specific": type(recipe.model.language_specific)()}
    )
    base_total, base_route = counts(dense_cfg)
    values = sorted(set(per_route.values()))
    return {
        "recipe": recipe.name,
        "languages": languages,
        "vocab_size": vocab_size,
        "encoder_layers": recipe.model.encoder_layers,
        "decoder_layers": recipe.model.decoder_layers,
        "decoder_sharing": recipe.model.decoder_sharing,
        "language_specific": recipe.model.language_specific.model_dump(mode="json"),
        "total": total,
        "per_route_min": values[0],
        "per_route_max": values[-1],
        "baseline_total": base_total,
        "baseline_per_route": max(base_route.values()),
        "per_route_equals_baseline": values == [max(base_route.values())],
        "routes": len(per_route),
    }


def params_main(args: argparse.Namespace) -> int:
    results = []
    for name in args.config:
        try:
            recipe = load_recipe(name)
        except RecipeError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        langs = args.languages.split(",") if args.languages else recipe_languages(recipe)
        vocab = args.vocab_size or recipe_vocab_size(recipe, 8000)
        results.append(parameter_counts(recipe, vocab, langs))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(
        f"{'recipe':<26}{'layers':>7}{'decoder':>10}{'LSL (src / tgt)':>28}"
        f"{'total':>10}{'per route':>11}{'baseline':>10}{'= base':>8}"
    )
    for r in results:
        ls = r["language_specific"]
        lsl = "search" if ls["search"] else f"{ls['encoder_src']} / {ls['encoder_tgt']}"
        if ls["component"] != "layer":
            lsl += f" {ls['component']}"
        route = (
            f"{r['per_route_min'] / 1e6:.2f}M"
            if r["per_route_min"] == r["per_route_max"]
            else f"{r['per_route_min'] / 1e6:.2f}-{r['per_route_max'] / 1e6:.2f}M"
        )
        same = "yes" if r["per_route_equals_baseline"] else "no"
        print(
            f"{r['recipe']:<26}{r['encoder_layers']:>4}-{r['decoder_layers']:<2}"
            f"{r['decoder_sharing']:>10}{lsl:>28}{r['total'] / 1e6:>9.2f}M{route:>11}"
            f"{r['baseline_per_route'] / 1e6:>9.2f}M{same:>8}"
        )
    print(
        f"({len(results[0]['languages'])} languages, vocabulary {results[0]['vocab_size']}; "
        "per route = parameters one route's forward pass uses; baseline = same recipe without "
        "language-specific layers)"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m training.lsl",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("select", help="architecture from a search run's mixing weights")
    s.add_argument(
        "--checkpoint", action="append", required=True, help="search run dir or .pt (repeatable)"
    )
    s.add_argument("--which", choices=["last", "best"], default="last")
    s.add_argument("--out", required=True, help="recipe YAML to write")
    s.add_argument("--plot", help="PNG (default: OUT with .mixing.png)")
    s.add_argument("--json", help="weights as JSON (default: OUT with .mixing.json)")
    s.add_argument("--base-recipe", help="recipe to put the architecture in (default: the run's)")
    s.add_argument("--name", help="name of the new recipe (default: <base>_selected)")
    s.add_argument("--init-from", help="dense checkpoint to initialise from (section 3.3)")
    p = sub.add_parser("params", help="total and per-route parameter counts of recipes")
    p.add_argument("--config", nargs="+", required=True, help="recipe paths or names")
    p.add_argument("--vocab-size", type=int, help="default: the recipe's tokenizer, else 8000")
    p.add_argument("--languages", help="comma-separated (default: data.languages / corpus)")
    p.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        if args.command == "select":
            return select_main(args)
        return params_main(args)
    except (RecipeError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
