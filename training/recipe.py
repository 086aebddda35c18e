"""Training recipes: one YAML file = data + model + training hyper-parameters.

A recipe is a pydantic model that forbids unknown keys everywhere, so a typo in a YAML file
(``training.lrr``) is an error with the allowed keys listed, never a silently ignored setting.

Relative paths (``data.dir``, ``data.tokenizer``, ``init_from``) are resolved against the
current directory, then against the repository root, so recipes work from either place.

Overrides use dotted keys and YAML values: ``--set training.lr=1e-3 model.encoder_layers=12``.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from lsmt_core.routes import Route, parse_route, route_key

from .model import ModelConfig
from .vocab import TargetVocabConfig

RECIPES_DIR = Path(__file__).resolve().parent / "recipes"


class RecipeError(ValueError):
    """A recipe file or override that cannot be used; the message says why and where."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataConfig(_Strict):
    """Where the corpus and tokenizer are, and which directions to train."""

    dir: Path = Path("data/corpus")
    """Corpus root: ``DIR/{train,dev,test}/{src}-{tgt}.{src|tgt}`` (docs/data.md)."""
    tokenizer: Path = Path("data/tokenizer")
    """Tokenizer directory holding ``spm.model`` (or the ``.model`` file itself)."""
    language_tokenizers: dict[str, Path] = Field(default_factory=dict)
    """Languages written with a tokenizer of their own (an added language's vocabulary,
    Shallow paper 3.5; ``python -m lsmt_text.tokenizer`` trains one): language -> its
    directory or ``.model``. The model gives each its own source and target embeddings."""
    languages: list[str] | None = None
    """Restrict to these languages; None = every language of the corpus's train split."""
    routes: list[str] | None = None
    """Directions as ``"src-tgt"``; None = every train direction among ``languages``."""
    quality_tag: Literal["<HQ>", "<LQ>"] = "<HQ>"
    """Corpus-quality tag used by the ``lsl`` tag scheme."""
    max_len: int | None = None
    """Drop training pairs longer than this (tokens incl. tags/EOS); None = max_positions."""
    max_pairs_per_route: int | None = None
    """Keep at most this many training pairs per direction (first ones); None = all."""
    source_temperature: float | None = Field(None, gt=0)
    """Within a direction, draw the sources of a corpus built with package sources
    (docs/data.md) with p(source) ~ n_source ** (1/T), the direction keeping its size
    (``training.datasets.mix_sources``); None = every pair once (p ~ n_source)."""
    source_weights: dict[str, float] | None = None
    """With ``source_temperature``: multiply a source's share by its weight (then renormalise),
    e.g. ``{tatoeba: 2.5}`` to weigh everyday text more than its size alone would; sources
    not named keep weight 1."""
    target_vocab: TargetVocabConfig | None = None
    """Per-target-language vocabularies (``training.vocab``): pieces seen >= ``min_count``
    times, the ``max_size`` most frequent; with ``filter_training`` the target side is
    segmented with them. Saved in the checkpoint for export's slicing. None = full vocab."""

    @field_validator("routes")
    @classmethod
    def _routes_format(cls, routes: list[str] | None) -> list[str] | None:
        for r in routes or []:
            parse_route(r)
        return routes

    @model_validator(mode="after")
    def _source_weights(self) -> DataConfig:
        if self.source_weights is None:
            return self
        if self.source_temperature is None:
            raise ValueError("data.source_weights needs data.source_temperature (try 5.0)")
        bad = {s: w for s, w in self.source_weights.items() if not w > 0}
        if bad:
            raise ValueError(f"data.source_weights must be positive, got {bad}")
        return self


class TrainingConfig(_Strict):
    """Optimisation, batching, logging and evaluation."""

    seed: int = 1
    max_steps: int = 10_000
    """Optimizer updates (each one = ``accumulation`` micro-batches per process)."""
    batch_tokens: int = 4096
    """Padded tokens per micro-batch and process: B * max(src_len, tgt_len + 1) <= this."""
    max_sentences: int | None = None
    accumulation: int = Field(1, ge=1)
    temperature: float = Field(5.0, gt=0)
    """Route sampling p(route) ~ n_route ** (1/T); T=1 proportional, large T uniform."""
    lr: float = Field(5e-4, gt=0)
    warmup_steps: int = Field(4000, ge=1)
    lr_schedule_offset: int = Field(0, ge=0)
    """Updates the inverse-sqrt decay counts as done before this run. A run that starts from
    trained weights (``init_from``: the shipped bundle) without their optimizer continues their
    decay (the warm-up then only re-warms Adam's moments, reaching the decayed rate within a
    few dozen updates) instead of going back to the peak rate, which unlearns what the weights
    knew (stage 3's first slices from a bundle lost 0.5-2.7 chrF on Acts)."""
    betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    clip_norm: float = 1.0
    """Gradient-norm clipping; 0 disables it (the norm is still logged)."""
    label_smoothing: float = Field(0.1, ge=0, lt=1)
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    """auto: fp32 on CPU, bf16 on CUDA where supported else fp16 (with a GradScaler). bf16 on a
    CPU with native bf16 (AVX-512 BF16, AMX) trains the d-256 models about 1.4x faster
    (loadtests/bench_training.py); on one without, it falls back to fp32."""
    num_threads: int | None = None
    """torch intra-op threads on CPU; None = torch's default."""
    log_every: int = Field(10, ge=1)
    eval_every: int = 500
    """Dev evaluation (greedy, chrF) every N steps and at the end; 0 disables it."""
    eval_sentences: int = 50
    """Dev sentences per direction for the in-training evaluation (a fixed random sample)."""
    eval_batch_size: int = 64
    eval_testsets: list[str] = Field(default_factory=list)
    """Named test sets (``lsmt_text.data.testsets``: acts, ntrex, <source>-test, ...) scored at
    every evaluation on ``eval_sentences`` per direction, for the learning curves only: the
    best checkpoint is chosen on dev."""
    save_every: int = 500
    """Write ``last.pt`` every N steps (also at the end and on interruption)."""
    ddp_find_unused_parameters: Literal["auto"] | bool = "auto"
    """auto: True when the model has language-specific modules (route-dependent params)."""


class AddLanguagesConfig(_Strict):
    """Incremental language addition (Shallow paper, section 3.5): the model of ``init_from``
    gains the languages of ``donors``, every parameter it already had stays frozen
    (bit-identical), and only the new languages' language-specific modules train, each
    initialised from its donor's (the closest trained language, as the paper starts Russian
    from Bulgarian). Existing target languages keep the checkpoint's target vocabularies."""

    donors: dict[str, str] = Field(min_length=1)
    """New language -> the trained language whose modules it starts from."""

    @model_validator(mode="after")
    def _new_languages_only(self) -> AddLanguagesConfig:
        both = set(self.donors) & set(self.donors.values())
        if both:
            raise ValueError(f"languages {sorted(both)} are both new and donors")
        return self


class Recipe(_Strict):
    name: str
    description: str = ""
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    init_from: Path | None = None
    """Initialise the model from this checkpoint (run dir or .pt) before training."""
    init_mode: Literal["copy", "shallow", "hybrid"] = "copy"
    """copy: same architecture, by parameter name (a dense tensor also fills every language's
    copy of a language-specific module); shallow: 12-2 from 6-6 (encoder layer i <- i//2,
    bottom decoder layers kept); hybrid: an LSTM-decoder model from a Transformer (all but
    the decoder copied), see ``training.checkpoint.init_from_checkpoint``."""
    add_languages: AddLanguagesConfig | None = None
    """Train only new languages on top of ``init_from`` (``training.add_language``)."""

    @model_validator(mode="after")
    def _add_languages_needs_a_model(self) -> Recipe:
        if self.add_languages is not None and (self.init_from is None or self.init_mode != "copy"):
            raise ValueError("add_languages needs init_from (the trained model) and init_mode copy")
        if self.add_languages is not None:
            old = sorted(set(self.model.language_decoders) - set(self.add_languages.donors))
            if old:  # a trained language's routes would change decoder
                raise ValueError(f"language_decoders {old}: only new languages get one")
        return self

    def route_list(self, available: list[Route]) -> list[Route]:
        """The directions to train, given those present in the corpus's train split."""
        langs = set(self.data.languages) if self.data.languages else None
        if self.data.routes is not None:
            wanted = [parse_route(r) for r in self.data.routes]
            missing = [r for r in wanted if r not in set(available)]
            if missing:
                raise RecipeError(
                    "routes not in the corpus: "
                    + ", ".join(route_key(r) for r in missing)
                    + "; available: "
                    + ", ".join(route_key(r) for r in available)
                )
            if langs is not None:
                bad = [r for r in wanted if r.src not in langs or r.tgt not in langs]
                if bad:
                    raise RecipeError(f"routes outside data.languages: {bad}")
            return sorted(wanted, key=route_key)
        chosen = [r for r in available if langs is None or (r.src in langs and r.tgt in langs)]
        if not chosen:
            raise RecipeError(f"no corpus direction among languages {sorted(langs or [])}")
        return sorted(chosen, key=route_key)


# -- loading -----------------------------------------------------------------------------------


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = Recipe
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        ann = getattr(field, "annotation", None) if field else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        model = ann
    return sorted(model.model_fields)


def _format_error(err: ValidationError, source: str) -> str:
    lines = [f"invalid recipe {source}:"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            allowed = _allowed_keys(e["loc"])
            close = difflib.get_close_matches(str(e["loc"][-1]), allowed, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            lines.append(f"  {loc}: unknown key{hint}; allowed keys: {', '.join(allowed)}")
        else:
            lines.append(f"  {loc}: {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``["training.lr=1e-3", ...]`` -> nested dict; values are parsed as YAML."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise RecipeError(f"override {item!r} is not of the form key.path=value")
        key, value = item.split("=", 1)
        parts = key.strip().split(".")
        if not all(parts):
            raise RecipeError(f"override {item!r} has an empty key")
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise RecipeError(f"override {item!r} conflicts with another override")
        node[parts[-1]] = yaml.safe_load(value) if value.strip() else None
    return out


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def recipe_from_dict(
    raw: dict[str, Any], overrides: dict[str, Any] | None = None, source: str = "<dict>"
) -> Recipe:
    if not isinstance(raw, dict):
        raise RecipeError(f"recipe {source} must be a mapping, got {type(raw).__name__}")
    data = merge(raw, overrides or {})
    try:
        return Recipe.model_validate(data)
    except ValidationError as err:
        raise RecipeError(_format_error(err, source)) from None


def find_recipe(name_or_path: str | Path) -> Path:
    """A recipe path, or the name of one in ``training/recipes/`` (with or without .yaml)."""
    p = Path(name_or_path)
    if p.is_file():
        return p
    for cand in (RECIPES_DIR / p.name, RECIPES_DIR / f"{p.name}.yaml"):
        if cand.is_file():
            return cand
    known = sorted(q.stem for q in RECIPES_DIR.glob("*.yaml"))
    raise RecipeError(f"recipe {name_or_path!s} not found (built-in recipes: {', '.join(known)})")


def load_recipe(path: str | Path, overrides: list[str] | dict[str, Any] | None = None) -> Recipe:
    """Load a YAML recipe (file path or built-in name) with optional overrides."""
    file = find_recipe(path)
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise RecipeError(f"recipe {file} is not valid YAML: {err}") from None
    ov = parse_overrides(overrides) if isinstance(overrides, list) else overrides
    return recipe_from_dict(raw, ov, source=str(file))


def dump_recipe(recipe: Recipe) -> str:
    return yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
