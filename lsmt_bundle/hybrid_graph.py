"""A hybrid route's LSTM decoder (``training.model.hybrid``) as two ONNX graphs, built from its
dense weights with ``onnx.helper`` (no torch, so the server can build them at load time):

- ``keys``: encoder states (N, S, D) -> the additive attention's keys W_k m + b_k, once per
  source;
- ``step``: one decoding step for N hypotheses: the previous tokens (N,), the LSTM states
  (L, N, H) and the source (states, keys, additive mask (N, S)) -> the ``k`` best log-probs of
  each hypothesis with their token ids (N, k), and the next states. The decoding options are
  applied in the graph, before the log-softmax, as CTranslate2 applies them: the repetition
  penalty to the logits of the tokens in ``penalized`` (N, T: the hypothesis so far, or
  (N, 0)) and an additive ``ban`` (0 or -inf, broadcast to (N, V): the end token before the
  minimum length, repeated n-grams). Only (N, k) leaves the graph: the search needs no more,
  and a full (N, V) log-softmax and top-k in numpy cost more than the step itself.

The graphs compute exactly the PyTorch decoder's step: ONNX's LSTM operator with the gates
reordered (PyTorch stores i, f, g, o; ONNX wants i, o, f, c), layer norm on each LSTM's input,
the residual around every LSTM but the first, and the context summed with the last output
before the tied projection.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .dense import DECODER_EMBEDDING, OUTPUT_PROJECTION, DenseModel

OPSET = 17  # LayerNormalization's first opset
IR_VERSION = 8  # the IR of opset 17: readable by every ONNX Runtime that runs the opset
PREFIX = "decoder"


class _Graph:
    """Nodes and initializers being collected; names are made unique by a counter."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def const(self, name: str, value: np.ndarray) -> str:
        # np.ascontiguousarray would make a scalar (a Gather index) one-dimensional
        self.initializers.append(numpy_helper.from_array(np.array(value, order="C"), name))
        return name

    def op(self, op_type: str, *inputs: str, outputs: int = 1, **attrs: Any) -> list[str]:
        """Add a node; its outputs' names."""
        self._count += 1
        names = [f"{op_type.lower()}_{self._count}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, **attrs))
        return names

    def one(self, op_type: str, *inputs: str, name: str | None = None, **attrs: Any) -> str:
        """Add a node of one output (named ``name``: a graph output) and return its name."""
        if name is None:
            return self.op(op_type, *inputs, **attrs)[0]
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], **attrs))
        return name

    def axes(self, *axes: int) -> str:
        """An axes constant (Squeeze, Unsqueeze), shared by the nodes that use it."""
        name = "axes_" + "_".join(map(str, axes))
        if all(t.name != name for t in self.initializers):
            self.const(name, np.array(axes, dtype=np.int64))
        return name

    def model(
        self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]
    ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
        )
        onnx.checker.check_model(model)
        return model


def _float(name: str, *shape: str | int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _gates_ifgo_to_iofc(w: np.ndarray) -> np.ndarray:
    """PyTorch's LSTM gate blocks (i, f, g, o) along the first axis in ONNX's order (i, o, f, c)."""
    i, f, g, o = np.split(w, 4, axis=0)
    return np.concatenate([i, o, f, g], axis=0)


def keys_graph(dense: DenseModel) -> onnx.ModelProto:
    w = dense.weights
    g = _Graph()
    wk = g.const("key_weight_t", w[f"{PREFIX}.attention.key.weight"].T)
    bk = g.const("key_bias", w[f"{PREFIX}.attention.key.bias"])
    g.one("Add", g.one("MatMul", "memory", wk), bk, name="keys")
    return g.model(
        "lsmt_hybrid_keys", [_float("memory", "N", "S", "D")], [_float("keys", "N", "S", "D")]
    )


def step_graph(dense: DenseModel) -> onnx.ModelProto:
    a, w = dense.architecture, dense.weights
    layers, eps = a.decoder_layers, a.layer_norm_eps
    hidden = a.lstm_hidden_size or a.d_model
    g = _Graph()
    axis0 = g.axes(0)
    embedding = g.const("embedding", w[DECODER_EMBEDDING])
    x = g.one("Gather", embedding, "tokens", axis=0)  # (N, D)
    hs, cs = [], []
    y = context = ""
    for i in range(layers):
        p = f"{PREFIX}.layers.{i}"
        inp = x if i == 0 else g.one("Concat", y, context, axis=1)
        normed = g.one(
            "LayerNormalization",
            inp,
            g.const(f"{p}.norm.weight", w[f"{p}.norm.weight"]),
            g.const(f"{p}.norm.bias", w[f"{p}.norm.bias"]),
            axis=-1,
            epsilon=eps,
        )
        bias = np.concatenate(
            [
                _gates_ifgo_to_iofc(w[f"{p}.lstm.bias_ih_l0"]),
                _gates_ifgo_to_iofc(w[f"{p}.lstm.bias_hh_l0"]),
            ]
        )
        index = g.const(f"layer{i}", np.array(i, dtype=np.int64))
        _, h, c = g.op(
            "LSTM",
            g.one("Unsqueeze", normed, axis0),  # (1, N, in): one time step
            g.const(f"{p}.W", _gates_ifgo_to_iofc(w[f"{p}.lstm.weight_ih_l0"])[None]),
            g.const(f"{p}.R", _gates_ifgo_to_iofc(w[f"{p}.lstm.weight_hh_l0"])[None]),
            g.const(f"{p}.B", bias[None]),
            "",  # sequence_lens: every row is one step
            g.one("Unsqueeze", g.one("Gather", "h", index, axis=0), axis0),
            g.one("Unsqueeze", g.one("Gather", "c", index, axis=0), axis0),
            outputs=3,
            hidden_size=hidden,
        )
        hs.append(h)
        cs.append(c)
        out = g.one("Squeeze", h, axis0)  # (N, H)
        if i == 0:
            y = out
            context = _attention(g, w, y)
        else:
            y = g.one("Add", y, out)
    if f"{PREFIX}.out_proj.weight" in w:
        y = g.one(
            "Add",
            g.one("MatMul", y, g.const("out_proj_t", w[f"{PREFIX}.out_proj.weight"].T)),
            g.const("out_proj_bias", w[f"{PREFIX}.out_proj.bias"]),
        )
    output = g.one("Add", y, context)
    logits = g.one("MatMul", output, g.const("projection_t", w[OUTPUT_PROJECTION].T))
    _best_log_probs(g, logits)
    g.one("Concat", *hs, axis=0, name="h_out")
    g.one("Concat", *cs, axis=0, name="c_out")
    int64 = TensorProto.INT64
    inputs = [
        helper.make_tensor_value_info("tokens", int64, ["N"]),
        _float("h", layers, "N", hidden),
        _float("c", layers, "N", hidden),
        _float("memory", "N", "S", "D"),
        _float("keys", "N", "S", "D"),
        _float("mask", "N", "S"),
        helper.make_tensor_value_info("penalized", int64, ["N", "T"]),
        _float("penalty", 1),
        _float("ban", "BN", "BV"),
        helper.make_tensor_value_info("k", int64, [1]),
    ]
    outputs = [
        _float("log_probs", "N", "K"),
        helper.make_tensor_value_info("token_ids", int64, ["N", "K"]),
        _float("h_out", layers, "N", hidden),
        _float("c_out", layers, "N", hidden),
    ]
    return g.model("lsmt_hybrid_step", inputs, outputs)


def _best_log_probs(g: _Graph, logits: str) -> None:
    """Repetition penalty, bans, log-softmax, then the ``k`` best: outputs ``log_probs`` and
    ``token_ids`` (best first)."""
    seen = g.one("GatherElements", logits, "penalized", axis=1)  # (N, T)
    lowered = g.one(
        "Where",
        g.one("Greater", seen, g.const("zero", np.zeros((), dtype=np.float32))),
        g.one("Div", seen, "penalty"),
        g.one("Mul", seen, "penalty"),
    )
    logits = g.one("ScatterElements", logits, "penalized", lowered, axis=1)
    log_probs = g.one("LogSoftmax", g.one("Add", logits, "ban"), axis=-1)
    g.nodes.append(helper.make_node("TopK", [log_probs, "k"], ["log_probs", "token_ids"], axis=-1))


def _attention(g: _Graph, w: dict[str, np.ndarray], query: str) -> str:
    """Single-head additive attention of ``query`` (N, H) over the source: context (N, D)."""
    p = f"{PREFIX}.attention"
    q = g.one("MatMul", query, g.const("query_t", w[f"{p}.query.weight"].T))  # (N, D)
    hidden = g.one("Tanh", g.one("Add", "keys", g.one("Unsqueeze", q, g.axes(1))))  # (N, S, D)
    energy = g.const("energy_t", w[f"{p}.energy.weight"].T)  # (D, 1)
    scores = g.one("Squeeze", g.one("MatMul", hidden, energy), g.axes(2))  # (N, S)
    weights = g.one("Softmax", g.one("Add", scores, "mask"), axis=-1)
    context = g.one("MatMul", g.one("Unsqueeze", weights, g.axes(1)), "memory")  # (N, 1, D)
    return g.one("Squeeze", context, g.axes(1))
