"""Custom argument types: ``ICustomArgParser`` and ``registerCustomArgParser``.

A model may take (and return) objects of the user's own types holding tensors. PopTorch finds
their tensors with the registered parser; here the parser is registered as a node type of
``torch.utils._pytree``, which both the executor (splitting a call into micro-batches) and
the capture flatten with, so the object's tensors are batched, captured and returned like
any other. A parser applies to the exact type it is registered for.
"""

from __future__ import annotations

import abc

from torch.utils import _pytree as pytree

from ._errors import error

PARSERS: dict[type, "ICustomArgParser"] = {}


class ICustomArgParser(abc.ABC):
    """How to find the tensors in an object of a custom type, and rebuild one from tensors."""

    @abc.abstractmethod
    def yieldTensors(self, struct) -> None:
        """Yield every ``torch.Tensor`` in ``struct``, always in the same order."""

    @abc.abstractmethod
    def reconstruct(self, original_structure, tensor_iterator):
        """A new object like ``original_structure`` with its tensors taken, in the order of
        :meth:`yieldTensors`, from ``tensor_iterator``."""


def _deregister(arg_type: type) -> None:
    undo = getattr(pytree, "_deregister_pytree_node", None)
    if undo is not None:
        undo(arg_type)
    else:  # pragma: no cover - older torch
        pytree.SUPPORTED_NODES.pop(arg_type, None)


def registerCustomArgParser(arg_data_type: type, arg_parser: ICustomArgParser | None) -> None:
    """Use ``arg_parser`` for arguments of type ``arg_data_type`` (None removes it)."""
    if arg_data_type in PARSERS:
        _deregister(arg_data_type)
        del PARSERS[arg_data_type]
    if arg_parser is None:
        return
    if not isinstance(arg_parser, ICustomArgParser):
        raise error("arg_parser must inherit from ICustomArgParser")

    def flatten(obj):
        return list(arg_parser.yieldTensors(obj)), obj

    def unflatten(tensors, obj):
        return arg_parser.reconstruct(obj, iter(tensors))

    def flatten_with_keys(obj):  # the tensors named by their position, for input checks
        tensors, context = flatten(obj)
        return [(pytree.SequenceKey(i), t) for i, t in enumerate(tensors)], context

    pytree.register_pytree_node(arg_data_type, flatten, unflatten,
                                serialized_type_name=f"ipusim.{arg_data_type.__qualname__}",
                                flatten_with_keys_fn=flatten_with_keys)
    PARSERS[arg_data_type] = arg_parser


__all__ = ["ICustomArgParser", "registerCustomArgParser"]
