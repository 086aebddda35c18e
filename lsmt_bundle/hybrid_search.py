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

# step(tokens (R,), h, c (L, R, H), the rows' sources: memory, keys (R, S, D), mask (R, S),
# penalized token ids (R, T), repetition penalty (1,), additive ban (broadcast to (R, V)), k (1,))
#   -> the k best log-probs (R, k) and their token ids (R, k), best first; h, c
StepFunction = Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]


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


def bans(prefix: np.ndarray, eos: int, vocab: int, opts: SearchOptions) -> np.ndarray:
    """The additive ban of the next step: -inf for the end token before the minimum length
    and for every token that would repeat an n-gram of its hypothesis; (1, 1) zeros when
    nothing is banned (the step broadcasts it)."""
    step = prefix.shape[1]
    n = opts.no_repeat_ngram_size
    rows = tokens = np.zeros(0, dtype=np.int64)
    if n and step >= n:
        # Every n-gram of each hypothesis whose first n - 1 tokens are its last n - 1: the
        # n-th token would repeat it.
        grams = np.lib.stride_tricks.sliding_window_view(prefix, n, axis=1)  # (R, step-n+1, n)
        context = prefix[:, step - n + 1 :]
        repeats = (grams[:, :, : n - 1] == context[:, None, :]).all(axis=2)
        rows, at = np.nonzero(repeats)
        tokens = grams[rows, at, n - 1]
    end_banned = step < opts.min_length
    if not len(rows) and not end_banned:
        return np.zeros((1, 1), dtype=np.float32)
    ban = np.zeros((len(prefix) if len(rows) else 1, vocab), dtype=np.float32)
    if end_banned:
        ban[:, eos] = -np.inf
    ban[rows, tokens] = -np.inf
    return ban


def beam_search(
    step: StepFunction,
    memory: np.ndarray,
    keys: np.ndarray,
    mask: np.ndarray,
    state_shape: tuple[int, int],
    vocab: int,
    bos: int,
    eos: int,
    opts: SearchOptions,
) -> list[list[Found]]:
    """The ``num_hypotheses`` best hypotheses of every source row (best first)."""
    # Long on purpose, as its PyTorch twin: one loop whose state every step updates together.
    b, k = memory.shape[0], opts.beam_size
    layers, hidden = state_shape
    # Each hypothesis's 2k best extensions hold its sentence's 2k best: the step returns those.
    per_row = min(2 * k, vocab)
    fixed = {
        "penalty": np.array([opts.repetition_penalty], dtype=np.float32),
        "k": np.array([per_row], dtype=np.int64),
    }
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
        penalized = prefix if opts.repetition_penalty != 1.0 else prefix[:, :0]
        ban = bans(prefix, eos, vocab, opts)
        lp, ids, h, c = step(tokens, h, c, mem, key, msk, penalized, fixed["penalty"], ban,
                             fixed["k"])  # fmt: skip
        a = len(active)
        total = (scores.reshape(-1, 1) + lp).reshape(a, k * per_row)
        n = min(2 * k, k * per_row)  # room for beams that finish
        order = np.argsort(-total, axis=1, kind="stable")[:, :n]
        # The candidates in order: the k best that go on become the beams; one that ends is
        # finished if it ranks before the k-th that goes on (the PyTorch loop's break).
        cand = np.take_along_axis(total, order, 1)
        cand_lp = np.take_along_axis(lp.reshape(a, -1), order, 1)
        tok = np.take_along_axis(ids.reshape(a, -1), order, 1)
        rows_of = np.arange(a)[:, None] * k + order // per_row
        ends = (cand > -np.inf) & (tok == eos)
        goes_on = (cand > -np.inf) & (tok != eos)
        ahead = np.cumsum(goes_on, axis=1) - goes_on  # candidates going on ranked before
        for i, j in zip(*np.nonzero(ends & (ahead < k)), strict=True):
            row = rows_of[i, j]
            lps = [*step_lps[row].tolist(), float(cand_lp[i, j])]
            score = float(cand[i, j]) / len(lps) ** opts.length_penalty
            finished[active[i]].append(Found(prefix[row].tolist(), score, lps))
        new_scores = np.full((a, k), -np.inf, dtype=np.float32)
        origin = np.repeat(np.arange(a)[:, None] * k, k, axis=1)  # unfilled: dead beams
        new_tokens = np.zeros((a, k), dtype=np.int64)
        new_lps = np.zeros((a, k), dtype=np.float32)
        taken = np.nonzero(goes_on & (ahead < k))
        slots = (taken[0], ahead[taken])
        new_scores[slots], origin[slots] = cand[taken], rows_of[taken]
        new_tokens[slots], new_lps[slots] = tok[taken], cand_lp[taken]
        keep = [i for i in range(a) if len(finished[active[i]]) < k]
        if not keep:
            break
        rows = origin[keep].reshape(-1)
        tokens = new_tokens[keep].reshape(-1)
        prefix = np.concatenate([prefix[rows], tokens[:, None]], axis=1)
        step_lps = np.concatenate([step_lps[rows], new_lps[keep].reshape(-1, 1)], axis=1)
        h, c = h[:, rows], c[:, rows]
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
