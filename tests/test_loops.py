"""A PopART Loop's copies of its loop-carried tensors (sim/compiler/loops.py): LoopOpx copies every body
output to a clone after the body and every clone to the body input before the next iteration, an output
the body passes through included, each step one merged copy program; the copy to the body input crosses
the exchange for an output an op laid out by its own plan."""

import torch

from sim import poptorch
from sim.compiler.loops import relaid_out


class Lookups(torch.nn.Module):
    """Ten iterations that pass the index through, gather rows by it and scale a running sum."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(512, 64))

    def forward(self, index, rows, total):
        def body(i, r, t):
            return [i, self.table.index_select(0, i), t * 2.0]
        return poptorch.for_loop(10, body, [index, rows, total])


def _compiled(alias_zero_copy: bool = False):
    opts = poptorch.Options().enableSyntheticData(True)
    if alias_zero_copy:
        opts._Popart.set("aliasZeroCopy", True)
    model = poptorch.inferenceModel(Lookups(), options=opts)
    model(torch.randint(0, 512, (256,)), torch.zeros(256, 64), torch.ones(128, 64))
    return model.executable


def test_each_iteration_copies_all_its_carried_tensors_in_two_merged_programs():
    ex = _compiled()
    g = ex.graph
    carried = [op for op in g.ops if op.attrs.get("loop_carried")]
    assert len(carried) == 30  # three carried tensors, ten iterations
    groups = {}
    for op in carried:
        groups.setdefault(op.attrs["loop_group"], []).append(op)
    assert len(groups) == 10 and all(len(ops) == 3 for ops in groups.values())
    for ops in groups.values():
        first, *rest = ops
        cost = ex.costs[first.name]
        # to the clones, then back to the body inputs: two compute sets; the gathered rows, laid out by
        # the gather's plan, cross the exchange into the body input (one phase, their bytes)
        assert cost.supersteps == 2
        assert cost.exchange_bytes == 256 * 64 * 4
        assert cost.plan == "3 loop-carried tensors copied to clones and back, 1 through the exchange"
        assert all(ex.costs[op.name].cycles == 0 for op in rest)
    # which carried outputs keep the body input's layout: the index passed through and the running sum made
    # from its input by an element-wise op do, the gathered rows do not
    first = next(iter(groups.values()))
    assert [relaid_out(g, op.inputs[0]) for op in first] == [False, True, False]


def test_alias_zero_copy_leaves_only_the_copies_across_the_exchange():
    ex = _compiled(alias_zero_copy=True)
    op = next(op for op in ex.graph.ops if op.attrs.get("loop_carried"))
    cost = ex.costs[op.name]
    assert cost.supersteps == 1 and cost.exchange_bytes == 256 * 64 * 4
    assert cost.plan == "3 loop-carried tensors copied to the body's inputs, 1 through the exchange"
    assert cost.cycles < _compiled().costs[op.name].cycles


def test_the_exit_flag_and_the_iterator_are_fused_scalar_vertices():
    """LoopOpx's maps on its scalars each iteration, ``exit |= !cond | i >= M`` and ``i += 1``: popops
    fuses each into one generated vertex (a scalar map of several ops, or a loop increment), whose
    estimate is 13 + inputs x fused ops worker cycles: 6 x (13 + 4 x 4) and 6 x (13 + 1 x 1) tile cycles,
    each its own compute set."""
    ex = _compiled()
    for role, cycles in (("exit_update", 6 * (13 + 16)), ("iterator", 6 * (13 + 1))):
        ops = [op for op in ex.graph.ops if op.attrs.get("loop_control") == role]
        assert len(ops) == 10
        cost = ex.costs[ops[0].name]
        assert (cost.compute_cycles, cost.supersteps, cost.tiles_used) == (cycles, 1, 1)
        assert cost.launch_cycles == 6 * 13
