"""popxl-addons' ``repeat_graph``: a graph's ops moved into a loop run ``repeat_count`` times.

On the main graph (how Graphcore's PopXL training code runs its device iterations in the program:
``repeat_graph(ir.main_graph, device_iterations)``) each run makes the program's pass that many times,
so the simulated run is that many device iterations, one a pass (``ir.num_host_transfers`` must cover
them all, as in PopXL). A subgraph is refused by name: wrap it with ``ops.repeat`` instead."""

from __future__ import annotations

from ...popxl.errors import NotModelledError

__all__ = ["repeat_graph"]


def repeat_graph(graph, repeat_count: int):
    if repeat_count <= 1:
        return graph
    if not graph._main:
        raise NotModelledError(f"popxl_addons.transforms.repeat_graph({graph.name!r}, {repeat_count}): only the main "
                               "graph is modelled; repeat a subgraph with ops.repeat")
    graph._repeat_count *= repeat_count
    graph.ir._note(f"repeat_graph(main graph, {repeat_count}): each run makes the main graph's pass {repeat_count} "
                   "times, simulated as that many device iterations")
    return graph
