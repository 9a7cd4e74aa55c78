"""Learner ranks (one process each, under Lightning's DDP strategy): where their collectives
run, and whether their weights stayed in step."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist


def collective_device() -> torch.device:
    """Where tensors must be for the process group's collectives: this rank's GPU with nccl,
    the CPU with gloo."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def ranks_in_sync(modules: Iterable[torch.nn.Module], learner_steps: int) -> dict[str, Any]:
    """Every rank's updates and how far its weights are from rank 0's (the largest
    absolute difference over every parameter and buffer; 0.0 when DDP keeps them identical)."""
    flat = torch.cat([t.detach().reshape(-1).float().to(collective_device()) for m in modules for t in m.state_dict().values()
                      if torch.is_tensor(t) and t.is_floating_point()])
    reference = flat.clone()
    dist.broadcast(reference, src=0)
    drift = torch.tensor([(flat - reference).abs().max().item(), float(learner_steps)], device=flat.device)
    gathered = [torch.zeros_like(drift) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, drift)
    return {"ranks": len(gathered), "learner_steps": [int(g[1]) for g in gathered],
            "max_weight_difference": max(float(g[0]) for g in gathered)}
