"""sim.onnx: ONNX control flow (Loop, Scan, If) as PopART runs it (models built here with onnx.helper)."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import sim
import sim.onnx
from sim.errors import GraphError

OPSET = [h.make_opsetid("", 17)]


def _model(nodes, inputs, outputs, inits=()):
    return h.make_model(h.make_graph(nodes, "control_flow", inputs, outputs, list(inits)), opset_imports=OPSET)


def _vi(name, shape, dtype=T.FLOAT):
    return h.make_tensor_value_info(name, dtype, shape)


def _loop_body(cond_out="cond_in", scan=True):
    """v <- relu(v @ W) (W from the outer scope); the new v is also a scan output."""
    nodes = [h.make_node("MatMul", ["v_in", "W"], ["mm"], name="mm"),
             h.make_node("Relu", ["mm"], ["v_out"], name="relu")]
    if cond_out == "cond_in":
        nodes.append(h.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"))
    else:  # go on while the state's sum is under 10: a condition only the device knows
        nodes += [h.make_node("ReduceSum", ["v_out"], ["total"], name="total", keepdims=0),
                  h.make_node("Less", ["total", "ten"], ["cond_out"], name="under_ten")]
    outputs = [_vi("cond_out", [], T.BOOL), _vi("v_out", [4, 32])]
    if scan:
        nodes.append(h.make_node("Identity", ["v_out"], ["scan_v"], name="scan_copy"))
        outputs.append(_vi("scan_v", [4, 32]))
    return h.make_graph(nodes, "body", [_vi("i", [], T.INT64), _vi("cond_in", [], T.BOOL), _vi("v_in", [4, 32])],
                        outputs)


def _loop_model(trips=3, cond_out="cond_in", scan=True, trip_input=True, loss=False):
    inits = [nh.from_array(np.full((32, 32), 0.01, np.float32), "W"), nh.from_array(np.array(True), "go"),
             nh.from_array(np.array(10.0, np.float32), "ten")]
    if trip_input:
        inits.append(nh.from_array(np.array(trips, np.int64), "M"))
    outs = ["v_final"] + (["v_all"] if scan else [])
    nodes = [h.make_node("Loop", ["M" if trip_input else "", "go", "x"], outs, name="steps",
                         body=_loop_body(cond_out, scan))]
    outputs = [_vi("v_final", [4, 32])] + ([_vi("v_all", [trips, 4, 32])] if scan else [])
    if loss:
        nodes.append(h.make_node("ReduceMean", ["v_final"], ["loss"], name="loss", keepdims=0))
        outputs.append(_vi("loss", []))
    return _model(nodes, [_vi("x", [4, 32])], outputs, inits)


def _by_kind(graph, kind):
    return [op for op in graph.ops if op.kind == kind]


def test_loop_unrolled_as_popart_runs_it():
    """A Loop with a constant trip count runs its body that many times (PopART's LoopOpx: a poplar
    loop of the body), each iteration with the exit-condition update, the iterator's increment and
    the copies of each loop-carried tensor back to the body's input; a scan output is a dynamic
    update of one slice an iteration of a (trips, ...) tensor (PopART's LoopScanOutPattern)."""
    g = sim.onnx.load(_loop_model(trips=3))
    mms = _by_kind(g, "matmul")
    assert [op.name for op in mms] == ["steps/0/mm", "steps/1/mm", "steps/2/mm"]
    # each iteration's matmul reads the previous iteration's state
    assert mms[1].inputs[0] in {t for op in g.ops if op.name.startswith("steps/0/") for t in op.outputs}
    assert all(op.attrs.get("onnx_loop") == "steps" for op in g.ops if op.name.startswith("steps/"))
    control = [op for op in g.ops if op.attrs.get("loop_control")]
    assert sorted(op.attrs["loop_control"] for op in control) == sorted(["exit_update", "iterator"] * 3)
    updates = [op for op in g.ops if op.attrs.get("dynamic_update")]
    assert [g.tensors[op.outputs[0]].shape for op in updates] == [(4, 32)] * 3  # one slice each
    scan_out = next(op for op in g.ops if op.outputs == ["v_all"])
    assert scan_out.kind == "concat" and g.tensors["v_all"].shape == (3, 4, 32)  # the slices side by side
    carried = [op for op in g.ops if op.attrs.get("loop_carried")]
    assert len(carried) == 3  # the one loop-carried tensor, copied each iteration
    assert [op.attrs["loop_group"] for op in carried] == ["steps/0", "steps/1", "steps/2"]
    assert [g.tensors[o].shape for o in g.outputs] == [(4, 32), (3, 4, 32)]
    run = sim.simulate(g, "ipu-mk2")
    assert any("Loop 'steps'" in n and "3 iterations" in n for n in run.executable.notes)


def test_loop_cost_grows_with_its_trip_count():
    """Each iteration adds the body's and the loop's own work: 6 iterations cost more than 3, and the
    difference is one iteration's cost three times over (every iteration prices alike)."""
    cycles = {m: sim.simulate(sim.onnx.load(_loop_model(trips=m, scan=False)), "ipu-mk2").cycle_count
              for m in (2, 3, 6)}
    assert cycles[2] < cycles[3] < cycles[6]
    assert cycles[6] - cycles[3] == 3 * (cycles[3] - cycles[2])


def test_loop_iteration_number_is_a_run_time_value():
    """The body is compiled once and reads the iteration number at run time (the iterator's tensor), so
    a Gather by it moves data each iteration, as on the IPU: not a free static slice."""
    body = h.make_graph([h.make_node("Gather", ["table", "i"], ["row"], name="row", axis=0),
                         h.make_node("Add", ["v_in", "row"], ["v_out"], name="acc"),
                         h.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")],
                        "body", [_vi("i", [], T.INT64), _vi("cond_in", [], T.BOOL), _vi("v_in", [8])],
                        [_vi("cond_out", [], T.BOOL), _vi("v_out", [8])])
    inits = [nh.from_array(np.array(4, np.int64), "M"), nh.from_array(np.array(True), "go")]
    m = _model([h.make_node("Loop", ["M", "go", "x"], ["y"], name="rows", body=body)],
               [_vi("x", [8]), _vi("table", [4, 8])], [_vi("y", [8])], inits)
    g = sim.onnx.load(m)
    gathers = [op for op in g.ops if op.name.startswith("rows/") and op.name.endswith("/row")]
    assert len(gathers) == 4 and all(op.kind == "copy" and op.attrs["onnx_op"] == "Gather" for op in gathers)
    iterators = [op.outputs[0] for op in g.ops if op.attrs.get("loop_control") == "iterator"]
    assert [op.inputs[1] for op in gathers[1:]] == iterators[:3]  # each iteration reads the incremented one
    assert sim.simulate(g).cycle_count > 0


def test_loop_condition_the_device_computes_runs_the_maximum_trip_count():
    """A termination condition computed from the data is known only on the device: the loop is priced
    at its maximum trip count (an upper bound) and the run says so."""
    g = sim.onnx.load(_loop_model(trips=5, cond_out="computed", scan=False))
    assert len(_by_kind(g, "matmul")) == 5
    run = sim.simulate(g, "ipu-mk2")
    assert any("Loop 'steps'" in n and "maximum trip count" in n for n in run.executable.notes)


def test_loop_needs_a_constant_trip_count_as_popart_does():
    with pytest.raises(GraphError, match=r"Loop.*trip count.*PopART"):
        sim.onnx.load(_loop_model(trip_input=False, scan=False))


def test_loop_trains_only_where_no_gradient_crosses_it():
    """PopART's LoopOp has no gradient op: a training run that would differentiate through the loop
    is refused; one where the loop only prepares the input trains."""
    g = sim.onnx.load(_loop_model(trips=2, scan=False, loss=True), loss="loss")
    with pytest.raises(GraphError, match=r"Loop.*'steps'.*gradient"):
        sim.simulate(g, "ipu-mk2", training=True)
    # the loop (no weights) feeds a weighted layer and the loss: nothing to differentiate inside it
    body = h.make_graph([h.make_node("Relu", ["v_in"], ["v_out"], name="relu"),
                         h.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")],
                        "body", [_vi("i", [], T.INT64), _vi("cond_in", [], T.BOOL), _vi("v_in", [4, 32])],
                        [_vi("cond_out", [], T.BOOL), _vi("v_out", [4, 32])])
    inits = [nh.from_array(np.array(2, np.int64), "M"), nh.from_array(np.array(True), "go"),
             nh.from_array(np.full((32, 32), 0.01, np.float32), "W")]
    nodes = [h.make_node("Loop", ["M", "go", "x"], ["p"], name="prep", body=body),
             h.make_node("MatMul", ["p", "W"], ["y"], name="fc"),
             h.make_node("ReduceMean", ["y"], ["loss"], name="loss", keepdims=0)]
    m = _model(nodes, [_vi("x", [4, 32])], [_vi("loss", [])], inits)
    run = sim.simulate(sim.onnx.load(m, loss="loss"), "ipu-mk2", training=True)
    assert run.cycle_count > 0


def test_scan_slices_its_inputs_each_iteration():
    """Scan (PopART's ScanToLoopPattern: a Loop that dynamic-slices each scan input and dynamic-updates
    each scan output): a running sum over the sequence axis, 6 steps."""
    body = h.make_graph([h.make_node("Add", ["s_in", "x_t"], ["s_out"], name="acc"),
                         h.make_node("Identity", ["s_out"], ["y_t"], name="emit")],
                        "body", [_vi("s_in", [16]), _vi("x_t", [16])], [_vi("s_out", [16]), _vi("y_t", [16])])
    m = _model([h.make_node("Scan", ["s0", "xs"], ["s_final", "ys"], name="cumsum", body=body, num_scan_inputs=1)],
               [_vi("s0", [16]), _vi("xs", [6, 16])], [_vi("s_final", [16]), _vi("ys", [6, 16])])
    g = sim.onnx.load(m)
    assert len([op for op in g.ops if op.attrs.get("dynamic_slice")]) == 6
    assert len([op for op in g.ops if op.attrs.get("dynamic_update")]) == 6
    assert len([op for op in g.ops if op.name.startswith("cumsum/") and op.name.endswith("/acc")]) == 6
    assert [g.tensors[o].shape for o in g.outputs] == [(16,), (6, 16)]
    assert sim.simulate(g).cycle_count > 0


def _if_model(cond_value=None):
    then = h.make_graph([h.make_node("MatMul", ["x", "W"], ["t"], name="heavy")], "then", [], [_vi("t", [4, 32])])
    other = h.make_graph([h.make_node("Relu", ["x"], ["e"], name="light")], "else", [], [_vi("e", [4, 32])])
    inits = [nh.from_array(np.full((32, 32), 0.01, np.float32), "W")]
    inputs = [_vi("x", [4, 32])]
    if cond_value is None:
        nodes = [h.make_node("ReduceSum", ["x"], ["s"], name="s", keepdims=0),
                 h.make_node("Greater", ["s", "zero"], ["c"], name="positive")]
        inits.append(nh.from_array(np.array(0.0, np.float32), "zero"))
    else:
        nodes = []
        inits.append(nh.from_array(np.array(cond_value), "c"))
    nodes.append(h.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other))
    return _model(nodes, inputs, [_vi("y", [4, 32])], inits)


def test_if_with_a_constant_condition_runs_its_branch():
    assert [op.kind for op in sim.onnx.load(_if_model(True)).ops] == ["matmul"]
    assert [op.kind for op in sim.onnx.load(_if_model(False)).ops] == ["relu"]


def test_if_the_device_decides_prices_both_branches_as_sim_poptorch_cond():
    """A condition only the device knows: both branches are priced, then a select of their outputs
    (an upper bound: the IPU runs one), as sim.poptorch prices poptorch.cond; the run says so."""
    g = sim.onnx.load(_if_model())
    kinds = [op.kind for op in g.ops]
    assert "matmul" in kinds and "relu" in kinds
    select = [op for op in g.ops if op.attrs.get("onnx_if") == "branch" and op.kind == "select"]
    assert len(select) == 1 and select[0].outputs[0] in g.outputs
    run = sim.simulate(g, "ipu-mk2")
    assert any("If 'branch'" in n and "upper bound" in n for n in run.executable.notes)


def test_loop_body_weight_is_stored_once_in_the_layout_its_matmul_wants():
    """torch's Gemm (weights (out, in), transB=1) in a loop body: the weight is stored in the matmul's
    layout once at compile time, as outside a loop, not transposed every iteration."""
    body = h.make_graph([h.make_node("Gemm", ["v_in", "fc.weight", "fc.bias"], ["g"], name="fc", transB=1),
                         h.make_node("Tanh", ["g"], ["v_out"], name="tanh"),
                         h.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")],
                        "body", [_vi("i", [], T.INT64), _vi("cond_in", [], T.BOOL), _vi("v_in", [4, 16])],
                        [_vi("cond_out", [], T.BOOL), _vi("v_out", [4, 16])])
    inits = [nh.from_array(np.array(3, np.int64), "M"), nh.from_array(np.array(True), "go"),
             nh.from_array(np.ones((16, 16), np.float32), "fc.weight"), nh.from_array(np.ones(16, np.float32), "fc.bias")]
    m = _model([h.make_node("Loop", ["M", "go", "x"], ["y"], name="rnn", body=body)],
               [_vi("x", [4, 16])], [_vi("y", [4, 16])], inits)
    g = sim.onnx.load(m)
    assert [op.kind for op in g.ops].count("transpose") == 0
    assert [op.inputs[1] for op in g.ops if op.kind == "matmul"] == ["fc.weight"] * 3
    assert g.tensors["fc.weight"].role == "weight"


def test_nested_loops_and_a_body_initializer():
    """A Loop in a Loop's body: its ops named <outer>/<i>/<inner>/<j>/<op>, every one tagged with the
    inner loop (the innermost); a float initializer of the body is one weight, whatever the iterations."""
    inner = h.make_graph([h.make_node("MatMul", ["u_in", "Wb"], ["u_out"], name="mm"),
                          h.make_node("Identity", ["c_in"], ["c_out"], name="keep")],
                         "inner", [_vi("j", [], T.INT64), _vi("c_in", [], T.BOOL), _vi("u_in", [2, 8])],
                         [_vi("c_out", [], T.BOOL), _vi("u_out", [2, 8])],
                         [nh.from_array(np.full((8, 8), 0.1, np.float32), "Wb")])
    outer = h.make_graph([h.make_node("Loop", ["N", "go2", "v_in"], ["v_out"], name="inner", body=inner),
                          h.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")],
                         "outer", [_vi("i", [], T.INT64), _vi("cond_in", [], T.BOOL), _vi("v_in", [2, 8])],
                         [_vi("cond_out", [], T.BOOL), _vi("v_out", [2, 8])],
                         [nh.from_array(np.array(3, np.int64), "N"), nh.from_array(np.array(True), "go2")])
    inits = [nh.from_array(np.array(2, np.int64), "M"), nh.from_array(np.array(True), "go")]
    m = _model([h.make_node("Loop", ["M", "go", "x"], ["y"], name="outer", body=outer)],
               [_vi("x", [2, 8])], [_vi("y", [2, 8])], inits)
    g = sim.onnx.load(m)
    mms = [op for op in g.ops if op.kind == "matmul"]
    assert [op.name for op in mms] == [f"outer/{i}/inner/{j}/mm" for i in range(2) for j in range(3)]
    assert {op.inputs[1] for op in mms} == {"Wb"} and [t.name for t in g.weights()] == ["Wb"]
    assert {op.attrs["onnx_loop"] for op in mms} == {"outer/0/inner", "outer/1/inner"}
    assert sim.simulate(g).cycle_count > 0
