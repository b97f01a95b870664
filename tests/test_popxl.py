"""The PopXL-style front end (sim.popxl): recording, sessions, collectives, IPUs, errors."""

from __future__ import annotations

import numpy as np
import pytest

import sim
from sim import popxl
from sim.schedule.collectives import groups_of
from sim.errors import GraphError, IpuSimError, OptionsError
from sim.popxl import ops
from sim.program import Collective, leaves
from sim.strategy import AutoStage, ShardedExecution

# --- replica groupings: PopXL's documented examples ---------------------------------------------

# ReplicaGrouping.assignment docstring (graphcore/popart python/popxl/python_files/replica_grouping.py)
# and Ir.replica_grouping docstring (python/popxl/python_files/ir.py), replication factor 8.
DOC_ASSIGNMENTS = [
    ((1, 8), [0, 0, 0, 0, 0, 0, 0, 0]),
    ((1, 1), [0, 1, 2, 3, 4, 5, 6, 7]),
    ((1, 2), [0, 0, 1, 1, 2, 2, 3, 3]),
    ((2, 2), [0, 1, 0, 1, 2, 3, 2, 3]),
    ((1, 4), [0, 0, 0, 0, 1, 1, 1, 1]),
    ((2, 4), [0, 1, 0, 1, 0, 1, 0, 1]),
    ((4, 2), [0, 1, 2, 3, 0, 1, 2, 3]),
]


@pytest.mark.parametrize("args,assignment", DOC_ASSIGNMENTS)
def test_replica_grouping_assignment_matches_the_popxl_docs(args, assignment):
    ir = popxl.Ir(replication=8)
    stride, group_size = args
    rg = ir.replica_grouping(stride, group_size)
    assert rg.assignment == assignment
    assert ir.replica_grouping(stride=stride, group_size=group_size).assignment == assignment
    assert (rg.stride, rg.group_size, rg.num_groups) == (stride, group_size, 8 // group_size)


@pytest.mark.parametrize("stride,group_size,groups", [  # docs/popxl/replication.rst, 16 replicas
    (1, 4, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]),
    (4, 4, [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]),
    (1, 1, [[r] for r in range(16)]),
])
def test_replica_grouping_tables_of_the_replication_chapter(stride, group_size, groups):
    ir = popxl.Ir()
    ir.replication_factor = 16
    assert groups_of(ir.replica_grouping(stride, group_size).assignment) == groups


def test_replica_grouping_defaults_repr_transpose_and_errors():
    ir = popxl.Ir(replication=8)
    assert ir.replica_grouping().assignment == [0] * 8
    assert ir.replica_grouping(stride=2).group_size == 4  # replication_factor // stride
    rg = ir.replica_grouping(stride=2, group_size=4)
    assert repr(rg) == "ReplicaGrouping(num_replicas=8, stride=2, group_size=4, num_groups=2)"
    assert rg == ir.replica_grouping(2, 4) and rg != ir.replica_grouping(2, 2)
    assert ir.replica_grouping(1, 2).transpose().assignment == [0, 1] * 4  # PopXL: [0,0,1,1] -> [0,1,0,1]
    # PopXL's docstring example [0,1,0,1,2,3,2,3] -> [0,0,1,1,0,0,1,1]: no constant stride, not modelled
    from sim.popxl.errors import NotModelledError
    with pytest.raises(NotModelledError, match="no constant stride"):
        ir.replica_grouping(2, 2).transpose()
    with pytest.raises(OptionsError, match="divide"):
        ir.replica_grouping(3, 2)


# --- a small MLP: the same graph as GraphBuilder's, the same cycles -----------------------------

def _mlp_ir(transfers: int = 4, replication: int = 1):
    ir = popxl.Ir(replication=replication)
    ir.num_host_transfers = transfers
    with ir.main_graph, popxl.in_sequence():
        x_h2d = popxl.h2d_stream((16, 784), popxl.float16, name="x")
        x = ops.host_load(x_h2d)
        w1 = popxl.variable(np.zeros((784, 256), np.float16), name="w1")
        b1 = popxl.variable(np.zeros((256,), np.float16), name="b1")
        h = ops.relu_(x @ w1 + b1)  # in place: PopXL's ops.relu would copy its input first
        w2 = popxl.variable(np.zeros((256, 10), np.float16), name="w2")
        b2 = popxl.variable(np.zeros((10,), np.float16), name="b2")
        y = h @ w2 + b2
        y_d2h = popxl.d2h_stream(y.shape, y.dtype, name="y")
        ops.host_store(y_d2h, y)
    return ir, x_h2d, y_d2h


def test_mlp_program_simulates_like_the_same_graphbuilder_graph():
    ir, x_h2d, y_d2h = _mlp_ir(transfers=4)
    session = popxl.Session(ir, "ipu_hw")
    with session:
        outputs = session.run({x_h2d: np.ones((4, 16, 784), np.float16)})
    assert outputs[y_d2h].shape == (4, 16, 10) and not outputs[y_d2h].any()  # zeros: no numerics

    b = sim.GraphBuilder("mlp", dtype="float16")
    x = b.input("x", (16, 784))
    y = b.linear(b.relu(b.linear(x, 256, name="fc1")), 10, name="fc2")
    b.output(y)
    # PopXL counts its stream callbacks in its run's host work, not on the IPU's path (sim.popxl.session)
    reference = sim.simulate(b.graph, "ipu-mk2", sim.Options().deviceIterations(4).stepIOCallbacks(False))

    assert session.executable.system.name == "ipu-mk2"
    assert [op.kind for op in session.executable.graph.ops] == [op.kind for op in b.graph.ops]
    assert session.cycle_count == reference.cycle_count
    assert isinstance(session.simulation, sim.Run)
    assert "cycles" in session.summary()


def test_subgraph_call_equals_the_same_ops_inline():
    def build(called: bool):
        ir = popxl.Ir()
        with ir.main_graph:
            x_h2d = popxl.h2d_stream((8, 64), popxl.float32, "x")
            x = ops.host_load(x_h2d)
            w = popxl.variable((64, 64), popxl.float32, name="w")

            def layer(t, weight):
                return ops.gelu(t @ weight)
            if called:
                y, = ops.call(ir.create_graph(layer, x, w), x, w)
            else:
                y = layer(x, w)
            ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
        s = popxl.Session(ir)
        s.run({x_h2d: np.zeros((8, 64), np.float32)})
        return s
    inline, called = build(False), build(True)
    assert [op.kind for op in called.executable.graph.ops] == ["matmul", "gelu"]
    assert called.executable.graph.ops[0].name.endswith("layer_0/matmul")
    assert called.cycle_count == inline.cycle_count


def test_repeat_without_host_io_is_copied_and_with_host_io_is_the_transfer_step():
    ir = popxl.Ir()
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((4, 32), popxl.float32, "x")
        x = ops.host_load(x_h2d)
        w = popxl.variable((32, 32), popxl.float32, name="w")
        body = ir.create_graph(lambda t, v: ops.tanh(t @ v), x, w)
        y, = ops.repeat(body, 5, x, w)
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
    assert [op.kind for op in ir.main_graph.sim_graph.ops] == ["matmul", "tanh"] * 5
    # iteration k+1 reads iteration k's output
    ops_ = ir.main_graph.sim_graph.ops
    assert ops_[2].inputs[0] == ops_[1].outputs[0]

    class Linear(popxl.Module):  # PopXL's user-guide pattern: host IO inside the repeat
        def __init__(self, x_h2d, y_d2h):
            self.x_h2d, self.y_d2h = x_h2d, y_d2h

        def build(self, x, out_features):
            x = ops.host_load(self.x_h2d, "x")
            self.W = popxl.graph_input((x.shape[-1], out_features), popxl.float32, "W")
            y = x @ self.W
            ops.host_store(self.y_d2h, y)
            return y

    ir = popxl.Ir()
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((2, 2), popxl.float32, "x_stream")
        y_d2h = popxl.d2h_stream((2, 2), popxl.float32, "y_stream")
        W = popxl.variable(np.ones((2, 2), np.float32), name="W")
        x = ops.init((2, 2), popxl.float32, "init")
        lin = Linear(x_h2d, y_d2h)
        ops.repeat(ir.create_graph(lin, x, out_features=2), 8, x, inputs_dict={lin.W: W})
    ir.num_host_transfers = 8
    s = popxl.Session(ir, "ipu_model")
    out = s.run({x_h2d: np.zeros((8, 2, 2), np.float32)})
    assert out[y_d2h].shape == (8, 2, 2)
    assert [op.kind for op in s.executable.graph.ops] == ["matmul"]
    assert s.executable.options.device_iterations == 8
    assert all(len(v[0]) == 8 for v in s.perf_counters.values())


# --- collectives, replication and host transfers --------------------------------------------------

def _collectives(item):
    if isinstance(item, Collective):
        yield item
    for attr in ("items", "body"):
        sub = getattr(item, attr, None)
        for child in (sub if isinstance(sub, list) else [sub] if sub is not None else []):
            yield from _collectives(child)


def test_replicated_all_reduce_runs_over_the_groups_replicas():
    ir = popxl.Ir(replication=4)
    group = ir.replica_grouping(stride=2, group_size=2)
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((8, 64), popxl.float32, "x")
        x = ops.host_load(x_h2d)
        w = popxl.variable((64, 64), popxl.float32, name="w")
        h = ops.collectives.replicated_all_reduce(ops.gelu(x @ w), group=group)
        everyone = ops.collectives.replicated_all_reduce(h)
        ops.host_store(popxl.d2h_stream(h.shape, h.dtype, "y"), everyone)
    s = popxl.Session(ir, "ipu_hw")
    s.run({x_h2d: np.zeros((4, 8, 64), np.float32)})
    assert s.executable.system.name == "ipu-m2000"
    grouped = [c for c in _collectives(s.executable.program) if c.name == "replicated_all_reduce"]
    assert sorted(c.ipus for c in grouped) == [(0, 2), (1, 3)]  # groups [0, 2] and [1, 3]
    assert {c.group_size for c in grouped} == {2} and {c.op for c in grouped} == {"all_reduce"}
    assert {c.nbytes for c in grouped} == {8 * 64 * 4}
    (full,) = [c for c in _collectives(s.executable.program) if c.name == "replicated_all_reduce_2"]
    assert full.group_size == 4 and full.ipus == (0, 1, 2, 3)
    trace = s.simulation.trace
    rows = trace[trace.kind == "collective"]
    assert set(rows.name) == {"replicated_all_reduce", "replicated_all_reduce_2"}
    assert (rows.cycles > 0).all()


def test_reduce_scatter_and_all_gather_shapes_follow_the_group():
    ir = popxl.Ir(replication=8)
    group = ir.replica_grouping(stride=1, group_size=4)
    with ir.main_graph:
        t = popxl.variable((6, 10), popxl.float16, name="t")
        s = ops.collectives.replicated_reduce_scatter(t, group=group)
        assert s.shape == (15,)
        assert ops.collectives.replicated_all_gather(s, group=group).shape == (60,)
        assert ops.collectives.replicated_all_gather(t, group=group, output_shape="new_axis").shape == (4, 6, 10)
        # PopXL's 'concat' (and 'auto' without a meta-shape) along an axis; 'meta_shape' one after another
        assert ops.collectives.replicated_all_gather(t, group=group).shape == (24, 10)
        assert ops.collectives.replicated_all_gather(t, 1, group).shape == (6, 40)
        assert ops.collectives.replicated_all_gather(t, group=group, output_shape="meta_shape").shape == (240,)
        with pytest.raises(ValueError, match="Axis should be an int"):
            ops.collectives.replicated_all_gather(t, group)
    kinds = {op.kind: op.attrs for op in ir.main_graph.sim_graph.ops}
    assert kinds["replicated_reduce_scatter"] == {"group_stride": 1, "group_size": 4}


def test_replication_4_on_an_m2000_with_3_host_transfers_counts_3x4_per_stream():
    ir, x_h2d, y_d2h = _mlp_ir(transfers=3, replication=4)
    s = popxl.Session(ir, "ipu_hw")
    assert s.simulation is None
    with pytest.raises(popxl.PopXLError, match="at least once"):
        _ = s.cycle_count
    out = s.run({x_h2d: np.zeros((3, 4, 16, 784), np.float16)})
    assert out[y_d2h].shape == (3, 4, 16, 10)
    assert s.executable.system.name == "ipu-m2000"
    counters = s.simulation.perf_counters
    for key in ("input", "input_complete", "output", "output_complete"):
        assert [len(v) for v in counters[key]] == [12]
    o = s.executable.options
    assert (o.device_iterations, o.replication_factor) == (3, 4)
    assert s.simulation.latency[0] > 0


# --- IPUs -------------------------------------------------------------------------------------------

def test_popxl_ipu_places_ops_and_the_program_runs_sharded():
    ir = popxl.Ir()
    ir.num_host_transfers = 2
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((16, 128), popxl.float16, "x")
        with popxl.ipu(0):
            x = ops.host_load(x_h2d)
            # in place, as PopART runs the reference's ReLU (PopXL's ops.relu would copy its input first)
            h = ops.relu_(x @ popxl.variable((128, 128), popxl.float16, name="w0"))
            h = h.copy_to_ipu(1)
        with popxl.ipu(1):
            y = ops.relu_(h @ popxl.variable((128, 128), popxl.float16, name="w1"))
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
    s = popxl.Session(ir, "ipu_hw")
    s.run({x_h2d: np.zeros((2, 16, 128), np.float16)})
    ex = s.executable
    assert [(op.kind, op.ipu) for op in ex.graph.ops] == [("matmul", 0), ("relu", 0), ("matmul", 1), ("relu", 1)]
    assert ex.strategy == "sharded" and ex.ipus_per_replica == 2
    assert any("ShardedExecution" in n for n in ex.notes)
    kinds = s.simulation.trace.groupby("ipu").kind.apply(set)
    assert "compute" in kinds[1] and "inter_ipu" in kinds[0]

    b = sim.GraphBuilder("two", dtype="float16")
    x = b.input("x", (16, 128))
    with b.ipu(0):
        h = b.relu(b.matmul(x, b.weight("w0", (128, 128))))
    with b.ipu(1):
        y = b.relu(b.matmul(h, b.weight("w1", (128, 128))))
    b.output(y)
    ref = sim.simulate(b.graph, "ipu-m2000",
                       sim.Options().deviceIterations(2).setExecutionStrategy(ShardedExecution())
                       .stepIOCallbacks(False))
    assert s.cycle_count == ref.cycle_count


def test_a_program_may_go_back_to_an_ipu_it_used_before():
    """IPU 0, then 1, then 0 again, in program order: each change of IPU is the next stage
    (ShardedExecution with AutoStage.AutoIncrement), as the same graph built with blocks runs."""
    ir = popxl.Ir()
    ir.num_host_transfers = 2
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((16, 128), popxl.float16, "x")
        with popxl.ipu(0):
            h = ops.relu_(ops.host_load(x_h2d) @ popxl.variable((128, 128), popxl.float16, name="w0")).copy_to_ipu(1)
        with popxl.ipu(1):
            h = ops.relu_(h @ popxl.variable((128, 128), popxl.float16, name="w1")).copy_to_ipu(0)
        with popxl.ipu(0):
            y = ops.relu_(h @ popxl.variable((128, 128), popxl.float16, name="w2"))
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
    s = popxl.Session(ir, "ipu_hw")
    s.run({x_h2d: np.zeros((2, 16, 128), np.float16)})
    assert s.executable.strategy == "sharded" and [len(st.ops) for st in s.executable.stages] == [2, 2, 2]

    b = sim.GraphBuilder("back", dtype="float16")
    x = b.input("x", (16, 128))
    for i, ipu in enumerate((0, 1, 0)):
        with b.ipu(ipu):
            x = b.relu(b.matmul(x, b.weight(f"w{i}", (128, 128))))
    b.output(x)
    o = sim.Options().deviceIterations(2).setExecutionStrategy(ShardedExecution(AutoStage.AutoIncrement))
    o.stepIOCallbacks(False)  # PopXL counts its stream callbacks in its run's host work
    o._Popart.set("aliasZeroCopy", True)  # as PopXL's Ir sets it: IPU 0's two like matmuls copy nothing
    o._Popart.set("explicitRecomputation", True)  # PopXL's Ir sets it too
    ref = sim.simulate(b.graph, "ipu-m2000", o)
    assert s.cycle_count == ref.cycle_count


# --- training through autodiff ----------------------------------------------------------------------

def _training_ir(adam: bool = False, loss: bool = True, replication: int = 2, group_size: int | None = None,
                 reduce: bool = True, moment_dtypes=(popxl.float32, popxl.float32), momentum: bool = False):
    class Net(popxl.Module):
        def build(self, x):
            self.W1 = popxl.graph_input((784, 128), popxl.float32, "W1")
            self.W2 = popxl.graph_input((128, 10), popxl.float32, "W2")
            return ops.gelu(x @ self.W1) @ self.W2

    ir = popxl.Ir(replication=replication)
    ir.num_host_transfers = 2
    with ir.main_graph:
        img_h2d = popxl.h2d_stream((32, 784), popxl.float32, "img")
        lbl_h2d = popxl.h2d_stream((32,), popxl.int32, "label")
        img, lbl = ops.host_load(img_h2d), ops.host_load(lbl_h2d)
        W1 = popxl.variable((784, 128), popxl.float32, name="W1")
        W2 = popxl.variable((128, 10), popxl.float32, name="W2")
        net = Net()
        fwd = ir.create_graph(net, img)
        bwd = popxl.transforms.autodiff(fwd)
        fwd_call = ops.call_with_info(fwd, img, inputs_dict={net.W1: W1, net.W2: W2})
        probs = ops.softmax(fwd_call.outputs[0], axis=-1)
        if loss:
            out, dx = ops.nll_loss_with_softmax_grad(probs, lbl)
        else:
            out, dx = probs, popxl.GradTensor(ir.main_graph, probs.shape, probs.dtype, probs, "dx")
        bwd_call = ops.call_with_info(bwd.graph, dx, inputs_dict=bwd.inputs_dict(fwd_call))
        grads = bwd.fwd_parent_ins_to_grad_parent_outs(fwd_call, bwd_call)
        group = ir.replica_grouping(group_size=group_size) if group_size else None
        for w in (W1, W2):
            g = ops.collectives.replicated_all_reduce(grads[w], group=group) if reduce else grads[w]
            if adam:
                m = popxl.variable(w.shape, moment_dtypes[0], name=f"m_{w.name}")
                v = popxl.variable(w.shape, moment_dtypes[1], name=f"v_{w.name}")
                ops.var_updates.accumulate_moving_average_(m, g, 0.9)
                ops.var_updates.accumulate_moving_average_square_(v, g, 0.999)
                ops.var_updates.adam_var_update(w, ops.var_updates.adam_updater(m, v), learning_rate=1e-3)
            elif momentum:  # v = 0.9 v + g; w -= 0.01 v
                v = popxl.variable(w.shape, moment_dtypes[0], name=f"v_{w.name}")
                ops.var_updates.accumulator_scale_(v, 0.9)
                ops.var_updates.accumulate_(v, g)
                ops.scaled_add_(w, v, b=-0.01)
            else:
                ops.scaled_add_(w, g, b=-0.01)
        ops.host_store(popxl.d2h_stream(out.shape, out.dtype, "loss"), out)
    return ir, img_h2d, lbl_h2d, grads


def test_nll_loss_is_a_scalar_as_in_popxl():
    ir, img, lbl, _ = _training_ir()
    loss = next(op for op in ir.main_graph.sim_graph.ops if op.kind == "softmax_cross_entropy")
    s = popxl.Session(ir, "ipu_hw")
    out = s.run({img: np.zeros((2, 2, 32, 784), np.float32), lbl: np.zeros((2, 2, 32), np.int32)})
    assert [v.shape for v in out.values()] == [(2, 2)]  # (transfers, replicas) of a scalar loss
    assert loss.outputs[0] == s.executable.graph.loss
    other = popxl.Ir()
    with other.main_graph:
        probs = popxl.variable((4, 10), popxl.float32, name="p")
        labels = popxl.variable(np.zeros(4, np.int32), name="l")
        ops.nll_loss_with_softmax_grad(probs, labels, reduction="none", ignore_index=3)
    loss = next(op for op in other.main_graph.sim_graph.ops if op.kind == "softmax_cross_entropy")
    assert loss.attrs["reduction"] == "none" and loss.attrs["ignore_index"] == 3  # priced (loss_steps)
    assert not any("no modelled effect" in n for n in other._notes)


def test_autodiff_program_is_simulated_as_training():
    ir, img, lbl, grads = _training_ir()
    assert grads[next(iter(grads))].shape == (32, 784)  # the image's gradient handle
    s = popxl.Session(ir, "ipu_hw")
    s.run({img: np.zeros((2, 2, 32, 784), np.float32), lbl: np.zeros((2, 2, 32), np.int32)})
    ex = s.executable
    assert ex.training
    kinds = [op.kind for op in ex.graph.ops]
    assert "gelu_grad" in kinds and kinds.count("sgd_update") == 2
    assert s.simulation.breakdown.loc[0, "collective"] > 0  # gradient all-reduce over 2 replicas
    assert any("autodiff" in n for n in ex.notes)


def _gradient_collectives(session) -> list[tuple[str, int]]:
    """(op, group size) of each gradient collective of the session's weight update."""
    return [(c.op, c.group_size) for c in leaves(session.executable.program)
            if isinstance(c, Collective) and c.name.startswith("gradient")]


@pytest.mark.parametrize("adam", [False, True])
def test_gradient_collectives_are_the_programs(adam):
    # as the program applies them to each weight's gradient (through Adam's moments too): over
    # every replica, over groups of 2 of 4 (data parallel within tensor-parallel groups), or none
    everyone = popxl.Session(_training_ir(adam, replication=4)[0])
    assert _gradient_collectives(everyone) == [("all_reduce", 4)] * 2
    pairs = popxl.Session(_training_ir(adam, replication=4, group_size=2)[0])
    assert _gradient_collectives(pairs) == [("all_reduce", 2)] * 2
    assert any(n.startswith("gradient collectives of W1, W2, as the program applies them: all-reduce over groups "
                            "of 2") for n in pairs.executable.notes)
    alone = popxl.Session(_training_ir(adam, replication=4, reduce=False)[0])
    assert _gradient_collectives(alone) == []
    assert any(n.endswith("none (each replica updates its own copy)") for n in alone.executable.notes)
    assert alone.executable.graph.tensors["W1"].grad_collectives == ()


def test_the_simulated_adam_state_has_the_dtypes_of_the_programs_moments():
    # popxl-addons' Adam keeps its first moment in float16 by default (first_order_dtype): the simulated
    # optimizer's first state is then float16 too (its bytes in memory, streaming memory and RTS traffic)
    s = popxl.Session(_training_ir(adam=True, moment_dtypes=(popxl.float16, popxl.float32))[0])
    ex = s.executable
    assert ex.optimizer == "adam (state: first moment float16, second moment float32)"
    assert {t.name: t.dtype for t in ex.graph.tensors.values() if t.role == "state" and "W1" in t.name} == {
        "W1/adam_state0": "float16", "W1/adam_state1": "float32"}
    assert any(n.startswith("trained with the simulator's adam (state: first moment float16, second moment "
                            "float32) update") for n in ex.notes)
    assert popxl.Session(_training_ir(adam=True)[0]).executable.optimizer == "adam"
    # a velocity the program keeps makes its SGD momentum SGD, the velocity's dtype the state's
    ex = popxl.Session(_training_ir(momentum=True, moment_dtypes=(popxl.float16,) * 2)[0]).executable
    assert ex.optimizer == "sgd_momentum (state float16)"
    assert sorted(t.name for t in ex.graph.tensors.values() if t.role == "state") == [
        "W1/sgd_momentum_state0", "W2/sgd_momentum_state0"]
    assert popxl.Session(_training_ir()[0]).executable.optimizer == "sgd"


def test_autodiff_with_adam_updaters_selects_adam_and_needs_a_loss():
    ir, *_ = _training_ir(adam=True)
    s = popxl.Session(ir)
    ops_ = s.executable.graph.ops
    # the simulator's Adam update of each weight after the backward pass, not the updaters
    # recorded as forward ops reading the moment variables
    assert [(op.kind, op.pass_) for op in ops_].count(("adam_update", "update")) == 2
    assert not any(op.pass_ == "forward" and op.kind in ("adam_updater", "accumulate", "sgd_update") for op in ops_)
    assert any(n.startswith("trained with the simulator's adam update") for n in s.executable.notes)
    # the moments are the simulated Adam's state, not two more weights per weight
    assert sorted(w.name for w in s.executable.graph.weights()) == ["W1", "W2"]
    assert any("m_W1" in n and "optimizer's state" in n for n in s.executable.notes)
    ir, *_ = _training_ir(loss=False)
    with pytest.raises(GraphError, match="nll_loss_with_softmax_grad"):
        popxl.Session(ir)


# --- options and notes --------------------------------------------------------------------------

def test_session_options_are_applied_or_listed_as_unmodelled():
    ir, _, _ = _mlp_ir(transfers=1)
    ir.options.numIOTiles = 64
    ir.options.enableStochasticRounding = True
    ir._pb_ir.getSessionOptions().engineOptions = {"debug.instrument": "true"}
    s = popxl.Session(ir)
    assert s.executable.tiles == s.executable.system.ipu.tiles - 64
    notes = s.executable.notes
    assert "ir.options.enableStochasticRounding=True: accepted, no modelled effect" in notes
    assert any(n.startswith("ir.options.engineOptions") for n in notes)
    assert not any("numIOTiles" in n for n in notes)


def test_tensor_methods_and_op_shapes():
    ir = popxl.Ir()
    with ir.main_graph, popxl.name_scope("blk"):
        t = popxl.variable(np.zeros((4, 6, 8), np.float32), name="t")
        assert t.dtype == popxl.float32 and t.shape == (4, 6, 8) and t.nelms == 192
        assert t[1].shape == (6, 8) and t[:, 2:5, ::2].shape == (4, 3, 4)
        assert t.T.shape == (8, 6, 4) and t.reshape((-1, 8)).shape == (24, 8)
        assert (t + 1.0).shape == (4, 6, 8) and (2 * t).dtype == popxl.float32
        assert ops.sum(t).shape == () and ops.mean(t, axis=1, keepdims=True).shape == (4, 1, 8)
        assert ops.concat([t, t], axis=1).shape == (4, 12, 8)
        assert ops.cast(t, popxl.float16).dtype == popxl.float16
        ids = popxl.constant(np.zeros((3,), np.int32), name="ids")
        assert ops.gather(popxl.variable((100, 16), popxl.float16), ids).shape == (3, 16)
        img = popxl.variable((2, 3, 16, 16), popxl.float16)
        y = ops.conv(img, popxl.variable((8, 3, 3, 3), popxl.float16), padding=(1, 1, 1, 1),
                     available_memory_proportions=[0.3])
        assert y.shape == (2, 8, 16, 16)
        conv = next(op for op in ir.main_graph.sim_graph.ops if op.kind == "conv2d")
        assert conv.attrs["available_memory_proportion"] == 0.3  # the op's own, as PopART sets it per op
        with pytest.raises(ValueError, match="expected one entry in"):
            ops.conv(img, popxl.variable((8, 3, 3, 3), popxl.float16), available_memory_proportions=[1.5])
        assert ops.group_norm(y, popxl.variable((8,), popxl.float16), popxl.variable((8,), popxl.float16),
                              num_groups=4).shape == y.shape
    assert ir.main_graph.sim_graph.ops[0].name.startswith("blk/")


# --- errors -------------------------------------------------------------------------------------

def test_clear_errors_for_unknown_or_wrong_usage():
    with pytest.raises(popxl.PopXLError, match="no graph has been selected"):
        ops.relu(None)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable((4, 4), popxl.float32, name="x")
        with pytest.raises(AttributeError, match="ops.ctc_beam_search_decoder is not modelled"):
            ops.ctc_beam_search_decoder(x)
        with pytest.raises(popxl.NotModelledError, match="supported here"):
            ops.collectives.replicated_all_to_all(x)
        with pytest.raises(GraphError, match="inner dimensions"):
            x @ popxl.variable((3, 4), popxl.float32)

        def uses_parent(t):
            return t @ x  # x belongs to the main graph
        with pytest.raises(popxl.PopXLError, match="belongs to graph 'main'"):
            ir.create_graph(uses_parent, x)
        with pytest.raises(popxl.PopXLError, match="only be created in the main graph"):
            ir.create_graph(lambda: popxl.variable((2,), popxl.float32))
        sub = ir.create_graph(lambda a, b: a + b, x, x)
        with pytest.raises(ValueError, match="was given no tensor"):  # PopXL: ValueError
            ops.call(sub, x)
        h2d = popxl.h2d_stream((4, 4), popxl.float32, "in")
        y = ops.host_load(h2d) @ x
        ops.host_store(popxl.d2h_stream((4, 4), popxl.float32, "out"), y)
    with pytest.raises(AttributeError, match="popxl.TensorLocation is not modelled"):
        _ = popxl.TensorLocation
    with pytest.raises(ValueError, match="device_desc"):
        popxl.Session(ir, "gpu")
    s = popxl.Session(ir, "ipu_hw")
    with pytest.raises(popxl.PopXLError, match="belongs to a Session"), ir.main_graph:
        ops.relu(x)
    with pytest.raises(popxl.PopXLError, match="belongs to a Session"):
        ir.replication_factor = 2
    with pytest.raises(ValueError, match="Missing"):
        s.run({})
    with pytest.raises(popxl.SessionIOError, match="Shape mismatch"):
        s.run({h2d: np.zeros((5, 4), np.float32)})
    with pytest.raises(popxl.PopXLError, match="no ops"):
        popxl.Session(popxl.Ir())
    assert issubclass(popxl.PopXLError, IpuSimError) and issubclass(popxl.NotModelledError, IpuSimError)


def test_host_transfers_must_match_a_repeat_with_host_io():
    ir = popxl.Ir()
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((2, 2), popxl.float32, "x")
        y_d2h = popxl.d2h_stream((2, 2), popxl.float32, "y")

        def step():  # no outputs: a repeated graph has at least as many inputs as outputs (PopXL)
            ops.host_store(y_d2h, ops.relu(ops.host_load(x_h2d)))
        ops.repeat(ir.create_graph(step), 4)
    ir.num_host_transfers = 2
    with pytest.raises(OptionsError, match="num_host_transfers = 4"):
        popxl.Session(ir)


def test_gradients_only_feed_weight_updates():
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable((4, 4), popxl.float32, name="w")
        g = ir.create_graph(lambda t: ops.relu(t), w)
        info = popxl.transforms.autodiff(g)
        dw, = ops.call(info.graph, popxl.GradTensor(ir.main_graph, (4, 4), popxl.float32, None, "dy"))
        with pytest.raises(popxl.NotModelledError, match="gradient from an autodiff grad graph"):
            ops.mul(dw, 2.0)


# --- element-wise math, comparisons, reductions and random numbers (sim/popxl/ops/_math.py) ----------
def _program(build):
    """(session run, the graph's ops) of a one-IPU program whose main graph ``build`` fills."""
    ir = popxl.Ir()
    with ir.main_graph:
        out = build()
        d2h = popxl.d2h_stream(out.shape, out.dtype, "out")
        ops.host_store(d2h, out)
    with popxl.Session(ir, "ipu_hw") as s:
        s.run()
    return s.simulation, s.executable.graph.ops


@pytest.mark.parametrize("op, kind", [("abs", "abs"), ("cos", "cos"), ("sin", "sin"), ("log", "log"),
                                      ("ceil", "ceil"), ("floor", "floor"), ("sign", "sign"), ("swish", "swish"),
                                      ("geluerf", "gelu_erf"), ("clip", "clamp")])
def test_unary_math_ops_are_popops_unary_ops(op, kind):
    def build():
        x = popxl.variable(np.ones((4, 8), np.float32), name="x")
        y = getattr(ops, op)(x)
        assert (y.shape, y.dtype) == ((4, 8), popxl.float32)
        return y
    run, graph_ops = _program(build)
    assert [o.kind for o in graph_ops] == [kind]
    assert run.cycle_count > 0


def test_comparisons_and_where_broadcast_and_give_bools():
    def build():
        x = popxl.variable(np.ones((4, 1), np.float32), name="x")
        y = popxl.variable(np.ones((1, 8), np.float32), name="y")
        above = ops.greater(x, y)
        assert (above.shape, above.dtype) == ((4, 8), popxl.bool)
        both = ops.logical_and(above, ops.logical_not(ops.equal(x, 0.5)))
        return ops.where(both, x, ops.pow(y, 2.0))
    run, graph_ops = _program(build)
    assert [o.kind for o in graph_ops] == ["compare", "compare", "logical_not", "logical", "pow", "select"]
    with pytest.raises(TypeError, match="the condition must be a popxl bool Tensor"):
        _program(lambda: ops.where(popxl.variable(np.ones(3, np.float32)), 1.0, popxl.variable(np.ones(3, np.float32))))
    with pytest.raises(GraphError, match=r"shapes \(3,\), \(4,\) do not broadcast"):
        _program(lambda: ops.fmod(popxl.variable(np.ones(3, np.float32)), popxl.variable(np.ones(4, np.float32))))


def test_reductions_as_popart_builds_them():
    expected = {"min": ["reduce_min"], "prod": ["reduce_prod"], "sumsquare": ["reduce_sum"],
                "l1": ["abs", "reduce_sum"], "l2": ["reduce_sum", "sqrt"], "logsum": ["reduce_sum", "log"],
                "logsumexp": ["reduce_max", "sub", "exp", "reduce_sum", "log", "add"]}
    for name, kinds in expected.items():
        def build():
            y = getattr(ops, name)(popxl.variable(np.ones((4, 8), np.float32), name="x"), axis=1)
            assert y.shape == (4,)
            return y
        _, graph_ops = _program(build)
        assert [o.kind for o in graph_ops if o.kind != "reshape"] == kinds, name


@pytest.mark.parametrize("name, grad", [
    ("l1", [("map", ["sign", "mul"])]), ("l2", [("map", ["mul", "div"])]), ("sumsquare", [("map", ["mul", "mul"])]),
    ("logsum", [("exp", None), ("div", None)]),
])
def test_a_norm_reductions_grad_graph_is_its_grad_opxs(name, grad):
    """autodiff of ops.l1 / l2 / sumsquare / logsum: ReduceL1GradOpx, ReduceL2GradOpx, ReduceSumSquareGradOpx one
    map each, ReduceLogSumGradOpx an exp and a divide; then the matmul's two gradients (the rest are views)."""
    class Net(popxl.Module):
        def build(self, x):
            self.W = popxl.graph_input((8, 6), popxl.float32, "W")
            return getattr(ops, name)(x @ self.W, axis=1)
    ir = popxl.Ir()
    with ir.main_graph:
        bwd = popxl.transforms.autodiff(ir.create_graph(Net(), popxl.variable(np.ones((4, 8), np.float32), name="x")))
    assert [(o.kind, o.attrs.get("steps")) for o in bwd.graph._b.graph.ops if o.kind != "reshape"] == \
        grad + [("matmul", None)] * 2


def test_seeds_and_random_numbers_are_drawn_on_the_ipu():
    def build():
        seed = popxl.variable(np.array([1, 2], np.uint32), popxl.uint32, name="seed")
        seeds = ops.split_random_seed(seed, 3)
        assert len(seeds) == 3 and all(s.shape == (2,) and s.dtype == popxl.uint32 for s in seeds)
        return ops.add(ops.random_normal(seeds[0], (4, 8)), ops.random_uniform(seeds[1], (4, 8), -1.0, 1.0))
    run, graph_ops = _program(build)
    assert [o.kind for o in graph_ops] == ["modify_random_seed"] * 3 + ["random_normal", "random_uniform", "add"]
    trace = run.op_trace()
    assert (trace[trace.kind == "modify_random_seed"].end - trace[trace.kind == "modify_random_seed"].start > 0).all()
    with pytest.raises(ValueError, match=r"seed Tensor must be shape=\(2,\) dtype=uint32"):
        _program(lambda: ops.random_uniform(popxl.variable(np.ones(2, np.float32)), (4,)))


def test_squeeze_and_increment_mod():
    def build():
        x = popxl.variable(np.ones((4, 1, 8), np.float32), name="x")
        with pytest.raises(ValueError, match="axis 0 .* has size 4, not 1"):
            ops.squeeze(x, 0)
        return ops.increment_mod(ops.squeeze(x), 1.0, 3.0)
    _, graph_ops = _program(build)
    assert [(o.kind, o.attrs.get("steps")) for o in graph_ops] == [("reshape", None), ("map", ["add", "remainder"])]


def test_cumsum_is_a_triangular_matmul_as_popart_runs_it():
    def build():
        y = ops.cumsum(popxl.variable(np.ones((4, 8, 3), np.float32), name="x"), 1)
        assert y.shape == (4, 8, 3)
        return y
    _, graph_ops = _program(build)
    assert [o.kind for o in graph_ops] == ["transpose", "reshape", "matmul", "reshape", "transpose"]


def test_topk_argmax_onehot_and_dynamic_slices():
    def build():
        x = popxl.variable(np.ones((4, 16), np.float32), name="x")
        values, indices = ops.topk(x, 3, axis=1, largest=True, sorted=True)
        assert (values.shape, values.dtype, indices.shape, indices.dtype) == ((4, 3), popxl.float32, (4, 3), popxl.int32)
        best = ops.argmax(x, 1)
        assert (best.shape, best.dtype, ops.argmin(x, 0, keepdim=True).shape) == ((4,), popxl.int32, (1, 16))
        classes = ops.onehot(best, popxl.constant(10, popxl.int32), popxl.constant(np.array([0.0, 1.0], np.float32)), 1)
        assert (classes.shape, classes.dtype) == ((4, 10), popxl.float32)
        with pytest.raises(GraphError, match="number of classes must be known"):
            ops.onehot(best, popxl.variable(np.array(10, np.int32)), popxl.constant(np.array([0.0, 1.0], np.float32)), 1)
        at = popxl.variable(np.array([2], np.uint32), popxl.uint32, name="at")
        window = ops.dynamic_slice(x, at, [1], [4], True)
        with pytest.raises(ValueError, match="a slice of 20 along axis 1 does not fit"):
            ops.dynamic_slice(x, at, [1], [20], True)
        updated = ops.dynamic_update(x, at, window, [1], [4], True)
        assert (window.shape, updated.shape) == ((4, 4), (4, 16))
        # an index of any shape holding one offset an axis (PopART's opx reshapes it), as Llama's KV cache
        two = popxl.constant(np.zeros((2, 1), np.int32))
        assert ops.dynamic_update(x, two, window[:1], [0, 1], [1, 4], True).shape == (4, 16)
        with pytest.raises(ValueError, match="must hold 2 offsets"):
            ops.dynamic_update(x, at, window[:1], [0, 1], [1, 4], True)
        return ops.add(ops.sum(updated), ops.sum(classes))
    _, graph_ops = _program(build)
    kinds = [o.kind for o in graph_ops if o.kind != "reshape"]
    assert kinds[:6] == ["sort", "reduce_max", "reduce_min", "map", "copy", "copy"]
    assert graph_ops[0].attrs["k"] == 3


def test_shaped_dropout_draws_a_mask_of_its_shape():
    def build():
        x = popxl.variable(np.ones((4, 8, 6), np.float32), name="x")
        seed = popxl.variable(np.array([1, 2], np.uint32), popxl.uint32, name="seed")
        with pytest.raises(GraphError, match=r"mask shape \(3, 1, 1\) does not broadcast"):
            ops.shaped_dropout(x, seed, (3, 1, 1), 0.1)
        return ops.shaped_dropout(x, seed, (4, 8, 1), 0.1)
    _, graph_ops = _program(build)
    drop = next(o for o in graph_ops if o.kind == "dropout")
    assert drop.attrs["p"] == 0.1 and [o.kind for o in graph_ops] == ["dropout", "mul"]


def test_batch_norm_inference_and_pooling():
    def build():
        x = popxl.variable(np.ones((2, 8, 16, 16), np.float32), name="x")
        stats = [popxl.variable(np.ones(8, np.float32), name=n) for n in ("scale", "bias", "mean", "var")]
        y = ops.max_pool(ops.batch_norm_inference(x, *stats), (3, 3), (2, 2), (1, 1, 1, 1))
        assert y.shape == (2, 8, 8, 8)
        with pytest.raises(popxl.NotModelledError, match=r"padding \(0, 0, 1, 1\) .* the same before and after"):
            ops.average_pool(y, (2, 2), padding=(0, 0, 1, 1))
        with pytest.raises(GraphError, match=r"has shape \(4,\), expected \(8,\)"):
            ops.batch_norm_inference(x, popxl.variable(np.ones(4, np.float32)), *stats[1:])
        return ops.average_pool(y, (2, 2))
    _, graph_ops = _program(build)
    assert [(o.kind, o.attrs.get("inference")) for o in graph_ops] == [("batchnorm", True), ("maxpool", None),
                                                                       ("avgpool", None)]


# --- gathers, scatters, order statistics and the rest of PopXL's ops (sim/popxl/ops/_select.py) -----
def _kinds(graph_ops, *attrs):
    return [(o.kind,) + tuple(o.attrs.get(a) for a in attrs) for o in graph_ops if o.kind != "reshape"]


def test_gathers_along_any_axis_are_multislices():
    def build():
        x = popxl.variable(np.ones((4, 16, 8), np.float32), name="x")
        at = popxl.variable(np.array([[1, 2, 3]], np.int32), name="at")
        y = ops.gather(x, at, axis=1)
        assert y.shape == (4, 1, 3, 8)
        assert ops.tied_gather(x, at).shape == (1, 3, 16, 8) and ops.groupedgather(x, at, 2).shape == (4, 16, 1, 3)
        with pytest.raises(popxl.NotModelledError, match="only one group is modelled"):
            ops.groupedgather(x, at, 0, group_size=2)
        with pytest.raises(GraphError, match="must be integers"):
            ops.gather(x, popxl.variable(np.ones(3, np.float32)))
        return y
    run, graph_ops = _program(build)
    assert _kinds(graph_ops, "axis") == [("gather", 1), ("gather", None), ("gather", 2)]
    trace = run.op_trace()
    assert (trace[trace.kind == "gather"].end - trace[trace.kind == "gather"].start > 0).all()


def test_scatters_follow_popart_index_alignment():
    def build():
        data = popxl.variable(np.ones((10, 16), np.float32), name="data")
        rows = popxl.variable(np.zeros(10, np.int32), name="rows")
        slices = ops.scatter_reduce(data, rows, "sum", axis_size=4)  # a vector along axis 0: whole rows
        elements = ops.scatter_reduce(data, popxl.variable(np.zeros((10, 16), np.int32)), "max", axis_size=4)
        assert slices.shape == elements.shape == (4, 16)
        with pytest.raises(GraphError, match="Partial broadcasting of indices is not currently supported"):
            ops.scatter_reduce(data, popxl.variable(np.zeros((2, 16), np.int32)), "sum", axis_size=4)
        assert ops.scatter_reduce(data, popxl.variable(np.zeros(16, np.int32)), "sum", axis=1, axis_size=4).shape == (10, 4)
        with pytest.raises(GraphError, match="Failed to expand 'indices' shape"):
            ops.scatter_reduce(data, popxl.variable(np.zeros(12, np.int32)), "sum", axis_size=4)
        with pytest.raises(ValueError, match="One of initial_values and axis_size"):
            ops.scatter_reduce(data, rows, "sum")
        into = ops.scatter_reduce(data, rows, "min", initial_values=slices)
        written = ops.scatter(into, popxl.variable(np.zeros((4, 3), np.int32)), popxl.variable(np.ones((4, 3), np.float32)),
                              axis=1)
        return ops.add(ops.add(written, elements), slices)
    _, graph_ops = _program(build)
    scatters = [(o.attrs["reduce"], o.attrs["slices"], o.attrs["axis"]) for o in graph_ops if o.kind == "scatter_elements"]
    assert scatters == [("sum", True, 0), ("max", False, 0), ("sum", True, 1), ("min", True, 0), ("none", False, 1)]


def test_subsample_median_histogram_and_nll_loss_as_popart_grows_them():
    def build():
        x = popxl.variable(np.ones((10, 16, 5), np.float32), name="x")
        assert ops.subsample(x, [2, 3, 1]).shape == (5, 6, 5)
        w = popxl.variable(np.ones((2, 8, 8, 8), np.float32))
        assert ops.conv_transpose(w, popxl.variable(np.ones((8, 4, 3, 3), np.float32)), stride=(2, 2),
                                  output_shape=(16, 16)).shape == (2, 4, 16, 16)
        mid = ops.median(x, axis=[0, 2])
        assert mid.shape == (16,) and ops.median(x, axis=1, keepdims=True).shape == (10, 1, 5)
        counts = ops.histogram(x, [0.1, 1.0, 10.0], absolute_of_input=True)
        assert (counts.shape, counts.dtype) == ((4,), popxl.uint32)
        with pytest.raises(ValueError, match="must increase"):
            ops.histogram(x, [1.0, 0.5], False)
        loss = ops.nll_loss(popxl.variable(np.ones((8, 10), np.float32)), popxl.variable(np.zeros(8, np.int32)))
        assert loss.shape == ()
        return ops.add(ops.sum(mid), loss)
    _, graph_ops = _program(build)
    kinds = _kinds(graph_ops, "op")
    assert kinds[:7] == [("copy", "subsample"), ("conv2d_grad_input", None), ("transpose", None), ("sort", "median"),
                         ("transpose", None), ("sort", "median"), ("histogram", None)]
    # NllOpx: one-hot, multiply, row sums, log of the max with epsilon, the mean
    assert [k for k, _ in kinds[7:12]] == ["map", "mul", "reduce_sum", "map", "reduce_mean"]


def test_maximum_isinf_isfinite_lamb_square_clamp_and_inplace_forms():
    def build():
        x = popxl.variable(np.ones((10, 16), np.float32), name="x")
        top = ops.maximum(x, popxl.variable(np.ones(16, np.float32)), popxl.variable(np.ones((10, 1), np.float32)))
        finite = ops.isfinite(ops.clamp(top, 0.0, 1.0))
        assert (finite.shape, finite.dtype) == ((10, 16), popxl.bool)
        sq = ops.lamb_square(popxl.variable(np.ones((4, 4), np.float16), popxl.float16))
        assert (sq.shape, sq.dtype) == ((), popxl.float32)
        assert ops.dynamic_update_ is ops.dynamic_update and ops.rename is ops.identity
        ops.geluerf_(x), ops.geluerf(x)
        return ops.add(ops.sum(ops.where(finite, top, x)), sq)
    run, graph_ops = _program(build)
    # an in-place GELU is the same op without the out-of-place one's input copy (sim/compiler/outplace.py)
    assert [op.attrs["in_place"] for op in graph_ops if op.kind == "gelu_erf"] == [True, False]
    kinds = _kinds(graph_ops, "steps")
    assert kinds[:6] == [("maximum", None), ("maximum", None), ("clamp", None), ("isnan", None),
                         ("map", ["compare", "isfinite", "logical_not", "logical"]), ("logical", None)]
    assert ("square", None) in kinds and run.cycle_count > 0


@pytest.mark.parametrize("mode, kinds", [("nearest", ["copy", "reshape"]), ("cubic", ["map"]),
                                         ("linear", ["copy", "mul", "mul", "add", "mul", "mul", "add"])])
def test_interpolate_as_popart_resizes(mode, kinds):
    def build():
        y = ops.interpolate(popxl.variable(np.ones((2, 3, 8, 8), np.float32)), (1, 1, 2, 1.5), mode)
        assert y.shape == (2, 3, 16, 12)
        return y
    _, graph_ops = _program(build)
    assert [o.kind for o in graph_ops] == kinds


def test_conv_transpose_is_the_input_gradient_of_a_convolution_and_trains():
    class Net(popxl.Module):
        def build(self, x):
            self.W = popxl.graph_input((8, 4, 3, 3), popxl.float32, "W")
            y = ops.conv_transpose(x, self.W, stride=(2, 2), padding=(1, 1, 1, 1), output_padding=(1, 1))
            assert y.shape == (2, 4, 16, 16)
            return ops.reshape(ops.interpolate(y, (1, 1, 0.5, 0.5)), (2, 256)) @ popxl.constant(
                np.ones((256, 10), np.float32))

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 8, 8, 8), np.float32), name="x")
        W = popxl.variable((8, 4, 3, 3), popxl.float32, name="W")
        net = Net()
        fwd = ir.create_graph(net, x)
        bwd = popxl.transforms.autodiff(fwd)
        call = ops.call_with_info(fwd, x, inputs_dict={net.W: W})
        loss, dx = ops.nll_loss_with_softmax_grad(ops.softmax(call.outputs[0], axis=-1),
                                                  popxl.variable(np.zeros(2, np.int32)))
        grads = bwd.fwd_parent_ins_to_grad_parent_outs(call, ops.call_with_info(bwd.graph, dx,
                                                                                 inputs_dict=bwd.inputs_dict(call)))
        ops.scaled_add_(W, grads[W], b=-0.01)
        ops.host_store(popxl.d2h_stream(loss.shape, loss.dtype, "loss"), loss)
    s = popxl.Session(ir, "ipu_hw")
    s.run()
    kinds = [o.kind for o in s.executable.graph.ops]
    assert kinds.count("conv2d_grad_input") == 1 and "conv2d_grad_weight" in kinds and "sgd_update" in kinds
    convt = next(o for o in s.executable.graph.ops if o.kind == "conv2d_grad_input")
    assert (convt.attrs["ci"], convt.attrs["co"], convt.attrs["stride"], convt.attrs["padding"]) == (4, 8, 2, 1)


def test_conditional_prices_the_constant_branch_or_both():
    runs = {}
    for cond in ("device", True, False):
        ir = popxl.Ir()
        with ir.main_graph:
            x = popxl.variable(np.ones((64, 64), np.float32), name="x")
            big = ir.create_graph(lambda a: ops.relu(a @ a @ a), x)
            small = ir.create_graph(lambda a: ops.relu(a), x)
            c = popxl.variable(np.array(True), popxl.bool) if cond == "device" else popxl.constant(np.array(cond),
                                                                                                   popxl.bool)
            info = ops.conditional_with_info(c, big, small, [x], [x])
            y, = info.outputs
            assert info.called_graph == (big, small) and y.shape == (64, 64)
            ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "out"), y)
        s = popxl.Session(ir, "ipu_hw")
        s.run()
        runs[cond] = ([o.kind for o in s.executable.graph.ops], s.simulation.cycle_count, s.executable.notes)
    assert runs[True][0] == ["matmul", "matmul", "relu"] and runs[False][0] == ["relu"]
    assert runs["device"][0] == ["matmul", "matmul", "relu", "relu", "select"]
    assert runs[False][1] < runs[True][1] < runs["device"][1]
    assert any("both branches" in n and "upper bound" in n for n in runs["device"][2])
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((4, 4), np.float32))
        a, b = ir.create_graph(lambda t: t @ t, x), ir.create_graph(lambda t: ops.sum(t), x)
        with pytest.raises(GraphError, match="the branches' outputs differ"):
            ops.conditional(popxl.variable(np.array(True), popxl.bool), a, b, [x], [x])


def test_storing_a_tensor_no_op_makes_costs_its_stream_copy():
    """Echoing the input back (host_store of a host_load, no op between) is a stream copy like any
    other: it adds a host_io row and its cycles, as it does in a program with no other op."""
    n = 1 << 18

    def run(echo: bool):
        ir = popxl.Ir()
        with ir.main_graph:
            xs = popxl.h2d_stream((n,), popxl.float32, "x")
            x = ops.host_load(xs)
            ops.host_store(popxl.d2h_stream((n,), popxl.float32, "y"), x + 1)
            if echo:
                ops.host_store(popxl.d2h_stream((n,), popxl.float32, "x_back"), x)
        session = popxl.Session(ir, "ipu_hw")
        session.run({xs: np.zeros(n, np.float32)})
        trace = session.simulation.trace
        return session.cycle_count, list(trace[trace.kind == "host_io"].name)

    (plain, rows), (echoed, echoed_rows) = run(False), run(True)
    assert rows == ["x", "y"] and echoed_rows == ["x", "y", "x_back"]  # each store named by its stream
    assert echoed > plain + 400_000  # a MiB more over the host link


def test_a_repeat_of_a_graph_with_its_own_host_io_repeat_counts_every_transfer():
    """ops.repeat(outer, 2) of a graph that repeats a host transfer 4 times makes 8 transfers a run:
    num_host_transfers 8 runs, and any other count names 8."""
    def program(transfers: int):
        ir = popxl.Ir()
        ir.num_host_transfers = transfers
        with ir.main_graph:
            xs, ys = popxl.h2d_stream((4,), popxl.float32, "x"), popxl.d2h_stream((4,), popxl.float32, "y")
            w = popxl.variable(np.zeros(4, np.float32))

            def inner(w):
                ops.host_store(ys, ops.host_load(xs) + w)
                return w
            body = ir.create_graph(inner, w)
            outer = ir.create_graph(lambda w: ops.repeat(body, 4, w), w)
            ops.repeat(outer, 2, w)
        return ir, xs, ys

    ir, xs, ys = program(8)
    assert popxl.Session(ir, "ipu_hw").run({xs: np.zeros((8, 4), np.float32)})[ys].shape == (8, 4)
    for wrong in (2, 4):
        with pytest.raises(OptionsError, match="2 x 4 = 8 times per run .* set ir.num_host_transfers = 8"):
            popxl.Session(program(wrong)[0], "ipu_hw")


def test_popxl_signatures_shapes_and_exception_types():
    """PopXL's own argument orders and results: two vectors' matmul is a scalar (numpy, PopART's
    MatMulOp); an unreduced softmax-gradient loss has the labels' shape; ignore_index comes before
    reduction (SDK 3.x); ops.init's fifth argument is meta_shape; in_sequence takes mode; a tensor or
    a stream of another Ir is PopXL's ValueError (check_in_graph)."""
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(3, np.float32))
        assert (a @ a).shape == ()
        probs, labels = popxl.variable(np.zeros((4, 10), np.float32)), popxl.variable(np.zeros(4, np.int32))
        assert ops.nll_loss_with_softmax_grad(probs, labels, reduction="none")[0].shape == (4,)
        loss, _ = ops.nll_loss_with_softmax_grad(probs, labels, 1, -100)
        assert loss.shape == ()
        assert ops.init((4,), popxl.float32, "acc", "zero", (8,)).meta_shape == (8,)
        with popxl.in_sequence(mode=False), popxl.in_sequence("pass"):
            pass
        stream = popxl.h2d_stream((4,), popxl.float32, "x")
    other = popxl.Ir()
    with other.main_graph:
        b = popxl.variable(np.ones(3, np.float32))
        with pytest.raises(ValueError, match="belongs to another Ir"):
            b + a
        with pytest.raises(ValueError, match="stream 'x' was made in another Ir"):
            ops.host_load(stream)


def test_a_program_of_one_host_load_runs_its_copy():
    """PopXL runs a main graph holding only a host_load (the load is an op): its stream copy is the
    run, about half of loading and storing the same tensor back."""
    n = 1 << 18

    def cycles(store: bool) -> int:
        ir = popxl.Ir()
        with ir.main_graph:
            xs = popxl.h2d_stream((n,), popxl.float32, "x")
            x = ops.host_load(xs)
            if store:
                ops.host_store(popxl.d2h_stream((n,), popxl.float32, "y"), x)
        session = popxl.Session(ir, "ipu_hw")
        session.run({xs: np.zeros(n, np.float32)})
        return session.cycle_count

    load, both = cycles(False), cycles(True)
    assert 0.4 * both < load < 0.7 * both


def test_a_store_is_named_by_its_stream_in_the_trace():
    """The timeline names a device-to-host copy after the d2h stream it stores to, as PopVision names
    a stream copy by its stream, not after the tensor stored (here the add's result)."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x_h2d = popxl.h2d_stream((64, 64), popxl.float16, name="x_stream")
        x = ops.host_load(x_h2d, "x")
        y = ops.add(x, x)
        ops.host_store(popxl.d2h_stream((64, 64), popxl.float16, "y_stream"), y)
    session = popxl.Session(ir, "ipu_hw")
    with session:
        session.run({x_h2d: np.ones((64, 64), np.float16)})
    trace = session.simulation.trace
    names = set(trace[trace.kind == "host_io"].name)
    assert "y_stream" in names and y.name not in names and y.name != "y_stream"
