"""Beam search in numpy around a decoder step function: the hybrid engine's search.

It is the search of ``training.search.beam_search`` (the PyTorch reference the parity tests
compare with): each step keeps the ``2 * beam`` best extensions of every sentence, a
hypothesis that emits EOS is finished (scored by its summed log-probabilities / length **
``length_penalty``, EOS counted), and a sentence is done once it has ``beam`` finished
hypotheses; at the length limit the live beams count as finished. Beam 1 is greedy search.
Sentences that are done leave the batch, so a long sentence does not keep short ones'
rows in every step.

What CTranslate2's ``translate_batch`` offers besides, and the server uses, is here too:
``num_hypotheses``, ``min_length`` (EOS forbidden before it), ``repetition_penalty`` (a
token already generated in the hypothesis has its logit divided by the penalty when
positive, multiplied when negative; Keskar et al. 2019) and ``no_repeat_ngram_size`` (a token
that would repeat an n-gram of the hypothesis is forbidden).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# step(tokens (R,), h (L, R, H), c (L, R, H), rows' sources: memory, keys (R, S, D), mask
# (R, S)) -> logits (R, V), h, c
StepFunction = Callable[
    [np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    tuple[np.ndarray, np.ndarray, np.ndarray],
]


@dataclass(frozen=True)
class SearchOptions:
    beam_size: int = 1
    num_hypotheses: int = 1
    max_length: int = 256
    min_length: int = 0
    length_penalty: float = 1.0
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0


@dataclass
class Found:
    tokens: list[int]  # without BOS and EOS
    score: float  # summed log-probabilities / length ** length_penalty
    log_probs: list[float]  # per token, EOS included when it was emitted


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    out: np.ndarray = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return out


def _adjust(logits: np.ndarray, prefix: np.ndarray, eos: int, opts: SearchOptions) -> np.ndarray:
    """The logits after the penalties and bans that the options ask for."""
    step = prefix.shape[1]
    if opts.repetition_penalty != 1.0 and step:
        rows = np.arange(len(logits))[:, None]
        seen = logits[rows, prefix]
        logits[rows, prefix] = np.where(
            seen > 0, seen / opts.repetition_penalty, seen * opts.repetition_penalty
        )
    n = opts.no_repeat_ngram_size
    if n and step >= n - 1:
        for r, tokens in enumerate(prefix.tolist()):
            context = tokens[step - n + 1 :]
            for j in range(step - n + 1):
                if tokens[j : j + n - 1] == context:
                    logits[r, tokens[j + n - 1]] = -np.inf
    if step < opts.min_length:
        logits[:, eos] = -np.inf
    return logits


def beam_search(
    step: StepFunction,
    memory: np.ndarray,
    keys: np.ndarray,
    mask: np.ndarray,
    state_shape: tuple[int, int],
    bos: int,
    eos: int,
    opts: SearchOptions,
) -> list[list[Found]]:
    """The ``num_hypotheses`` best hypotheses of every source row (best first)."""
    # Long on purpose, as its PyTorch twin: one loop whose state every step updates together.
    b, k = memory.shape[0], opts.beam_size
    layers, hidden = state_shape
    active = np.arange(b)  # sentences still searching, in the order of their rows
    mem, key, msk = (np.repeat(x, k, axis=0) for x in (memory, keys, mask))
    h = np.zeros((layers, b * k, hidden), dtype=np.float32)
    c = np.zeros_like(h)
    tokens = np.full(b * k, bos, dtype=np.int64)
    prefix = np.zeros((b * k, 0), dtype=np.int64)
    step_lps = np.zeros((b * k, 0), dtype=np.float32)
    # Only the first beam of a sentence is live at the start, so the k beams don't duplicate.
    scores = np.full((b, k), -np.inf, dtype=np.float32)
    scores[:, 0] = 0.0
    finished: list[list[Found]] = [[] for _ in range(b)]
    for _ in range(opts.max_length):
        logits, h, c = step(tokens, h, c, mem, key, msk)
        lp = log_softmax(_adjust(logits.astype(np.float32), prefix, eos, opts))
        a, vocab = len(active), lp.shape[1]
        total = (scores.reshape(-1, 1) + lp).reshape(a, k * vocab)
        n = min(2 * k, k * vocab)  # room for beams that finish
        top = np.argpartition(-total, n - 1, axis=1)[:, :n]
        top = np.take_along_axis(top, np.argsort(-np.take_along_axis(total, top, 1), 1), 1)
        # The candidates in order: the k best that go on become the beams; one that ends is
        # finished if it ranks before the k-th that goes on (the PyTorch loop's break).
        cand = np.take_along_axis(total, top, 1)
        rows_of, tok = np.arange(a)[:, None] * k + top // vocab, top % vocab
        ends = (cand > -np.inf) & (tok == eos)
        goes_on = (cand > -np.inf) & (tok != eos)
        ahead = np.cumsum(goes_on, axis=1) - goes_on  # candidates going on ranked before
        for i, j in zip(*np.nonzero(ends & (ahead < k)), strict=True):
            row = rows_of[i, j]
            lps = [*step_lps[row].tolist(), float(lp[row, eos])]
            score = float(cand[i, j]) / len(lps) ** opts.length_penalty
            finished[active[i]].append(Found(prefix[row].tolist(), score, lps))
        new_scores = np.full((a, k), -np.inf, dtype=np.float32)
        origin = np.repeat(np.arange(a)[:, None] * k, k, axis=1)  # unfilled: dead beams
        new_tokens = np.zeros((a, k), dtype=np.int64)
        taken = np.nonzero(goes_on & (ahead < k))
        slots = (taken[0], ahead[taken])
        new_scores[slots], origin[slots] = cand[taken], rows_of[taken]
        new_tokens[slots] = tok[taken]
        keep = [i for i in range(a) if len(finished[active[i]]) < k]
        if not keep:
            break
        rows = origin[keep].reshape(-1)
        chosen = new_tokens[keep].reshape(-1)
        prefix = np.concatenate([prefix[rows], chosen[:, None]], axis=1)
        step_lps = np.concatenate([step_lps[rows], lp[rows, chosen][:, None]], axis=1)
        h, c, tokens = h[:, rows], c[:, rows], chosen
        if len(keep) < a:  # a beam's rows all read its sentence's source: only drop rows
            mem, key, msk = mem[rows], key[rows], msk[rows]
        scores, active = new_scores[keep], active[keep]
    else:
        _finish_live(finished, active, prefix, step_lps, scores, opts)
    return [sorted(found, key=lambda f: -f.score)[: opts.num_hypotheses] for found in finished]


def _finish_live(
    finished: list[list[Found]],
    active: np.ndarray,
    prefix: np.ndarray,
    step_lps: np.ndarray,
    scores: np.ndarray,
    opts: SearchOptions,
) -> None:
    """At the length limit: the live beams of sentences short of hypotheses count as found."""
    k = opts.beam_size
    for i, sentence in enumerate(active):
        for beam in np.argsort(-scores[i]):
            if len(finished[sentence]) >= opts.num_hypotheses or scores[i, beam] == -np.inf:
                break
            row = i * k + int(beam)
            lps = step_lps[row].tolist()
            score = float(sum(lps)) / max(len(lps), 1) ** opts.length_penalty
            finished[sentence].append(Found(prefix[row].tolist(), score, lps))
