"""The user's ``torch.optim`` optimizer, split per engine unit.

The engine steps each unit's parameters as soon as their gradients are final, so it runs one
instance of the user's optimizer class per unit, over that unit's fp32 masters, with the
hyper-parameters of the user's parameter groups. Every ``torch.optim`` optimizer except LBFGS
(it needs a closure that re-runs the whole model) and SparseAdam (sparse gradients are not
offloaded) updates each parameter from its own gradient and state only, so the split changes no
arithmetic. The user's optimizer object stays the place where hyper-parameters live: an LR
scheduler (or code) that changes ``param_groups[i]["lr"]`` there reaches the units at their next
step, as it reaches a plain torch optimizer at its next ``step()``.
"""

from __future__ import annotations

import inspect
from typing import Any

from schedlab.core.errors import ConfigError

_REFUSED = {
    "LBFGS": "needs a closure that re-evaluates the whole model at every step",
    "SparseAdam": "takes sparse gradients, which the engine does not offload",
}


def check_optimizer(optimizer) -> None:
    """Refuse, in one line, an optimizer whose step is not per parameter."""
    name = type(optimizer).__name__
    if name in _REFUSED:
        raise ConfigError(
            f"torch.optim.{name} is not supported: {_REFUSED[name]}", field="optimizer"
        )


def constructor_kwargs(optimizer) -> dict[str, Any]:
    """The user's defaults that the optimizer's ``__init__`` accepts.

    ``optimizer.defaults`` can hold keys the constructor does not take (AdamW adds
    ``decoupled_weight_decay=True`` itself and refuses it as an argument)."""
    cls = type(optimizer)
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(optimizer.defaults)
    return {k: v for k, v in optimizer.defaults.items() if k in params}


def make_unit_optimizer(optimizer, groups: dict[int, list]) -> tuple[Any, list[int]]:
    """One optimizer of the user's class over ``groups`` (user group index -> masters); returns
    it and, per its param group, the user group it mirrors."""
    order = sorted(groups)
    param_groups = [
        {
            **{k: v for k, v in optimizer.param_groups[g].items() if k != "params"},
            "params": groups[g],
        }
        for g in order
    ]
    return type(optimizer)(param_groups, **constructor_kwargs(optimizer)), order


def sync_hyperparameters(unit_optimizer, user_optimizer, group_ids: list[int]) -> None:
    """Copy the user's current per-group hyper-parameters (lr after a scheduler step, ...)."""
    for group, g in zip(unit_optimizer.param_groups, group_ids, strict=True):
        for key, value in user_optimizer.param_groups[g].items():
            if key != "params":
                group[key] = value
