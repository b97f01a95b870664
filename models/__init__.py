"""The model zoo: named workloads built as :class:`sim.graph.Graph` with the GraphBuilder.

    >>> import models
    >>> g = models.get("bert-base", micro_batch=4, layers_per_ipu=[0, 4, 4, 4])
    >>> models.names()[:3]
    ['mlp', 'bert-base', 'bert-large']

Each family module (``mlp``, ``bert``, ``gpt2``, ``resnet``, ``efficientnet``, ``vit``, ``swin``, ``clip``,
``roformer``, ``unet``, ``conformer``) holds ``MODELS`` (name → default parameters) and
``build(name, params)``. Unknown names and unknown or invalid parameters raise
:class:`sim.errors.GraphError` naming what is wrong and what is valid, as does a parameter given a value
other than its default that the model, as its other parameters build it, would not use (``Params.unused``).
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
    try:
        g = build(name, p)
    except (TypeError, AttributeError, ValueError, KeyError) as e:
        if not params:  # the defaults fail: the model's own bug, as it is
            raise
        # a value of a kind the builder's checks did not foresee (a number where a list of names goes)
        raise GraphError(f"model {name!r}: the parameters {params!r} could not be used ({type(e).__name__}: {e}); "
                         "one of them has a value of the wrong kind: see `ipusim models` for each parameter's "
                         "default, whose kind it takes") from e
    g.micro_batch = p.int("micro_batch") if "micro_batch" in defaults else 1  # a microbenchmark: one call
    g.params = copy.deepcopy(dict(params))
    return g
