"""The hybrid engine: a hybrid route (Transformer encoder + LSTM decoder, the Shallow paper's
fastest model) served without torch.

CTranslate2 runs Transformer-family models only, so the route is split where the model is:

- the encoder is a CTranslate2 ``Encoder`` (the same layers, quantization and threads as a
  Transformer route's engine);
- the LSTM decoder is two ONNX graphs (``hybrid_graph``) run by ONNX Runtime, the well-kept
  runtime for models CTranslate2 lacks: int8 dynamic quantization on CPU (its LSTM and
  MatMul kernels), and its CUDA provider where the ``onnxruntime-gpu`` build is installed;
- beam search, batching of the steps and the decoding options live in ``hybrid_search``.

An engine is a set of files, stored and cached as a CTranslate2 model directory is:

    model.bin, config.json, vocabulary.json   the encoder (CTranslate2)
    decoder_keys.onnx, decoder_step.onnx       the decoder (ONNX Runtime)
    hybrid.json                                 the target vocabulary and the decoder's sizes

:class:`HybridTranslator` answers the subset of ``ctranslate2.Translator`` that the server, the
evaluation and the benchmarks call (``translate_batch``, ``score_batch``, ``unload_model``,
``load_model``, ``model_is_loaded``, ``num_active_batches``; ``lsmt_bundle.contracts.Engine``),
so an engine kind is only a loader behind the same interface.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ctranslate2
import numpy as np
from ctranslate2.specs import transformer_spec

from .ct2 import ACTIVATIONS, fill_encoder
from .dense import DenseModel
from .hybrid_search import Found, SearchOptions, beam_search

# the step graph's inputs, in the order the search passes them (hybrid_graph.step_graph)
STEP_INPUTS = ("tokens", "h", "c", "memory", "keys", "mask", "penalized", "penalty", "ban", "k")
KEYS = "decoder_keys.onnx"
STEP = "decoder_step.onnx"
INFO = "hybrid.json"
KIND = "lsmt-hybrid"
BOS, EOS = "<s>", "</s>"


def is_hybrid(files: dict[str, bytes] | Path) -> bool:
    """Whether an engine's files (or directory) are a hybrid engine's."""
    return INFO in files if isinstance(files, dict) else (files / INFO).is_file()


def encoder_spec(dense: DenseModel) -> transformer_spec.TransformerEncoderModelSpec:
    a = dense.architecture
    encoder = transformer_spec.TransformerEncoderSpec(
        a.encoder_layers, a.heads, pre_norm=a.pre_norm, activation=ACTIVATIONS[a.activation]
    )
    fill_encoder(encoder, dense)
    spec = transformer_spec.TransformerEncoderModelSpec(encoder)
    spec.config.layer_norm_epsilon = a.layer_norm_eps
    spec.register_vocabulary(dense.source_vocab)
    spec.validate()
    return spec


def hybrid_files(dense: DenseModel, quantization: str | None = "int8") -> dict[str, bytes]:
    """A hybrid route's engine files; int8 quantizations quantize the decoder graphs too."""
    from .hybrid_graph import keys_graph, step_graph  # onnx: needed to build, not to serve

    a = dense.architecture
    # The graphs first: CTranslate2's optimize() quantizes the arrays it was given in place,
    # and the tied embedding it reads is the decoder's too.
    keys, step = keys_graph(dense), step_graph(dense)
    spec = encoder_spec(dense)
    if quantization is not None:
        spec.optimize(quantization=quantization)
    with tempfile.TemporaryDirectory(prefix="lsmt-hybrid-") as tmp:
        spec.save(tmp)
        files = {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}
        for name, graph in ((KEYS, keys), (STEP, step)):
            path = Path(tmp) / name
            path.write_bytes(graph.SerializeToString())
            if quantization is not None and quantization.startswith("int8"):
                _quantize(path)
            files[name] = path.read_bytes()
    info = {
        "kind": KIND,
        "decoder_layers": a.decoder_layers,
        "hidden_size": a.lstm_hidden_size or a.d_model,
        "quantization": quantization,
        "target_vocabulary": dense.target_vocab,
    }
    files[INFO] = json.dumps(info).encode()
    return files


class _NoPreprocessingHint(logging.Filter):
    """ONNX Runtime's quantizer logs a hint to run its shape-inference pre-processing, on the
    root logger, at every call; our graphs have nothing for it to infer."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


def _quantize(path: Path) -> None:
    """int8 weights with dynamic activation quantization (ONNX Runtime's CPU recipe for
    recurrent and linear layers), per output channel as CTranslate2's int8 is; in place."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    if not any(isinstance(f, _NoPreprocessingHint) for f in root.filters):
        root.addFilter(_NoPreprocessingHint())
    out = path.with_suffix(".int8.onnx")
    quantize_dynamic(path, out, weight_type=QuantType.QInt8, per_channel=True)
    out.replace(path)


@dataclass
class HybridResult:
    """What ``ctranslate2.TranslationResult`` gives the callers: pieces and scores."""

    hypotheses: list[list[str]]
    scores: list[float]
    log_probs: list[list[float]]


@dataclass
class ScoringResult:
    tokens: list[str]
    log_probs: list[float]


class HybridTranslator:
    """A hybrid route's engine (see the module's docstring)."""

    def __init__(
        self,
        files: dict[str, bytes],
        device: str = "cpu",
        device_index: int = 0,
        compute_type: str = "int8",
        inter_threads: int = 1,
        intra_threads: int = 1,
    ) -> None:
        import onnxruntime as ort

        self.device = device
        self._files = files
        info = json.loads(files[INFO])
        if info.get("kind") != KIND:
            raise ValueError(f"{INFO} is not a hybrid engine's")
        self.target_vocab: list[str] = info["target_vocabulary"]
        self.state_shape = (int(info["decoder_layers"]), int(info["hidden_size"]))
        self.bos, self.eos = self.target_vocab.index(BOS), self.target_vocab.index(EOS)
        encoder_files = {n: d for n, d in files.items() if not n.endswith((".onnx", INFO))}
        self.encoder = ctranslate2.Encoder(
            "lsmt-hybrid-encoder",
            device=device,
            device_index=device_index,
            compute_type=compute_type,
            inter_threads=inter_threads,
            intra_threads=intra_threads,
            files=encoder_files,
        )
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_threads
        options.inter_op_num_threads = 1
        providers: list[Any] = ["CPUExecutionProvider"]
        if device == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": device_index}))
        self.keys_session = ort.InferenceSession(files[KEYS], options, providers=providers)
        self.step_session = ort.InferenceSession(files[STEP], options, providers=providers)
        self.model_is_loaded = True
        self.num_active_batches = 0  # as CTranslate2 counts them: calls running now
        self._active_lock = threading.Lock()
        # Seconds spent, cumulated over calls (benchmarks read it to say where time goes):
        # "encoder" (CTranslate2), "decoder" (ONNX Runtime graphs), "total" (of translate_batch;
        # the rest is the search in numpy).
        self.profile: defaultdict[str, float] = defaultdict(float)

    # -- what the registry calls -----------------------------------------------------------

    def unload_model(self, to_cpu: bool = False) -> None:
        """CPU-only release; ``to_cpu`` moves nothing (the registry then drops the engine, as
        it does a CTranslate2 model that stayed loaded)."""
        if not to_cpu:
            self.model_is_loaded = False

    def load_model(self) -> None:
        self.model_is_loaded = True

    # -- decoding -----------------------------------------------------------------------------

    def _encode(self, sources: list[list[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Encoder states, attention keys and the additive source mask of a batch."""
        t0 = time.perf_counter()
        states = self.encoder.forward_batch(sources).last_hidden_state
        if self.device != "cpu":
            states = states.to_device(ctranslate2.Device.cpu)
        memory = np.asarray(states, dtype=np.float32)
        t1 = time.perf_counter()
        lengths = np.array([len(s) for s in sources])
        mask = np.where(np.arange(memory.shape[1])[None] < lengths[:, None], 0.0, -np.inf)
        (keys,) = self.keys_session.run(None, {"memory": memory})
        self.profile["encoder"] += t1 - t0
        self.profile["decoder"] += time.perf_counter() - t1
        return memory, keys, mask.astype(np.float32)

    def _step(self, *inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One decoder step (the step graph's inputs, in order: ``hybrid_graph``): the k best
        log-probs and token ids of each row, and the next states."""
        t0 = time.perf_counter()
        log_probs, ids, h_out, c_out = self.step_session.run(
            None, dict(zip(STEP_INPUTS, inputs, strict=True))
        )
        self.profile["decoder"] += time.perf_counter() - t0
        return log_probs, ids, h_out, c_out

    def translate_batch(
        self,
        source: list[list[str]],
        *,
        beam_size: int = 2,
        num_hypotheses: int = 1,
        length_penalty: float = 1.0,
        max_decoding_length: int = 256,
        min_decoding_length: int = 1,
        max_input_length: int = 0,
        max_batch_size: int = 0,
        repetition_penalty: float = 1.0,
        no_repeat_ngram_size: int = 0,
        return_scores: bool = True,
    ) -> list[HybridResult]:
        """CTranslate2's ``translate_batch`` (those arguments): best hypotheses first."""
        if not self.model_is_loaded:
            raise RuntimeError("the model is unloaded")
        if num_hypotheses > beam_size:
            raise ValueError("num_hypotheses must be <= beam_size")
        if max_input_length:
            source = [s[:max_input_length] for s in source]
        opts = SearchOptions(
            beam_size=beam_size,
            num_hypotheses=num_hypotheses,
            max_length=max_decoding_length,
            min_length=min_decoding_length,
            length_penalty=length_penalty,
            repetition_penalty=repetition_penalty,
            no_repeat_ngram_size=no_repeat_ngram_size,
        )
        t0 = time.perf_counter()
        size = max_batch_size or len(source) or 1
        results: list[HybridResult] = []
        with self._active_lock:
            self.num_active_batches += 1
        try:
            for start in range(0, len(source), size):
                found = self._search(source[start : start + size], opts)
                results += [self._result(f) for f in found]
        finally:
            with self._active_lock:
                self.num_active_batches -= 1
        self.profile["total"] += time.perf_counter() - t0
        return results

    def _search(self, sources: list[list[str]], opts: SearchOptions) -> list[list[Found]]:
        if not sources:
            return []
        memory, keys, mask = self._encode(sources)
        vocab = len(self.target_vocab)
        return beam_search(
            self._step, memory, keys, mask, self.state_shape, vocab, self.bos, self.eos, opts
        )

    def _result(self, found: list[Found]) -> HybridResult:
        return HybridResult(
            hypotheses=[[self.target_vocab[t] for t in f.tokens] for f in found],
            scores=[f.score for f in found],
            log_probs=[f.log_probs for f in found],
        )

    def score_batch(self, source: list[list[str]], target: list[list[str]]) -> list[ScoringResult]:
        """Each target's per-token log-probabilities (EOS appended), teacher-forced: what
        ``ctranslate2.Translator.score_batch`` gives (one row and one step at a time: for
        checks, not throughput)."""
        index = {p: i for i, p in enumerate(self.target_vocab)}
        memory, keys, mask = self._encode(source)
        layers, hidden = self.state_shape
        every = np.array([len(self.target_vocab)], dtype=np.int64)  # all log-probs, sorted
        penalized, penalty = np.zeros((1, 0), np.int64), np.ones(1, np.float32)
        no_options = penalized, penalty, np.zeros((1, 1), np.float32)
        results = []
        for row, pieces in enumerate(target):
            h = np.zeros((layers, 1, hidden), dtype=np.float32)
            c = np.zeros_like(h)
            previous, lps, one = self.bos, [], slice(row, row + 1)
            for tok in [*(index[p] for p in pieces), self.eos]:
                source_rows = memory[one], keys[one], mask[one]
                step = np.array([previous]), h, c, *source_rows, *no_options, every
                lp, ids, h, c = self._step(*step)
                lps.append(float(lp[0][ids[0] == tok][0]))
                previous = tok
            results.append(ScoringResult([*pieces, EOS], lps))
        return results


def open_hybrid(model: Path | dict[str, bytes], **options: Any) -> tuple[HybridTranslator, int]:
    """A hybrid engine of a directory or of its files in memory, and its weights' bytes."""
    if isinstance(model, Path):
        model = {p.name: p.read_bytes() for p in model.iterdir() if p.is_file()}
    nbytes = sum(len(model[n]) for n in ("model.bin", KEYS, STEP))
    return HybridTranslator(model, **options), nbytes
