"""Greedy and beam search over the route-aware model, with its decoding cache (a Transformer's
keys and values, a hybrid's LSTM states: ``model.new_cache`` / ``model.reorder_cache``).

Conventions match the exported CTranslate2 engines: decoding starts from BOS, which is not
returned; a hypothesis ends at EOS (not returned either). ``allowed`` (a boolean mask over the
vocabulary) restricts the output distribution to a target language's pieces, as the engine of
a vocabulary-sliced bundle does; without it nothing is masked, so the engine and PyTorch pick
tokens from the same set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lsmt_core.tags import BOS_ID, EOS_ID, PAD_ID

from .model import Route, Seq2SeqTransformer
from .model.layers import LS_PATH


@dataclass
class Hypothesis:
    tokens: list[int]
    score: float  # sum of token log-probabilities (EOS included), before length penalty
    log_probs: list[float]


def output_mask(
    output_ids: Sequence[int] | None, vocab_size: int, device: torch.device | str
) -> torch.Tensor | None:
    """Boolean mask over the vocabulary, True for ``output_ids`` (None: no restriction)."""
    if output_ids is None:
        return None
    mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
    mask[torch.as_tensor(list(output_ids), dtype=torch.long, device=device)] = True
    return mask


def _log_probs(logits: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """Log-softmax over the allowed pieces (the others get -inf)."""
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    return torch.log_softmax(logits.float(), dim=-1)


@torch.no_grad()
def greedy_search(
    model: Seq2SeqTransformer,
    src_ids: torch.Tensor,
    route: Route,
    max_len: int = 128,
    allowed: torch.Tensor | None = None,
    lms_path: str = LS_PATH,
) -> list[Hypothesis]:
    """Greedy decoding of a padded batch (B, S); returns one hypothesis per row. ``lms_path``:
    the LMS path to decode on (``shared``: a Fuse-Distillation model's shared pair)."""
    model.eval()
    b = src_ids.shape[0]
    memory, mask = model.encode(src_ids, route, lms_path=lms_path)
    cache = model.new_cache()
    last = torch.full((b, 1), BOS_ID, dtype=torch.long, device=src_ids.device)
    tokens: list[list[int]] = [[] for _ in range(b)]
    log_probs: list[list[float]] = [[] for _ in range(b)]
    done = torch.zeros(b, dtype=torch.bool, device=src_ids.device)
    for step in range(max_len):
        logits = model.decode(
            last, memory, mask, route, cache=cache, offset=step, lms_path=lms_path
        )[:, -1]
        lp = _log_probs(logits, allowed)
        best = lp.argmax(dim=-1)
        for i in range(b):
            if done[i]:
                continue
            log_probs[i].append(lp[i, best[i]].item())
            if best[i].item() == EOS_ID:
                done[i] = True
            else:
                tokens[i].append(best[i].item())
        if bool(done.all()):
            break
        last = best[:, None]
    return [Hypothesis(t, sum(lp), lp) for t, lp in zip(tokens, log_probs, strict=True)]


@torch.no_grad()
def beam_search(
    model: Seq2SeqTransformer,
    src_ids: torch.Tensor,
    route: Route,
    beam_size: int = 4,
    max_len: int = 128,
    length_penalty: float = 1.0,
    use_cache: bool = True,
    allowed: torch.Tensor | None = None,
    lms_path: str = LS_PATH,
) -> list[Hypothesis]:
    """Batched beam search; best hypothesis per row, ranked by score / length**length_penalty.

    ``use_cache=False`` re-runs the decoder on the whole prefix at every step; it exists to
    check the cached path and is otherwise only slower. ``lms_path`` as in :func:`greedy_search`.
    """
    # Long on purpose: one batched loop whose state (scores, prefixes, cache order) every
    # step updates together; split, each part would pass all of it around.
    model.eval()
    b, k, dev = src_ids.shape[0], beam_size, src_ids.device
    memory, mask = model.encode(src_ids, route, lms_path=lms_path)
    memory = memory.repeat_interleave(k, dim=0)
    mask = mask.repeat_interleave(k, dim=0)
    cache = model.new_cache() if use_cache else None
    prefix = torch.full((b * k, 1), BOS_ID, dtype=torch.long, device=dev)
    # Only the first beam of each row is live at the start, so the k beams don't duplicate.
    scores = torch.full((b, k), float("-inf"), device=dev)
    scores[:, 0] = 0.0
    step_lps = torch.zeros(b * k, 0, device=dev)
    finished: list[list[tuple[float, Hypothesis]]] = [[] for _ in range(b)]
    for step in range(max_len):
        inp = prefix[:, -1:] if use_cache else prefix
        offset = step if use_cache else 0
        logits = model.decode(
            inp, memory, mask, route, cache=cache, offset=offset, lms_path=lms_path
        )
        lp = _log_probs(logits[:, -1], allowed)  # (b*k, V)
        vocab = lp.shape[-1]
        total = (scores.view(-1, 1) + lp).view(b, k * vocab)
        top_scores, top_idx = total.topk(2 * k, dim=-1)  # room for beams that finish
        beam_idx, tok_idx = top_idx // vocab, top_idx % vocab
        new_scores = torch.full((b, k), float("-inf"), device=dev)
        new_origin = torch.zeros(b, k, dtype=torch.long, device=dev)
        new_tokens = torch.full((b, k), PAD_ID, dtype=torch.long, device=dev)
        for i in range(b):
            live = 0
            for j in range(2 * k):
                s = top_scores[i, j].item()
                if s == float("-inf"):
                    break
                origin = i * k + beam_idx[i, j].item()
                tok = tok_idx[i, j].item()
                if tok == EOS_ID:
                    lps = [*step_lps[origin].tolist(), lp[origin, tok].item()]
                    hyp = Hypothesis(prefix[origin, 1:].tolist(), s, lps)
                    finished[i].append((s / len(lps) ** length_penalty, hyp))
                    continue
                new_scores[i, live], new_origin[i, live], new_tokens[i, live] = s, origin, tok
                live += 1
                if live == k:
                    break
        if all(len(f) >= k for f in finished):
            break
        origin = new_origin.view(-1)
        chosen_lp = lp[origin, new_tokens.view(-1)]
        prefix = torch.cat([prefix[origin], new_tokens.view(-1, 1)], dim=1)
        step_lps = torch.cat([step_lps[origin], chosen_lp[:, None]], dim=1)
        scores = new_scores
        if cache is not None:
            model.reorder_cache(cache, origin)
    results = []
    for i in range(b):
        if not finished[i]:  # max_len reached: fall back to the best live beam
            origin = i * k + int(scores[i].argmax())
            lps = step_lps[origin].tolist()
            hyp = Hypothesis(prefix[origin, 1:].tolist(), float(sum(lps)), lps)
            finished[i].append((hyp.score / max(len(lps), 1) ** length_penalty, hyp))
        results.append(max(finished[i], key=lambda pair: pair[0])[1])
    return results
