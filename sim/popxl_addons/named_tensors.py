"""popxl-addons' ``NamedTensors``: a :class:`~sim.popxl_addons.dot_tree.DotTree` of tensors."""

from __future__ import annotations

from .dot_tree import DotTree


class NamedTensors(DotTree):
    """A :class:`DotTree` of tensors."""

    @property
    def named_tensors(self) -> dict:
        """The tensors by their dotted names (``to_dict``)."""
        return self.to_dict()

    @property
    def tensors(self) -> tuple:
        """The tensors, sorted by their names."""
        return tuple(self.values_flat())

    def remap(self, mapping: dict) -> "NamedTensors":
        """The same names, each tensor replaced by ``mapping[tensor]``."""
        return self.map(lambda t: mapping[t])


class NamedTensorData(DotTree):
    """A :class:`DotTree` of numpy arrays (the data of named tensors)."""
