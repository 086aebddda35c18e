"""A bundle's routes as Argos Translate packages (``.argosmodel``): what LibreTranslate serves.

An Argos package is a zip of one directory: ``metadata.json`` (languages, version, type),
``model/`` (a CTranslate2 model), ``sentencepiece.model`` and an optional ``README.md``
(``argostranslate.package``). argostranslate tokenizes the text with the SentencePiece model
and passes the pieces to ``Translator.translate_batch`` as they are; it can put a *target*
prefix in front of the output, but nothing in front of the source. Our engines expect the
route's tags around the source (``<2xx> pieces </s>``, ``lsmt_core.tags``), so each package's
engine carries them in its CTranslate2 config instead: ``bos_token`` is the target tag and
``add_source_bos``/``add_source_eos`` make CTranslate2 add it and ``</s>`` to every source
(the decoder still starts from ``<s>``). Nothing of argostranslate is changed.

Sentence splitting: argostranslate's default splitter (MiniSBD) and its others (Stanza, spaCy's
multilingual model) download a model on first use. A package can carry its own: here a blank
spaCy pipeline for the source language (``spacy/``, rule-based ``sentencizer``, written only
when spaCy is importable where the export runs), which argostranslate loads with
``ARGOS_CHUNK_TYPE=SPACY`` and no network (docs/export.md).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from lsmt_bundle import Bundle
from lsmt_bundle.ct2 import INT8_AS_STORED, build_spec, optimize_spec
from lsmt_core.languages import language_name
from lsmt_core.routes import Route, route_key
from lsmt_core.tags import BOS_PIECE, EOS_PIECE, TagScheme, lang_tag

ARGOS_VERSION = "1.9"  # the package format argostranslate 1.9-1.11 read


class ArgosExportError(ValueError):
    """A route that cannot be written as an Argos package."""


def package_name(bundle: Bundle, route: Route) -> str:
    return f"{bundle.name}-{route.src}_{route.tgt}"


def write_argos_package(
    bundle: Bundle, route: Route, out_dir: Path, quantization: str = "int8"
) -> Path:
    """Write ``<out_dir>/<bundle>-<src>_<tgt>.argosmodel``; returns its path."""
    if bundle.manifest.tag_scheme != TagScheme.TARGET_PREFIX:
        raise ArgosExportError(
            f"bundle {bundle.name} tags sources with the {bundle.manifest.tag_scheme.value!r} "
            "scheme (tags before the end token), which a CTranslate2 config cannot add; only "
            "target_prefix bundles export to Argos Translate"
        )
    if bundle.manifest.architecture.decoder_kind != "transformer":
        raise ArgosExportError("a hybrid (LSTM-decoder) route has no CTranslate2 model")
    bundle.check_route(route)
    name = package_name(bundle, route)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lsmt-argos-") as tmp:
        root = Path(tmp) / name
        root.mkdir()
        _write_model(bundle, route, root / "model", quantization)
        shutil.copyfile(bundle.tokenizer_path, root / "sentencepiece.model")
        (root / "metadata.json").write_text(json.dumps(metadata(bundle, route), indent=2))
        (root / "README.md").write_text(_readme(bundle, route))
        _write_sentencizer(root / "spacy", route.src)
        target = out_dir / f"{name}.argosmodel"
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(root.rglob("*")):
                zf.write(path, path.relative_to(Path(tmp)).as_posix())
    return target


def _write_model(bundle: Bundle, route: Route, out: Path, quantization: str) -> None:
    """The route's CTranslate2 model, with the route's source tags in its config."""
    spec = build_spec(bundle.assemble(route, keep_int8=quantization in INT8_AS_STORED))
    spec.config.bos_token = lang_tag(route.tgt)
    spec.config.add_source_bos = True
    spec.config.eos_token = EOS_PIECE
    spec.config.add_source_eos = True
    spec.config.decoder_start_token = BOS_PIECE
    optimize_spec(spec, quantization)
    out.mkdir()
    spec.save(str(out))


def metadata(bundle: Bundle, route: Route) -> dict[str, Any]:
    src, tgt = route
    provenance = bundle.manifest.provenance
    summary = {k: provenance[k] for k in ("checkpoint", "step", "best_dev_chrf") if k in provenance}
    recipe = provenance.get("recipe", {})
    if isinstance(recipe, dict) and "name" in recipe:
        summary["recipe"] = recipe["name"]
    return {
        "package_version": "1.0",
        "argos_version": ARGOS_VERSION,
        "from_code": src,
        "from_name": language_name(src),
        "to_code": tgt,
        "to_name": language_name(tgt),
        "type": "translate",
        "links": [],
        "license": _licence(provenance, route),
        "lsmt": {
            "bundle": bundle.name,
            "route": route_key(route),
            "modules": bundle.modules_for(route),
            "provenance": summary,  # the rest, corpus licences included: the bundle's manifest
        },
    }


def _licence(provenance: dict[str, Any], langs: Route) -> str:
    """The licences of the texts the model learnt the two languages from, as the bundle's
    provenance records them (its model card has the whole story)."""
    editions = provenance.get("corpus", {}).get("editions", {})
    known = [f"{lang}: {editions[lang]['name']}, {editions[lang]['licence']}"
             for lang in langs if lang in editions and "licence" in editions[lang]]  # fmt: skip
    return "; ".join(known) or "see the bundle's model card"


def _readme(bundle: Bundle, route: Route) -> str:
    return (
        f"# {bundle.name}: {language_name(route.src)} -> {language_name(route.tgt)}\n\n"
        f"Route {route_key(route)} of the LSMT bundle `{bundle.name}`, assembled into one "
        "CTranslate2 model (int8). The model adds the route's tags to every source itself "
        "(its config.json: bos_token, add_source_bos, add_source_eos).\n\n"
        "Sentence splitting offline: set `ARGOS_CHUNK_TYPE=SPACY`; the package's `spacy/` "
        "directory is a blank spaCy pipeline with a rule-based sentencizer.\n"
    )


def _write_sentencizer(out: Path, lang: str) -> None:
    """A blank spaCy pipeline for ``lang`` (argostranslate adds the sentencizer itself)."""
    try:
        import spacy
    except ImportError:
        return
    try:
        nlp = spacy.blank(lang)
    except ImportError:  # no language class: the multilingual one
        nlp = spacy.blank("xx")
    nlp.to_disk(out)
