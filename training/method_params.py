"""Extra parameters of the language-conditioned methods, for training and for inference, as
the LMS paper's Figure 4 counts them (LMS: L d (r + c) per linear; LMS + FD: (L + 1) d (r + c)
to train, d (r + c) to serve with FD-share; LAA: L d_model^2; LEE: L d_model).

"Inference" is what a bundle must store beyond the base model for the chosen path; a route's
engine holds none of it (every method is fused into the dense weights).

    python -m training.method_params training/recipes/lms_pair.yaml --vocab-size 8000 \\
        --languages de,en,fr
"""

from __future__ import annotations

import argparse
from typing import Any

from .model import build_model
from .model.layers import LS_PATH, SHARED_PATH
from .model.methods import METHODS, parameter_owner
from .recipe import load_recipe


def parameter_report(model: Any) -> dict[str, int]:
    """Counts: ``base`` (the dense model), each kind of every registered method's parameters
    (``lms``, ``lms_shared``, ``laa``, ``lee``, ``sparse_scores``...), ``training`` (extra, all
    of it), and ``inference_ls`` and ``inference_share``: the extra a bundle stores for
    serving that LMS path (a sparse model's bundle stores its selected gates instead)."""
    kinds = {kind: method for method in METHODS for kind in method.kinds}
    out = {"base": 0} | dict.fromkeys(kinds, 0)
    for name, p in model.named_parameters():
        owner = parameter_owner(name)
        out["base" if owner is None else owner[1]] += p.numel()
    out["training"] = sum(out[kind] for kind in kinds)
    for key, path in (("inference_ls", LS_PATH), ("inference_share", SHARED_PATH)):
        out[key] = sum(out[kind] for kind, method in kinds.items() if method.stored(kind, path))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recipe")
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--languages", default="de,en,fr")
    args = ap.parse_args(argv)
    recipe = load_recipe(args.recipe)
    model = build_model(recipe.model, args.vocab_size, args.languages.split(","))
    r = parameter_report(model)
    base = r["base"]
    print(f"{'':18}{'parameters':>12}{'vs base':>10}")
    for key in ("base", "training", "inference_ls", "inference_share"):
        share = "" if key == "base" else f"{100 * r[key] / base:+9.2f}%"
        print(f"{key:18}{r[key]:>12,}{share:>10}")


if __name__ == "__main__":
    main()
