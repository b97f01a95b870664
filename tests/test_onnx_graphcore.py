"""PopART's own ONNX ops (``ai.graphcore``), as a model built with PopART's builder holds them: each read with
PopART's attribute names and priced as the ops its Opx runs (sim/onnx/_ops_graphcore.py)."""

from __future__ import annotations

import numpy as np
import pytest

import sim
from sim import load_system
from sim.cost import op_cost

onnx = pytest.importorskip("onnx")
import sim.onnx  # noqa: E402
from onnx import TensorProto as TP, helper as h  # noqa: E402

F16 = TP.FLOAT16


def _model(nodes, inputs, outputs, initializers=()):
    graph = h.make_graph(nodes, "popart", [h.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                         [h.make_tensor_value_info(n, F16, None) for n in outputs], initializer=list(initializers))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 11), h.make_opsetid("ai.graphcore", 1)])


def _node(op, inputs, outputs=("y",), **attrs):
    return h.make_node(op, list(inputs), list(outputs), domain="ai.graphcore", **attrs)


X = ("x", F16, [4, 8])

CASES = [
    (_node("Gelu", "x"), [X], [("gelu", (4, 8))]),
    (_node("GeluErf", "x"), [X], [("gelu_erf", (4, 8))]),
    (_node("Swish", "x"), [X], [("swish", (4, 8))]),
    (_node("Expm1", "x"), [X], [("expm1", (4, 8))]),
    (_node("Log1p", "x"), [X], [("log1p", (4, 8))]),
    (_node("NearbyInt", "x"), [X], [("round", (4, 8))]),
    (_node("Atan2", "xz"), [X, ("z", F16, [4, 8])], [("atan2", (4, 8))]),
    (_node("Fmod", "xz"), [X, ("z", F16, [4, 8])], [("remainder", (4, 8))]),
    (_node("Detach", "x"), [X], [("detach", (4, 8))]),
    (_node("Nop", "x"), [X], [("identity", (4, 8))]),
    (_node("Scale", "x", scale=0.5), [X], [("scale", (4, 8))]),
    (_node("ScaledAdd", "xz", scale0=0.5, scale1=2.0), [X, ("z", F16, [4, 8])], [("add", (4, 8))]),
    (_node("Subsample", "x", strides=[2, 3]), [X], [("copy", (2, 3))]),
    (_node("Reverse", "x", dimensions=[1]), [X], [("copy", (4, 8))]),
    (_node("TensorRemap", "x", remap_type=0), [X], [("remap", (4, 8))]),
    (_node("ShapedDropout", "x", shape=[4, 1], ratio=0.1), [X], [("dropout", (4, 8))]),
    (_node("IdentityLoss", "x", reduction="Mean"), [X], [("reduce_mean", (1,))]),
    (_node("IdentityLoss", "x", reduction="None"), [X], [("identity", (4, 8))]),
    (_node("L1", "x", reduction="Sum", **{"lambda": 0.1}), [X], [("abs", (4, 8)), ("reduce_sum", (1,)),
                                                                ("scale", (1,))]),
    (_node("Nll", "xl", reduction="Mean", ignoreIndex=-1), [X, ("l", TP.INT32, [4])],
     [("softmax_cross_entropy", (1,))]),
    # no reduction: a loss per label, the classes on the last axis (nll.cpp)
    (_node("Nll", "xl", reduction="None"), [("x", F16, [2, 3, 8]), ("l", TP.INT32, [2, 3])],
     [("softmax_cross_entropy", (2, 3))]),
    (_node("Pow2ScaleThenCast", "xs", to="FLOAT8_143"), [X, ("s", TP.INT8, [])], [("cast", (4, 8))]),
    (_node("CastThenPow2Scale", "xs", to=TP.FLOAT16), [("x", TP.FLOAT8E4M3FN, [4, 8]), ("s", TP.INT8, [])],
     [("cast", (4, 8))]),
    (_node("GroupNormalization", ["x", "s", "b"], ["y", "mean", "inv_std_dev"], num_groups=2, epsilon=1e-5),
     [("x", F16, [2, 4, 8, 8]), ("s", F16, [4]), ("b", F16, [4])], [("groupnorm", (2, 4, 8, 8))]),
    (_node("DynamicSlice", "xo", axes=[1], sizes=[2], noOverlap=1), [X, ("o", TP.UINT32, [1])], [("copy", (4, 2))]),
    (_node("DynamicUpdate", "xou", axes=[1], sizes=[2], noOverlap=1),
     [X, ("o", TP.UINT32, [1]), ("u", F16, [4, 2])], [("copy", (4, 8))]),
    (_node("Ctc", ["x", "t", "il", "tl"], ["y", "grad"], reduction="Mean", blank=0),
     [("x", F16, [20, 2, 10]), ("t", TP.UINT32, [2, 5]), ("il", TP.UINT32, [2]), ("tl", TP.UINT32, [2])],
     [("ctc_loss", (1,))]),
]


@pytest.mark.parametrize("node, inputs, ops", CASES, ids=[f"{c[0].op_type}-{i}" for i, c in enumerate(CASES)])
def test_each_graphcore_op_is_read_and_priced(node, inputs, ops):
    g = sim.onnx.load(_model([node], inputs, ["y"]))
    assert [(op.kind, g.tensors[op.outputs[0]].shape) for op in g.ops] == ops
    run = sim.simulate(g, "ipu-mk2", sim.Options())
    assert run.cycle_count > 0 and run.breakdown.sum(axis=1).iloc[0] == run.cycle_count


def test_nll_reads_probabilities_or_log_probabilities():
    """NllOp takes probabilities unless ``inputIsLogProbability``: NllOpx's log of the label's probability or not."""
    def lowering(**attrs):
        g = sim.onnx.load(_model([_node("Nll", "xl", reduction="Sum", **attrs)], [X, ("l", TP.INT32, [4])], ["y"]))
        return {k: v for k, v in g.ops[0].attrs.items() if k in ("probabilities", "log_probabilities", "reduction")}
    assert lowering() == {"probabilities": True, "reduction": "sum"}
    assert lowering(inputIsLogProbability=1) == {"log_probabilities": True, "reduction": "sum"}


def test_a_popart_model_trains_through_its_graphcore_ops():
    """A PopART builder's classifier (MatMul, aiGraphcore Gelu, Softmax, Nll, an L1 penalty on a weight and an
    IdentityLoss on the sum) trains: both weights get their update; a Detach stops the gradient before it."""
    rng = np.random.default_rng(0)
    w1 = onnx.numpy_helper.from_array(rng.random((8, 16)).astype(np.float16), "w1")
    w2 = onnx.numpy_helper.from_array(rng.random((16, 10)).astype(np.float16), "w2")

    def trained(detach: bool) -> set:
        nodes = [h.make_node("MatMul", ["x", "w1"], ["a"]), _node("Gelu", ["a"], ["b"]),
                 *([_node("Detach", ["b"], ["bd"])] if detach else []),
                 h.make_node("MatMul", ["bd" if detach else "b", "w2"], ["c"]), h.make_node("Softmax", ["c"], ["p"]),
                 _node("Nll", ["p", "l"], ["nll"], reduction="Mean"),
                 _node("L1", ["w2"], ["penalty"], reduction="Sum", **{"lambda": 0.01}),
                 h.make_node("Add", ["nll", "penalty"], ["total"]),
                 _node("IdentityLoss", ["total"], ["loss"], reduction="None")]
        g = sim.onnx.load(_model(nodes, [X, ("l", TP.INT32, [4])], ["loss"], [w1, w2]), loss="loss")
        run = sim.simulate(g, "ipu-mk2", sim.Options(), training=True)
        graph = run.executable.graph
        return {op.inputs[0] for op in graph.ops if op.pass_ == "update"}

    assert trained(detach=False) == {"w1", "w2"}
    assert trained(detach=True) == {"w2"}


def test_a_call_runs_its_callee_where_it_stands():
    """builder.aiGraphcore.call: the callee's ops inlined at each call, named under it, its weight shared."""
    w = onnx.numpy_helper.from_array(np.ones((8, 8), np.float16), "w")
    callee = h.make_graph([h.make_node("MatMul", ["a", "w"], ["b"]), h.make_node("Relu", ["b"], ["c"])], "layer",
                          [h.make_tensor_value_info("a", F16, [4, 8])], [h.make_tensor_value_info("c", F16, [4, 8])],
                          initializer=[w])
    nodes = [_node("Call", ["x"], ["h"], callee=callee), _node("Call", ["h"], ["y"], callee=callee)]
    g = sim.onnx.load(_model(nodes, [X], ["y"]))
    assert [(op.kind, op.name, op.inputs[-1] if op.kind == "matmul" else None) for op in g.ops] == [
        ("matmul", "Call_0/MatMul_0", "w"), ("relu", "Call_0/Relu_1", None),
        ("matmul", "Call_1/MatMul_0", "w"), ("relu", "Call_1/Relu_1", None)]
    with pytest.raises(sim.GraphError, match="its callee 'layer' takes 1 inputs and gives 1 outputs; the node has 2"):
        sim.onnx.load(_model([_node("Call", ["x", "x"], ["y"], callee=callee)], [X], ["y"]))


def test_a_missing_required_attribute_is_named():
    """PopART's loss ops read ``reduction`` (and L1 ``lambda``) with no default: a node without them is an error."""
    with pytest.raises(sim.GraphError, match="it has no 'reduction' attribute, which PopART's IdentityLossOp requires"):
        sim.onnx.load(_model([_node("IdentityLoss", "x")], [X], ["y"]))
    with pytest.raises(sim.GraphError, match="it has no 'lambda' attribute, which PopART's L1Op requires"):
        sim.onnx.load(_model([_node("L1", "x", reduction="Sum")], [X], ["y"]))
    with pytest.raises(sim.GraphError, match="reduction 'mean': PopART reads"):
        sim.onnx.load(_model([_node("IdentityLoss", "x", reduction="mean")], [X], ["y"]))


def test_graphcore_ops_without_a_rule_are_named():
    with pytest.raises(sim.UnsupportedOpError, match="ai.graphcore::SplineBasis"):
        sim.onnx.load(_model([_node("SplineBasis", "xm", ["y", "z"], degree=1)], [X, ("m", TP.INT32, [4, 8])],
                             ["y"]))


U32 = TP.UINT32
MORE_CASES = [
    # ScatterReduce: element by element (an index of the data's shape), or whole slices (a vector along the axis)
    (_node("ScatterReduce", "xi", axis_size=6, axis=1, reduction="max"), [X, ("i", U32, [4, 8])],
     [("scatter_elements", (4, 6))], {"axis": 1, "reduce": "max"}),
    (_node("ScatterReduce", "xi", axis_size=10, axis=0), [X, ("i", U32, [4])],
     [("scatter_elements", (10, 8))], {"axis": 0, "reduce": "sum", "slices": True}),
    (_node("ScatterReduce", "xiv", axis_size=10, axis=0, reduction="none"),
     [X, ("i", U32, [4, 1]), ("v", F16, [10, 8])], [("scatter_elements", (10, 8))],
     {"axis": 0, "reduce": "none", "slices": True}),
    (_node("GroupedGather", "xi", axis=1, group_size=4), [X, ("i", U32, [4, 3])], [("copy", (4, 3))], {}),
    (_node("Init", "", shape=[3, 5], data_type=F16, tensor_type=0, init_type=0), [], [("scale", (3, 5))],
     {"broadcast": True}),
    (_node("SequenceSlice", "xzabc", zeroUnused=0),
     [X, ("z", F16, [6, 8]), ("a", U32, [2]), ("b", U32, [2]), ("c", U32, [2])], [("copy", (6, 8))],
     {"dynamic_update": True}),
    (_node("ReplicatedAllReduce", "x", __collectiveOperator=0), [X], [("replicated_all_reduce", (4, 8))],
     {"group_stride": 1, "group_size": None}),
    (_node("ReplicatedReduceScatter", "x", __collectiveReplicaGrouping=[8, 2, 4]), [X],
     [("replicated_reduce_scatter", (8,))], {"group_stride": 2, "group_size": 4}),
    (_node("ReplicatedAllGather", "x", __collectiveCommGroup=[1, 2]), [X], [("replicated_all_gather", (64,))],
     {"group_stride": 1, "group_size": 2}),
]


@pytest.mark.parametrize("node, inputs, ops, attrs", MORE_CASES,
                         ids=[f"{c[0].op_type}-{i}" for i, c in enumerate(MORE_CASES)])
def test_scatter_gather_init_and_collectives_are_read_as_popart_reads_them(node, inputs, ops, attrs):
    g = sim.onnx.load(_model([node], inputs, ["y"]))
    assert [(op.kind, g.tensors[op.outputs[0]].shape) for op in g.ops] == ops
    assert {k: v for k, v in g.ops[-1].attrs.items() if k in attrs} == attrs
    run = sim.simulate(g, "ipu-pod16" if "replicated" in ops[0][0] else "ipu-mk2",
                       sim.Options().replicationFactor(8) if "replicated" in ops[0][0] else sim.Options())
    assert run.cycle_count > 0 and run.breakdown.sum(axis=1).iloc[0] == run.cycle_count


def test_a_grouped_gather_from_a_weight_is_one_multislice_of_the_groups_tables():
    table = onnx.numpy_helper.from_array(np.ones((4, 100, 8), np.float16), "t")
    g = sim.onnx.load(_model([_node("GroupedGather", "ti", axis=1, group_size=4)], [("i", U32, [4, 3])], ["y"],
                             [table]))
    assert [(op.kind, g.tensors[op.outputs[0]].shape) for op in g.ops] == [
        ("reshape", (400, 8)), ("reshape", (12,)), ("gather", (12, 8)), ("reshape", (4, 3, 8))]


def test_popart_checks_of_the_new_ops():
    with pytest.raises(sim.GraphError, match="it has no 'axis_size' attribute"):
        sim.onnx.load(_model([_node("ScatterReduce", "xi")], [X, ("i", U32, [4, 8])], ["y"]))
    with pytest.raises(sim.GraphError, match="Partial broadcasting of indices is not currently supported"):
        sim.onnx.load(_model([_node("ScatterReduce", "xi", axis_size=3, axis=0)], [X, ("i", U32, [4, 2])], ["y"]))
    with pytest.raises(sim.GraphError, match=r"Failed to expand 'indices' shape \[5\] to match 'src' shape \[4, 8\]"):
        sim.onnx.load(_model([_node("ScatterReduce", "xi", axis_size=3, axis=0)], [X, ("i", U32, [5])], ["y"]))
    with pytest.raises(sim.UnsupportedOpError, match="grouped ScatterReduce"):
        sim.onnx.load(_model([_node("ScatterReduce", "xi", axis_size=3, group_size=2)], [X, ("i", U32, [4, 8])],
                             ["y"]))
    with pytest.raises(sim.GraphError, match="axis = 0 indicates the dimension of the group"):
        sim.onnx.load(_model([_node("GroupedGather", "xi", axis=0, group_size=4)], [X, ("i", U32, [4, 3])], ["y"]))
    with pytest.raises(sim.UnsupportedOpError, match="its shards are the session's replicas"):
        sim.onnx.load(_model([_node("ReplicatedAllGather", "x")], [X], ["y"]))
    with pytest.raises(sim.UnsupportedOpError, match="an Orthogonal __collectiveCommGroup"):
        sim.onnx.load(_model([_node("ReplicatedAllReduce", "x", __collectiveCommGroup=[2, 2])], [X], ["y"]))


def test_a_dynamic_updates_update_gets_its_gradient():
    """DynamicUpdate's update (its third input) trains through the op: a dynamic slice of the gradient."""
    w = onnx.numpy_helper.from_array(np.ones((8, 2), np.float16), "w")
    nodes = [h.make_node("MatMul", ["x", "w"], ["u"]),
             _node("DynamicUpdate", ["x", "o", "u"], ["y"], axes=[1], sizes=[2], noOverlap=1),
             h.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)]
    g = sim.onnx.load(_model(nodes, [X, ("o", TP.UINT32, [1])], ["loss"], [w]), loss="loss")
    run = sim.simulate(g, "ipu-mk2", sim.Options(), training=True, optimizer="sgd")
    names = [op.name for op in run.executable.graph.ops]
    assert any(n.endswith("grad_slice") for n in names)
    assert any(op.pass_ == "update" and op.inputs[0] == "w" for op in run.executable.graph.ops)


def test_the_exact_gelu_is_popops_gelu_erf_vertex():
    """PopART's GeluErf (and ONNX's Gelu with approximate "none") run popops' GELU_ERF vertex, 16 cycles a half
    (popopsCycleEstimators.hpp {16, false, 1}), where its Gelu runs popnn's tanh GELU at 2 (configs/_vector-ops.toml):
    the same graph with one in place of the other costs 14 cycles a half more on each tile's elements."""
    shape = [1472, 1000]  # 1,000 halves a tile

    def cycles(node):
        g = sim.onnx.load(_model([node], [("x", F16, shape)], ["y"]))
        return op_cost(g.ops[0], g, load_system("ipu-mk2").ipu, 1472).compute_cycles
    exact, tanh = cycles(_node("GeluErf", "x")), cycles(_node("Gelu", "x"))
    assert exact - tanh == pytest.approx(14 * 1000 + (350 - 230), abs=2)
    tanh_onnx = h.make_node("Gelu", ["x"], ["y"], approximate="tanh")
    g = sim.onnx.load(h.make_model(h.make_graph([tanh_onnx], "g", [h.make_tensor_value_info("x", F16, shape)],
                                                [h.make_tensor_value_info("y", F16, None)]),
                                   opset_imports=[h.make_opsetid("", 20)]))
    assert [op.kind for op in g.ops] == ["gelu"]


def test_fp8_scale_casts_round_trip_and_check_their_types():
    """Pow2ScaleThenCast to FP8 and CastThenPow2Scale back: each one cast (float8, then float16); PopART's
    refusals of other types."""
    nodes = [_node("Pow2ScaleThenCast", "xs", ["q"], to="FLOAT8_152"), _node("CastThenPow2Scale", "qs", ["y"],
                                                                            to=TP.FLOAT16)]
    g = sim.onnx.load(_model(nodes, [X, ("s", TP.INT8, [])], ["y"]))
    assert [(op.kind, g.tensors[op.outputs[0]].dtype) for op in g.ops] == [("cast", "float8"), ("cast", "float16")]
    with pytest.raises(sim.GraphError, match="casts to FLOAT8_143 or FLOAT8_152"):
        sim.onnx.load(_model([_node("Pow2ScaleThenCast", "xs", to="INT8")], [X, ("s", TP.INT8, [])], ["y"]))
    with pytest.raises(sim.GraphError, match="Casting from FLOAT8 is only supported"):
        sim.onnx.load(_model([_node("CastThenPow2Scale", "xs", to=TP.FLOAT16)], [X, ("s", TP.INT8, [])], ["y"]))
