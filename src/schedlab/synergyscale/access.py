"""Parameter-access tracing for :mod:`schedlab.synergyscale.engine`.

The engine fetches a unit's parameters in the unit's forward pre-hook and releases them in its
post-hook. A model can also read a parameter outside the module that owns it: the tied-head idiom
``F.linear(h, self.emb.weight)`` runs in the *parent's* forward, after ``emb`` has released its
weight. Without tracing, that op computes with the one-element placeholder and training goes
silently wrong (the loss stays at ln(vocab)). ZeRO-3 handles this by tracing parameter access;
so does this module: a ``TorchFunctionMode`` active during the engine's forward and backward sees
every torch op, and for each managed parameter among its arguments that is not on the device it
fetches it for the op and releases it right after. Autograd's saved copies are already references
(the engine's ``saved_tensors_hooks``), so backward fetches it again when it needs it.

An in-place write to a managed parameter inside forward (``nn.Embedding(max_norm=...)``'s renorm,
``w.clamp_()`` under ``no_grad``) would only change the fetched working copy and be lost at
release, so it is refused with one line instead.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor
from torch.overrides import TorchFunctionMode

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


class ParamAccess(TorchFunctionMode):
    """Fetch a managed parameter for any torch op that reads it while it is offloaded.

    ``slot_of`` maps ``id(parameter)`` to the engine's slot; ``access(slot)`` makes it usable
    and returns True when it fetched it just for this op (the caller releases it after).
    """

    def __init__(self, slot_of: dict[int, Any], live: dict[int, Any], access, release) -> None:
        super().__init__()
        self.slot_of, self.live = slot_of, live  # live: storage pointer -> fetched slot
        self.access, self.release = access, release
        self._writes: dict[Any, bool] = {}  # func -> is an in-place write (cached per op)
        self.external_reads = 0  # ops that needed a fetch outside the owning module

    def _find(self, args, kwargs) -> list:
        slot_of, found = self.slot_of, []
        for value in (*args, *kwargs.values()):
            if type(value) in (list, tuple):
                for item in value:
                    slot = slot_of.get(id(item))
                    if slot is not None:
                        found.append(slot)
            else:
                slot = slot_of.get(id(value))
                if slot is not None:
                    found.append(slot)
        return found

    def _written_slot(self, func, name: str, args, kwargs):
        """The managed parameter an in-place op would write (itself or a view of its fetched
        copy, as ``weight.detach()`` in ``nn.Embedding(max_norm=...)``), else None."""
        writes = self._writes.get(func)
        if writes is None:
            writes = self._writes[func] = _is_write(name)
        if not writes and "out" not in kwargs:
            return None
        target = kwargs.get("out") if "out" in kwargs else (args[0] if args else None)
        slot = self.slot_of.get(id(target))
        if slot is None and self.live and isinstance(target, Tensor):
            try:
                slot = self.live.get(target.untyped_storage().data_ptr())
            except (RuntimeError, NotImplementedError):
                return None
        return slot

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        written = self._written_slot(func, name, args, kwargs)
        if written is not None:
            raise SchedlabError(
                f"model writes parameter '{written.name}' in place during forward ({name}); "
                "the engine trains fetched copies, so the write would be lost"
            )
        found = self._find(args, kwargs)
        if not found:
            return func(*args, **kwargs)
        if name in ("__get__", "__set__", "__delete__"):
            attr = getattr(getattr(func, "__self__", None), "__name__", "")
            if name != "__get__" or attr != "data":
                return func(*args, **kwargs)  # .grad, .shape, .data = ...: no values read
        if name in _SHAPE_QUERIES:
            return func(*args, **kwargs)
        unique = {slot.index: slot for slot in found}
        fetched = [slot for slot in unique.values() if self.access(slot)]
        if not fetched:
            return func(*args, **kwargs)
        self.external_reads += 1
        try:
            return func(*args, **kwargs)
        finally:
            for slot in fetched:
                self.release(slot)
