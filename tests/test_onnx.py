"""sim.onnx: ONNX models imported into sim graphs (models built here with onnx.helper; no downloads)."""

import collections
import math
import itertools
import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import models
import sim
import sim.onnx
from sim.graph.training import expand_training

REPO = Path(__file__).resolve().parents[1]
OPSET = [h.make_opsetid("", 17)]


def zeros(name, shape, dtype=np.float32):
    return nh.from_array(np.zeros(shape, dtype), name)


def const(name, value, dtype=np.int64):
    return nh.from_array(np.asarray(value, dtype), name)


def model(nodes, inputs, outputs, inits=(), opset=OPSET, name="test"):
    return h.make_model(h.make_graph(nodes, name, inputs, outputs, list(inits)), opset_imports=opset)


def kinds(graph, pass_="forward"):
    return [op.kind for op in graph.ops if op.pass_ == pass_]


def shapes(graph, kind):
    return [graph.tensors[op.outputs[0]].shape for op in graph.ops if op.kind == kind]


# --- models -----------------------------------------------------------------------------------
def mlp_model(widths=(784, 256, 256, 10), batch="batch"):
    """torch.nn.Linear layers as torch exports them: Gemm with transB=1 (weights (out, in))."""
    nodes, inits, x = [], [], "x"
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        inits += [zeros(f"fc{i}.weight", (b, a)), zeros(f"fc{i}.bias", (b,))]
        nodes.append(h.make_node("Gemm", [x, f"fc{i}.weight", f"fc{i}.bias"], [f"/fc{i}/Gemm_output_0"],
                                 name=f"/fc{i}/Gemm", transB=1))
        x = f"/fc{i}/Gemm_output_0"
        if i < len(widths) - 2:
            nodes.append(h.make_node("Relu", [x], [f"/act{i}/Relu_output_0"], name=f"/act{i}/Relu"))
            x = f"/act{i}/Relu_output_0"
    nodes[-1].output[0] = "logits"
    nodes.append(h.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"], name="/loss",
                             reduction="mean"))
    return model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [batch, widths[0]]),
                         h.make_tensor_value_info("labels", T.INT64, [batch])],
                 [h.make_tensor_value_info("logits", T.FLOAT, [batch, widths[-1]]),
                  h.make_tensor_value_info("loss", T.FLOAT, [])], inits, name="mlp")


def cnn_model():
    inits = [zeros("conv1.w", (8, 3, 3, 3)), zeros("conv1.b", (8,)),
             zeros("bn.scale", (8,)), zeros("bn.bias", (8,)), zeros("bn.mean", (8,)), zeros("bn.var", (8,)),
             zeros("conv2.w", (8, 1, 3, 3)), zeros("fc.w", (10, 8)), zeros("fc.b", (10,))]
    nodes = [
        h.make_node("Conv", ["x", "conv1.w", "conv1.b"], ["c1"], name="conv1", kernel_shape=[3, 3],
                    pads=[1, 1, 1, 1]),
        h.make_node("BatchNormalization", ["c1", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["b1"], name="bn"),
        h.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        h.make_node("MaxPool", ["r1"], ["p1"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        h.make_node("Conv", ["p1", "conv2.w"], ["c2"], name="conv2_dw", group=8, strides=[2, 2],
                    pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        h.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        h.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        h.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
        h.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"], name="loss"),
    ]
    return model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, 32, 32]),
                         h.make_tensor_value_info("labels", T.INT64, ["N"])],
                 [h.make_tensor_value_info("logits", T.FLOAT, ["N", 10]),
                  h.make_tensor_value_info("loss", T.FLOAT, [])], inits, name="cnn")


def attention_model(seq=16, hidden=64, heads=4):
    """One post-LN transformer attention block as exporters write it: the head split and merge
    Reshapes take shapes computed from Shape(x) at run time (Shape -> Gather -> Unsqueeze ->
    Concat), and the loss is a ReduceMean."""
    dh = hidden // heads
    inits = [zeros(f"w{n}", (hidden, hidden)) for n in "qkvo"] + [zeros(f"b{n}", (hidden,)) for n in "qkv"]
    inits += [zeros("ln.g", (hidden,)), zeros("ln.b", (hidden,)),
              const("zero", 0), const("axes0", [0]), const("split_tail", [seq, heads, dh]),
              const("merge_tail", [seq, hidden]), nh.from_array(np.array(np.sqrt(dh), np.float32), "scale")]
    nodes = [
        h.make_node("Shape", ["x"], ["x_shape"], name="shape"),
        h.make_node("Gather", ["x_shape", "zero"], ["b"], name="batch_dim", axis=0),
        h.make_node("Unsqueeze", ["b", "axes0"], ["b1"], name="batch_1d"),
        h.make_node("Concat", ["b1", "split_tail"], ["split_shape"], name="split_shape", axis=0),
        h.make_node("Concat", ["b1", "merge_tail"], ["merge_shape"], name="merge_shape", axis=0),
    ]
    for n in "qkv":
        nodes += [h.make_node("MatMul", ["x", f"w{n}"], [f"{n}_mm"], name=f"{n}_proj"),
                  h.make_node("Add", [f"{n}_mm", f"b{n}"], [f"{n}_b"], name=f"{n}_bias"),
                  h.make_node("Reshape", [f"{n}_b", "split_shape"], [f"{n}_4d"], name=f"{n}_split"),
                  h.make_node("Transpose", [f"{n}_4d"], [f"{n}_h"], name=f"{n}_heads",
                              perm=[0, 2, 3, 1] if n == "k" else [0, 2, 1, 3])]
    nodes += [
        h.make_node("MatMul", ["q_h", "k_h"], ["scores"], name="scores"),
        h.make_node("Div", ["scores", "scale"], ["scaled"], name="scale"),
        h.make_node("Softmax", ["scaled"], ["probs"], name="softmax", axis=-1),
        h.make_node("MatMul", ["probs", "v_h"], ["ctx"], name="context"),
        h.make_node("Transpose", ["ctx"], ["ctx_t"], name="merge_heads", perm=[0, 2, 1, 3]),
        h.make_node("Reshape", ["ctx_t", "merge_shape"], ["ctx_2d"], name="merge"),
        h.make_node("MatMul", ["ctx_2d", "wo"], ["out"], name="out_proj"),
        h.make_node("Add", ["out", "x"], ["res"], name="residual"),
        h.make_node("LayerNormalization", ["res", "ln.g", "ln.b"], ["y"], name="ln", axis=-1, epsilon=1e-5),
        h.make_node("ReduceMean", ["y"], ["loss"], name="loss", keepdims=0),
    ]
    return model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["batch", seq, hidden])],
                 [h.make_tensor_value_info("y", T.FLOAT, ["batch", seq, hidden]),
                  h.make_tensor_value_info("loss", T.FLOAT, [])], inits, name="attention")


def unknown_op_model(op_type="FancyOp", domain=""):
    nodes = [h.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             h.make_node(op_type, ["h"], ["a"], name="fancy", domain=domain),
             h.make_node("Relu", ["a"], ["y"], name="relu")]
    opsets = OPSET + ([h.make_opsetid(domain, 1)] if domain else [])
    return model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [4, 32])],
                 [h.make_tensor_value_info("y", T.FLOAT, [4, 32])], [zeros("w", (32, 32))], opset=opsets)


# --- tests ------------------------------------------------------------------------------------
def test_mlp_matches_the_zoo_mlp_exactly():
    """Gemm(transB=1) + Relu + SoftmaxCrossEntropyLoss import as the zoo's linear + relu + loss:
    the same op kinds, shapes, dtypes and tensor roles (weights stored (in, out) as the zoo's),
    so every op has the zoo's cost signature and the schedule is the same: equal cycles."""
    m = mlp_model()
    onnx.checker.check_model(m)
    g = sim.onnx.load(m, batch_size=16)
    zoo = models.get("mlp")  # micro-batch 16, 784 -> 256 -> 256 -> 10, float32
    assert kinds(g) == kinds(zoo)
    assert g.tensors["x"].shape == (16, 784) and g.tensors["labels"].shape == (16,)
    assert g.tensors["labels"].dtype == "int32"  # int64 on the host is int32 on the IPU
    assert g.tensors["fc0.weight"].shape == (784, 256) and g.tensors["fc0.weight"].role == "weight"
    assert g.outputs == ["logits", "loss"] and g.loss == "loss"
    assert g.tensors["logits"].shape == (16, 10)
    assert g.num_parameters() == zoo.num_parameters()
    for ours, theirs in zip(g.ops, zoo.ops):
        assert [g.tensors[t].shape for t in ours.inputs] == [zoo.tensors[t].shape for t in theirs.inputs]
    for training in (False, True):
        ours = sim.simulate(g, "ipu-mk2", training=training).cycle_count
        assert ours == sim.simulate(zoo, "ipu-mk2", training=training).cycle_count


def test_cnn_imports_with_its_shapes_and_trains():
    g = sim.onnx.load(cnn_model(), batch_size=4, dtype="float16")
    assert kinds(g) == ["conv2d", "add", "batchnorm", "relu", "maxpool", "conv2d", "relu", "avgpool",
                        "reshape", "matmul", "add", "softmax_cross_entropy"]
    convs = [op for op in g.ops if op.kind == "conv2d"]
    assert convs[0].attrs == {"kernel": 3, "stride": 1, "padding": 1, "groups": 1}
    assert convs[1].attrs == {"kernel": 3, "stride": 2, "padding": 1, "groups": 8}
    assert shapes(g, "conv2d") == [(4, 8, 32, 32), (4, 8, 8, 8)]
    assert shapes(g, "maxpool") == [(4, 8, 16, 16)] and shapes(g, "avgpool") == [(4, 8, 1, 1)]
    assert g.tensors["conv1.b"].shape == (1, 8, 1, 1)  # the conv bias broadcasts over N, H, W
    assert g.tensors["bn.mean"].role == g.tensors["bn.var"].role == "constant"
    assert g.tensors["bn.scale"].role == "weight"
    assert g.tensors["fc.w"].shape == (8, 10)
    assert all(t.dtype == "float16" for t in g.tensors.values() if t.dtype.startswith("float")
               and t.name != "loss")
    run = sim.simulate(g, "ipu-mk2", sim.Options().deviceIterations(2), training=True)
    assert run.cycle_count > 0
    assert "conv2d_grad_weight" in {op.kind for op in run.executable.graph.ops}


def test_transformer_block_folds_its_shape_subgraph():
    g = sim.onnx.load(attention_model(), batch_size=2, loss="loss")
    # Shape -> Gather -> Unsqueeze -> Concat computed the Reshape targets at import time
    assert collections.Counter(kinds(g)) == {"matmul": 6, "add": 4, "reshape": 4, "transpose": 4,
                                             "div": 1, "softmax": 1, "layernorm": 1, "reduce_mean": 1}
    assert not {"gather", "concat", "slice", "copy"} & set(kinds(g))
    assert g.tensors["q_4d"].shape == (2, 16, 4, 16)
    assert g.tensors["k_h"].shape == (2, 4, 16, 16) and g.tensors["scores"].shape == (2, 4, 16, 16)
    assert g.tensors["ctx_2d"].shape == (2, 16, 64) and g.tensors["y"].shape == (2, 16, 64)
    # the scores' Div by sqrt(16) is popops' DIVIDE, as PopART's DivOpx runs it (no pattern makes it a multiply)
    divisor = g.tensors[next(op for op in g.ops if op.kind == "div").inputs[1]]
    assert divisor.role == "constant" and divisor.numel == 1
    assert g.inputs == ["x"] and g.outputs == ["y", "loss"] and g.loss == "loss"
    assert sim.simulate(g, "ipu-mk2").cycle_count > 0
    opts = sim.Options()
    opts.Training.gradientAccumulation(2)
    assert sim.simulate(g, "ipu-mk2", opts, training=True, optimizer="adam").cycle_count > 0


def test_shape_inference_runs_without_the_weights_values():
    """Shape inference sees the model with each large float initializer a typed input (light_graph): a large model's
    weights are not copied for it, and the shapes are the same; small initializers (a Reshape's target) stay."""
    from sim.onnx._importer import light_graph
    x = h.make_tensor_value_info("x", T.FLOAT, [4, 64])
    y = h.make_tensor_value_info("y", T.FLOAT, None)
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Reshape", ["m", "target"], ["y"])]
    m = model(nodes, [x], [y], [zeros("w", [64, 64]), const("target", [2, 2, 64]), zeros("b", [8])])
    light = light_graph(m.graph)
    assert [i.name for i in light.initializer] == ["target", "b"]  # w (4,096 elements) is left out
    assert [i.name for i in light.input] == ["x", "w"] and light.input[1].type.tensor_type.elem_type == T.FLOAT
    assert len(m.graph.initializer) == 3  # the model itself is not changed
    g = sim.onnx.load(m)
    assert g.tensors["y"].shape == (2, 2, 64) and g.tensors["w"].role == "weight"


def test_symbolic_batch_needs_a_size_and_scales_with_it():
    with pytest.raises(sim.GraphError, match=r"batch_size=N.*"):
        sim.onnx.load(mlp_model())
    small, big = (sim.onnx.load(mlp_model(), batch_size=b) for b in (4, 64))
    assert small.tensors["x"].shape == (4, 784) and big.tensors["x"].shape == (64, 784)
    assert small.tensors["logits"].shape == (4, 10)
    assert sim.simulate(small).cycle_count < sim.simulate(big).cycle_count


def test_other_symbolic_dims_are_sized_by_name():
    nodes = [h.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["batch", "seq", 8])],
              [h.make_tensor_value_info("y", T.FLOAT, ["batch", "seq", 4])], [zeros("w", (8, 4))])
    with pytest.raises(sim.GraphError, match=r"dims=\{'seq': N\}"):
        sim.onnx.load(m, batch_size=2)
    g = sim.onnx.load(m, batch_size=2, dims={"seq": 5})
    assert g.tensors["y"].shape == (2, 5, 4)
    # the batch size and a dims entry for the batch dimension are two sizes of one dimension
    assert sim.onnx.load(m, batch_size=2, dims={"seq": 5, "batch": 2}).tensors["y"].shape == (2, 5, 4)
    with pytest.raises(sim.GraphError, match=r"batch size 4 and dims\['batch'\] = 2 .* give one of them"):
        sim.onnx.load(m, batch_size=4, dims={"seq": 5, "batch": 2})
    assert sim.onnx.batch_dims(m) == {"batch"}


def test_the_batch_size_sizes_the_batch_dimension_only():
    """An attention mask led by ``seq`` is not sized by the batch size (dims sizes it), and a time-major
    input's ``batch`` is the batch wherever it stands."""
    nodes = [h.make_node("Add", ["x", "mask"], ["y"], name="add")]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["batch", "seq", "seq"]),
                      h.make_tensor_value_info("mask", T.FLOAT, ["seq", "seq"])],
              [h.make_tensor_value_info("y", T.FLOAT, ["batch", "seq", "seq"])])
    g = sim.onnx.load(m, batch_size=2, dims={"seq": 16})
    assert (g.tensors["x"].shape, g.tensors["mask"].shape, g.micro_batch) == ((2, 16, 16), (16, 16), 2)
    with pytest.raises(sim.GraphError, match=r"'mask' dim 0 \('seq'\)"):
        sim.onnx.load(m, batch_size=2)
    assert sim.onnx.batch_dims(m) == {"batch"}
    time_major = model([h.make_node("Relu", ["ids"], ["y"], name="relu")],
                       [h.make_tensor_value_info("ids", T.FLOAT, ["seq", "batch"])],
                       [h.make_tensor_value_info("y", T.FLOAT, ["seq", "batch"])])
    g = sim.onnx.load(time_major, batch_size=4, dims={"seq": 7})
    assert (g.tensors["ids"].shape, g.micro_batch) == ((7, 4), 4)


def test_batch_size_against_a_fixed_batch_is_an_error():
    with pytest.raises(sim.GraphError, match="fixed leading"):
        sim.onnx.load(mlp_model(batch=8), batch_size=4)
    assert sim.onnx.load(mlp_model(batch=8), batch_size=8).tensors["x"].shape == (8, 784)


def test_unknown_op_names_the_op_and_how_to_price_it():
    with pytest.raises(sim.UnsupportedOpError) as e:
        sim.onnx.load(unknown_op_model())
    msg = str(e.value)
    assert "FancyOp" in msg and "'fancy'" in msg
    assert "sim.onnx.register_op('FancyOp', fn)" in msg and "docs/onnx.md" in msg


def test_register_op_gives_an_op_a_cost():
    sim.onnx.register_op("FancyOp", lambda ctx: ctx.op("gelu", ctx.inputs[:1], shapes=[ctx.shape(0)]))
    sim.onnx.register_op("com.example::Swish",
                         lambda ctx: ctx.custom(vertices=ctx.shape(0)[0] * 8, vertex_cycles=40,
                                                shapes=[ctx.shape(0)]))
    try:
        g = sim.onnx.load(unknown_op_model())
        assert kinds(g) == ["matmul", "gelu", "relu"] and g.tensors["a"].shape == (4, 32)
        g2 = sim.onnx.load(unknown_op_model("Swish", "com.example"))
        custom = next(op for op in g2.ops if op.kind == "custom")
        assert custom.attrs["vertices"] == 32 and custom.attrs["vertex_cycles"] == 40
        assert sim.simulate(g).cycle_count > 0 and sim.simulate(g2).cycle_count > 0
    finally:
        sim.onnx.unregister_op("FancyOp")
        sim.onnx.unregister_op("com.example::Swish")
    with pytest.raises(sim.UnsupportedOpError):
        sim.onnx.load(unknown_op_model())


def test_a_weight_read_twice_in_one_transposed_layout_is_transposed_once():
    """Two Gemm (transB=1) nodes sharing one weight, as a shared nn.Linear or a GRU cell looped in
    Python exports: one transpose of the weight, read by both matmuls."""
    nodes = [h.make_node("Gemm", ["x", "w"], ["h"], transB=1, name="g1"),
             h.make_node("Gemm", ["h", "w"], ["y"], transB=1, name="g2")]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [4, 16])],
              [h.make_tensor_value_info("y", T.FLOAT, [4, 16])], [zeros("w", (16, 16))])
    g = sim.onnx.load(m)
    assert [op.kind for op in g.ops].count("transpose") == 1
    assert [op.kind for op in g.ops].count("matmul") == 2


def test_a_constant_over_the_folding_cap_is_a_graph_constant():
    """A causal mask of 5,000 positions (ConstantOfShape then Trilu, 25 M elements) is folded by PopART
    whatever its size: the importer keeps it as one constant of the graph (no op, no intermediate)
    rather than refusing the ConstantOfShape it does not compute."""
    from onnx import numpy_helper as nh
    n = 5000
    shape = nh.from_array(np.array([n, n], np.int64), "shape")
    fill = h.make_tensor("fill", T.FLOAT, [1], [1.0])
    nodes = [h.make_node("ConstantOfShape", ["shape"], ["ones"], value=fill, name="cos"),
             h.make_node("Trilu", ["ones"], ["mask"], upper=1, name="tri"),
             h.make_node("Add", ["x", "mask"], ["y"], name="add")]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [n, n])], [h.make_tensor_value_info("y", T.FLOAT, [n, n])],
              [shape])
    g = sim.onnx.load(m)
    assert kinds(g) == ["add"]
    assert [(t.name, t.shape) for t in g.tensors.values() if t.role == "constant"] == [("mask", (n, n))]


def test_folding_takes_ieee_values_without_numpy_warnings():
    """T5's relative position buckets take the log of 0 and clamp it after: folded, the log is -inf and its
    cast an integer's wrap, as on the device, and numpy's warnings for them do not reach the user."""
    nodes = [h.make_node("Constant", [], ["zero"], value=nh.from_array(np.zeros(4, np.float32)), name="zero"),
             h.make_node("Log", ["zero"], ["logs"], name="log"),
             h.make_node("Cast", ["logs"], ["ints"], to=T.INT64, name="cast"),
             h.make_node("Cast", ["ints"], ["back"], to=T.FLOAT, name="back"),
             h.make_node("Add", ["x", "back"], ["y"], name="add")]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [4])], [h.make_tensor_value_info("y", T.FLOAT, [4])])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = sim.onnx.load(m)
    assert kinds(g) == ["add"]


def test_an_unnamed_dynamic_dimension_past_the_first_says_how_to_name_it():
    m = model([h.make_node("Relu", ["x"], ["y"], name="r")], [h.make_tensor_value_info("x", T.FLOAT, ["N", None])],
              [h.make_tensor_value_info("y", T.FLOAT, None)])
    with pytest.raises(sim.GraphError, match=r"without a name past the first \(input 'x' dim 1\) cannot be sized"):
        sim.onnx.load(m, batch_size=2)


def test_an_input_led_by_another_named_dimension_is_sized_by_dims():
    """The batch size sizes the batch dimension only: an input led by another name (a sequence) needs dims, and
    the error says so rather than asking again for the batch size given."""
    m = model([h.make_node("Add", ["x", "s"], ["y"], name="a")],
              [h.make_tensor_value_info("x", T.FLOAT, ["N", 16]), h.make_tensor_value_info("s", T.FLOAT, ["T", 16])],
              [h.make_tensor_value_info("y", T.FLOAT, None)])
    only_dims = r"input 's' dim 0 \('T'\)\. Give dims=\{'T': N\} \(command line: --dim T=N\)$"
    with pytest.raises(sim.GraphError, match=only_dims):
        sim.onnx.load(m, batch_size=4)
    with pytest.raises(sim.GraphError, match=r"batch_size=N\) .* for a leading \(batch\) dimension, dims=\{'T': N\}"):
        sim.onnx.load(m)


def test_an_if_known_at_import_passes_its_branchs_constants_on():
    """An If whose condition folds, its branch making a shape: the Reshape after it reads that shape
    as a constant (exporters write such shape branches)."""
    from onnx import numpy_helper as nh

    def branch(name, shape):
        out = h.make_tensor_value_info(f"{name}_shape", T.INT64, [2])
        node = h.make_node("Constant", [], [f"{name}_shape"], value=nh.from_array(np.array(shape, np.int64)))
        return h.make_graph([node], name, [], [out])

    nodes = [h.make_node("Constant", [], ["cond"], value=nh.from_array(np.array(True))),
             h.make_node("If", ["cond"], ["shape"], then_branch=branch("then", [2, 32]),
                         else_branch=branch("else", [4, 16]), name="pick"),
             h.make_node("Reshape", ["x", "shape"], ["y"], name="r")]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 4, 8])], [h.make_tensor_value_info("y", T.FLOAT, None)])
    g = sim.onnx.load(m)
    assert [(op.kind, g.tensors[op.outputs[0]].shape) for op in g.ops] == [("reshape", (2, 32))]


def test_upsample_before_opset_9_takes_its_scales_attribute():
    node = h.make_node("Upsample", ["x"], ["y"], scales=[1.0, 1.0, 2.0, 2.0], mode="nearest", name="up")
    m = model([node], [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 4, 4])],
              [h.make_tensor_value_info("y", T.FLOAT, [1, 3, 8, 8])], opset=[h.make_opsetid("", 8)])
    g = sim.onnx.load(m)
    assert [(op.kind, g.tensors[op.outputs[0]].shape) for op in g.ops] == [("copy", (1, 3, 4, 4)), ("reshape", (1, 3, 8, 8))]


def test_register_op_in_the_default_domain_by_either_name():
    """"" and "ai.onnx" are one domain: a rule registered as ai.onnx::Relu prices the model's Relu."""
    m = model([h.make_node("Relu", ["x"], ["y"], name="r")], [h.make_tensor_value_info("x", T.FLOAT, [4, 8])],
              [h.make_tensor_value_info("y", T.FLOAT, [4, 8])])
    sim.onnx.register_op("ai.onnx::Relu", lambda ctx: ctx.op("gelu", ctx.inputs[:1], shapes=[ctx.shape(0)]))
    try:
        assert kinds(sim.onnx.load(m)) == ["gelu"]
    finally:
        sim.onnx.unregister_op("ai.onnx::Relu")
    assert kinds(sim.onnx.load(m)) == ["relu"]


@pytest.mark.parametrize("node, shape", [
    (h.make_node("Concat", ["x", "x"], ["y"], axis=2, name="bad"), [2, 3]),
    (h.make_node("Transpose", ["x"], ["y"], perm=[0, 2], name="bad"), [2, 3]),
    (h.make_node("MaxPool", ["x"], ["y"], name="bad"), [1, 3, 8, 8]),
    (h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[0, 0], name="bad"), [1, 3, 8, 8]),
    (h.make_node("Cast", ["x"], ["y"], name="bad"), [2, 3]),
])
def test_a_malformed_node_is_an_error_naming_it(node, shape):
    m = h.make_model(h.make_graph([node], "g", [h.make_tensor_value_info("x", T.FLOAT, shape)],
                                  [h.make_tensor_value_info("y", T.FLOAT, None)]),
                     opset_imports=[h.make_opsetid("", 17)])
    malformed = f"its attributes or inputs are not a valid {node.op_type}|axis 2 is out of range"  # Concat's axis
    with pytest.raises(sim.GraphError, match=f"node 'bad'\\): ({malformed})"):
        sim.onnx.load(m)


@pytest.mark.parametrize("bad", [lambda ctx: 42, lambda ctx: "no-such-tensor",
                                 lambda ctx: (ctx.op("gelu", ctx.inputs[:1], shapes=[ctx.shape(0)]),) * 3])
def test_a_rule_returning_no_graph_tensor_is_a_named_error(bad):
    sim.onnx.register_op("FancyOp", bad)
    try:
        with pytest.raises(sim.GraphError, match=r"FancyOp.*its rule returned .* a rule returns the name"):
            sim.onnx.load(unknown_op_model())
    finally:
        sim.onnx.unregister_op("FancyOp")


def test_an_unknown_op_error_lists_the_others_further_on():
    """One round of register_op should cover a model: the first unknown op's error also names
    the op types after it that have no rule, or one that refuses them (a shape or a constant always folds).
    LpNormalization and LpPool: PopART has neither (willow/src/op), so the simulator refuses them saying so."""
    nodes = [h.make_node("LpNormalization", ["x"], ["a"], name="lpnorm"), h.make_node("Shape", ["a"], ["s"], name="shape"),
             h.make_node("Shrink", ["a"], ["b0"], name="shrink"), h.make_node("LpPool", ["b0"], ["b"], name="lppool", kernel_shape=[1, 1]),
             h.make_node("LpNormalization", ["b"], ["c"], name="lpnorm2"), h.make_node("FancyOp", ["c"], ["d"], name="fancy"),
             h.make_node("Relu", ["d"], ["y"], name="relu")]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 8, 8])],
              [h.make_tensor_value_info("y", T.FLOAT, [1, 4, 8, 8])])
    with pytest.raises(sim.UnsupportedOpError) as e:
        sim.onnx.load(m)
    message = str(e.value)
    assert "ONNX op LpNormalization (node 'lpnorm'): PopART has no LpNormalization op" in message
    assert "Further on, the model also has op types the simulator has no cost for: LpPool, FancyOp (unless" in message


@pytest.mark.parametrize("op_type, attrs, why", [
    ("Xor", {}, "PopART has no Xor op"),
    ("NonMaxSuppression", {}, "PopART has no NonMaxSuppression op .* an output shape that depends on the values"),
    ("QuantizeLinear", {}, "PopART has no QuantizeLinear op .* none of ONNX's int8 quantisation ops"),
    ("MaxUnpool", {"kernel_shape": [2, 2]}, "PopART has no MaxUnpool op")])
def test_onnx_ops_popart_lacks_are_refused_saying_so(op_type, attrs, why):
    """Opset 6-11 ops no op, opx or ONNX pass of PopART's creates (ONNX's logical Xor: PopART has ai.graphcore's
    BitwiseXor only; its ONNX backend tests exclude test_xor)."""
    node = h.make_node(op_type, ["x", "x"], ["y"], name="n", **attrs)
    m = model([node], [h.make_tensor_value_info("x", T.BOOL if op_type == "Xor" else T.FLOAT, [2, 4])],
              [h.make_tensor_value_info("y", T.FLOAT, [2, 4])])
    with pytest.raises(sim.UnsupportedOpError, match=why):
        sim.onnx.load(m)


def test_file_path_and_bytes_round_trip(tmp_path):
    m = cnn_model()
    path = tmp_path / "small_cnn.onnx"
    onnx.save(m, str(path))
    from_path = sim.onnx.load(path, batch_size=2)
    from_str = sim.onnx.load(str(path), batch_size=2)
    from_bytes = sim.onnx.load(path.read_bytes(), batch_size=2)
    from_proto = sim.onnx.load(m, batch_size=2)
    assert from_path.name == "small_cnn" and from_proto.name == "cnn"
    sig = [[(op.kind, [g.tensors[t].shape for t in op.inputs + op.outputs]) for op in g.ops]
           for g in (from_path, from_str, from_bytes, from_proto)]
    assert sig[0] == sig[1] == sig[2] == sig[3]
    assert sim.simulate(from_path).cycle_count == sim.simulate(from_proto).cycle_count
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"  # the proto is untouched
    with pytest.raises(sim.GraphError, match="no ONNX file"):
        sim.onnx.load(tmp_path / "missing.onnx")


def test_cli_prints_the_ipusim_summary(tmp_path, capsys):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), str(path))
    assert sim.onnx.main([str(path), "--system", "ipu-mk2", "--batch-size", "16"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mlp on ipu-mk2") and "cycles" in out and "samples/s" in out
    assert sim.onnx.main([str(path), "--batch-size", "16", "--device-iterations", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    opts = sim.Options().deviceIterations(2)
    expected = sim.simulate(sim.onnx.load(path, batch_size=16), "ipu-mk2", opts).cycle_count
    assert summary["cycle_count"] == expected and summary["model"] == "mlp"
    assert sim.onnx.main([str(path), "--batch-size", "16", "--training", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["training"] is True
    assert sim.onnx.main([str(path)]) == 2  # symbolic batch without --batch-size
    assert "batch_size" in capsys.readouterr().err
    att = tmp_path / "attention.onnx"
    onnx.save(attention_model(), str(att))
    assert sim.onnx.main([str(att), "--batch-size", "2", "--training"]) == 2
    assert "--loss TENSOR" in capsys.readouterr().err
    assert sim.onnx.main([str(att), "--batch-size", "2", "--training", "--loss", "loss", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["training"] is True
    # the module entry point: python -m sim.onnx
    proc = subprocess.run([sys.executable, "-m", "sim.onnx", str(path), "--batch-size", "16", "--json"],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cycle_count"] == sim.simulate(sim.onnx.load(path, batch_size=16)).cycle_count


def test_conv_attributes_conv2d_holds_or_rejects():
    """conv2d holds one stride and the same padding on both sides (else expandDims, tested below); a
    dilation below 1 is an error; a dilated kernel and SAME padding are conv2d attributes."""
    def conv(**attrs):
        nodes = [h.make_node("Conv", ["x", "w"], ["y"], name="c", **attrs)]
        kernel = attrs.pop("_kernel", (3, 3))
        return model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 16, 16])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], [zeros("w", (4, 4) + kernel)])
    with pytest.raises(sim.GraphError, match=r"dilations=\[0, 1\]: each must be a whole number >= 1"):
        sim.onnx.load(conv(dilations=[0, 1]))
    atrous = sim.onnx.load(conv(dilations=[2, 2], pads=[2, 2, 2, 2]))  # priced as tests/test_dilation.py says
    assert atrous.ops[0].attrs["dilation"] == 2 and atrous.tensors["y"].shape == (1, 4, 16, 16)
    for attrs in (dict(pads=[0, 0, 1, 1]), dict(strides=[1, 2]), dict(auto_pad="SAME_UPPER", strides=[2, 2])):
        assert [op.kind for op in sim.onnx.load(conv(**attrs)).ops] == ["copy", "conv2d", "reshape"]
    same = sim.onnx.load(conv(auto_pad="SAME_UPPER"))
    assert same.ops[0].attrs["padding"] == 1 and same.tensors["y"].shape == (1, 4, 16, 16)


@pytest.mark.parametrize("attrs", [dict(pads=[7, 7], group=64), dict(auto_pad="SAME_UPPER", group=64)])
def test_conv1d_is_a_conv2d_of_height_one(attrs):
    """A 1-D Conv (a speech model's depthwise convolution): a 1 x k conv2d over views, priced as one."""
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["y"], name="c", **attrs)]
    g = sim.onnx.load(model(nodes, [h.make_tensor_value_info("x", T.FLOAT16, [2, 64, 100])],
                            [h.make_tensor_value_info("y", T.FLOAT16, None)],
                            [zeros("w", (64, 1, 15), np.float16), zeros("b", (64,), np.float16)]))
    assert [op.kind for op in g.ops] == ["reshape", "conv2d", "add", "reshape"]
    conv = g.ops[1]
    assert (conv.attrs["kernel"], conv.attrs["padding"], conv.attrs["groups"]) == ([1, 15], [0, 7], 64)
    assert g.tensors["y"].shape == (2, 64, 100)
    b = sim.GraphBuilder("ref", "float16")
    b.output(b.conv2d(b.reshape(b.input("x", (2, 64, 100)), (2, 64, 1, 100)), 64, (1, 15), 1, (0, 7), groups=64))
    opts = sim.Options().enableSyntheticData(True)
    cycles = {k: sim.simulate(graph, "ipu-mk2", opts).op_trace().set_index("kind").loc["conv2d", "compute"]
              for k, graph in (("onnx", g), ("builder", b.graph))}
    assert cycles["onnx"] == cycles["builder"]


def test_gather_is_an_embedding_on_a_table_and_a_copy_otherwise():
    nodes = [h.make_node("Gather", ["table", "ids"], ["emb"], name="embed"),            # table lookup
             h.make_node("Gather", ["emb", "first"], ["cls"], name="cls", axis=1),      # one position: a view
             h.make_node("Gather", ["emb", "ids"], ["mixed"], name="mixed", axis=0),    # computed table
             h.make_node("Gather", ["emb", "picks"], ["picked"], name="picked", axis=1)]
    m = model(nodes, [h.make_tensor_value_info("ids", T.INT64, [2, 6])],
              [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("cls", "mixed", "picked")],
              [zeros("table", (100, 16)), const("first", 0), const("picks", [0, 2])])
    g = sim.onnx.load(m)
    ops = {op.name: op for op in g.ops}
    assert ops["embed"].kind == "gather" and g.tensors["table"].role == "weight"
    assert g.tensors["emb"].shape == (2, 6, 16)
    assert (ops["cls/slice"].kind, ops["cls"].kind) == ("slice", "reshape")  # both free views
    assert g.tensors["cls"].shape == (2, 16)
    assert ops["mixed"].kind == "copy" and g.tensors["mixed"].shape == (2, 6, 6, 16)
    assert ops["picked"].kind == "copy" and g.tensors["picked"].shape == (2, 2, 16)
    assert sim.simulate(g).cycle_count > 0


def test_elementwise_maps_to_priced_kinds():
    """Erf-GELU stays element-wise; Pow(x, 2) is popops' POWER (PopART's PowOpx, no pattern makes it a mul), Sqrt
    and Erf are popops' SQRT and ERF."""
    inits = [nh.from_array(np.array(v, np.float32), n) for n, v in
             (("sqrt2", np.sqrt(2)), ("one", 1.0), ("half", 0.5), ("two", 2.0))]
    nodes = [h.make_node("Div", ["x", "sqrt2"], ["d"], name="div"),
             h.make_node("Erf", ["d"], ["e"], name="erf"),
             h.make_node("Add", ["e", "one"], ["a"], name="add1"),
             h.make_node("Mul", ["x", "a"], ["m"], name="mul"),
             h.make_node("Mul", ["m", "half"], ["gelu"], name="half"),
             h.make_node("Pow", ["gelu", "two"], ["sq"], name="pow"),
             h.make_node("Sqrt", ["sq"], ["r"], name="sqrt"),
             h.make_node("Exp", ["r"], ["ex"], name="exp"),
             h.make_node("Sigmoid", ["ex"], ["s"], name="sigmoid"),
             h.make_node("Tanh", ["s"], ["t"], name="tanh"),
             h.make_node("Gelu", ["t"], ["y"], name="gelu_op", domain="")]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [8, 32])],
              [h.make_tensor_value_info("y", T.FLOAT, [8, 32])], inits, opset=[h.make_opsetid("", 20)])
    g = sim.onnx.load(m)
    # opset 20's Gelu (approximate "none", the exact form) as PopART runs the exact GELU, its GeluErf
    assert kinds(g) == ["div", "erf", "add", "mul", "scale", "pow", "sqrt", "exp", "sigmoid", "tanh", "gelu_erf"]
    assert all(g.tensors[op.outputs[0]].shape == (8, 32) for op in g.ops)
    assert sim.simulate(g).cycle_count > 0


def test_softplus_hard_sigmoid_hard_swish_and_instance_norm():
    """PopART's expressions for Softplus, HardSigmoid (and HardSwish, x times it) as one popops map each,
    with their gradients' expressions; InstanceNormalization as popnn's group norm of a channel a group."""
    nodes = [h.make_node("InstanceNormalization", ["x", "scale", "bias"], ["n"], name="in", epsilon=1e-5),
             h.make_node("Softplus", ["n"], ["sp"], name="softplus"),
             h.make_node("HardSigmoid", ["sp"], ["hs"], name="hardsigmoid", alpha=0.2, beta=0.5),
             h.make_node("HardSwish", ["hs"], ["y"], name="hardswish")]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 8, 16, 16])],
              [h.make_tensor_value_info("y", T.FLOAT, [2, 8, 16, 16])],
              [zeros("scale", (8,)), zeros("bias", (8,))], opset=[h.make_opsetid("", 17)])
    g = sim.onnx.load(m)
    assert kinds(g) == ["groupnorm", "map", "map", "map"]
    ops = {op.name: op for op in g.ops}
    assert ops["in"].attrs["groups"] == 8
    assert ops["softplus"].attrs["steps"] == ["maximum", "abs", "exp", "add", "log", "add"]
    assert ops["hardsigmoid"].attrs["steps"] == ["mul", "add", "minimum", "maximum"]
    assert ops["hardswish"].attrs["steps"] == ops["hardsigmoid"].attrs["steps"] + ["mul"]
    run = sim.simulate(g)
    costs = run.executable.costs
    assert costs["hardswish"].compute_cycles > costs["hardsigmoid"].compute_cycles > 0


@pytest.mark.parametrize("inputs, inits", [
    (["x", "", "scales"], [nh.from_array(np.array([1, 1, 2, 2], np.float32), "scales")]),
    (["x", "", "", "sizes"], [nh.from_array(np.array([1, 4, 16, 16], np.int64), "sizes")]),
])
def test_resize_nearest_is_a_copy_of_the_input_and_a_view_of_it(inputs, inits):
    """ResizeOpx resizeNearest: the input cloned and copied, the output a view repeating its elements."""
    m = model([h.make_node("Resize", inputs, ["y"], name="up", mode="nearest")],
              [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 8, 8])], [h.make_tensor_value_info("y", T.FLOAT, [1, 4, 16, 16])],
              inits)
    g = sim.onnx.load(m)
    assert [(op.kind, g.tensors[op.outputs[0]].shape) for op in g.ops] == [("copy", (1, 4, 8, 8)),
                                                                          ("reshape", (1, 4, 16, 16))]
    cubic = model([h.make_node("Resize", inputs, ["y"], name="up", mode="cubic")],
                  [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 8, 8])],
                  [h.make_tensor_value_info("y", T.FLOAT, [1, 4, 16, 16])], inits)
    (op,) = sim.onnx.load(cubic).ops  # sixteen multiply-adds an output, as sim.poptorch's bicubic
    assert (op.kind, op.attrs["steps"], op.attrs["repeat"]) == ("map", ["mul", "add"], 16)


def test_resize_linear_as_popart_runs_it_and_refuses_to_train():
    """PopART's resizeLinear: a copy of the input, then per resized dimension the two neighbours times
    their weights along it, added; ResizeGradOpx refuses linear mode, so training through it is refused."""
    m = model([h.make_node("Resize", ["x", "", "scales"], ["y"], name="up", mode="linear")],
              [h.make_tensor_value_info("x", T.FLOAT16, [1, 4, 8, 8])], [h.make_tensor_value_info("y", T.FLOAT16, [1, 4, 16, 16])],
              [nh.from_array(np.array([1, 1, 2, 2], np.float32), "scales")])
    g = sim.onnx.load(m)
    assert [(op.kind, g.tensors[op.outputs[0]].shape) for op in g.ops] == [
        ("copy", (1, 4, 8, 8)), ("mul", (1, 4, 16, 8)), ("mul", (1, 4, 16, 8)), ("add", (1, 4, 16, 8)),
        ("mul", (1, 4, 16, 16)), ("mul", (1, 4, 16, 16)), ("add", (1, 4, 16, 16))]
    assert g.ops[-1].outputs == ["y"] and {g.tensors[t].dtype for op in g.ops for t in op.outputs} == {"float16"}
    assert sim.simulate(g, "ipu-mk2").cycle_count > 0
    trained = model([h.make_node("Mul", ["x", "w"], ["a"], name="scale"),
                     h.make_node("Resize", ["a", "", "scales"], ["y"], name="up", mode="linear"),
                     h.make_node("ReduceMean", ["y"], ["loss"], name="loss", keepdims=0)],
                    [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 8, 8])], [h.make_tensor_value_info("loss", T.FLOAT, [])],
                    [zeros("w", (1, 4, 8, 8)), nh.from_array(np.array([1, 1, 2, 2], np.float32), "scales")])
    with pytest.raises(sim.GraphError, match="cannot train through a Resize in linear mode"):
        sim.simulate(sim.onnx.load(trained, loss="loss"), "ipu-mk2", training=True)


def test_topk_and_cumsum_as_sim_poptorch_prices_them():
    """TopK: one sort op with its values and indices; CumSum: the axis moved last, a matmul of the rows
    by a constant triangular matrix, moved back (PopART's CumSumOpx)."""
    nodes = [h.make_node("TopK", ["x", "k"], ["v", "i"], name="topk", axis=-1),
             h.make_node("CumSum", ["x", "ax"], ["c"], name="cumsum")]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [4, 6, 32])],
              [h.make_tensor_value_info("v", T.FLOAT, [4, 6, 5]), h.make_tensor_value_info("i", T.INT64, [4, 6, 5]),
               h.make_tensor_value_info("c", T.FLOAT, [4, 6, 32])],
              [const("k", [5]), const("ax", 1)])
    g = sim.onnx.load(m)
    ops = [(op.kind, [g.tensors[t].shape for t in op.outputs]) for op in g.ops]
    assert ops == [("sort", [(4, 6, 5), (4, 6, 5)]), ("transpose", [(4, 32, 6)]), ("reshape", [(128, 6)]),
                   ("matmul", [(128, 6)]), ("reshape", [(4, 32, 6)]), ("transpose", [(4, 6, 32)])]
    assert g.ops[0].attrs["k"] == 5 and sim.simulate(g).cycle_count > 0


def test_dropout_reshape_family_and_reductions():
    inits = [const("shape", [4, -1]), const("axes", [1]), const("starts", [2]), const("ends", [10**9]),
             const("ax1", [1]), nh.from_array(np.array(0.1, np.float32), "ratio"),
             nh.from_array(np.array(True), "train")]
    nodes = [h.make_node("Dropout", ["x", "ratio", "train"], ["d"], name="drop"),
             h.make_node("Dropout", ["d"], ["d2"], name="eval_drop"),                   # inference: identity
             h.make_node("Reshape", ["d2", "shape"], ["r"], name="reshape"),
             h.make_node("Unsqueeze", ["r", "axes"], ["u"], name="unsq"),
             h.make_node("Squeeze", ["u", "axes"], ["s"], name="sq"),
             h.make_node("Slice", ["s", "starts", "ends", "ax1"], ["sl"], name="slice"),
             h.make_node("ReduceSum", ["sl", "ax1"], ["rs"], name="rsum", keepdims=1),
             h.make_node("Cast", ["rs"], ["c"], name="cast", to=T.FLOAT16),
             h.make_node("Cast", ["c"], ["c2"], name="cast_back", to=T.FLOAT16)]  # same dtype: nothing
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [4, 2, 8])],
              [h.make_tensor_value_info("c2", T.FLOAT16, None)], inits)
    g = sim.onnx.load(m)
    assert kinds(g) == ["dropout", "reshape", "reshape", "reshape", "slice", "reduce_sum", "cast"]
    assert g.tensors["sl"].shape == (4, 14) and g.tensors["rs"].shape == (4, 1)
    assert g.outputs == ["c"] and g.tensors["c"].dtype == "float16"


def test_dropout_before_opset_12_drops_in_training_only():
    """An opset 7-11 Dropout has no training flag: PopART's DropoutOp drops in a training session and is an
    identity in an inference one. The op is kept, free at inference, priced in training."""
    w = nh.from_array(np.ones((64, 64), np.float16), "w")

    def graph(ratio: float):
        nodes = [h.make_node("MatMul", ["x", "w"], ["a"]), h.make_node("Dropout", ["a"], ["d"], ratio=ratio),
                 h.make_node("ReduceSum", ["d"], ["loss"], keepdims=0)]
        g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT16, [32, 64])],
                         [h.make_tensor_value_info("loss", T.FLOAT16, None)], initializer=[w])
        return sim.onnx.load(h.make_model(g, opset_imports=[h.make_opsetid("", 11)]), loss="loss")

    dropped, kept = graph(0.1), graph(0.0)
    assert kinds(dropped) == ["matmul", "dropout", "reduce_sum"] and kinds(kept) == ["matmul", "reduce_sum"]
    assert sim.simulate(dropped).cycle_count == sim.simulate(kept).cycle_count
    assert sim.simulate(dropped, training=True).cycle_count > sim.simulate(kept, training=True).cycle_count


def test_loss_must_be_a_scalar_the_model_computes():
    with pytest.raises(sim.GraphError, match="a loss must be a scalar"):
        sim.onnx.load(attention_model(), batch_size=2, loss="y")
    with pytest.raises(sim.GraphError, match="not a tensor computed by the model"):
        sim.onnx.load(attention_model(), batch_size=2, loss="nope")
    g = sim.onnx.load(attention_model(), batch_size=2)  # a ReduceMean output is no loss by default
    assert g.loss is None
    with pytest.raises(sim.GraphError, match="no loss"):
        sim.simulate(g, training=True)


def test_popart_placement_attributes_carry_over():
    nodes, x = [], "x"
    for i in range(4):
        nodes.append(h.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}",
                                 __ipu_number=i // 2, __pipeline_stage=i // 2))
        x = f"m{i}"
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["B", 64])],
              [h.make_tensor_value_info(x, T.FLOAT, ["B", 64])], [zeros(f"w{i}", (64, 64)) for i in range(4)])
    g = sim.onnx.load(m, batch_size=8)
    assert [(op.ipu, op.stage) for op in g.ops] == [(0, 0), (0, 0), (1, 1), (1, 1)]
    run = sim.simulate(g, "ipu-m2000", sim.Options().deviceIterations(4))
    assert run.executable.strategy == "pipelined" and len(run.executable.stages) == 2


@pytest.mark.parametrize("attrs, match", [
    ({"__ipu_number": -1}, r"__ipu_number = -1; expected a whole number >= 0"),
    ({"__ipu_number": "zero"}, r"__ipu_number = b?'zero'; expected a whole number"),
    ({"__available_memory": 7.0}, r"__available_memory = 7.0; expected a proportion .* \(0, 1\]"),
    ({"__available_memory": -1.0}, r"__available_memory = -1.0"),
])
def test_bad_popart_attributes_are_named_errors(attrs, match):
    m = model([h.make_node("MatMul", ["x", "w"], ["y"], name="mm", **attrs)],
              [h.make_tensor_value_info("x", T.FLOAT, [8, 64])], [h.make_tensor_value_info("y", T.FLOAT, [8, 64])],
              [zeros("w", (64, 64))])
    with pytest.raises(sim.GraphError, match=match) as e:
        sim.onnx.load(m)
    assert "mm" in str(e.value)


@pytest.mark.parametrize("kwargs, match", [
    ({"batch_size": 2.5}, r"batch_size must be a whole number >= 1, got 2.5"),
    ({"batch_size": True}, r"batch_size must be a whole number"),
    ({"batch_size": 4, "dims": {"S": "64"}}, r"dims\['S'\] must be a whole number >= 1, got '64'"),
    ({"batch_size": 4, "dims": {"S": 8, "seqq": 12}}, r"dims names 'seqq', not a symbolic dimension .*'S'"),
])
def test_load_refuses_sizes_it_cannot_use(kwargs, match):
    m = model([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [h.make_tensor_value_info("x", T.FLOAT, ["B", "S", 64])],
              [h.make_tensor_value_info("y", T.FLOAT, ["B", "S", 64])], [zeros("w", (64, 64))])
    with pytest.raises(sim.GraphError, match=match):
        sim.onnx.load(m, **kwargs)


def test_a_tensor_written_twice_or_an_empty_file_is_named(tmp_path):
    twice = model([h.make_node("Relu", ["x"], ["y"], name="a"), h.make_node("Sigmoid", ["x"], ["y"], name="b")],
                  [h.make_tensor_value_info("x", T.FLOAT, [4, 8])], [h.make_tensor_value_info("y", T.FLOAT, [4, 8])])
    with pytest.raises(sim.GraphError, match=r"node 'b' \(Sigmoid\) writes 'y', which node 'a' already defines"):
        sim.onnx.load(twice)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(sim.GraphError, match="is empty, not an ONNX model"):
        sim.onnx.load(empty)


def test_missing_external_data_needed_at_import_is_a_named_error(tmp_path):
    """A Reshape's shape kept in an external data file that is gone: one error naming the
    initializer and the folder, not onnx's traceback."""
    import onnx
    shape = const("shp", [8, 64])
    m = model([h.make_node("Reshape", ["x", "shp"], ["y"], name="r")], [h.make_tensor_value_info("x", T.FLOAT, [512])],
              [h.make_tensor_value_info("y", T.FLOAT, [8, 64])], [shape])
    path = tmp_path / "resh.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="resh.data",
                    size_threshold=0)
    data = tmp_path / "resh.data"
    content = data.read_bytes()
    data.write_bytes(content[:2])  # truncated
    with pytest.raises(sim.GraphError, match=r"initializer 'shp' is needed at import time .* could not be read"):
        sim.onnx.load(path)
    data.unlink()
    with pytest.raises(sim.GraphError, match=r"initializer 'shp' is needed at import time .* could not be read"):
        sim.onnx.load(path)


def test_a_torch_export_imports():
    """A torch.nn.TransformerEncoderLayer through torch's TorchScript exporter (offline)."""
    torch = pytest.importorskip("torch")
    import io
    import warnings

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, activation="gelu")

        def forward(self, x):
            return self.layer(x)

    buf = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(Encoder().eval(), (torch.randn(2, 8, 32),), buf, dynamo=False, input_names=["x"],
                              output_names=["y"], dynamic_axes={"x": {0: "batch"}}, opset_version=17)
    except ImportError as e:  # an exporter that needs packages not installed here
        pytest.skip(f"torch.onnx.export is not available offline: {e}")
    g = sim.onnx.load(buf.getvalue(), batch_size=4)
    counts = collections.Counter(kinds(g))
    assert counts["matmul"] == 6 and counts["layernorm"] == 2 and counts["softmax"] == 1
    assert not {"concat", "copy"} & set(counts)  # the shape subgraphs folded
    assert g.tensors["y"].shape == (4, 8, 32)
    assert sim.simulate(g, "ipu-mk2").cycle_count > 0


def test_ipusim_run_takes_an_onnx_file(tmp_path, capsys):
    """`ipusim run --onnx PATH` runs an ONNX model with every run flag (here replicas, training)."""
    from sim.cli import main as cli
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), str(path))
    assert cli.main(["run", "--onnx", str(path), "--micro-batch", "16", "--system", "ipu-m2000", "--replicas", "2",
                     "--training", "--gradient-accumulation", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    graph = sim.onnx.load(path, batch_size=16)
    o = sim.Options().replicationFactor(2)
    o.Training.gradientAccumulation(2)
    assert summary["cycle_count"] == sim.simulate(graph, "ipu-m2000", o, training=True).cycle_count
    assert cli.main(["run", "--onnx", str(path), "--model", "mlp"]) == 2
    assert cli.main(["run", "--onnx", str(tmp_path / "missing.onnx")]) == 2
    assert "no such file" in capsys.readouterr().err
    # a zoo parameter is refused (an ONNX model's sizes are in its file), and --dim is for ONNX only
    assert cli.main(["run", "--onnx", str(path), "--hidden", "512"]) == 2
    assert "--hidden sets a zoo model's parameter" in capsys.readouterr().err
    assert cli.main(["run", "--model", "mlp", "--dim", "batch=4"]) == 2
    assert "--dim applies to an ONNX model" in capsys.readouterr().err


def test_ipusim_run_sizes_symbolic_dimensions_and_names_the_loss(tmp_path, capsys):
    """--dim sizes a symbolic dimension other than the batch, --loss names the tensor to train on."""
    from sim.cli import main as cli
    path = tmp_path / "tokens.onnx"
    onnx.save(model([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                    [h.make_tensor_value_info("x", T.FLOAT, ["B", "S", 64])],
                    [h.make_tensor_value_info("y", T.FLOAT, ["B", "S", 64])], [zeros("w", (64, 64))]), str(path))
    assert cli.main(["run", "--onnx", str(path), "--micro-batch", "2"]) == 2
    assert "dims={'S': N} (command line: --dim S=N)" in capsys.readouterr().err
    assert cli.main(["run", "--onnx", str(path), "--micro-batch", "2", "--dim", "S=32", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["cycle_count"] == sim.simulate(sim.onnx.load(path, batch_size=2, dims={"S": 32})).cycle_count
    assert cli.main(["run", "--onnx", str(path), "--micro-batch", "2", "--dim", "S=32", "--training",
                     "--loss", "y"]) == 2
    assert "a loss must be a scalar" in capsys.readouterr().err  # as sim.onnx.load(loss="y") says
    assert cli.main(["run", "--onnx", str(path), "--micro-batch", "2", "--dim", "S=32", "--training"]) == 2
    assert "has no loss the simulator recognises" in capsys.readouterr().err
    assert cli.main(["run", "--onnx", str(path), "--micro-batch", "2", "--dim", "S=32", "--loss", "y"]) == 2
    assert "--loss names the tensor to train on: it applies with --training" in capsys.readouterr().err


_W = nh.from_array(np.ones((2, 4, 6, 6), np.float32), "w")


def _int(name, value):
    return nh.from_array(np.array(value, np.int64), name)


def _trained(node, inits=(), out="y", opset=18):
    """x times a weight, then ``node`` (reading "a"), then the mean of its output "y" as the loss, at ``opset``."""
    nodes = [h.make_node("Mul", ["x", "w"], ["a"], name="scale"), node,
             h.make_node("ReduceMean", [out], ["loss"], name="loss", keepdims=0)]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 4, 6, 6])], [h.make_tensor_value_info("loss", T.FLOAT, [])],
              [_W, *inits], opset=[h.make_opsetid("", opset)])
    return sim.onnx.load(m, loss="loss")


@pytest.mark.parametrize("node, inits, expected", [
    (h.make_node("Abs", ["a"], ["y"]), (), [("abs", (2, 4, 6, 6))]),
    (h.make_node("Floor", ["a"], ["y"]), (), [("floor", (2, 4, 6, 6))]),
    (h.make_node("Log", ["a"], ["y"]), (), [("log", (2, 4, 6, 6))]),
    (h.make_node("Sin", ["a"], ["y"]), (), [("sin", (2, 4, 6, 6))]),
    (h.make_node("Elu", ["a"], ["y"]), (), [("map", (2, 4, 6, 6))]),
    (h.make_node("Shrink", ["a"], ["y"]), (), [("map", (2, 4, 6, 6))]),
    (h.make_node("Mod", ["a", "a"], ["y"], fmod=1), (), [("remainder", (2, 4, 6, 6))]),
    (h.make_node("PRelu", ["a", "s"], ["y"]), (nh.from_array(np.ones((4, 1, 1), np.float32), "s"),),
     [("map", (2, 4, 6, 6))]),
    (h.make_node("Sum", ["a", "a", "a"], ["y"]), (), [("map", (2, 4, 6, 6))]),
    (h.make_node("Mean", ["a", "a"], ["y"]), (), [("map", (2, 4, 6, 6))]),
    (h.make_node("ReduceL2", ["a", "ax"], ["y"], keepdims=0), (_int("ax", [2, 3]),),
     [("reduce_sum", (2, 4)), ("sqrt", (2, 4))]),
    (h.make_node("ReduceL1", ["a"], ["y"]), (), [("abs", (2, 4, 6, 6)), ("reduce_sum", (1, 1, 1, 1))]),
    (h.make_node("ReduceSumSquare", ["a"], ["y"]), (), [("reduce_sum", (1, 1, 1, 1))]),
    (h.make_node("ReduceLogSum", ["a"], ["y"]), (), [("reduce_sum", (1, 1, 1, 1)), ("log", (1, 1, 1, 1))]),
    (h.make_node("ReduceLogSumExp", ["a", "ax"], ["y"]), (_int("ax", [1]),),
     [("reduce_max", (2, 1, 6, 6)), ("map", (2, 4, 6, 6)), ("reduce_sum", (2, 1, 6, 6)), ("map", (2, 1, 6, 6))]),
    (h.make_node("ReduceProd", ["a"], ["y"]), (), [("reduce_prod", (1, 1, 1, 1))]),
    (h.make_node("Pad", ["a", "p"], ["y"], mode="reflect"), (_int("p", [0, 0, 1, 2, 0, 0, 1, 2]),),
     [("pad", (2, 4, 8, 10))]),
    (h.make_node("Tile", ["a", "r"], ["y"]), (_int("r", [1, 2, 1, 3]),), [("copy", (2, 8, 6, 18))]),
    (h.make_node("GroupNormalization", ["a", "gs", "gb"], ["y"], num_groups=2),
     (nh.from_array(np.ones(2, np.float32), "gs"), nh.from_array(np.zeros(2, np.float32), "gb")),
     [("groupnorm", (2, 4, 6, 6))]),
    (h.make_node("ScatterElements", ["a", "i", "u"], ["y"], axis=1, reduction="add"),
     (_int("i", np.zeros((2, 2, 6, 6))), nh.from_array(np.ones((2, 2, 6, 6), np.float32), "u")),
     [("scatter_elements", (2, 4, 6, 6))]),
    (h.make_node("RandomNormalLike", ["a"], ["y"]), (), [("random_normal", (2, 4, 6, 6))]),
], ids=lambda v: v.op_type if hasattr(v, "op_type") else "")
def test_more_of_poparts_ops_import_and_train(node, inits, expected):
    """Element-wise, reduction and data-movement ops PopART has, each as the sim kinds sim.poptorch
    prices the same torch operation with, and each trains (a backward rule for every kind)."""
    g = _trained(node, inits)
    assert [(op.kind, g.tensors[op.outputs[0]].shape) for op in g.ops if op.name not in ("scale", "loss")] == expected
    run = sim.simulate(g, "ipu-mk2", training=True)
    assert run.cycle_count > sim.simulate(g, "ipu-mk2").cycle_count > 0


@pytest.mark.parametrize("op_type, grads", [
    ("ReduceL1", [("map", ["sign", "mul"])]), ("ReduceL2", [("map", ["mul", "div"])]),
    ("ReduceSumSquare", [("map", ["mul", "mul"])]), ("ReduceLogSum", [("exp", None), ("div", None)]),
])
def test_a_norm_reductions_gradient_is_its_grad_opxs(op_type, grads):
    """ReduceL1GradOpx dy sign(x), ReduceL2GradOpx dy x / y and ReduceSumSquareGradOpx 2 dy x, one popops::map each;
    ReduceLogSumGradOpx exp(y) then a divide: nothing for the abs, the reduce or the square root alone (the other
    backward ops are views), and the forward's square is the reduce's SQUARE_ADD."""
    g = _trained(h.make_node(op_type, ["a", "ax"], ["y"], keepdims=0), (_int("ax", [2, 3]),))
    reduce = next(op for op in g.ops if op.kind == "reduce_sum")
    assert reduce.attrs.get("operation") == ("square_add" if op_type in ("ReduceL2", "ReduceSumSquare") else None)
    trained = expand_training(g)
    ops = [op for op in trained.ops if op.pass_ == "backward" and op.name.startswith(op_type)]
    assert [(op.kind, op.attrs.get("steps")) for op in ops if op.kind != "reshape"] == grads
    assert trained.tensors[ops[-1].outputs[0]].shape == (2, 4, 6, 6)


def test_more_ops_attributes():
    """The expressions' codelets (PopART's opx: EluComputex gamma-less Selu, max(0, x) + min(0, alpha (exp(x) - 1));
    AtanComputex asin(x / sqrt(1 + x x))), and the shapes and types of ArgMax and OneHot."""
    steps = {n: _trained(h.make_node(n, ["a", "a", "a"][:k], ["y"], name="op")).ops[1].attrs["steps"]
             for n, k in (("Sum", 3), ("Mean", 2), ("Elu", 1), ("Atan", 1))}
    assert steps == {"Sum": ["add", "add"], "Mean": ["add", "scale"],
                     "Elu": ["exp", "sub", "mul", "minimum", "maximum", "add"],
                     "Atan": ["mul", "add", "sqrt", "div", "asin"]}
    nodes = [h.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=0),
             h.make_node("OneHot", ["am", "depth", "values"], ["y"], axis=1)]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 4, 6])], [h.make_tensor_value_info("y", T.FLOAT, None)],
              [_int("depth", [5]), nh.from_array(np.array([0, 1], np.float32), "values")], opset=[h.make_opsetid("", 18)])
    g = sim.onnx.load(m)
    assert [(op.kind, g.tensors[op.outputs[0]].shape, g.tensors[op.outputs[0]].dtype) for op in g.ops] == [
        ("reduce_max", (2, 6), "int32"), ("map", (2, 5, 6), "float32")]


def test_selection_comparison_and_clamp_are_poplibs_own_ops():
    """Comparisons and logic are popops' compare / logical ops, Where its Select, Max and Min its
    MAXIMUM / MINIMUM, Clip its Clamp, LeakyRelu PopART's expression, Pow popops' POWER, ReduceMin a
    min reduction; the chain trains."""
    f = lambda n, v: nh.from_array(np.array(v, np.float32), n)  # noqa: E731
    nodes = [h.make_node("Mul", ["x", "w"], ["a"], name="scale"),
             h.make_node("Greater", ["a", "zero"], ["pos"], name="gt"),
             h.make_node("Not", ["pos"], ["neg"], name="not"),
             h.make_node("Where", ["neg", "zero", "a"], ["r"], name="where"),
             h.make_node("Max", ["r", "a"], ["m"], name="max"),
             h.make_node("Clip", ["m", "lo", "hi"], ["c"], name="clip"),
             h.make_node("LeakyRelu", ["c"], ["l"], name="leaky", alpha=0.1),
             h.make_node("Pow", ["l", "p"], ["q"], name="pow"),
             h.make_node("ReduceMin", ["q"], ["rm"], name="rmin", keepdims=1),
             h.make_node("Add", ["q", "rm"], ["y"], name="add"),
             h.make_node("ReduceMean", ["y"], ["loss"], name="loss", keepdims=0)]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 4, 6, 6])], [h.make_tensor_value_info("loss", T.FLOAT, [])],
              [_W, f("zero", 0.0), f("lo", -1.0), f("hi", 1.0), f("p", 1.5)], opset=[h.make_opsetid("", 18)])
    g = sim.onnx.load(m, loss="loss")
    assert kinds(g) == ["mul", "compare", "logical_not", "select", "maximum", "clamp", "map", "pow", "reduce_min",
                        "add", "reduce_mean"]
    assert next(op for op in g.ops if op.name == "leaky").attrs["steps"] == ["scale", "compare", "select"]
    assert sim.simulate(g, "ipu-mk2", training=True).cycle_count > sim.simulate(g, "ipu-mk2").cycle_count



def _conv_graph(x_shape, w_shape, **attrs):
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", **attrs),
             h.make_node("ReduceMean", ["y"], ["loss"], name="loss", keepdims=0)]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, list(x_shape))], [h.make_tensor_value_info("loss", T.FLOAT, [])],
              [zeros("w", w_shape), zeros("b", (w_shape[0],))], opset=[h.make_opsetid("", 17)])
    return sim.onnx.load(m, loss="loss")


@pytest.mark.parametrize("x_shape, w_shape, attrs, out", [
    ((2, 3, 8, 16, 16), (8, 3, 3, 3, 3), {"pads": [1] * 6}, (2, 8, 8, 16, 16)),        # 3-D
    ((2, 3, 16, 16), (8, 3, 3, 3), {"strides": [2, 1], "pads": [1, 1, 1, 1]}, (2, 8, 8, 16)),
    ((2, 3, 16, 16), (8, 3, 4, 4), {"auto_pad": "SAME_UPPER"}, (2, 8, 16, 16)),         # 3 rows: 1 + 2
    ((2, 3, 16, 16), (8, 3, 3, 3), {"pads": [0, 0, 1, 1]}, (2, 8, 15, 15)),
    ((2, 3, 32), (8, 3, 3), {"pads": [0, 2]}, (2, 8, 32)),
])
def test_convolutions_conv2d_cannot_hold_run_as_expand_dims(x_shape, w_shape, attrs, out):
    """3-D convolutions, strides that differ between axes and padding that differs between sides: poplin's
    expandDims, as sim.poptorch prices such layers (the kernel folded into the input channels by a copy,
    a 1x1 convolution over the output's positions with the layer's multiply-adds); they train, and the
    run's notes say how they were priced."""
    g = _conv_graph(x_shape, w_shape, **attrs)
    positions = math.prod(out[2:])
    volume = math.prod(w_shape[2:])
    assert [(op.kind, g.tensors[op.outputs[0]].shape) for op in g.ops][:4] == [
        ("copy", (2, 3 * volume, 1, positions)), ("conv2d", (2, 8, 1, positions)), ("add", (2, 8, 1, positions)),
        ("reshape", out)]
    conv = next(op for op in g.ops if op.kind == "conv2d")
    assert conv.attrs["kernel_shape"] == list(w_shape[2:])
    run = sim.simulate(g, "ipu-mk2", training=True)
    assert run.flops > 0 and any("expandDims" in n for n in run.executable.notes)


def test_one_and_three_dimensional_pools():
    """MaxPool / AveragePool of 1-D and 3-D fields and their global forms, as sim.poptorch prices
    MaxPool1d/3d: the window's and stride's volumes, the real output shapes."""
    nodes = [h.make_node("MaxPool", ["x"], ["p"], name="pool", kernel_shape=[3], strides=[2], pads=[1, 1]),
             h.make_node("GlobalAveragePool", ["p"], ["y"], name="gap")]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 8, 32])], [h.make_tensor_value_info("y", T.FLOAT, None)])
    g = sim.onnx.load(m)
    assert [(op.kind, g.tensors[op.outputs[0]].shape, op.attrs["window"], op.attrs["stride_volume"]) for op in g.ops] == [
        ("maxpool", (2, 8, 16), 3, 2), ("avgpool", (2, 8, 1), 16, 16)]
    nodes = [h.make_node("AveragePool", ["x"], ["p"], name="pool", kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
             h.make_node("GlobalMaxPool", ["p"], ["y"], name="gmp")]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 8, 4, 16, 16])], [h.make_tensor_value_info("y", T.FLOAT, None)])
    g = sim.onnx.load(m)
    assert [(op.kind, g.tensors[op.outputs[0]].shape, op.attrs["window"]) for op in g.ops] == [
        ("avgpool", (2, 8, 2, 8, 8), 8), ("maxpool", (2, 8, 1, 1, 1), 128)]
    assert sim.simulate(g).cycle_count > 0


def test_any_scalar_is_a_loss_as_in_popart():
    """PopART takes any one-element tensor as the final loss (Ir::setFinalLoss); the backward pass
    starts from a gradient of one. A tensor of more elements is refused as PopART refuses it."""
    nodes = [h.make_node("Mul", ["x", "w"], ["a"], name="scale"),
             h.make_node("ReduceMean", ["a"], ["m"], name="mean", keepdims=0),
             h.make_node("ReduceSumSquare", ["a"], ["l2"], name="l2", keepdims=0),
             h.make_node("Add", ["m", "l2"], ["loss"], name="loss")]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 4, 6, 6])], [h.make_tensor_value_info("loss", T.FLOAT, [])],
              [_W])
    g = sim.onnx.load(m, loss="loss")
    run = sim.simulate(g, "ipu-mk2", training=True)
    seeded = [t for t in run.executable.graph.tensors if t.startswith("loss/grad_seed")]
    assert seeded and any(op.kind == "sgd_update" for op in run.executable.graph.ops)
    with pytest.raises(sim.GraphError, match=r"loss='a' has shape \(2, 4, 6, 6\); a loss must be a scalar"):
        sim.onnx.load(m, loss="a")


@pytest.mark.parametrize("op_type, kinds_", [
    ("Tan", ["sin", "cos", "div"]),
    ("Asinh", ["pow", "add", "sqrt", "add", "log"]),
    ("Acosh", ["pow", "sub", "sqrt", "add", "log"]),
    ("Acos", ["asin", "sub"]),
    ("Atanh", ["add", "sub", "div", "log", "scale"]),
    ("Cosh", ["exp", "scale", "exp", "add", "scale"]),
])
def test_trig_ops_as_poparts_onnx_pass_rewrites_them(op_type, kinds_):
    """PopART's onnxpasses/nodepatterns/trig.cpp rewrites these into other ops, each its own compute
    set (x squared a Pow of a constant 2, popops POWER), and its CoshOpPattern Cosh; they train."""
    g = _trained(h.make_node(op_type, ["a"], ["y"], name="trig"))
    assert [op.kind for op in g.ops if op.name not in ("scale", "loss")] == kinds_
    assert g.ops[-2].outputs == ["y"]
    assert sim.simulate(g, "ipu-mk2", training=True).cycle_count > 0


@pytest.mark.parametrize("node", [
    h.make_node("Einsum", ["a", "a"], ["y"], equation="bchw,bchw->bc"),
    h.make_node("Celu", ["a"], ["y"]),
    h.make_node("NonZero", ["a"], ["y"]),
    h.make_node("GatherElements", ["a", "a"], ["y"], axis=1),  # willow/src/op has none; its backend tests skip it
], ids=lambda n: n.op_type)
def test_ops_popart_lacks_are_refused_saying_so(node):
    with pytest.raises(sim.UnsupportedOpError, match=f"PopART has no {node.op_type} op"):
        _trained(node)


@pytest.mark.parametrize("node", [
    h.make_node("RMSNormalization", ["a", "w"], ["y"], name="rms"),          # torch's nn.RMSNorm at opset 23 on
    h.make_node("Attention", ["a", "a", "a"], ["y"], name="sdpa", is_causal=1),  # scaled_dot_product_attention
    h.make_node("SwiGLU", ["a"], ["y"], name="swiglu"),
    h.make_node("RotaryEmbedding", ["a", "a", "a"], ["y"], name="rope"),     # torch.onnx.ops: opset 23 only
], ids=lambda n: n.op_type)
def test_newer_onnx_ops_popart_lacks_are_refused_saying_how_to_export(node):
    """ONNX's op types of opsets 18-28 that PopART has no op for are refused as PopART's missing ops are; the two
    torch writes from opset 23 on for scaled_dot_product_attention and nn.RMSNorm also say which export writes the
    ops PopART runs (torch.onnx.ops.rotary_embedding exports at opset 23 only, so no such advice)."""
    with pytest.raises(sim.UnsupportedOpError, match=f"PopART has no {node.op_type} op") as refused:
        _trained(node, opset=28)
    assert ("opset_version=20" in str(refused.value)) == (node.op_type in ("RMSNormalization", "Attention"))


def test_swish_of_opset_24_is_poparts_swish():
    """ONNX's Swish (opset 24), x * sigmoid(alpha x): at alpha 1 PopART's own Swish op (popnn's SWISH), as Gelu-20 is
    its Gelu; another alpha as the scale, sigmoid and product PopART would run. Both train."""
    plain = _trained(h.make_node("Swish", ["a"], ["y"], name="swish"), opset=24)
    scaled = _trained(h.make_node("Swish", ["a"], ["y"], name="swish", alpha=1.702), opset=24)
    assert [op.kind for op in plain.ops if op.pass_ == "forward"][1:-1] == ["swish"]
    assert [op.kind for op in scaled.ops if op.pass_ == "forward"][1:-1] == ["scale", "sigmoid", "mul"]
    factors = [op.attrs["factor"] for op in scaled.ops if op.kind == "scale" and op.pass_ == "forward"]
    assert factors[-1] == pytest.approx(1.702)  # an ONNX float attribute: 1.702 in float32
    for g in (plain, scaled):
        assert sim.simulate(g, "ipu-mk2", training=True).cycle_count > sim.simulate(g, "ipu-mk2").cycle_count


def test_lrn_as_popart_runs_it():
    """LRNOpx: a square, its copy, size - 1 in-place adds of channel-shifted squares, two maps; trains."""
    g = _trained(h.make_node("LRN", ["a"], ["y"], name="lrn", size=3, alpha=1e-4, beta=0.75, bias=1.0))
    assert [(op.kind, g.tensors[op.outputs[0]].shape) for op in g.ops if op.name not in ("scale", "loss")] == [
        ("square", (2, 4, 6, 6)), ("copy", (2, 4, 6, 6)), ("add", (2, 3, 6, 6)), ("add", (2, 3, 6, 6)),
        ("map", (2, 4, 6, 6)), ("map", (2, 4, 6, 6))]
    assert sim.simulate(g, "ipu-mk2", training=True).cycle_count > sim.simulate(g, "ipu-mk2").cycle_count


@pytest.mark.parametrize("x_shape, w_shape, attrs, out", [
    ((4, 64, 32), (64, 32, 8), {"strides": [4], "pads": [2, 2]}, (4, 32, 128)),                 # 1-D (a vocoder)
    ((2, 16, 8, 8), (16, 8, 1, 8), {"strides": [1, 4], "pads": [0, 2, 0, 2]}, (2, 8, 8, 32)),
    ((2, 8, 4, 8, 8), (8, 4, 2, 2, 2), {"strides": [2, 2, 2]}, (2, 4, 8, 16, 16)),               # 3-D
])
def test_transposed_convolutions_beyond_conv2d_grad_input(x_shape, w_shape, attrs, out):
    """1-D and 3-D ConvTranspose, strides that differ between axes: poplin's expandDims over the output's
    positions, as sim.poptorch prices ConvTranspose1d/3d; they train."""
    nodes = [h.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", **attrs),
             h.make_node("ReduceMean", ["y"], ["loss"], name="loss", keepdims=0)]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, list(x_shape))], [h.make_tensor_value_info("loss", T.FLOAT, [])],
              [zeros("w", w_shape)], opset=[h.make_opsetid("", 17)])
    g = sim.onnx.load(m, loss="loss")
    positions, volume = math.prod(out[2:]), math.prod(w_shape[2:])
    assert [(op.kind, g.tensors[op.outputs[0]].shape) for op in g.ops][:3] == [
        ("copy", (x_shape[0], x_shape[1] * volume, 1, positions)), ("conv2d", (x_shape[0], out[1], 1, positions)),
        ("reshape", out)]
    assert g.ops[1].attrs["transposed"] is True
    assert sim.simulate(g, "ipu-mk2", training=True).cycle_count > 0


def test_a_dilated_transposed_convolution_is_refused_as_popart_refuses_it():
    """PopART's ConvTransposeOp::setup throws "Non default value for dilations is not supported."."""
    nodes = [h.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", dilations=[2, 2])]
    m = model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 8, 8, 8])],
              [h.make_tensor_value_info("y", T.FLOAT, None)], [zeros("w", (8, 4, 3, 3))], opset=[h.make_opsetid("", 17)])
    with pytest.raises(sim.UnsupportedOpError, match=r"dilations=\[2, 2\]: PopART's ConvTransposeOp refuses a dilated "
                                                     r"kernel"):
        sim.onnx.load(m)


@pytest.mark.parametrize("node", [h.make_node("Softmax", ["x"], ["y"], name="n", axis=5),
                                  h.make_node("ReduceMax", ["x"], ["y"], name="n", axes=[5]),
                                  h.make_node("Concat", ["x", "x"], ["y"], name="n", axis=-3)])
def test_an_axis_out_of_range_is_an_error_naming_the_node(node):
    m = model([node], [h.make_tensor_value_info("x", T.FLOAT, [4, 8])], [h.make_tensor_value_info("y", T.FLOAT, None)])
    with pytest.raises(sim.GraphError, match=rf"ONNX op {node.op_type} \(node 'n'\): axis -?[35] is out of range for "
                                             r"a tensor of 2 dimension\(s\) \(ONNX allows -2 to 1\)"):
        sim.onnx.load(m)


def test_flatten_takes_an_axis_up_to_the_rank():
    """ONNX's Flatten axis runs from -r to r (r: everything in the first dimension, the second of size 1)."""
    m = model([h.make_node("Flatten", ["x"], ["y"], name="f", axis=2)], [h.make_tensor_value_info("x", T.FLOAT, [4, 8])],
              [h.make_tensor_value_info("y", T.FLOAT, None)])
    g = sim.onnx.load(m)
    assert g.tensors[g.outputs[0]].shape == (32, 1)


def test_an_input_no_node_reads_is_not_streamed_and_is_named():
    """A graph input nothing reads costs no host transfer (PopART removes an isolated stream tensor,
    Tensors::removeIsolated) and the run says so, naming it."""
    def model(extra: bool):
        inputs = [h.make_tensor_value_info("x", T.FLOAT, [4, 64])]
        if extra:
            inputs.append(h.make_tensor_value_info("unused", T.FLOAT, [4, 1_000_000]))
        graph = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", inputs,
                             [h.make_tensor_value_info("y", T.FLOAT, [4, 64])])
        return h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    with_extra = sim.simulate(sim.onnx.load(model(True)), "ipu-mk2")
    without = sim.simulate(sim.onnx.load(model(False)), "ipu-mk2")
    assert with_extra.cycle_count == without.cycle_count
    assert [n for n in with_extra.all_notes if "'unused': read by no op" in n]
    assert not [n for n in without.all_notes if "read by no op" in n]
