"""PopART's outlining: the copies into and out of called subgraphs (sim/compiler/outlining.py)."""

import pytest

import sim
from sim.compiler.executable import compile as compile_
from sim.compiler.outlining import _crossing, _equivalence, add_call_copies
from sim.cost import op_cost
from sim.graph.ir import GraphBuilder, Op
from sim.hardware.system import load_system

IPU = load_system("bow-ipu").ipu
TILES = IPU.tiles


def _options(**popart):
    o = sim.Options()
    for key, value in popart.items():
        o._Popart.set(key, value)
    return o


def _copies(g, names):
    """Cycles of copying ``names`` one after another, merged as Poplar merges adjacent copies: each tensor's
    popops copy, with one launch and one sync for them all (every copy is spread from the first tile on)."""
    costs = [op_cost(Op("c", "copy", [name], [name]), g, IPU, TILES) for name in names]
    return sum(c.cycles for c in costs) - (len(costs) - 1) * (costs[0].launch_cycles + costs[0].sync_cycles)


def _chain(shapes):
    """Matmuls one after another, [64, 256] through weights of the given [k, n] shapes, then a relu."""
    b = GraphBuilder("chain", "float16")
    x = b.input("x", (64, 256))
    for i, (k, n) in enumerate(shapes):
        x = b.matmul(x, b.weight(f"w{i}", (k, n)), name=f"mm{i}")
    b.output(b.relu(x, name="out"))
    return b.graph


def _cycles(g, **popart):
    return compile_(g, "bow-ipu", _options(**popart)).costs


def test_a_repeated_matmul_copies_its_operands_and_result_each_call():
    g = _chain([(256, 256)] * 3)
    on, off = _cycles(g), _cycles(g, enableOutlining=False)
    for i in range(3):
        copies = _copies(g, [f"mm{i - 1}" if i else "x", f"w{i}"]) + _copies(g, [f"mm{i}"])
        assert on[f"mm{i}"].cycles == off[f"mm{i}"].cycles + copies
        assert "outlined call: 2 tensors copied in" in on[f"mm{i}"].plan
        assert "outlined call: 1 tensor copied out" in on[f"mm{i}"].plan
    assert on["out"] == off["out"]  # an elementwise op alone is worth too little to outline


def test_a_matmul_that_occurs_once_is_no_call():
    g = _chain([(256, 256), (256, 512)])
    assert _cycles(g) == _cycles(g, enableOutlining=False)


def test_alias_zero_copy_and_a_high_threshold_leave_the_copies_out():
    g = _chain([(256, 256)] * 3)
    off = _cycles(g, enableOutlining=False)
    assert _cycles(g, aliasZeroCopy=True, explicitRecomputation=True) == off
    with pytest.raises(sim.OptionsError, match="aliasZeroCopy without explicitRecomputation: PopART refuses it"):
        _cycles(g, aliasZeroCopy=True)
    assert _cycles(g, outlineThreshold=1e9) == off


def test_repeated_relus_alone_are_not_outlined():
    b = GraphBuilder("relus", "float16")
    x = b.input("x", (64, 256))
    for i in range(4):
        x = b.relu(x, name=f"r{i}")
    b.output(x)
    assert _cycles(b.graph) == _cycles(b.graph, enableOutlining=False)


def _blocks(inner_pairs: bool):
    """Two like blocks on one IPU: a matmul (two like-shaped ones when ``inner_pairs``), a relu, a matmul."""
    b = GraphBuilder("blocks", "float16")
    x = b.input("x", (64, 256))
    for layer in range(2):
        with b.ipu(0, block=f"layer{layer}"):
            h = b.matmul(x, b.weight(f"a{layer}", (256, 512)), name=f"l{layer}/a")
            if inner_pairs:
                h = b.matmul(h, b.weight(f"b{layer}", (512, 512)), name=f"l{layer}/b")
                h = b.matmul(h, b.weight(f"c{layer}", (512, 512)), name=f"l{layer}/c")
            h = b.relu(h, name=f"l{layer}/relu")
            x = b.matmul(h, b.weight(f"d{layer}", (512, 256)), name=f"l{layer}/d")
    b.output(x)
    return b.graph


def test_a_repeated_block_is_one_call_copying_what_crosses_it():
    g = _blocks(inner_pairs=False)
    on, off = _cycles(g), _cycles(g, enableOutlining=False)
    for layer in range(2):
        inputs = ["x" if layer == 0 else "l0/d", f"a{layer}", f"d{layer}"]
        assert on[f"l{layer}/a"].cycles == off[f"l{layer}/a"].cycles + _copies(g, inputs)
        assert on[f"l{layer}/d"].cycles == off[f"l{layer}/d"].cycles + _copies(g, [f"l{layer}/d"])
        assert on[f"l{layer}/relu"] == off[f"l{layer}/relu"]  # inside the call: nothing crosses


def test_just_in_time_copies_each_tensor_next_to_the_op_that_reads_or_makes_it():
    """subgraphCopyingStrategy JustInTime: a block's input and first weight are copied in before its first
    matmul, its last weight before the last matmul (each group merged on its own), its result out after it."""
    g = _blocks(inner_pairs=False)
    jit, off = _cycles(g, subgraphCopyingStrategy="JustInTime"), _cycles(g, enableOutlining=False)
    for layer in range(2):
        first = ["x" if layer == 0 else "l0/d", f"a{layer}"]
        assert jit[f"l{layer}/a"].cycles == off[f"l{layer}/a"].cycles + _copies(g, first)
        assert jit[f"l{layer}/d"].cycles == (off[f"l{layer}/d"].cycles + _copies(g, [f"d{layer}"])
                                             + _copies(g, [f"l{layer}/d"]))
    merged = _cycles(g)  # OnEnterAndExit, the default: three copies in merged into one program
    assert sum(c.cycles for c in jit.values()) > sum(c.cycles for c in merged.values())
    assert _options(subgraphCopyingStrategy=1).just_in_time_copies()
    assert not sim.Options().just_in_time_copies() and not _options(subgraphCopyingStrategy=0).just_in_time_copies()
    assert "_Popart.subgraphCopyingStrategy" not in _options(subgraphCopyingStrategy=1).unmodelled()
    with pytest.raises(sim.OptionsError, match="subgraphCopyingStrategy"):
        _options(subgraphCopyingStrategy=2)


def test_ops_twice_as_frequent_as_their_block_are_calls_within_it():
    g = _blocks(inner_pairs=True)
    costs, counts = add_call_copies(g, _cycles(g, enableOutlining=False), IPU, TILES)
    # each block is a call (2), and so are its two like 512 x 512 matmuls (4 in all, twice the block's 2)
    assert counts[0][:2] == (6, 2 * (5 + 1) + 4 * 3)  # a block: its input and four weights in, its result out
    assert "outlined call" in costs["l1/b"].plan and "outlined call" in costs["l1/c"].plan


def test_the_run_says_what_outlining_costs():
    g = _chain([(256, 256)] * 3)
    notes = sim.simulate(g, "bow-ipu").executable.notes
    cycles = sum(_copies(g, [f"mm{i - 1}" if i else "x", f"w{i}"]) + _copies(g, [f"mm{i}"]) for i in range(3))
    assert any(n.startswith("PopART outlining:") and f"IPU 0: 3 calls, 9 tensors copied in {cycles:,} cycles" in n
               for n in notes)
    assert not _options(aliasZeroCopy=True, outlineThreshold=2.0).unmodelled()  # both are modelled


def test_outline_threshold_must_be_a_number():
    with pytest.raises(sim.OptionsError, match="outlineThreshold"):
        _cycles(_chain([(256, 256)] * 2), outlineThreshold="high")


def test_like_accumulations_of_different_weights_match_and_copy_their_accumulator_back():
    """PopART matches ops by what they do, not which tensors they name: the three like weights' gradient
    accumulations are one subgraph's calls, each copying its accumulator and gradient in and the
    accumulator, updated in place, back out (CallOpx::copyModified)."""
    b = GraphBuilder("trained", "float16")
    x = b.input("x", (64, 256))
    for i in range(3):
        x = b.matmul(x, b.weight(f"w{i}", (256, 256)), name=f"mm{i}")
    b.mse_loss(x, b.input("target", (64, 256)))
    o = _options(enableOutlining=False)
    o.Training.gradientAccumulation(2)
    g = compile_(b.graph, "bow-ipu", o, training=True).graph
    accumulations = [op for op in g.ops if op.kind == "accumulate"]
    assert len(accumulations) == 3 and len({_equivalence(op, g) for op in accumulations}) == 1
    readers = {}
    for op in g.ops:
        for t in op.inputs:
            readers.setdefault(t, set()).add(op.name)
    accumulator, gradient = accumulations[0].inputs
    assert g.tensors[accumulator].role == "accumulator"
    assert _crossing(accumulations[:1], readers, g) == ([accumulator, gradient], [accumulator])


def test_layers_without_blocks_are_found_where_they_repeat():
    """Four like layers (matmul, relu, matmul) with no block names and a different head: each layer is
    one call, copying its input and two weights in and its result out, as PopART's outliner matches
    the sequence (its ops appear no more often than the layers, so none is a call of its own)."""
    b = GraphBuilder("layers", "float16")
    x = b.matmul(b.input("x", (64, 128)), b.weight("stem", (128, 256)), name="stem")
    for i in range(4):
        h = b.relu(b.matmul(x, b.weight(f"a{i}", (256, 512)), name=f"a{i}"), name=f"relu{i}")
        x = b.matmul(h, b.weight(f"b{i}", (512, 256)), name=f"b{i}")
    b.output(x)
    plain = compile_(b.graph, "bow-ipu", _options(enableOutlining=False))
    costs, counts = add_call_copies(plain.graph, plain.costs, IPU, TILES)
    assert counts[0][:2] == (4, 4 * (3 + 1))
    assert "outlined call: 3 tensors copied in" in costs["a1"].plan and "copied out" in costs["b1"].plan
    assert "outlined call" not in costs["stem"].plan and "outlined call" not in costs["relu1"].plan


def test_poptorch_runs_price_popart_outlining_unless_alias_zero_copy():
    """Through sim.poptorch: three like Linear layers on one IPU are three calls, and PopTorch's
    ``_Popart.set("aliasZeroCopy", True)`` takes their copies out of the cycle count."""
    torch = pytest.importorskip("torch")
    import sim.poptorch as poptorch

    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(64, 64) for _ in range(3)])

        def forward(self, x):
            for layer in self.layers:
                x = torch.relu(layer(x))
            return x

    def run(**popart):
        opts = poptorch.Options().logCycleCount(True)
        for key, value in popart.items():
            opts._Popart.set(key, value)
        model = poptorch.inferenceModel(Stack(), opts)
        model(torch.zeros(16, 64))
        return model

    copied, elided = run(), run(aliasZeroCopy=True, explicitRecomputation=True)
    assert any(n.startswith("PopART outlining:") and "IPU 0: 3 calls" in n for n in copied.executable.notes)
    assert not any(n.startswith("PopART outlining:") for n in elided.executable.notes)
    assert elided.cycleCount() < copied.cycleCount()
