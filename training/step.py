"""One optimisation step: the loss, the learning-rate schedule, the optimizer, and the update
over a list of micro-batches (gradient accumulation, DDP, mixed precision).

The loss is label-smoothed cross entropy summed over target tokens and divided by the number
of target tokens of the whole update (all micro-batches, all ranks), so accumulation and DDP
give the gradient of one big batch. With ``data.target_vocab.restrict_output`` the softmax
covers only the target language's pieces (:class:`OutputVocabulary`), as the exported,
vocabulary-sliced engine does.

The step does not know which method a model uses: the forward pass returns a
:class:`~training.model.transformer.ModelOutput`, and the loss is the mean cross entropy of
its predictions (two with Fuse Distillation) plus its named auxiliary losses (the FD KL, the
sparse gates' losses), all summed over target tokens. The reported loss and NLL are the
cross entropy's: the mean over the predictions and the first prediction's.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from lsmt_core.routes import Route
from lsmt_core.tags import PAD_ID

from .batching import Batch

if TYPE_CHECKING:
    from .recipe import Recipe


def label_smoothed_nll(
    logits: torch.Tensor,
    gold: torch.Tensor,
    eps: float,
    pad_id: int = PAD_ID,
    keep: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(label-smoothed loss, NLL), both summed over non-pad target tokens, in float32.

    loss = (1 - eps) * NLL + eps * mean over the vocabulary of -log p (as PyTorch's
    ``cross_entropy(label_smoothing=eps)`` and fairseq). ``keep`` marks the tokens that count
    (default: ``gold != pad_id``; given when ``gold`` holds positions in a restricted output).
    """
    if keep is None:
        keep = gold != pad_id
    lp = F.log_softmax(logits[keep].float(), dim=-1)
    target = gold[keep]
    nll = -lp.gather(-1, target[:, None]).squeeze(-1)
    loss = (1.0 - eps) * nll + eps * -lp.mean(dim=-1)
    return loss.sum(), nll.sum()


def inverse_sqrt(warmup: int, offset: int = 0):
    """LR multiplier at update ``i`` (0-based): linear warm-up, then 1/sqrt decay, the decay
    counted from ``offset`` updates made before (``TrainingConfig.lr_schedule_offset``)."""

    def factor(i: int) -> float:
        s = i + 1
        return min(s / warmup, math.sqrt(warmup / (s + offset)))

    return factor


ADAM_IMPLEMENTATIONS = {
    "loop": {"foreach": False},
    "foreach": {"foreach": True},
    "fused": {"fused": True},
}


def make_optimizer(model: nn.Module, recipe: Recipe, implementation: str | None = None):
    """Adam with the inverse-sqrt schedule. ``implementation`` (loop | foreach | fused) is
    for benchmarks; None lets torch choose (the same updates up to float rounding)."""
    t = recipe.training
    groups = getattr(model, "module", model).optimizer_groups(t.lr)  # DDP wraps
    # frozen parameters (a language addition) get no optimizer state and never move
    groups = [{**g, "params": [p for p in g["params"] if p.requires_grad]} for g in groups]
    opt = torch.optim.Adam(
        [g for g in groups if g["params"]],
        lr=t.lr,
        betas=t.betas,
        eps=t.adam_eps,
        weight_decay=t.weight_decay,
        **(ADAM_IMPLEMENTATIONS[implementation] if implementation else {}),
    )
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, inverse_sqrt(t.warmup_steps, t.lr_schedule_offset)
    )
    return opt, sched


class OutputVocabulary:
    """Per target language, the output rows the training softmax is restricted to
    (``data.target_vocab.restrict_output``) and the map from piece ids to those rows."""

    def __init__(
        self,
        ids: dict[str, list[int]],
        vocab_size_of: Callable[[str], int],
        device: torch.device,
    ):
        """``vocab_size_of(lang)``: the size of the vocabulary ``lang``'s ids index."""
        self.rows: dict[str, torch.Tensor] = {}
        self.remap: dict[str, torch.Tensor] = {}
        for lang, lang_ids in ids.items():
            rows = torch.tensor(sorted(lang_ids), dtype=torch.long)
            remap = torch.full((vocab_size_of(lang),), -1, dtype=torch.long)
            remap[rows] = torch.arange(len(rows))
            self.rows[lang], self.remap[lang] = rows.to(device), remap.to(device)

    def restrict(self, route: Route, gold: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(output rows of the route's target language, ``gold`` as positions in them;
        padding stays where it was, outside-vocabulary pieces become -1 and fail the loss)."""
        remap = self.remap[route.tgt]
        return self.rows[route.tgt], torch.where(gold == PAD_ID, PAD_ID, remap[gold])


@dataclass
class StepStats:
    loss: float  # per target token (label-smoothed), over all ranks
    nll: float
    ntokens: int  # target tokens, all ranks
    src_tokens: int
    sentences: int
    grad_norm: float
    stop: bool = False


def batch_loss(
    model: nn.Module,
    batch: Batch,
    label_smoothing: float,
    output_vocab: OutputVocabulary | None = None,
    autocast_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(objective, cross entropy, NLL) of one batch, each summed over its target tokens.

    The cross entropy is the mean over every prediction the forward made (one per path), the
    NLL the first prediction's, and the objective adds the forward's auxiliary losses."""
    rows, gold = None, batch.gold
    if output_vocab is not None:
        rows, gold = output_vocab.restrict(batch.route, batch.gold)
    amp = contextlib.nullcontext()
    if autocast_dtype is not None:
        amp = torch.autocast(batch.src.device.type, dtype=autocast_dtype)
    with amp:
        out = model(batch.src, batch.tgt_in, batch.route, rows)
    keep = batch.gold != PAD_ID
    scored = [
        label_smoothed_nll(logits, gold, label_smoothing, keep=keep)
        for logits in (out.logits, *out.also_scored)
    ]
    ce = sum(loss for loss, _ in scored) / len(scored)
    objective = ce + sum(aux.float() for aux in out.aux_losses.values())
    return objective, ce, scored[0][1]


def train_step(
    model: nn.Module,
    batches: list[Batch],
    optimizer: torch.optim.Optimizer,
    scheduler: Any | None,
    *,
    label_smoothing: float,
    clip_norm: float,
    device: torch.device,
    world_size: int = 1,
    autocast_dtype: torch.dtype | None = None,
    scaler: torch.amp.GradScaler | None = None,
    stop_request: bool = False,
    output_vocab: OutputVocabulary | None = None,
) -> StepStats:
    """One optimizer update over ``batches`` (gradient accumulation; DDP if ``model`` is
    wrapped). Gradients are those of the token-summed loss divided by the update's target
    tokens across all ranks. With ``stop_request`` on any rank, no update is made and
    ``stats.stop`` is True on every rank."""
    counts = [
        sum(b.ntokens for b in batches),
        sum(b.src_tokens for b in batches),
        sum(len(b) for b in batches),
        float(stop_request),
    ]
    ntok, src_tok, sents, stop = _summed_over_ranks(counts, world_size, device)
    if stop > 0:
        return StepStats(math.nan, math.nan, 0, 0, 0, math.nan, stop=True)
    scale = world_size / ntok  # DDP averages gradients over ranks
    optimizer.zero_grad(set_to_none=True)
    # kept on the device: no synchronisation per micro-batch
    sums = torch.zeros(2, dtype=torch.float64, device=device)
    for i, b in enumerate(batches):
        sync = contextlib.nullcontext()
        if world_size > 1 and i < len(batches) - 1 and hasattr(model, "no_sync"):
            sync = model.no_sync()  # gradients are all-reduced once, after the last batch
        with sync:
            objective, ce, nll = batch_loss(
                model, b.to(device), label_smoothing, output_vocab, autocast_dtype
            )
            scaled = objective * scale
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        sums += torch.stack([ce.detach(), nll.detach()]).double()
    grad_norm = _apply_update(model, optimizer, scheduler, scaler, clip_norm)
    ce_total, nll_total = _summed_over_ranks(sums, world_size, device)
    return StepStats(
        loss=ce_total / ntok,
        nll=nll_total / ntok,
        ntokens=int(ntok),
        src_tokens=int(src_tok),
        sentences=int(sents),
        grad_norm=grad_norm,
    )


def _summed_over_ranks(
    values: list[float] | torch.Tensor, world_size: int, device: torch.device
) -> list[float]:
    local = torch.as_tensor(values, dtype=torch.float64, device=device)
    if world_size > 1:
        dist.all_reduce(local)
    return [float(x) for x in local.tolist()]


def _apply_update(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any | None,
    scaler: torch.amp.GradScaler | None,
    clip_norm: float,
) -> float:
    """Clip the accumulated gradients, step the optimizer and the schedule; the gradient norm
    before clipping."""
    if scaler is not None:
        scaler.unscale_(optimizer)
    params = [p for p in model.parameters() if p.grad is not None]
    grad_norm = torch.nn.utils.clip_grad_norm_(params, clip_norm if clip_norm > 0 else float("inf"))
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return float(grad_norm)
