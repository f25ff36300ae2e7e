"""Parameter-access tracing for :mod:`schedlab.synergyscale.engine`.

The engine fetches a unit's parameters in the unit's forward pre-hook and releases them in its
post-hook. A model can also read a parameter outside the module that owns it: the tied-head idiom
``F.linear(h, self.emb.weight)`` runs in the *parent's* forward, after ``emb`` has released its
weight. Without tracing, that op computes with the one-element placeholder and training goes
silently wrong (the loss stays at ln(vocab)). ZeRO-3 handles this by tracing parameter access;
so does this module, at the cost of only the ops that need it: a *released* parameter's class
is swapped to :class:`Released` (a ``Parameter`` subclass), whose ``__torch_function__`` sees
every torch op on it, fetches it for the op and releases it right after; a fetched parameter is
a plain ``Parameter`` again, so the ops of its own module and every op on activations run with
no Python in between (issue 46: the earlier ``TorchFunctionMode`` saw every op of the step).
Autograd's saved copies are references (the engine's ``saved_tensors_hooks``), so backward
fetches a parameter again when it needs it.

An in-place write to a released parameter (``w.clamp_()`` under ``no_grad`` in a parent) would
only change a fetched copy and be lost, so it is refused with one line; a write to a fetched one
(``nn.Embedding(max_norm=...)``'s renorm through ``weight.detach()``) bumps the parameter's
version counter, which the engine checks at release.
"""

from __future__ import annotations

from typing import Any

from torch._C import DisableTorchFunctionSubclass
from torch.nn import Parameter

from schedlab.core.errors import SchedlabError

# Tensor methods that change metadata only, never a parameter's values.
_NOT_WRITES = frozenset({"requires_grad_", "share_memory_", "detach_", "retain_grad"})
_INPLACE_DUNDERS = frozenset(
    {
        "__setitem__",
        "__iadd__",
        "__isub__",
        "__imul__",
        "__itruediv__",
        "__ifloordiv__",
        "__imod__",
        "__ipow__",
        "__iand__",
        "__ior__",
        "__ixor__",
        "__ilshift__",
        "__irshift__",
        "__imatmul__",
    }
)
# Queries that the placeholder answers exactly as the real tensor (same shape and dtype).
_SHAPE_QUERIES = frozenset({"size", "dim", "numel", "__len__", "ndimension", "nelement"})


def _is_write(name: str) -> bool:
    if name in _INPLACE_DUNDERS:
        return True
    return name.endswith("_") and not name.endswith("__") and name not in _NOT_WRITES


class Access:
    """What :class:`Released` calls: ``slot_of`` maps ``id(parameter)`` to its engine slot;
    ``access(slot)`` makes it usable and returns True when it fetched it just for this op (the
    caller releases it right after with ``release(slot)``); ``active()`` says whether the engine
    is inside a forward or backward (outside them an offloaded parameter reads as its NaN
    placeholder, as documented)."""

    def __init__(self, slot_of: dict[int, Any], access, release, active) -> None:
        self.slot_of, self.access, self.release, self.active = slot_of, access, release, active
        self.external_reads = 0  # ops that needed a fetch outside the owning module


#: id(released parameter) -> its engine's Access (a parameter belongs to one engine at a time)
OWNERS: dict[int, Access] = {}


def _released_args(args, kwargs) -> list:
    found = []
    for value in (*args, *kwargs.values()):
        if type(value) in (list, tuple):
            found.extend(item for item in value if type(item) is Released)
        elif type(value) is Released:
            found.append(value)
    return found


def _call(func, args, kwargs):
    with DisableTorchFunctionSubclass():
        return func(*args, **kwargs)


class Released(Parameter):
    """The class of an offloaded parameter while it is released (its ``.data`` a placeholder)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in ("__get__", "__set__", "__delete__"):
            attr = getattr(getattr(func, "__self__", None), "__name__", "")
            if name != "__get__" or attr != "data":
                return _call(func, args, kwargs)  # .grad, .shape, .data = ...: no values read
        if name in _SHAPE_QUERIES:
            return _call(func, args, kwargs)
        found = _released_args(args, kwargs)
        owner = OWNERS.get(id(found[0])) if found else None
        if owner is None or not owner.active():
            return _call(func, args, kwargs)
        target = kwargs.get("out") if "out" in kwargs else (args[0] if args else None)
        if _is_write(name) or "out" in kwargs:
            slot = owner.slot_of.get(id(target))
            if slot is not None:
                raise SchedlabError(
                    f"model writes parameter '{slot.name}' in place during forward ({name}); "
                    "the engine trains fetched copies, so the write would be lost"
                )
        unique = {}
        for param in found:
            slot = owner.slot_of.get(id(param))
            if slot is not None:
                unique[slot.index] = slot
        fetched = [slot for slot in unique.values() if owner.access(slot)]
        if fetched:
            owner.external_reads += 1
        try:
            return _call(func, args, kwargs)
        finally:
            for slot in fetched:
                owner.release(slot)
