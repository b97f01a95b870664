"""A PopART Loop's copies of its loop-carried tensors (sim/compiler/loops.py): LoopOpx copies every body
output to a clone after the body and every clone to the body input before the next iteration, an output
the body passes through included, each step one merged copy program; the copy to the body input crosses
the exchange for an output an op laid out by its own plan."""

import pytest
import torch

from sim import poptorch
from sim.poptorch import _state
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
        opts._Popart.set("explicitRecomputation", True)  # which PopART requires beside it
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


class _Looped(torch.nn.Module):
    """``for_loop`` of ``count`` over a matmul, a ReLU and (nested) an inner loop of 3 scalings;
    ``one_by_one`` runs the same iterations as ``count`` loops of one, which the capture traces
    in full; ``branch`` makes fx fail on the forward, so torch.export captures it."""

    def __init__(self, count: int, one_by_one: bool = False, nested: bool = False, branch: bool = False):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(32, 32) / 8)
        self.count, self.one_by_one, self.nested, self.branch = count, one_by_one, nested, branch
        self.traced = [0]  # calls of the body while the model is captured (a list: the capture puts back
        # the module's attributes after it traces)

    def body(self, x, total):
        self.traced[0] += _state.active() is not None
        y = torch.relu(x @ self.w)
        if self.nested:
            y = poptorch.for_loop(3, lambda t: t * 0.5 + 1.0, [y])[0]
        return [y, total + y.sum()]

    def forward(self, x, total):
        if self.branch and x.shape[0] > 1:
            x = x * 1.0
        if not self.one_by_one:
            return poptorch.for_loop(self.count, self.body, [x, total])
        outs = [x, total]
        for _ in range(self.count):
            outs = poptorch.for_loop(1, self.body, outs)
        return outs


def _run(module):
    torch.manual_seed(0)
    x, total = torch.randn(16, 32), torch.zeros(())
    eager = module(x, total)
    model = poptorch.inferenceModel(module, poptorch.Options().enableSyntheticData(True).logCycleCount(True))
    out = model(x, total)
    return model, out, eager


def test_a_loop_is_traced_twice_and_written_out_as_its_iterations_traced_one_by_one():
    """PopTorch traces a for_loop's body once; the capture traces it twice (torch.fx, and torch.export
    where fx cannot trace the model) and copies the second iteration for the rest: the same graph as
    the iterations traced one by one (op kinds in order, each carried copy's iteration, the cycles), and
    the same outputs as the model run as torch, a nested loop included."""
    for nested in (False, True):
        for branch in (False, True):
            looped = _Looped(12, nested=nested, branch=branch)
            model, out, eager = _run(looped)
            ref, _, _ = _run(_Looped(12, one_by_one=True, nested=nested, branch=branch))
            kinds = [op.kind for op in model.executable.graph.ops]
            assert kinds == [op.kind for op in ref.executable.graph.ops]
            assert kinds.count("matmul") == 12
            assert kinds.count("copy") == 12 * 2 + (12 * 3 if nested else 0)
            assert [op.attrs.get("loop_group") for op in model.executable.graph.ops] == \
                [op.attrs.get("loop_group") for op in ref.executable.graph.ops]
            assert model.cycleCount() == ref.cycleCount()
            method = "torch.export" if branch else "torch.fx"
            assert f"graph captured with {method}" in model.executable.notes
            if not branch:  # (torch.export calls the body on a copy of the module)
                assert looped.traced == [2]
            for o, e in zip(out, eager):
                torch.testing.assert_close(o, e)


def test_a_body_that_changes_between_calls_is_traced_for_every_iteration():
    """A body whose Python does something else on its first call than after (a counter): its two traced
    iterations differ, so every iteration is traced and the graph holds what each call did."""
    class Warm(_Looped):
        calls = 0

        def body(self, x, total):
            self.calls += 1
            y = x @ self.w
            return [torch.tanh(y) if self.calls % 5 == 1 else torch.relu(y), total + y.sum()]

    model, out, eager = _run(Warm(5))
    kinds = [op.kind for op in model.executable.graph.ops]
    assert kinds.count("matmul") == 5
    assert kinds.count("tanh") == 1 and kinds.count("relu") == 4


@pytest.mark.parametrize("count, says", [(-2, "0 or more; got -2"), (2.5, "an int; got 2.5")])
def test_a_for_loop_count_that_is_not_a_whole_number_of_iterations_is_refused(count, says):
    """A negative count ran no iteration, silently, until 2026-12-06; a fractional one failed inside the capture
    without naming the loop."""
    class Loop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x):
            return poptorch.for_loop(count, lambda t: [self.linear(t) + 1], [x])[0]

    with pytest.raises(Exception, match=r"for_loop expects count.*" + says.replace(".", r"\.")):
        poptorch.inferenceModel(Loop().eval())(torch.zeros(2, 4))
