"""``popart.Builder`` (sim/popart/builder.py): the ONNX it writes, with PopART's tensor ids, argument order,
node attributes and annotations, as sim.onnx reads them."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

import sim.onnx  # noqa: E402
import sim.popart as popart  # noqa: E402
from sim.errors import GraphError, UnsupportedOpError  # noqa: E402


def _node(builder, output):
    model = onnx.load_from_string(builder.getModelProto())
    return next(n for n in model.graph.node if output in n.output)


def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def test_ids_follow_popart_naming():
    """BuilderImpl::getNextId: ``input``, ``init_input``, ``<op type or debug name>:<index>``, ``/n`` when taken,
    the name scopes as a prefix."""
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT16", [2, 4]))
    y = b.addInputTensor("FLOAT16", [2, 4])
    named = b.addInputTensor(popart.TensorInfo("INT32", [2]), "labels")
    w = b.addInitializedInputTensor(np.zeros([4, 4], np.float16))
    s1 = b.aiOnnx.add([x, y])
    s2 = b.aiOnnx.add([x, y])
    with b.nameScope("layer0"):
        m = b.aiOnnx.matmul([s1, w], debugContext="proj")
    assert (x, y, named, w, s1, s2, m) == ("input", "input/1", "labels", "init_input", "Add:0", "Add:0/1",
                                           "layer0/proj:0")
    assert b.getInputTensorIds() == ["input", "input/1", "labels"]
    assert b.getTrainableTensorIds() == ["init_input"]
    assert _node(b, m).name == "layer0/proj"


def test_onnx_ops_take_popart_argument_order():
    """After the inputs: ``num_outputs`` for an op with optional outputs, then the required attributes and the
    optional ones, each alphabetical, ``auto_pad`` left out (PopART's popart_opset*.gen.cpp)."""
    b = popart.Builder(opsets={"ai.onnx": 11, "ai.graphcore": 1})
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [1, 3, 8, 8]))
    w = b.addInitializedInputTensor(np.zeros([4, 3, 3, 3], np.float32))
    c = b.aiOnnx.conv([x, w], [1, 1], 1, [3, 3], [1, 1, 1, 1], [2, 2])  # dilations, group, kernel_shape, pads, strides
    assert _attrs(_node(b, c)) == {"dilations": [1, 1], "group": 1, "kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                   "strides": [2, 2]}
    pooled = b.aiOnnx.maxpool([c], 1, [2, 2], 0, None, [0, 0, 0, 0], 0, [2, 2])  # num_outputs, kernel_shape, ...
    assert isinstance(pooled, list) and len(pooled) == 1
    assert _attrs(_node(b, pooled[0]))["kernel_shape"] == [2, 2]
    a = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]))
    m = b.addInitializedInputTensor(np.zeros([4, 3], np.float32))
    g = b.aiOnnx.gemm([a, m], 2.0, 0.5, False, True)  # alpha, beta, transA, transB
    assert _attrs(_node(b, g)) == {"alpha": 2.0, "beta": 0.5, "transA": 0, "transB": 1}
    values, indices = b.aiOnnx.topk([a, b.aiOnnx.constant(np.array([2], np.int64))], axis=1)
    parts = b.aiOnnx.split([a], 3, 1, [1, 1, 1])  # num_outputs, axis, split
    assert (values, indices, parts) == ("TopK:0", "TopK:1", ["Split:0", "Split:1", "Split:2"])
    assert [b.getTensorShape(t) for t in (c, pooled[0], g, values, parts[2])] == [[1, 4, 4, 4], [1, 4, 2, 2],
                                                                                  [2, 4], [2, 2], [2, 1]]
    assert b.getTensorDtypeString(g) == "float"


def test_builder_errors_name_the_problem():
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2]))
    with pytest.raises(AttributeError, match="no ONNX operator"):
        b.aiOnnx.addd([x, x])
    with pytest.raises(GraphError, match="'nope' is not known"):
        b.aiOnnx.add([x, "nope"])
    with pytest.raises(TypeError, match="missing required argument.*axis"):
        b.aiOnnx.concat([x, x])
    with pytest.raises(TypeError, match="unexpected keyword argument 'axes'"):
        b.aiOnnx.softmax([x], axes=[0])
    with pytest.raises(RuntimeError, match="already defined as 10"):  # aiOnnx chose PopART's default, 10
        b.aiOnnxOpset11.relu([x])
    with pytest.raises(UnsupportedOpError, match="VariableSettings"):
        b.addInitializedInputTensor(np.zeros(2, np.float32), object())
    with pytest.raises(TypeError, match="not a data type PopART takes"):
        popart.TensorInfo("FLOAT17", [2])


def test_graphcore_ops_write_popart_attributes():
    """willow/src/builder.cpp: a loss's reduction as its string, the other arguments by PopART's names."""
    b = popart.Builder()
    p = b.addInputTensor(popart.TensorInfo("FLOAT", [4, 10]))
    lbl = b.addInputTensor(popart.TensorInfo("INT32", [4]))
    nll = b.aiGraphcore.nllloss([p, lbl], popart.ReductionType.Sum, ignoreIndex=3)
    l1 = b.aiGraphcore.l1loss([p], 0.1)
    sl = b.aiGraphcore.dynamicslice([p, b.aiOnnx.constant(np.array([1], np.uint32))], [0], [2], True)
    assert _attrs(_node(b, nll)) == {"reduction": b"Sum", "inputIsLogProbability": 0, "ignoreIndex": 3}
    assert _attrs(_node(b, l1)) == {"lambda": pytest.approx(0.1), "reduction": b"Mean"}
    assert _attrs(_node(b, sl)) == {"axes": [0], "sizes": [2], "noOverlap": 1}
    assert _node(b, nll).domain == "ai.graphcore"
    # ONNX's shape inference cannot size PopART's ops: the simulator's importer does
    assert b.getTensorShape(sl) == [2, 10] and b.getTensorShape(nll) == []


def test_annotations_reach_the_simulated_ops():
    """virtualGraph / pipelineStage as contexts and on ids, the available-memory proportion, and RecomputeType:
    Recompute (2) recomputes, Checkpoint (1) keeps the output (PopART's op.hpp; sim.onnx read any non-zero
    value as recompute before)."""
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT16", [4, 8]))
    w = b.addInitializedInputTensor(np.zeros([8, 8], np.float16))
    with b.virtualGraph(1), b.pipelineStage(2):
        m = b.aiOnnx.matmul([x, w])
        r = b.aiOnnx.relu([m])
    s = b.aiOnnx.sigmoid([r])
    b.virtualGraph(s, 0)
    b.setAvailableMemoryProportion(m, 0.3)
    b.recomputeOutputInBackwardPass(r)
    b.recomputeOutputInBackwardPass(s, popart.RecomputeType.Checkpoint)
    (ck,) = b.checkpointOutput([s])
    b.addOutputTensor(ck)
    assert b.getVirtualGraph(m) == 1 and not b.hasVirtualGraph()
    ops = {op.name: op for op in sim.onnx.load(b.getModelProto()).ops}
    assert (ops["MatMul_0"].ipu, ops["MatMul_0"].stage) == (1, 2)
    assert ops["MatMul_0"].attrs["available_memory_proportion"] == pytest.approx(0.3)  # an ONNX float attribute
    assert (ops["Sigmoid_2"].ipu, ops["Sigmoid_2"].stage) == (0, None)
    assert [ops[n].recompute for n in ("Relu_1", "Sigmoid_2")] == [True, False]
    # Checkpoint keeps the output: a recomputation checkpoint on the op making it; checkpointOutput's identity
    # passes its tensor on, so the op before it is the checkpoint
    assert "Checkpoint" not in ops and ops["Sigmoid_2"].attrs["recomputation_checkpoint"] is True
    assert "recomputation_checkpoint" not in ops["Relu_1"].attrs


def test_a_model_loaded_into_the_builder_keeps_its_ids(tmp_path):
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 2]))
    y = b.aiOnnx.relu([x])
    b.addOutputTensor(y)
    b.saveModelProto(str(tmp_path / "m.onnx"))
    again = popart.Builder(str(tmp_path / "m.onnx"))
    z = again.aiOnnx.relu([y])
    assert z == "Relu:0/1" and again.getInputTensorIds() == [x] and again.getOutputTensorIds() == [y]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_a_custom_op_is_priced_by_the_rule_registered_for_it():
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT16", [64, 64]))
    (y,) = b.customOp("LeakyRelu2", 1, "custom.ops", [x], {"alpha": 0.02})
    b.addOutputTensor(y)
    model = onnx.load_from_string(b.getModelProto())
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 10), ("custom.ops", 1)]
    assert _attrs(_node(b, y)) == {"alpha": pytest.approx(0.02)}
    with pytest.raises(UnsupportedOpError, match="LeakyRelu2"):
        sim.onnx.load(b.getModelProto())
    sim.onnx.register_op("custom.ops::LeakyRelu2", lambda ctx: ctx.op("relu", ctx.inputs[:1], shapes=[ctx.shape(0)]))
    try:
        assert [op.kind for op in sim.onnx.load(b.getModelProto()).ops] == ["relu"]
    finally:
        sim.onnx.unregister_op("custom.ops::LeakyRelu2")


def test_annotation_contexts_are_reusable_as_popart_context_managers():
    """PopART's AttributeContextManager and NameContextManager may be kept and entered again (Graphcore's phased
    BERT keeps its scopes); recomputeOutput, outputTensorLocation and commGroup are contexts too."""
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT16", [4, 8]))
    phase, scope = b.executionPhase(3), b.nameScope("layer")
    made = []
    for _ in range(2):
        with phase, scope, b.recomputeOutput(popart.RecomputeType.Recompute):
            made.append(b.aiOnnx.relu([x]))
    assert made == ["layer/Relu:0", "layer/Relu:0/1"] and not b.hasExecutionPhase()
    assert [_attrs(_node(b, t))["__execution_phase"] for t in made] == [3, 3]
    assert _attrs(_node(b, made[0]))["__recompute_output_in_backward_pass"] == 2
    location = popart.TensorLocation(popart.TensorStorage.OffChip)
    with b.outputTensorLocation(location), b.commGroup(popart.CommGroupType.Consecutive, 2):
        y = b.aiOnnx.sigmoid([x])
    assert _attrs(_node(b, y))["__output_tensor_location"] == [1, 0, 0, 0, 0, 0]
    assert _attrs(_node(b, y))["__collectiveCommGroup"] == [1, 2]
    with pytest.raises(ValueError, match="popart.RecomputeType"):
        b.recomputeOutput(7)


def test_popart_builder_idioms_graphcores_bert_uses():
    """What Graphcore's PopART BERT (examples nlp/bert/popart) writes: a positional debugContext, opset 9's
    constant(value, debugContext), cast to a DataType name, reshape_const, groupnormalization's three outputs."""
    b = popart.Builder(opsets={"ai.onnx": 9, "ai.graphcore": 1})
    x = b.addInputTensor(popart.TensorInfo("FLOAT16", [4, 8]))
    c = b.aiOnnx.constant(np.ones([8], np.float16), "bias")
    y = b.aiOnnx.add([x, c], "Add")
    z = b.aiOnnx.cast([y], "FLOAT", "ToFloat")
    r = b.reshape_const(b.aiOnnx, [z], [2, 16], "Flat")
    g = b.addInitializedInputTensor(np.ones([16], np.float32))
    outs = b.aiGraphcore.groupnormalization([r, g, b.addInitializedInputTensor(np.zeros([16], np.float32))], 1)
    assert (c, y, z, r) == ("bias:0", "Add:0", "ToFloat:0", "Flat:0")
    assert _attrs(_node(b, z)) == {"to": onnx.TensorProto.FLOAT}
    assert _node(b, r).input[1] == "Flat_const:0"
    assert len(outs) == 3 and b.getTensorShape(outs[0]) == [2, 16]
    b.addOutputTensor(outs[0])
    assert [op.kind for op in sim.onnx.load(b.getModelProto()).ops] == ["add", "cast", "reshape", "groupnorm"]


def test_subgraph_builders_make_calls_and_loops():
    """createSubgraphBuilder: a call's callee (sim.onnx inlines it where the call stands) and a loop's body that
    reads a parent tensor (unrolled, its ops once an iteration)."""
    b = popart.Builder(opsets={"ai.onnx": 11, "ai.graphcore": 1})
    x = b.addInputTensor(popart.TensorInfo("FLOAT16", [4, 8]))
    w = b.addInitializedInputTensor(np.zeros([8, 8], np.float16))
    callee = b.createSubgraphBuilder()
    cx = callee.addUntypedInputTensor()
    callee.addInputTensorFromParentGraph(w)
    callee.addOutputTensor(callee.aiOnnx.relu([callee.aiOnnx.matmul([cx, w])]))
    (y,) = b.aiGraphcore.call([x], 1, callee)
    (z,) = b.aiGraphcore.call([y], 1, callee)
    body = b.createSubgraphBuilder()
    body.addInputTensor(popart.TensorInfo("INT64", []))
    cond = body.addInputTensor(popart.TensorInfo("BOOL", []))
    carried = body.addInputTensor(popart.TensorInfo("FLOAT16", [4, 8]))
    body.addOutputTensor(body.aiOnnx.identity([cond]))
    body.addOutputTensor(body.aiOnnx.sigmoid([carried]))
    trips = b.aiOnnx.constant(np.array(3, np.int64))
    go = b.aiOnnx.constant(np.array(True))
    (out,) = b.aiOnnx.loop([trips, go, z], 1, body)
    b.addOutputTensor(out)
    ops = sim.onnx.load(b.getModelProto()).ops
    assert [op.kind for op in ops[:4]] == ["matmul", "relu", "matmul", "relu"]  # each call's callee, inlined
    assert [op.kind for op in ops].count("sigmoid") == 3  # the body once an iteration (with the loop's own ops)
    with pytest.raises(GraphError, match="no parent builder has that tensor"):
        callee.addInputTensorFromParentGraph("nope")
    with pytest.raises(GraphError, match="'input' is not known"):
        b.createSubgraphBuilder().aiOnnx.relu([x])  # a parent tensor not named as read
