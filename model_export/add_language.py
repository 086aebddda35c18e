"""Add languages to a bundle without touching what it has (Shallow paper section 3.5).

    python -m model_export add-language BUNDLE --from RUN [--routes de-en,en-de,...]

``RUN`` is a language addition trained on the bundle's own weights (``init_from`` the
bundle's checkpoint, ``add_languages.donors``: ``training.add_language``), so the languages
the bundle has are frozen in it. The command exports the run's model to a scratch bundle
beside ``BUNDLE``, refuses unless the layout, tokenizer and every module the bundle already
stores are what the run holds (the modules within the storage's rounding), then copies only
the new languages' module files in and writes the manifest last, atomically: a reader (the
server reloading) sees the old bundle or the new one, never half of it. Existing files are
never rewritten, so every existing route translates exactly as before.

An addition killed mid-way (SIGKILL included) leaves the old bundle, plus files no manifest
names (its scratch export, new module files, a manifest not yet in place): the next addition
removes them. One addition at a time per bundle (a lock on its directory, which the kernel
drops when the process dies): two would each write a manifest without the other's languages.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from itertools import permutations
from pathlib import Path
from typing import Any

import numpy as np

from lsmt_bundle import Bundle, BundleError, load_bundle
from lsmt_bundle.storage import max_error
from lsmt_bundle.store import MANIFEST, digest, module_index
from lsmt_core.manifest import (
    LANGUAGE_OWN_GROUPS,
    TARGET_DECODER,
    VOCABULARY_GROUPS,
    LowRankSum,
    Manifest,
    TargetVocab,
    TokenizerInfo,
)
from lsmt_core.routes import Route

from .selection import parse_routes, target_vocabulary

# What must be equal between the bundle and the run's export for the new modules to fit.
LAYOUT_FIELDS = ("architecture", "tag_scheme", "tokenizer", "store_dtype", "weight_groups")


class AddLanguageError(ValueError):
    """A language addition the bundle cannot take; nothing was changed."""


def add_languages(
    bundle_dir: Path, run: Path, *, which: str = "best", routes: list[Route] | None = None
) -> Manifest:
    """Add the run's new languages to ``bundle_dir``; the new manifest. ``routes`` (default:
    both directions between each new language and every language) are those offered."""
    with _one_addition_at_a_time(bundle_dir):
        _remove_leftovers(bundle_dir)
        return _add_languages(bundle_dir, run, which, routes)


@contextlib.contextmanager
def _one_addition_at_a_time(bundle_dir: Path) -> Iterator[None]:
    try:
        lock = os.open(bundle_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise BundleError(f"{bundle_dir} is not a bundle directory: {exc}") from exc
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise AddLanguageError(f"another addition to {bundle_dir} is running") from None
        yield
    finally:
        os.close(lock)


def _remove_leftovers(bundle_dir: Path) -> None:
    """What a killed addition left: its scratch export and a manifest not renamed into place
    (no addition is using them: this one holds the lock). Its module files are copied again."""
    for scratch in bundle_dir.parent.glob(f".{bundle_dir.name}.adding-*"):
        shutil.rmtree(scratch, ignore_errors=True)
    for manifest in bundle_dir.glob(".manifest-*"):
        manifest.unlink(missing_ok=True)


def _add_languages(bundle_dir: Path, run: Path, which: str, routes: list[Route] | None) -> Manifest:
    from training.checkpoint import load_model

    bundle = load_bundle(bundle_dir)
    model, recipe, meta = load_model(run, which=which)
    new = _new_languages(bundle.manifest.languages, list(meta.languages))
    _check_tokenizer(bundle, meta.tokenizer_model_path())
    languages = sorted([*bundle.manifest.languages, *new])
    offered = routes or [Route(*r) for r in permutations(languages, 2) if set(r) & set(new)]
    strange = [f"{s}-{t}" for s, t in offered if s not in languages or t not in languages]
    if strange:
        raise AddLanguageError(f"routes {strange} are not between the languages {languages}")
    target_vocab, rule = target_vocabulary(meta, recipe, languages, None, None, None)
    scratch = Path(tempfile.mkdtemp(prefix=f".{bundle_dir.name}.adding-", dir=bundle_dir.parent))
    try:
        from .from_torch import export_bundle

        exported = export_bundle(
            model,
            scratch,
            name=bundle.name,
            tokenizer_model=meta.tokenizer_model_path(),
            routes=[Route(*r) for r in permutations(languages, 2)],
            languages=languages,
            store_dtype=bundle.manifest.store_dtype,
            target_vocab=target_vocab,
            target_vocab_rule=rule,
            lms_path=_lms_path(bundle.manifest),
            language_tokenizer_models={
                lang: meta.language_tokenizer_model_path(lang) for lang in meta.language_tokenizers
            },
        )
        _check_layout(bundle.manifest, exported)
        _check_existing_modules(bundle, load_bundle(scratch))
        added = _copy_new_modules(scratch, bundle_dir, exported, new)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    manifest = _extended_manifest(bundle.manifest, exported, new, offered, added)
    manifest.provenance.setdefault("added_languages", {}).update(
        {lang: _addition_record(recipe, meta, run) for lang in new}
    )
    write_manifest_atomically(bundle_dir, manifest)
    return manifest


def _new_languages(bundle_languages: list[str], run_languages: list[str]) -> list[str]:
    lost = sorted(set(bundle_languages) - set(run_languages))
    if lost:
        raise AddLanguageError(f"the run lacks the bundle's languages {lost}: not an addition")
    new = sorted(set(run_languages) - set(bundle_languages))
    if not new:
        raise AddLanguageError(f"the run has no language the bundle lacks ({run_languages})")
    return new


def _check_tokenizer(bundle: Bundle, run_tokenizer: Path) -> None:
    want = bundle.manifest.files.get(bundle.manifest.tokenizer.path)
    if want is not None and digest(run_tokenizer.read_bytes()).sha256 != want.sha256:
        raise AddLanguageError(
            f"the run's tokenizer ({run_tokenizer}) is not the bundle's: its pieces would mean "
            "other things to the bundle's modules"
        )


def _lms_path(manifest: Manifest) -> str:
    paths = {f.path for f in manifest.fusions if isinstance(f, LowRankSum)}
    return paths.pop() if paths else "ls"


def _check_layout(old: Manifest, new: Manifest) -> None:
    for field in LAYOUT_FIELDS:
        if _layout(old, field) != _layout(new, field):
            raise AddLanguageError(f"the run's {field} differs from the bundle's")
    if old.fusions != new.fusions:
        raise AddLanguageError("the run's fusion rules differ from the bundle's")


def _layout(manifest: Manifest, field: str) -> Any:
    """A layout field as the addition compares it: the weight groups of languages' own
    embeddings and decoders come with the first language that has them."""
    if field == "weight_groups":
        return [g for g in manifest.weight_groups if g not in LANGUAGE_OWN_GROUPS]
    return getattr(manifest, field)


def _check_existing_modules(bundle: Bundle, exported: Bundle) -> None:
    """Every module the bundle stores holds what the run holds (integer tensors exactly,
    weights within the storage rounding of both), so the run really was trained on top of
    this bundle and left it unchanged."""
    for rel in bundle.manifest.files:
        if not rel.startswith("modules/"):
            continue
        name = rel.removeprefix("modules/").removesuffix(".safetensors")
        old, new = bundle.read_module(name), exported.read_module(name)
        if set(old) != set(new):
            raise AddLanguageError(f"module {name}: the run stores other tensors")
        tolerance = 2 * max_error(bundle.manifest.store_dtype, old) + 1e-6
        for key, value in old.items():
            exact = not np.issubdtype(value.dtype, np.floating)
            same = np.array_equal(value, new[key]) if exact else value.shape == new[key].shape
            if not same or (not exact and float(np.abs(value - new[key]).max()) > tolerance):
                raise AddLanguageError(
                    f"module {name}: {key} differs from the run's: was the run trained from "
                    "this bundle with add_languages (every existing parameter frozen)?"
                )


def _copy_new_modules(scratch: Path, bundle_dir: Path, exported: Manifest, new: list[str]) -> dict:
    """The new languages' module files (and own tokenizers) into the bundle; their recorded
    digests."""
    own = {info.path for info in _new_tokenizers(exported, new).values()}
    added = {}
    for rel, file_digest in exported.files.items():
        name = rel.removeprefix("modules/").removesuffix(".safetensors")
        is_new_module = (
            rel.startswith("modules/")
            and module_index(name) != "shared"
            and name.split("/", 1)[1] in new
        )
        if not is_new_module and rel not in own:
            continue
        target = bundle_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(scratch / rel, target)
        target.chmod(0o644)
        added[rel] = file_digest
    return added


def _new_tokenizers(exported: Manifest, new: list[str]) -> dict[str, TokenizerInfo]:
    """The new languages that bring a tokenizer of their own, with it."""
    return {
        lang: exported.language_tokenizers[lang]
        for lang in new
        if lang in exported.language_tokenizers
    }


def _extended_manifest(
    old: Manifest, exported: Manifest, new: list[str], routes: list, added: dict
) -> Manifest:
    languages = sorted([*old.languages, *new])
    target_vocab = old.target_vocab
    if target_vocab is not None and exported.target_vocab is not None:
        sizes = {**target_vocab.sizes, **{lang: exported.target_vocab.sizes[lang] for lang in new}}
        target_vocab = TargetVocab(
            min_count=target_vocab.min_count, max_size=target_vocab.max_size, sizes=sizes
        )
    offered = [*old.routes, *(Route(*r) for r in routes if tuple(r) not in set(old.routes))]
    own = _new_tokenizers(exported, new)
    decoders = [lang for lang in new if lang in exported.language_decoders]
    groups = list(old.weight_groups)
    if own:
        groups += [g for g in VOCABULARY_GROUPS if g not in groups]
    if decoders and TARGET_DECODER not in groups:
        groups.append(TARGET_DECODER)
    return old.model_copy(
        update={
            "languages": languages,
            "routes": offered,
            "target_vocab": target_vocab,
            "language_tokenizers": {**old.language_tokenizers, **own},
            "language_decoders": sorted([*old.language_decoders, *decoders]),
            "weight_groups": groups,
            "files": {**old.files, **added},
            "provenance": json.loads(json.dumps(old.provenance)),
        }
    )


def _addition_record(recipe: Any, meta: Any, run: Path) -> dict[str, Any]:
    donors = recipe.add_languages.donors if recipe.add_languages else {}
    return {
        "checkpoint": str(meta.path),
        "run": str(run),
        "step": meta.step,
        "best_dev_chrf": meta.best_dev_chrf,
        "donors": donors,
        "trained_routes": [f"{r.src}-{r.tgt}" for r in meta.routes],
        "recipe": recipe.name,
    }


def write_manifest_atomically(bundle_dir: Path, manifest: Manifest) -> None:
    """The manifest through a temporary file and a rename: never seen half-written."""
    Manifest.model_validate(json.loads(manifest.model_dump_json()))  # routes, languages agree
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", dir=bundle_dir)
    with os.fdopen(fd, "w") as f:
        f.write(manifest.model_dump_json(indent=2) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, bundle_dir / MANIFEST)


def add_language_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m model_export add-language",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("bundle", type=Path)
    p.add_argument("--from", dest="run", required=True, type=Path, help="the addition's run")
    p.add_argument("--which", choices=["best", "last"], default="best")
    p.add_argument("--routes", help="SRC-TGT list to offer (default: every new pair)")
    args = p.parse_args(argv)
    try:
        routes = parse_routes(args.routes)
        manifest = add_languages(
            args.bundle, args.run, which=args.which, routes=[Route(*r) for r in routes or []]
        )
    except (AddLanguageError, BundleError) as exc:
        raise SystemExit(f"error: {exc} (the bundle is unchanged)") from exc
    print(
        f"{args.bundle}: languages {', '.join(manifest.languages)}; {len(manifest.routes)} routes"
    )
    return 0
