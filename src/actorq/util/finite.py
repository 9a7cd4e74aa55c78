"""The non-finite guard: a NaN or inf loss, gradient or weight stops training with an error
naming the learner step and the tensor, and non-finite weights never reach the actors.

What it costs: the learner checks each loss it steps on (one scalar); a gradient or weight
that goes non-finite makes the next loss non-finite, and only then are all tensors scanned
to name the first bad one. The push scans the policy's weights before every push.

Example:
    >>> import torch
    >>> net = torch.nn.Linear(2, 1)
    >>> with torch.no_grad():
    ...     net.bias.fill_(float("nan"))
    Parameter containing:
    tensor([nan], requires_grad=True)
    >>> check_finite_weights(net, "the actors' policy", step=7)
    Traceback (most recent call last):
    ...
    actorq.util.errors.NonFiniteError: non-finite weight bias of the actors' policy at learner step 7: not pushed
"""

from __future__ import annotations

import torch
from torch import nn

from actorq.util.errors import NonFiniteError


def first_non_finite(module: nn.Module) -> str | None:
    """The name of the first parameter (or its gradient) of ``module`` holding NaN or inf."""
    for name, parameter in module.named_parameters():
        if not torch.isfinite(parameter).all():
            return f"weight {name}"
        if parameter.grad is not None and not torch.isfinite(parameter.grad).all():
            return f"gradient of {name}"
    return None


def check_finite_loss(loss: torch.Tensor, learner: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """Raises :class:`NonFiniteError` if ``loss`` is NaN or inf, naming what it optimizes and
    the first non-finite weight or gradient of the learner, if any."""
    if torch.isfinite(loss).all():
        return
    optimized = _modules_of(learner, optimizer)
    culprit = first_non_finite(learner)
    where = f"; first non-finite tensor: {culprit}" if culprit else ""
    raise NonFiniteError(f"non-finite loss ({loss.item()}) of {optimized} at learner step {step}{where}")


def check_finite_weights(module: nn.Module, what: str, step: int) -> None:
    """Raises :class:`NonFiniteError` naming the first non-finite weight of ``module``."""
    culprit = first_non_finite(module)
    if culprit is not None and culprit.startswith("weight"):
        raise NonFiniteError(f"non-finite {culprit} of {what} at learner step {step}: not pushed")


def _modules_of(learner: nn.Module, optimizer: torch.optim.Optimizer) -> str:
    """The learner's top-level modules whose parameters ``optimizer`` steps (e.g. ``critics``)."""
    ids = {id(p) for group in optimizer.param_groups for p in group["params"]}
    names = [name for name, child in learner.named_children() if any(id(p) in ids for p in child.parameters())]
    names += [name for name, p in learner.named_parameters(recurse=False) if id(p) in ids]
    return ", ".join(names) or "the learner"
