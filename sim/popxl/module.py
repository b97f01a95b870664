"""``popxl.Module``: a layer whose ``build`` method builds a subgraph."""

from __future__ import annotations


class Module:
    """Subclass it and define ``build``; pass an instance to ``ir.create_graph``.

    Tensors made in ``build`` (``popxl.graph_input``) can be kept on ``self`` and used as keys of
    ``inputs_dict`` when the graph is called, as in PopXL.
    """

    def build(self, *args, **kwargs):
        raise NotImplementedError("popxl.Module subclasses must define build()")

    def __call__(self, *args, **kwargs):
        return self.build(*args, **kwargs)
