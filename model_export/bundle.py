"""The module-store bundle on disk: write it, read it, and assemble one route's dense weights.

Numpy only: the server imports this without torch.

    bundle/
      manifest.json                    (lsmt_core.manifest.Manifest)
      tokenizer/spm.model
      modules/shared.safetensors
      modules/src/<lang>.safetensors   (only when some weights are source-indexed)
      modules/tgt/<lang>.safetensors   (target-indexed weights, target vocabulary ids)
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import ValidationError
from safetensors.numpy import load, save_file

from lsmt_core.manifest import (
    Architecture,
    FileDigest,
    Fusion,
    Index,
    Manifest,
    SparseSubnetwork,
    VocabSlice,
)
from lsmt_core.tags import tag_source

from .fusions import RULES as METHOD_RULES
from .storage import decode

Weights = dict[str, np.ndarray]
EMBEDDING = "embed_tokens.weight"
DECODER_EMBEDDING = "decoder.embed_tokens.weight"
OUTPUT_PROJECTION = "decoder.output_projection.weight"


class BundleError(Exception):
    """A bundle (or one of its modules) is missing, corrupt or inconsistent."""


@dataclass
class DenseModel:
    """One route's plain Transformer: what an engine is built from."""

    architecture: Architecture
    weights: Weights
    source_vocab: list[str]
    target_vocab: list[str]
    modules: list[str] = field(default_factory=list)  # the modules it was assembled from


def module_name(index: Index, lang: str | None = None) -> str:
    return "shared" if index == "shared" else f"{index}/{lang}"


def module_path(root: Path, name: str) -> Path:
    return root / "modules" / f"{name}.safetensors"


def write_bundle(
    out: Path, manifest: Manifest, modules: dict[str, Weights], tokenizer_model: Path
) -> None:
    """Write a bundle; ``modules`` maps module names (``shared``, ``src/de``...) to weights."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer").mkdir(exist_ok=True)
    shutil.copyfile(tokenizer_model, out / manifest.tokenizer.path)
    for name, weights in modules.items():
        path = module_path(out, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: np.ascontiguousarray(v) for k, v in weights.items()}, str(path))
        path.chmod(0o644)  # safetensors writes 0600: a server running as another user must read it
    written = [manifest.tokenizer.path] + [
        module_path(out, name).relative_to(out).as_posix() for name in modules
    ]
    manifest.files = {rel: digest((out / rel).read_bytes()) for rel in sorted(written)}
    (out / "manifest.json").write_text(manifest.model_dump_json(indent=2) + "\n")


def digest(data: bytes) -> FileDigest:
    return FileDigest(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())


def check_digest(manifest: Manifest, rel: str, data: bytes) -> None:
    """Raise BundleError if ``data`` is not the file ``rel`` the manifest recorded (bundles
    without recorded digests are not checked)."""
    want = manifest.files.get(rel)
    if want is None:
        return
    if len(data) != want.bytes:
        raise BundleError(f"{rel}: {len(data)} bytes, the manifest recorded {want.bytes}")
    if hashlib.sha256(data).hexdigest() != want.sha256:
        raise BundleError(f"{rel}: checksum mismatch (corrupted or modified since export)")


class Bundle:
    def __init__(self, path: Path, manifest: Manifest, pieces: list[str]):
        self.path = path
        self.manifest = manifest
        self.name = manifest.name
        self.pieces = pieces  # tokenizer pieces in id order = the full vocabulary
        self._indices = manifest.indices_used()

    @property
    def routes(self) -> list[tuple[str, str]]:
        return [tuple(r) for r in self.manifest.routes]

    @property
    def tokenizer_path(self) -> Path:
        return self.path / self.manifest.tokenizer.path

    @property
    def max_source_positions(self) -> int:
        return self.manifest.architecture.max_positions

    def check_route(self, src: str, tgt: str) -> None:
        if (src, tgt) not in self.routes:
            raise BundleError(f"route {src}->{tgt} is not offered by bundle {self.name}")

    def modules_for(self, src: str, tgt: str) -> list[str]:
        """The modules a route reads, in a fixed order."""
        names = [module_name("shared")]
        if "src" in self._indices:
            names.append(module_name("src", src))
        if "tgt" in self._indices:
            names.append(module_name("tgt", tgt))
        return names

    def engine_key(self, src: str, tgt: str) -> str:
        """Routes with equal keys read the same modules, so they share one engine."""
        return f"{self.name}:" + "+".join(self.modules_for(src, tgt))

    def source_pieces(self, pieces: list[str], src: str, tgt: str) -> list[str]:
        return tag_source(self.manifest.tag_scheme, pieces, src, tgt)

    def read_module(self, name: str) -> Weights:
        """A module's weights (float32, decoded), after checking its recorded size and
        checksum: a corrupted module fails loudly instead of serving garbage."""
        path = module_path(self.path, name)
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise BundleError(f"module {name} missing: {path}") from exc
        check_digest(self.manifest, path.relative_to(self.path).as_posix(), data)
        try:
            return decode(load(data))
        except Exception as exc:  # safetensors raises several types for corrupt files
            raise BundleError(f"module {name} unreadable ({path}): {exc}") from exc

    def check_sizes(self) -> dict[str, str]:
        """Files the manifest records that are missing or of another size: path -> problem.
        Cheap (no reading), for a server's start-up; :meth:`verify` also checks contents."""
        problems: dict[str, str] = {}
        for rel, want in self.manifest.files.items():
            path = self.path / rel
            if not path.is_file():
                problems[rel] = "missing"
            elif path.stat().st_size != want.bytes:
                problems[rel] = f"{path.stat().st_size} bytes, the manifest recorded {want.bytes}"
        return problems

    def verify(self) -> dict[str, str]:
        """Every file the manifest records, checked: path -> "ok" or what is wrong."""
        report: dict[str, str] = {}
        for rel in self.manifest.files:
            try:
                check_digest(self.manifest, rel, (self.path / rel).read_bytes())
                report[rel] = "ok"
            except FileNotFoundError:
                report[rel] = "missing"
            except BundleError as exc:
                report[rel] = str(exc).split(": ", 1)[1]
        return report

    def assemble(self, src: str, tgt: str) -> DenseModel:
        """Dense float32 weights for one route: select the route's modules, apply fusions."""
        self.check_route(src, tgt)
        names = self.modules_for(src, tgt)
        weights: Weights = {}
        extras: dict[str, Weights] = {}
        for name in names:
            index: Index = "shared" if name == "shared" else name.split("/")[0]  # type: ignore[assignment]
            for key, value in self.read_module(name).items():
                if self.manifest.group_of(key).index != index:
                    # Not a dense weight of this module's groups: an input to a fusion rule.
                    extras.setdefault(index, {})[key] = value
                    continue
                weights[key] = value
        dense = DenseModel(
            architecture=self.manifest.architecture,
            weights=weights,
            source_vocab=list(self.pieces),
            target_vocab=list(self.pieces),
            modules=names,
        )
        _tie_embeddings(dense)
        for fusion in self.manifest.fusions:
            FUSION_RULES[fusion.rule](dense, fusion, extras)
        _check_complete(dense)
        return dense


def _tie_embeddings(dense: DenseModel) -> None:
    if EMBEDDING not in dense.weights:
        raise BundleError(f"shared module lacks {EMBEDDING}")
    dense.weights.setdefault(DECODER_EMBEDDING, dense.weights[EMBEDDING])
    dense.weights.setdefault(OUTPUT_PROJECTION, dense.weights[EMBEDDING])


def _vocab_slice(dense: DenseModel, rule: Fusion, extras: dict[str, Weights]) -> None:
    assert isinstance(rule, VocabSlice)
    ids = extras.get("tgt", {}).get(rule.ids)
    if ids is None:
        raise BundleError(f"target module lacks {rule.ids}")
    ids = ids.astype(np.int64)
    if ids.min() < 0 or ids.max() >= len(dense.source_vocab):
        raise BundleError("target vocabulary ids out of range")
    rows = dense.weights[EMBEDDING][ids]
    dense.weights[DECODER_EMBEDDING] = rows
    dense.weights[OUTPUT_PROJECTION] = rows
    dense.target_vocab = [dense.source_vocab[i] for i in ids]


HEAD_PROJECTIONS = {"heads": "self_attn", "self_heads": "self_attn", "cross_heads": "cross_attn"}
LAYER_BRANCHES = {
    "encoder": ("self_attn.out_proj",),
    "decoder": ("self_attn.out_proj", "cross_attn.out_proj"),
}


def _sparse_subnetwork(dense: DenseModel, rule: Fusion, extras: dict[str, Weights]) -> None:
    """The route's sub-network (Sparse paper) as a smaller dense model computing exactly what
    the PyTorch model computes in eval mode. The gates (0 = dropped, else the component's score;
    bundles written before scores were exported hold 0/1) fold into the weights:

    - layers: dropped ones removed (the rest renumbered); a kept layer's score scales both
      residual branches, i.e. every out_proj and fc2 weight and bias of the layer (eq. 7);
    - FFN blocks: dropped ones sliced out of fc1 (rows, bias) and fc2 (columns); a kept block's
      score scales its fc1 rows (not b1) and its fc2 columns (eq. 6);
    - heads: a head's score scales its out_proj columns (eq. 5); dropped heads are zeroed (q/k/v
      rows and biases, out_proj columns) and still computed by the engine."""
    assert isinstance(rule, SparseSubnetwork)
    a, w = dense.architecture, dict(dense.weights)
    head_dim = a.d_model // a.heads
    sizes: dict[str, int] = {}
    ffn_dims: set[int] = set()
    for side, index, n in (
        ("encoder", "src", a.encoder_layers),
        ("decoder", "tgt", a.decoder_layers),
    ):
        gates = {
            k[len(rule.prefix) + len(side) + 2 :]: v.astype(np.float32)
            for k, v in extras.get(index, {}).items()
            if k.startswith(f"{rule.prefix}.{side}_")
        }
        if not gates:
            raise BundleError(f"{index} module lacks the {side}'s sparse selection")
        for kind, proj in HEAD_PROJECTIONS.items():
            heads = gates.get(kind)
            if heads is None:
                continue
            if heads.shape != (n, a.heads):
                raise BundleError(f"sparse {side} {kind} mask {heads.shape} does not fit the model")
            for i in range(n):
                p, score = f"{side}.layers.{i}.{proj}", np.repeat(heads[i], head_dim)
                keep = (score != 0).astype(np.float32)
                for name in ("q_proj", "k_proj", "v_proj"):
                    w[f"{p}.{name}.weight"] = w[f"{p}.{name}.weight"] * keep[:, None]
                    w[f"{p}.{name}.bias"] = w[f"{p}.{name}.bias"] * keep
                w[f"{p}.out_proj.weight"] = w[f"{p}.out_proj.weight"] * score[None, :]
        blocks = gates.get("ffn")
        if blocks is not None:
            if blocks.shape[0] != n or a.ffn_dim % blocks.shape[1]:
                raise BundleError(f"sparse {side} FFN mask {blocks.shape} does not fit the model")
            for i in range(n):
                p, score = (
                    f"{side}.layers.{i}.ffn",
                    np.repeat(blocks[i], a.ffn_dim // blocks.shape[1]),
                )
                keep = score != 0
                w[f"{p}.fc1.weight"] = w[f"{p}.fc1.weight"][keep] * score[keep, None]
                w[f"{p}.fc1.bias"] = w[f"{p}.fc1.bias"][keep]
                w[f"{p}.fc2.weight"] = w[f"{p}.fc2.weight"][:, keep] * score[None, keep]
                ffn_dims.add(int(keep.sum()))
        layers = gates.get("layers", np.ones(n, dtype=np.float32))
        if layers.shape != (n,) or not layers.any():
            raise BundleError(f"sparse {side} layer mask {layers.shape} does not fit the model")
        for i in np.flatnonzero(layers):
            for branch in (*LAYER_BRANCHES[side], "ffn.fc2"):
                for part in ("weight", "bias"):
                    name = f"{side}.layers.{i}.{branch}.{part}"
                    w[name] = w[name] * layers[i]
        renumber = {int(i): j for j, i in enumerate(np.flatnonzero(layers))}
        head, renamed = f"{side}.layers.", {}
        for name in [k for k in w if k.startswith(head)]:
            i, rest = name[len(head) :].split(".", 1)
            value = w.pop(name)
            if int(i) in renumber:
                renamed[f"{head}{renumber[int(i)]}.{rest}"] = value
        w.update(renamed)
        sizes[f"{side}_layers"] = len(renumber)
    if len(ffn_dims) > 1:
        raise BundleError(f"sparse FFN widths differ between layers: {sorted(ffn_dims)}")
    dense.weights = w
    dense.architecture = a.model_copy(
        update={**sizes, "ffn_dim": ffn_dims.pop() if ffn_dims else a.ffn_dim}
    )


# Each method adds one rule here (and a parity test), not a new pipeline.
FUSION_RULES: dict[str, Callable[[DenseModel, Fusion, dict[str, Weights]], None]] = {
    "vocab_slice": _vocab_slice,
    **METHOD_RULES,  # LMS, LAA, LEE (model_export.fusions)
    "sparse_subnetwork": _sparse_subnetwork,
}


def _check_complete(dense: DenseModel) -> None:
    a = dense.architecture
    needed = [f"encoder.layers.{i}.ffn.fc1.weight" for i in range(a.encoder_layers)]
    needed += [f"decoder.layers.{i}.cross_attn.q_proj.weight" for i in range(a.decoder_layers)]
    missing = [n for n in needed if n not in dense.weights]
    if missing:
        raise BundleError(f"assembled route lacks weights, e.g. {missing[:3]}")


def read_pieces(model_path: Path) -> list[str]:
    import sentencepiece as spm

    try:
        sp = spm.SentencePieceProcessor(model_file=str(model_path))
    except (OSError, RuntimeError) as exc:
        raise BundleError(f"tokenizer unreadable: {model_path}: {exc}") from exc
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def load_bundle(path: str | Path) -> Bundle:
    """Read and validate a bundle's manifest and tokenizer; modules are read lazily."""
    root = Path(path)
    manifest_path = root / "manifest.json"
    if not manifest_path.is_file():
        raise BundleError(f"no manifest.json in {root}")
    try:
        manifest = Manifest.model_validate(json.loads(manifest_path.read_text()))
    except (ValueError, ValidationError) as exc:
        raise BundleError(f"invalid manifest {manifest_path}: {exc}") from exc
    tokenizer = root / manifest.tokenizer.path
    if tokenizer.is_file():
        check_digest(manifest, manifest.tokenizer.path, tokenizer.read_bytes())
    pieces = read_pieces(tokenizer)
    if len(pieces) != manifest.tokenizer.vocab_size:
        raise BundleError(
            f"tokenizer has {len(pieces)} pieces, manifest says {manifest.tokenizer.vocab_size}"
        )
    return Bundle(root, manifest, pieces)
