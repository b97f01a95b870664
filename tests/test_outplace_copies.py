"""PopART's element-wise ops that cannot run in place copy their input first (sim/compiler/outplace.py):
GeluComputex / SwishComputex ``outplace`` is ``cloneNcopy`` then the in-place op, and PopART's inplacing
pass leaves an op out of place when its gradient reads the forward input or a later op depending on
its result reads the input too."""

from __future__ import annotations

import numpy as np

import sim
from sim.compiler.outlining import merged_copy
from sim.graph.ir import GraphBuilder


def _mlp(act: str, residual: bool = False, side_reader: bool = False):
    """x -> fc1 -> act -> fc2 (+ fc1's output when ``residual``; ``side_reader``: another op reads
    fc1's output without needing the activation)."""
    b = GraphBuilder(f"mlp_{act}", "float16")
    x = b.input("x", (256, 256))
    h = b.matmul(x, b.weight("w1", (256, 256), "float16"), name="fc1")
    y = getattr(b, act)(h, name="act")
    out = b.matmul(y, b.weight("w2", (256, 256), "float16"), name="fc2")
    if residual:
        out = b.add(out, h, name="residual")
    if side_reader:
        b.output(b.scale(h, 2.0, name="side"))
    b.output(out)
    return b


def _compile(b: GraphBuilder, training: bool, tf: bool = False):
    if training:
        b.mse_loss(b.graph.outputs[-1], b.input("target", (256, 256)))
    o = sim.Options().enableSyntheticData(True)
    o._Popart.set("aliasZeroCopy", True)  # each op's own cost, no outlined calls' copies
    o._Popart.set("explicitRecomputation", True)  # which PopART requires beside it
    if tf:
        o.cachedGraphFunctions(True)
    return sim.compile(b.graph, "ipu-mk2", o, training=training)


def _copy_cycles(exe, op_name: str) -> int:
    op = next(op for op in exe.graph.ops if op.name == op_name)
    return merged_copy([op.inputs[0]], exe.graph, exe.system.ipu, exe.tiles).cycles


def test_a_trained_gelu_copies_its_input_which_its_gradient_reads():
    inference, training = _compile(_mlp("gelu"), False), _compile(_mlp("gelu"), True)
    copy = _copy_cycles(training, "act")
    assert copy > 0
    assert training.costs["act"].cycles == inference.costs["act"].cycles + copy
    assert "cloneNcopy" in training.costs["act"].plan and "cloneNcopy" not in inference.costs["act"].plan
    [note] = [n for n in training.notes if n.startswith("PopART's outplace element-wise ops")]
    assert f"IPU 0: 1 op, {copy:,} cycles" in note
    assert not any(n.startswith("PopART's outplace") for n in inference.notes)


def test_swish_pays_the_copy_and_relu_whose_gradient_reads_its_output_does_not():
    swish = _compile(_mlp("swish"), True)
    assert swish.costs["act"].cycles == _compile(_mlp("swish"), False).costs["act"].cycles + _copy_cycles(swish, "act")
    relu = _compile(_mlp("relu"), True)
    assert "cloneNcopy" not in relu.costs["act"].plan
    assert relu.costs["act"].cycles == _compile(_mlp("relu"), False).costs["act"].cycles


def test_at_inference_only_a_later_reader_that_needs_the_result_keeps_the_op_out_of_place():
    plain = _compile(_mlp("gelu"), False)
    residual = _compile(_mlp("gelu", residual=True), False)  # the add reads fc1's output after the GELU's result
    side = _compile(_mlp("gelu", side_reader=True), False)  # PopART can run the side op before the GELU
    assert residual.costs["act"].cycles == plain.costs["act"].cycles + _copy_cycles(residual, "act")
    assert side.costs["act"].cycles == plain.costs["act"].cycles
    relu_residual = _compile(_mlp("relu", residual=True), False)
    assert "cloneNcopy" in relu_residual.costs["act"].plan


def test_tensorflow_lowering_pays_no_popart_copy():
    tf = _compile(_mlp("gelu"), True, tf=True)
    assert "cloneNcopy" not in tf.costs["act"].plan
    assert not any(n.startswith("PopART's outplace") for n in tf.notes)


def test_popxl_runs_no_inplacing_pass_so_the_program_chooses():
    """PopXL's Session applies only the pre-alias patterns: ``ops.gelu`` clones and copies its input even
    at inference with no other reader, ``ops.gelu_`` does not."""
    from sim import popxl
    from sim.popxl import ops

    def session(in_place: bool):
        ir = popxl.Ir()
        with ir.main_graph, popxl.in_sequence():
            x = ops.host_load(popxl.h2d_stream((256, 256), popxl.float16, name="x"))
            h = x @ popxl.variable(np.zeros((256, 256), np.float16), name="w")
            y = (ops.gelu_ if in_place else ops.gelu)(h)
            ops.host_store(popxl.d2h_stream(y.shape, y.dtype, name="y"), y)
        return popxl.Session(ir, "ipu_hw").executable

    outplace, inplace = session(False), session(True)
    [gelu] = [op for op in outplace.graph.ops if op.kind == "gelu"]
    [gelu_] = [op for op in inplace.graph.ops if op.kind == "gelu"]
    copy = merged_copy([gelu.inputs[0]], outplace.graph, outplace.system.ipu, outplace.tiles).cycles
    assert outplace.costs[gelu.name].cycles == inplace.costs[gelu_.name].cycles + copy
    assert "cloneNcopy" in outplace.costs[gelu.name].plan and "cloneNcopy" not in inplace.costs[gelu_.name].plan
