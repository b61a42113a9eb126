"""Bytes that autograd keeps for backward: the activation memory a training step holds between forward and backward.

:class:`SavedTensorMeter` is a context manager around ``torch.autograd.graph.saved_tensors_hooks``: every tensor an
operation saves for its backward passes its pack hook, which records the tensor's storage, each storage once
(views and tensors saved by several operations share one; a weak reference to the storage tells a storage still
alive from a new one at a reused address). Storages of the tensors in ``exclude`` (a model's parameters and
buffers, which exist whatever the batch) are not counted. Works on any device, so the activation memory of a GPU
configuration can be measured on the CPU.

By default the pack hook hands each tensor back unchanged, so the graph, its memory and its backward are exactly
what they would be without the meter. With ``keep=False`` the graph gets a placeholder instead: the count is the
same, the memory stays at the forward pass's working set, and the graph cannot run backward (for measuring
configurations whose saved tensors would not fit the machine).

Example:
    >>> import torch
    >>> x = torch.randn(2, 3, requires_grad=True)
    >>> with SavedTensorMeter(exclude=[x]) as meter:
    ...     y = (x.exp() * 2).sum()
    >>> meter.bytes  # exp saves its (2, 3) float32 result; x itself is excluded
    24
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch.multiprocessing.reductions import StorageWeakRef


class SavedTensorMeter:
    """Counts the bytes of the distinct storages that autograd saves for backward inside the ``with`` block.

    Args:
        exclude: Tensors whose storages are not counted (parameters, buffers).
        keep: Hand the saved tensors to the graph (True, default) or a placeholder (False: no backward possible,
            nothing held).

    Attributes:
        bytes: Total bytes of the distinct saved storages (whole storages: a saved view counts its base).
        count: Number of distinct saved storages.
        largest: ``(bytes, shape, dtype)`` of the largest saved storage seen (shape of the tensor saved).
        shapes: Shapes of the tensors that brought each counted storage, in the order saved.
    """

    def __init__(self, exclude: Iterable[torch.Tensor] = (), keep: bool = True):
        self.keep = keep
        self._excluded = {self._key(t): StorageWeakRef(t.untyped_storage()) for t in exclude}
        self._seen: dict[tuple, StorageWeakRef] = {}
        self.bytes = 0
        self.count = 0
        self.largest: tuple[int, tuple[int, ...], torch.dtype] | None = None
        self.shapes: list[tuple[int, ...]] = []
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda packed: packed)

    @staticmethod
    def _key(tensor: torch.Tensor) -> tuple:
        return tensor.device.type, tensor.device.index, tensor.untyped_storage().data_ptr()

    def _pack(self, tensor: torch.Tensor):
        if tensor.layout != torch.strided or tensor.device.type == "meta":
            return tensor if self.keep else None
        key = self._key(tensor)
        excluded = self._excluded.get(key)
        previous = self._seen.get(key)
        if (excluded is None or excluded.expired()) and (previous is None or previous.expired()):
            size = tensor.untyped_storage().nbytes()
            self._seen[key] = StorageWeakRef(tensor.untyped_storage())
            self.bytes += size
            self.count += 1
            self.shapes.append(tuple(tensor.shape))
            if self.largest is None or size > self.largest[0]:
                self.largest = (size, tuple(tensor.shape), tensor.dtype)
        return tensor if self.keep else None

    def __enter__(self) -> "SavedTensorMeter":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)
