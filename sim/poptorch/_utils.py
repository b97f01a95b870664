"""``poptorch._utils``: the tensor-structure helpers PopTorch's own packages import.

PopTorch Geometric's collater imports ``combine_batch_tensors_gen`` from ``poptorch._utils``
(poptorch_geometric/python/collate.py), so a drop-in needs the module. The structure helpers
walk tuples, lists, dicts and objects of a type with a registered ``ICustomArgParser`` (or a
subclass of one, as PopTorch's ``getCustomParser`` looks parsers up), as PopTorch's do
(poptorch python/_utils.py); anything else in a structure is not a tensor and is kept as it is.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import torch

from sim.poptorch import _args  # absolute: loaded as poptorch._utils it must share PARSERS


def _parser_of(x):
    """The parser registered for ``type(x)``, else for the first registered base class of it."""
    parser = _args.PARSERS.get(type(x))
    if parser is not None:
        return parser
    for arg_type, candidate in _args.PARSERS.items():
        if isinstance(x, arg_type):
            return candidate
    return None


def flattenTensorStructure(tensors, canonical_structure=None) -> list[torch.Tensor]:
    """The tensors in ``tensors`` in order (a dict in the key order of
    ``canonical_structure`` when given)."""
    out: list[torch.Tensor] = []

    def walk(x, c):
        parser = _parser_of(x)
        if parser is not None:
            out.extend(parser.yieldTensors(x))
        elif isinstance(x, dict):
            for k in (x if c is None else c):
                walk(x[k], None if c is None else c[k])
        elif isinstance(x, (list, tuple)):
            for i, item in enumerate(x):
                walk(item, None if c is None else c[i])
        elif isinstance(x, torch.Tensor):
            out.append(x)

    walk(tensors, canonical_structure)
    return out


def reconstructTensorStructure(structure, values: Iterable[torch.Tensor], filter_fn=lambda t: True):
    """A copy of ``structure`` with its tensors (those ``filter_fn`` accepts) replaced, in
    order, by ``values``."""
    it = iter(values)

    def build(x):
        parser = _parser_of(x)
        if parser is not None:
            return parser.reconstruct(x, it)
        if isinstance(x, dict):
            return type(x)({k: build(v) for k, v in x.items()})
        if isinstance(x, (list, tuple)):
            items = [build(v) for v in x]
            return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
        if isinstance(x, torch.Tensor) and filter_fn(x):
            return next(it)
        return x

    return build(structure)


def combine_batch_tensors_gen(tensors: list[list[torch.Tensor]]) -> Iterator[torch.Tensor]:
    """For each position in the batches' tensor lists, the batches' tensors at that position
    concatenated along dim 0 (``tensors[batch][position]``)."""
    for position in range(len(tensors[0])):
        yield torch.cat([batch[position] for batch in tensors])


__all__ = ["flattenTensorStructure", "reconstructTensorStructure", "combine_batch_tensors_gen"]
