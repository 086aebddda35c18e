"""What a run runs on: device, precision, and under ``torchrun`` the process group (DDP)."""

from __future__ import annotations

import os
import platform
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .model.layers import LanguageSpecific


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def setup_distributed(device: str = "auto") -> DistInfo:
    """Device choice and, under ``torchrun`` (WORLD_SIZE > 1), the process group
    (nccl on CUDA, gloo on CPU; rendezvous from the environment)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda asked for, but torch sees no CUDA device")
        if dev.index is None:
            dev = torch.device("cuda", local_rank if world > 1 else torch.cuda.current_device())
        torch.cuda.set_device(dev)
    if world > 1 and not (dist.is_available() and dist.is_initialized()):
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
    return DistInfo(rank, world, local_rank, dev)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX-512 BF16 or AMX): where it does not,
    PyTorch emulates bf16 and autocast is slower than fp32."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_precision(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype (None = fp32). ``bf16`` on a CPU without native bf16 falls back to
    fp32 with a warning: emulated, it would only be slower (docs/training.md)."""
    if precision == "fp32":
        return None
    if precision == "auto":
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if precision == "fp16" and device.type != "cuda":
        raise ValueError("fp16 needs CUDA; use bf16 or fp32 on CPU")
    if precision == "bf16" and device.type == "cpu" and not cpu_has_native_bf16():
        warnings.warn(
            "training.precision bf16: this CPU has no native bf16 (avx512_bf16 or amx_bf16 in "
            "/proc/cpuinfo), training in fp32",
            stacklevel=2,
        )
        return None
    return torch.bfloat16 if precision == "bf16" else torch.float16


def device_name(device: torch.device) -> str:
    """What the run trained on, for model cards: the GPU's name, or the CPU and its threads."""
    if device.type == "cuda":
        return f"one {torch.cuda.get_device_name(device)} GPU"
    return f"{platform.machine()} CPU, {torch.get_num_threads()} threads"


def is_main_thread() -> bool:
    """Signal handlers can only be installed from the main thread."""
    return threading.current_thread() is threading.main_thread()


def has_language_specific(model: nn.Module) -> bool:
    return any(isinstance(m, LanguageSpecific) for m in model.modules())


def wrap_ddp(model: nn.Module, info: DistInfo, find_unused: bool | str) -> nn.Module:
    """``model`` in DistributedDataParallel. Route-dependent modules leave other parameters
    unused, so ``find_unused="auto"`` turns the search on only for models that have any."""
    if find_unused == "auto":
        find_unused = has_language_specific(model)
    return nn.parallel.DistributedDataParallel(
        model,
        device_ids=[info.device.index] if info.device.type == "cuda" else None,
        find_unused_parameters=bool(find_unused),
        broadcast_buffers=False,
    )


def gather_objects(info: DistInfo, obj: Any) -> list[Any]:
    """``obj`` of every rank, in rank order (a collective; ``[obj]`` without DDP)."""
    if not info.distributed:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def broadcast_from_main(info: DistInfo, obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (a collective; ``obj`` without DDP)."""
    if not info.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]
