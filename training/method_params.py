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
from .recipe import load_recipe


def _kind(name: str) -> str | None:
    if ".lms_shared_" in name:
        return "lms_shared"
    if ".lms_" in name:
        return "lms"
    if name.startswith("laa."):
        return "laa"
    if name.startswith("lee."):
        return "lee"
    return None


def parameter_report(model: Any) -> dict[str, int]:
    """Counts: ``base`` (the dense model), ``training`` (extra, all of it), ``inference_ls``
    and ``inference_share`` (extra stored for serving that path), and per kind."""
    out = {"base": 0, "lms": 0, "lms_shared": 0, "laa": 0, "lee": 0}
    for name, p in model.named_parameters():
        out[_kind(name) or "base"] += p.numel()
    out["training"] = out["lms"] + out["lms_shared"] + out["laa"] + out["lee"]
    out["inference_ls"] = out["lms"] + out["laa"] + out["lee"]
    out["inference_share"] = out["lms_shared"] + out["laa"] + out["lee"]
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
