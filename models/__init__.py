"""The model zoo: named workloads built as :class:`sim.graph.Graph` with the GraphBuilder.

    >>> import models
    >>> g = models.get("bert-base", micro_batch=4, layers_per_ipu=[0, 4, 4, 4])
    >>> models.names()[:3]
    ['mlp', 'bert-base', 'bert-large']

Each family module (``mlp``, ``bert``, ``gpt2``, ``resnet``, ``efficientnet``, ``vit``, ``swin``, ``clip``,
``roformer``, ``unet``, ``conformer``) holds ``MODELS`` (name → default parameters) and
``build(name, params)``. Unknown names and unknown or invalid parameters raise
:class:`sim.errors.GraphError` naming what is wrong and what is valid.
"""

from __future__ import annotations

import copy

from sim.errors import GraphError
from sim.graph import Graph

from . import bert, clip, conformer, efficientnet, gpt2, microbench, mlp, resnet, roformer, swin, unet, vit
from ._common import Params

_REGISTRY = {name: (family.build, defaults)
             for family in (mlp, bert, gpt2, resnet, efficientnet, vit, swin, clip, roformer, unet,
                           conformer, microbench) for name, defaults in family.MODELS.items()}


def names() -> list[str]:
    """The names of every model in the zoo."""
    return list(_REGISTRY)


def _entry(name: str):
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise GraphError(f"unknown model {name!r}; known models: {', '.join(_REGISTRY)}") from None


def describe(name: str) -> dict:
    """The default parameters of model ``name`` (a copy; None means "derived", see the module)."""
    return copy.deepcopy(_entry(name)[1])


def get(name: str, **params) -> Graph:
    """Build model ``name`` with its defaults overridden by ``params``."""
    build, defaults = _entry(name)
    p = Params(name, defaults, params)
    g = build(name, p)
    g.micro_batch = p.int("micro_batch") if "micro_batch" in defaults else 1  # a microbenchmark: one call
    g.params = copy.deepcopy(dict(params))
    return g
