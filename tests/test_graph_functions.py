"""TensorFlow's cached graph functions (``Options.cachedGraphFunctions``, sim/compiler/graph_functions.py):
every convolution, matmul and norm call copies its arguments in and its results out; no PopART outlining."""

from __future__ import annotations

import pytest

import sim
from sim.compiler.graph_functions import FUNCTION_KINDS
from sim.compiler.outlining import merged_copy
from sim.errors import OptionsError
from sim.graph.ir import GraphBuilder


def _net():
    b = GraphBuilder("tf_cnn", "float16")
    x = b.input("x", (4, 16, 14, 14))
    for i in range(3):  # three like layers: PopART would outline them
        x = b.relu(b.batchnorm(b.conv2d(x, 16, 3, padding=1, name=f"conv{i}"), name=f"bn{i}"))
    y = b.matmul(b.reshape(x, (4, 16 * 14 * 14)), b.weight("fc", (16 * 14 * 14, 10), "float16"))
    b.softmax_cross_entropy(y, b.input("labels", (4,), "int32"))
    return b.graph


def _compile(functions: bool):
    o = sim.Options().enableSyntheticData(True)
    if functions:
        o.cachedGraphFunctions(True)
    else:
        o._Popart.set("aliasZeroCopy", True)  # the ops' own costs, no outlined calls' copies
        o._Popart.set("explicitRecomputation", True)  # which PopART requires beside it
    return sim.compile(_net(), "ipu-mk2", o, training=True)


def test_each_function_call_copies_its_arguments_in_and_its_results_out():
    base, tf = _compile(False), _compile(True)
    g, ipu, tiles = tf.graph, tf.system.ipu, tf.tiles
    called = [op for op in g.ops if op.kind in FUNCTION_KINDS]
    assert {op.kind for op in called} >= {"conv2d", "conv2d_grad_input", "conv2d_grad_weight", "matmul",
                                          "batchnorm", "batchnorm_grad"}
    for op in g.ops:
        extra = tf.costs[op.name].cycles - base.costs[op.name].cycles
        if op.kind not in FUNCTION_KINDS:
            assert extra == 0, op.name
            continue
        programs = [list(op.inputs), list(op.outputs)]
        if op.kind == "conv2d_grad_input":  # the weights' transpose function: weights in, transposed out
            programs = [[op.inputs[1]], [op.inputs[1]]] + programs
        assert extra == sum(merged_copy(p, g, ipu, tiles).cycles for p in programs), op.name
        assert tf.costs[op.name].plan.count("graph function:") == len(programs)
    assert not any("outlined call" in c.plan for c in tf.costs.values())
    [note] = [n for n in tf.notes if n.startswith("cachedGraphFunctions")]
    assert f"{len(called) + sum(op.kind == 'conv2d_grad_input' for op in called)} calls" in note


def test_the_option_is_modelled_and_checked():
    o = sim.Options().cachedGraphFunctions(True)
    assert o.graph_functions and "cachedGraphFunctions" not in o.unmodelled()
    with pytest.raises(OptionsError, match="cachedGraphFunctions expects True or False, got 'yes'"):
        sim.Options().cachedGraphFunctions("yes")


def test_tensorflow_rows_run_with_graph_functions_and_pytorch_rows_without():
    from sim.validation.published import PUBLISHED_BY_ID
    for rid in ("M23", "B4", "B7", "B30", "B11", "B45"):  # TF1 ResNet-50, EfficientNet, ResNeXt; TF2 U-Net; BERT
        assert PUBLISHED_BY_ID[rid].setup.options().graph_functions, rid
    for rid in ("B14", "B46", "B22", "M18"):  # PyTorch ResNet-50, BERT, ViT; PopART's MLPerf BERT
        assert not PUBLISHED_BY_ID[rid].setup.options().graph_functions, rid


def test_an_op_marked_graph_function_copies_in_and_out_in_a_popart_program():
    """poplibs' single_conv_layer calls its forward convolution (and a backward one of the same canonical
    parameters) through a graphfn::TensorFunction: those ops alone carry the copies, PopART's program
    otherwise unchanged."""
    from sim import poplibs_benchmarks as pb
    g = pb.conv_graph(4, 28, 3, 128, 128, padding=1)
    marked = {op.name for op in g.ops if op.attrs.get("graph_function")}
    assert marked == {"fwd/conv2d", "bwd"}
    o = sim.Options().enableSyntheticData(True)
    run = sim.compile(g, "ipu-mk2", o)
    for op in g.ops:
        programs = run.costs[op.name].plan.count("graph function:")  # its copies in, its copies out
        assert programs == (2 if op.name in marked else 0), op.name
    [note] = [n for n in run.notes if n.startswith("graph functions")]
    assert "IPU 0: 2 calls, 6 tensors copied" in note


def test_the_benchmark_backward_pass_reuses_the_forward_function_when_canonical_params_match():
    from sim.poplibs_benchmarks import backward_reuses_forward
    assert backward_reuses_forward(3, 64, 64, 1, 1)  # same-padded, as many channels in as out
    assert backward_reuses_forward((1, 7), 128, 128, 1, (0, 3))
    assert backward_reuses_forward(1, 256, 256, 1, 0)
    assert not backward_reuses_forward(3, 64, 128, 1, 1)  # the channels swap
    assert not backward_reuses_forward(3, 64, 64, 2, 1)  # a stride dilates the backward input
    assert not backward_reuses_forward(3, 256, 256, 1, 0)  # a valid convolution's backward pass is full


def test_call_copies_run_poplars_copy_code_not_more_of_the_ops_codelets():
    """A call's copies add their compute sets to the op (cycles, control code, vertex state on the copied
    tensors' tiles) but one codelet shared by every copy, not codelets of the op's kind."""
    from sim import poplibs_benchmarks as pb
    from sim.compiler.program_memory import CALL_COPY_CODELET, op_codelets
    marked = pb.conv_graph(4, 7, 3, 64, 64, padding=1)
    plain = pb.conv_graph(4, 7, 3, 64, 64, padding=1)
    for op in plain.ops:
        op.attrs.pop("graph_function", None)
    o = sim.Options().enableSyntheticData(True)
    with_copies, without = sim.compile(marked, "ipu-mk2", o), sim.compile(plain, "ipu-mk2", o)
    for name in ("fwd/conv2d", "bwd"):
        cost, base = with_copies.costs[name], without.costs[name]
        assert cost.copy_sets == 2 and cost.supersteps == base.supersteps + 2
        op = next(o for o in marked.ops if o.name == name)
        assert op_codelets(op, marked, cost) == op_codelets(op, plain, base) + [CALL_COPY_CODELET]
