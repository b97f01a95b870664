"""``popxl.transforms``: ``autodiff`` (the function; :mod:`.autodiff` is also a module, as in
PopXL: ``from popxl.transforms.autodiff import GradGraphInfo``), and the exchange and sum transforms
PopXL's phased programs use:

- ``merge_exchange()``: PopART's MergeExchange joins the remote and host copies made in the context into
  one exchange program; the simulator prices each copy as its own, with its own fixed latency (the
  run's notes say so), so a merged group is that latency a copy dearer here;
- ``io_tile_exchange()``: the copies made in it run on the IO tiles, overlapped with the compute tiles'
  work (as ``popxl.io_tiles()``, which the simulator models), merged as ``merge_exchange``;
- ``decompose_sum(graph)``: PopART's DecomposeSum (a sum of gradients split into additions as its
  terms arrive, which changes liveness, not work) is not run: the graph is returned as it is, noted."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..context import get_current_context, io_tiles
from .autodiff import (ExpectedConnection, ExpectedConnectionType, GradGraphInfo, _call_grad_graph,
                       _gradient_update, autodiff, from_gradient)

_MERGE_NOTE = ("popxl.transforms.merge_exchange: the copies made in it are priced each as its own exchange, with its "
               "fixed latency; PopART merges them into one")


@contextlib.contextmanager
def merge_exchange() -> Iterator[None]:
    get_current_context().graph.ir._note(_MERGE_NOTE)
    yield


@contextlib.contextmanager
def io_tile_exchange(verify_overlap: bool = True) -> Iterator[None]:
    with io_tiles(), merge_exchange():
        yield


def decompose_sum(graph):
    graph.ir._note("popxl.transforms.decompose_sum: PopART's DecomposeSum is not run (it changes when a sum's "
                   "terms are added, not the work); the graph is priced as written")
    return graph


__all__ = ["ExpectedConnection", "ExpectedConnectionType", "GradGraphInfo", "autodiff", "decompose_sum",
           "io_tile_exchange", "merge_exchange"]
