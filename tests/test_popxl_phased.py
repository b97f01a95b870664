"""Explicit grad graphs (popxl.transforms.autodiff as ops) and popxl-addons' batch serialisation: the
phased training programs of Graphcore's PopXL tutorial 6, whose activations go through remote buffers
and whose grad graphs run inside loops."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from sim import popxl
from sim import popxl_addons as addons
from sim.popxl import ops
from sim.popxl.errors import NotModelledError
from sim.popxl.transforms import ExpectedConnectionType


def _kinds(graph) -> list[str]:
    return [op.kind for op in graph.sim_graph.ops]


def test_autodiff_builds_the_grad_graph_as_ops_and_exposes_what_it_reads():
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((16, 256), popxl.float16, "x"))
        w0 = popxl.variable(np.zeros((256, 512), np.float16), name="w0")
        w1 = popxl.variable(np.zeros((512, 10), np.float16), name="w1")
        fwd = ir.create_graph(lambda a, b, c: ops.gelu(a @ b) @ c, x, w0, w1)
        info = popxl.transforms.autodiff(fwd, grads_required=fwd.inputs[1:])
    assert info.explicit_error is None
    # d/dc = gelu^T dy, d/dgelu = dy c^T, gelu's gradient, d/db = a^T dgelu (no gradient of a: not required)
    assert _kinds(info.graph) == ["matmul", "matmul", "gelu_grad", "matmul"]
    # gradient ops (``forward_of`` names the op), kept in program order (the "forward" pass the compiler keeps)
    assert all(op.forward_of and op.pass_ == "forward" for op in info.graph.sim_graph.ops)
    kinds = [c.connection_type for c in info.expected_inputs]
    assert kinds == [ExpectedConnectionType.FwdGrad] + [ExpectedConnectionType.Fwd] * 4
    assert [c.fwd_tensor for c in info.expected_outputs] == list(fwd.inputs[1:])
    # the activations it reads (the matmul's and the gelu's outputs) are now outputs of the forward graph
    assert len(fwd.outputs) == 3
    assert {c.fwd_tensor for c in info.expected_inputs[1:]} == {fwd.inputs[0], fwd.inputs[2], *fwd.outputs[1:]}
    assert [t.shape for t in info.graph.outputs] == [(256, 512), (512, 10)]


def _explicit_program(call_forward_first: bool = False):
    """A step graph: the forward call, a loss gradient, the grad graph's call and SGD on both weights."""
    ir = popxl.Ir()
    with ir.main_graph:
        stream = popxl.h2d_stream((16, 256), popxl.float16, "x")
        labels = popxl.h2d_stream((16,), popxl.int32, "labels")
        x, lab = ops.host_load(stream), ops.host_load(labels)
        w0 = popxl.variable(np.zeros((256, 512), np.float16), name="w0")
        w1 = popxl.variable(np.zeros((512, 10), np.float16), name="w1")
        fwd = ir.create_graph(lambda a, b, c: ops.gelu(a @ b) @ c, x, w0, w1)
        info = None if call_forward_first else popxl.transforms.autodiff(fwd, grads_required=fwd.inputs[1:])

        def step(a, y, b, c):
            nonlocal info
            site = ops.call_with_info(fwd, a, b, c)
            if info is None:  # autodiff after the forward call: its activations are still found at the call
                info = popxl.transforms.autodiff(fwd, grads_required=fwd.inputs[1:])
            _, dy = ops.nll_loss_with_softmax_grad(ops.softmax(site.parent_output(0), axis=-1), y)
            d0, d1 = ops.call(info.graph, dy, inputs_dict=info.inputs_dict(site))
            ops.scaled_add_(b, d0, b=-0.01)
            ops.scaled_add_(c, d1, b=-0.01)

        ops.call(ir.create_graph(step, x, lab, w0, w1), x, lab, w0, w1)
    return ir, stream, labels


def test_a_grad_graph_called_inside_a_graph_runs_as_written():
    ir, stream, labels = _explicit_program()
    assert ir._explicit_grads and not ir._training
    ops_ = ir.main_graph.sim_graph.ops
    backward = [op.kind for op in ops_ if op.forward_of]
    assert backward == ["softmax_cross_entropy_grad", "matmul", "matmul", "gelu_grad", "matmul"]
    updates = [op for op in ops_ if op.kind == "add" and op.outputs[0] in op.inputs]
    assert len(updates) == 2  # the program's own SGD updates (scaled_add_ in place)
    session = popxl.Session(ir, "ipu_hw")
    data = {stream: np.zeros((16, 256), np.float16), labels: np.zeros(16, np.int32)}
    with session:
        session.run(data)
    assert "autodiff grad graphs called inside other graphs" in " ".join(session._executable.notes)
    assert not session._executable.training
    assert session.simulation.breakdown.loc[0, "compute"] > 0
    # the same program with autodiff after the forward call: the same ops, the same cycles
    ir2, s2, l2 = _explicit_program(call_forward_first=True)
    session2 = popxl.Session(ir2, "ipu_hw")
    with session2:
        session2.run({s2: data[stream], l2: data[labels]})
    assert session2.cycle_count == session.cycle_count


def test_implicit_and_explicit_grad_calls_do_not_mix():
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((8, 64), popxl.float32, "x"))
        labels = ops.host_load(popxl.h2d_stream((8,), popxl.int32, "labels"))
        w = popxl.variable(np.zeros((64, 10), np.float32), name="w")
        fwd = ir.create_graph(lambda a, b: ops.softmax(a @ b, axis=1), x, w)
        info = popxl.transforms.autodiff(fwd)
        probs = ops.call(fwd, x, w)[0]
        _, dprobs = ops.nll_loss_with_softmax_grad(probs, labels)
        ops.call(info.graph, dprobs)  # in the main graph: the simulator's training
        with pytest.raises(NotModelledError, match="already called a grad graph from the main graph"):
            ir.create_graph(lambda d: ops.call(info.graph, d), popxl.TensorSpec((8, 10), popxl.float32))


def test_repeat_with_host_io_inside_a_subgraph_is_written_out():
    ir = popxl.Ir()
    ir.num_host_transfers = 4
    with ir.main_graph:
        stream = popxl.h2d_stream((8, 32), popxl.float32, "x")
        out = popxl.d2h_stream((8, 32), popxl.float32, "y")
        w = popxl.variable(np.zeros((32, 32), np.float32), name="w")

        def body(c):
            ops.host_store(out, ops.relu(ops.host_load(stream) @ c))

        loop = ir.create_empty_graph("loop")
        with loop:
            c = popxl.graph_input((32, 32), popxl.float32, "c")
            ops.repeat(ir.create_graph(body, c), 4, c)
        ops.call(loop, w)
    main = ir.main_graph
    assert len(main._loads[stream]) == 4 and len(main._stores[out]) == 4 and not main._io_repeats
    assert _kinds(main).count("matmul") == 4
    session = popxl.Session(ir, "ipu_hw")
    with session:
        session.run({stream: np.zeros((4, 8, 32), np.float32)})
    assert session._executable.options.device_iterations == 1  # one pass: the four transfers written out


class Linear(addons.Module):
    def build(self, x):
        w = self.add_variable_input("weight", partial(np.zeros, (x.shape[-1], 64)), x.dtype)
        return ops.gelu(x @ w)


def _phased(io_mode: str = "io", steps: int = 4):
    """Tutorial 6's scheme for two layers: layer 1's forward loop (images from the host, activations
    to a remote buffer), layer 2's forward, loss and backward loop, layer 1's backward loop (its
    input activations loaded back), then an SGD step of each accumulated gradient."""
    ir = popxl.Ir(replication=2)
    ir.options.numIOTiles = 32
    ir.num_host_transfers = steps
    with ir.main_graph:
        images = popxl.h2d_stream((8, 32), popxl.float32, "images")
        labels = popxl.h2d_stream((8,), popxl.int32, "labels")
        facts, fwd = Linear().create_graph(popxl.TensorSpec((8, 32), popxl.float32))
        grad_facts, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors)
        facts2, fwd2 = Linear().create_graph(popxl.TensorSpec((8, 64), popxl.float32))
        grad_facts2, bwd2 = addons.autodiff_with_accumulation(fwd2, fwd2.args.tensors,
                                                               grads_required=[fwd2.graph.inputs[0]])

        x_buffer = addons.batch_serial_buffer(fwd.graph.outputs[0], steps=steps)
        dx_buffer = addons.batch_serial_buffer(fwd.graph.outputs[0], steps=steps)
        fwd_bs, bwd_bs = addons.batch_serialise_fwd_and_grad(
            fwd, bwd, fwd.args, steps, load_handles={fwd.graph.inputs[0]: images, bwd.graph.inputs[0]: (dx_buffer, 0)},
            store_streams={}, store_buffers={fwd.graph.outputs[0]: (x_buffer, 0)}, io_mode=io_mode)

        class Head(addons.Module):  # layer 2's forward, the loss and layer 2's backward in one graph
            def build(self, x, y):
                w = self.add_variable_inputs("fwd", facts2)
                acc = self.add_variable_inputs("bwd", grad_facts2)
                site = fwd2.bind(w).call_with_info(x)
                loss, dz = addons.ops.cross_entropy_with_grad(site.parent_output(0), y)
                dx, = bwd2.bind(acc).call(dz, args=bwd2.grad_graph_info.inputs_dict(site))
                return dx

        head_facts, head = Head().create_graph(popxl.TensorSpec((8, 64), popxl.float32), labels.spec)
        head_bs = addons.batch_serialise(head, steps, load_handles={head.graph.inputs[0]: (x_buffer, 0),
                                                                    head.graph.inputs[1]: labels},
                                         store_streams={}, store_buffers={head.graph.outputs[0]: (dx_buffer, 0)},
                                         io_mode=io_mode)
        weights, weights2 = facts.init(), facts2.init()
        accums, accums2 = grad_facts.init_zero(), grad_facts2.init_zero()
        row = popxl.constant(0, popxl.int32)
        fwd_bs.graph.bind(weights).call(row)
        head_bs.graph.bind(addons.NamedTensors(fwd=weights2, bwd=accums2)).call(row)
        bound = addons.NamedTensors.from_dict({**weights.to_dict(), **accums.to_dict()})
        bwd_bs.graph.bind(bound).call(row)
        for w, acc in ((weights, accums), (weights2, accums2)):
            ops.scaled_add_(w.weight, acc.accum.weight, b=-0.01)
    return ir, images, labels, (fwd_bs, bwd_bs, head_bs, x_buffer)


def test_batch_serialised_phases_load_and_store_every_step():
    ir, images, labels, (fwd_bs, bwd_bs, head_bs, x_buffer) = _phased()
    main = ir.main_graph.sim_graph
    kinds = [op.kind for op in main.ops]
    # every step: layer 1 stores its output, and its input and its matmul's output (which its backward
    # reads: the weight's and gelu's gradients), the head loads the output and stores dx, layer 1's
    # backward loads dx and the two activations
    assert kinds.count("remote_store") == 4 * (3 + 1) and kinds.count("remote_load") == 4 * (1 + 3)
    assert len(ir.main_graph._loads[images]) == 4 and len(ir.main_graph._loads[labels]) == 4
    # the forward loop stores the input the grad graph reads, in a new buffer of steps x rows entries
    stored = fwd_bs.stored_buffers
    assert len(stored) == 3 and all(h.buffer.entries == 4 for h in stored.values())
    assert x_buffer.entries == 4
    # the grad graph's named inputs: its accumulators (it reads no weight: layer 1 needs no input gradient)
    assert sorted(bwd_bs.graph.args.keys_flat()) == ["accum.weight", "mean_accum_counter"]
    backward = [op.kind for op in main.ops if op.forward_of]
    assert backward.count("softmax_cross_entropy_grad") == 4 and backward.count("gelu_grad") == 8
    assert kinds.count("accumulate") == 4 * 2 * 2  # each step: a running mean and the count, per layer
    session = popxl.Session(ir, "ipu_hw")
    with session:
        session.run({images: np.zeros((4, 2, 8, 32), np.float32), labels: np.zeros((4, 2, 8), np.int32)})
    run = session.simulation
    assert session._executable.options.device_iterations == 1 and not session._executable.training
    assert run.samples == 8 * 4 * 2  # the pass's 4 micro-batches of 8 on each of 2 replicas
    assert "remote buffer copies run on the 32 IO tiles" in " ".join(session._executable.notes)
    assert run.breakdown.loc[0, "host_io"] > 0  # the images and labels, a step at a time


@pytest.mark.parametrize("io_mode", ["compute", "io", "io_overlapped"])
def test_batch_serialisation_io_modes_are_deterministic(io_mode):
    cycles = []
    for _ in range(2):
        ir, images, labels, _ = _phased(io_mode)
        session = popxl.Session(ir, "ipu_hw")
        with session:
            session.run({images: np.zeros((4, 2, 8, 32), np.float32), labels: np.zeros((4, 2, 8), np.int32)})
        cycles.append(session.cycle_count)
        copies = [op for op in ir.main_graph.sim_graph.ops if op.kind == "io_tile_copy"]
        assert bool(copies) == (io_mode != "compute")
        # on the compute tiles the remote copies are their own line; on the IO tiles they run beside them,
        # and the time the compute tiles wait for them, doing nothing, is theirs too
        bd = session.simulation.breakdown
        assert bd.loc[0, "remote_io"] > 0 and bd.loc[0].sum() == session.cycle_count
    assert cycles[0] == cycles[1]


def test_a_forward_weight_the_grad_graph_reads_is_its_named_input():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, fwd = Linear().create_graph(popxl.TensorSpec((8, 32), popxl.float32))
        _, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors, grads_required=[fwd.graph.inputs[0]])
        x_buffer = addons.batch_serial_buffer(fwd.graph.inputs[0], steps=2)
        dy_buffer = addons.batch_serial_buffer(fwd.graph.outputs[0], steps=2)
        _, bwd_bs = addons.batch_serialise_fwd_and_grad(
            fwd, bwd, fwd.args, 2,
            load_handles={fwd.graph.inputs[0]: (x_buffer, 0), bwd.graph.inputs[0]: (dy_buffer, 0)},
            store_streams={}, store_buffers={bwd.graph.outputs[0]: (x_buffer, 0)}, io_mode="compute")
    # dx = d(gelu) w^T reads the weight: bound by the forward graph's name
    assert sorted(bwd_bs.graph.args.keys_flat()) == ["accum.weight", "mean_accum_counter", "weight"]


def test_batch_serialise_checks_its_arguments():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, fwd = Linear().create_graph(popxl.TensorSpec((8, 32), popxl.float32))
        stream = popxl.h2d_stream((8, 32), popxl.float32, "x")
        with pytest.raises(ValueError, match="IR must have IO tiles"):
            addons.batch_serialise(fwd, 2, {fwd.graph.inputs[0]: stream}, {}, {})
        with pytest.raises(ValueError, match="Unknown 'io_mode'"):
            addons.batch_serialise(fwd, 2, {fwd.graph.inputs[0]: stream}, {}, {}, io_mode="disk")
        with pytest.raises(ValueError, match="rows must be >0"):
            addons.batch_serialise(fwd, 2, {fwd.graph.inputs[0]: stream}, {}, {}, rows=0, io_mode="compute")


def test_recompute_graph_reads_only_the_forward_inputs():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, fwd = Linear().create_graph(popxl.TensorSpec((8, 32), popxl.float32))
        _, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors, grads_required=[fwd.graph.inputs[0]])
        plain = [c.fwd_tensor for c in bwd.grad_graph_info.expected_inputs[1:]]
        recomp = addons.recompute_graph(bwd)
    info = recomp.grad_graph_info
    assert len(plain) == 3 and fwd.graph.outputs[1] in plain  # x, the weight and the matmul's output
    fwd_inputs = [c.fwd_tensor for c in info.expected_inputs if c.connection_type == ExpectedConnectionType.Fwd]
    assert set(fwd_inputs) == set(fwd.graph.inputs)  # the activation is made again, not read
    kinds = _kinds(recomp.graph)
    assert kinds[:2] == ["matmul", "gelu"]  # the forward ops first, then the backward ones
    assert kinds[2:] == _kinds(bwd.graph)
    assert recomp._accumulation is bwd._accumulation and info.outputs == bwd.grad_graph_info.outputs


def test_graph_helpers_the_examples_use():
    ir = popxl.Ir(replication=8)
    with ir.main_graph:
        inner = ir.create_graph(lambda x: x + popxl.constant(np.ones((4, 4), np.float32), name="c"),
                                popxl.TensorSpec((4, 4), popxl.float32))
        outer = ir.create_graph(lambda x: ops.call(inner, ops.call(inner, x)[0])[0],
                                popxl.TensorSpec((4, 4), popxl.float32))
        x = popxl.variable(np.zeros((4, 4), np.float32))
        ops.call(outer, x)
        ops.call(outer, x)
        # PopXL's Graph.called_graphs and its private _ir (Graphcore's GPT-J code reads both)
        assert outer.called_graphs == (inner,) and ir.main_graph.called_graphs == (outer,) and outer._ir is ir
        # the subgraph's constant is one tensor of the main graph however often it is called
        consts = [t for t in ir.main_graph.sim_graph.tensors.values() if t.role == "constant"]
        assert len(consts) == 1 and consts[0].shape == (4, 4)
        from sim.popxl_addons.named_replica_grouping import get_ild_replica_grouping, is_cross_ild
        group = ir.replica_grouping(stride=2, group_size=4)
        assert not is_cross_ild(group) and get_ild_replica_grouping(group) == group  # 8 replicas: one domain


def test_ild_replica_grouping_from_popdist(monkeypatch):
    monkeypatch.setenv("POPLAR_TARGET_OPTIONS", '{"ipuLinkDomainSize": 4}')
    from sim.popxl_addons.named_replica_grouping import get_ild_replica_grouping
    ir = popxl.Ir(replication=16)
    with ir.main_graph:
        restricted = get_ild_replica_grouping(ir.replica_grouping(stride=2, group_size=8))
    assert (restricted.stride, restricted.group_size) == (2, 2)


def test_a_submodules_inputs_are_named_under_it():
    class Head(addons.Module):
        def __init__(self):
            super().__init__()
            self.fwd = addons.Module()

        def build(self, x):
            facts, graph = Linear().create_graph(x)
            weights = self.fwd.add_variable_inputs("mlm", facts)  # a submodule's method from the parent's build
            return graph.bind(weights).call(x)[0]

    ir = popxl.Ir()
    with ir.main_graph:
        facts, head = Head().create_graph(popxl.TensorSpec((8, 32), popxl.float32))
        assert facts.keys_flat() == ["fwd.mlm.weight"] and head.args.fwd.mlm.weight.shape == (32, 64)
        probs = popxl.variable(np.zeros((8, 10), np.float16))
        loss, _ = ops.nll_loss_with_softmax_grad(probs, popxl.variable(np.zeros(8, np.int32)))
        assert loss.dtype == popxl.float16  # PopART's NllOp: the loss in the probabilities' type


def test_a_called_graph_is_one_program_however_often_it_runs():
    """PopXL's call and repeat are Poplar Call and Repeat programs: the subgraph's code is there once."""
    def control_code(count: int) -> float:
        ir = popxl.Ir()
        with ir.main_graph:
            x = popxl.variable(np.zeros((64, 64), np.float16))
            body = ir.create_graph(lambda a: ops.gelu(a @ a), x)
            y = ops.repeat(body, count, x)[0] if count > 1 else ops.call(body, x)[0]
            ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
        session = popxl.Session(ir, "ipu_hw")
        assert [op.kind for op in ir.main_graph.sim_graph.ops].count("matmul") == count  # the time: every copy
        return float(session._executable.memory[0].tile_category("control_code")[0])

    assert control_code(8) == control_code(1)


def test_a_repeat_written_out_beyond_the_limit_is_refused(monkeypatch):
    import sim.popxl.graph as graph_module
    monkeypatch.setattr(graph_module, "MAX_INLINED_OPS", 100)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((8, 8), np.float32))
        body = ir.create_graph(lambda a: ops.relu(a @ a), x)
        assert len(ops.repeat(body, 50, x)) == 1  # 100 ops: written out
        with pytest.raises(NotModelledError, match=r"51 iterations x 2 ops is more than the 100 ops"):
            ops.repeat(body, 51, x)


def test_call_module_outlines_a_submodule_under_its_name():
    class Block(addons.Module):
        def build(self, x):
            (y,) = self.call_module(Linear(), name="layer")(x)
            return y

    ir = popxl.Ir()
    with ir.main_graph:
        facts, block = Block().create_graph(popxl.TensorSpec((8, 32), popxl.float32))
        assert facts.keys_flat() == ["layer.weight"]
        y, = block.bind(facts.init()).call(popxl.variable(np.zeros((8, 32), np.float32)))
    assert y.shape == (8, 64) and _kinds(ir.main_graph).count("matmul") == 1
    with pytest.raises(ValueError, match="autodiff must be"):
        addons.Module().call_module(Linear(), autodiff="sometimes")


def test_a_session_run_takes_popxl_host_work_beside_the_device():
    """Each Session.run takes PopXL's fixed host work (configs: popxl_run_s, and popxl_stream_s for each
    stream load or store of the run on each replica), which a script's clock counts and the cycle count
    does not: fitted to the stored timings of Graphcore's PopXL tutorials 5 and 6."""
    ir, images, labels, _ = _phased("io")  # 2 replicas; 4 loads of each of 2 streams a run, no stores
    session = popxl.Session(ir, "ipu_hw")
    link = session._executable.system.host_link
    assert (link.popxl_run_s, link.popxl_stream_s) == (5.85e-4, 3.12e-5)
    assert session._host_seconds == pytest.approx(link.popxl_run_s + link.popxl_stream_s * 8 * 2, rel=1e-12)
    assert "each session.run also takes" in " ".join(session._executable.notes)
    with session:
        session.run({images: np.zeros((4, 2, 8, 32), np.float32), labels: np.zeros((4, 2, 8), np.int32)})
    assert session.simulation.seconds == pytest.approx(session.cycle_count / 1.325e9)  # device time only


def test_factories_draw_up_to_a_budget_then_give_zeros(monkeypatch):
    import sim.popxl_addons.variable_factory as factory_module
    monkeypatch.setattr(factory_module, "DRAW_BUDGET_BYTES", 1000)
    ir = popxl.Ir()
    with ir.main_graph:
        small = addons.VariableFactory(lambda: np.ones((10, 10)), popxl.float32, "small").create_var()  # 400 B
        big = addons.VariableFactory(lambda: np.ones((20, 20)), popxl.float32, "big").create_var()  # 1,600 B
    assert ir._drawn_bytes == 400 and (small._data == 1).all()  # drawn
    assert big._data.shape == (20, 20) and not big._data.any() and big._data.strides == (0, 0)  # a zero view
    assert "variable data beyond the first 0 MiB" in " ".join(ir._notes)


# --- popxl-addons' build_grad and called_graphs_grad_info --------------------------------------------------


class _HandLinear(addons.Module):
    """popxl-addons' own build_grad example (Module.create_grad_graph's docstring): x @ w + b."""

    def __init__(self, features: int):
        super().__init__()
        self.features = features

    def build(self, x):
        w = self.add_variable_input("w", partial(np.zeros, (x.shape[-1], self.features)), popxl.float32)
        b = self.add_variable_input("b", partial(np.zeros, (self.features,)), popxl.float32)
        self.aux["x"] = x
        self.aux["w"] = w
        return (x @ w) + b

    def build_grad(self, dy):
        self.var_grad["b"] = ops.sum(dy, 0)
        self.var_grad["w"] = (dy.T @ self.aux["x"]).T
        return dy @ self.aux["w"].T


def test_build_grad_writes_the_grad_graph_and_stitches_what_it_reads():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((16, 32), np.float32), name="x")
        _, fwd = _HandLinear(8).create_graph(x)
        grad = fwd.autodiff()  # method "auto": the module writes its own
    info = grad.grad_graph_info
    assert info.explicit_error is None
    # the ops build_grad wrote, not the backward rules': a reduction, two transposes around a matmul, a matmul
    assert sorted(_kinds(grad.graph)) == sorted(["reduce_sum", "transpose", "matmul", "transpose", "transpose",
                                                 "matmul"])
    kinds = [c.connection_type for c in info.expected_inputs]
    assert kinds == [ExpectedConnectionType.FwdGrad, ExpectedConnectionType.Fwd, ExpectedConnectionType.Fwd]
    x_in, w_in, b_in = fwd.graph.inputs
    # aux read in build_grad order: x, then w (w is already an input; x too): both forward inputs
    assert [c.fwd_tensor for c in info.expected_inputs[1:]] == [x_in, w_in]
    # outputs: build_grad's return (dx), then var_grad in grads_required order (w, b)
    assert [c.fwd_tensor for c in info.expected_outputs] == [x_in, w_in, b_in]
    assert [t.shape for t in grad.graph.outputs] == [(16, 32), (32, 8), (8,)]
    with pytest.raises(popxl.errors.PopXLError, match="already differentiated"):
        fwd.autodiff()


class _DoubleGrad(addons.Module):
    """y = gelu(x); its gradient written by hand as 2 dy (a 'scale', where gelu's rule makes a gelu_grad)."""

    def build(self, x):
        return ops.gelu(x)

    def build_grad(self, dy):
        return dy * 2.0


class _Parent(addons.Module):
    def build(self, x):
        h = x @ self.add_variable_input("w", partial(np.zeros, (x.shape[-1], x.shape[-1])), popxl.float32)
        (y,) = self.call_module(_DoubleGrad())(h)
        return y


def test_call_module_gives_the_callers_autodiff_the_modules_own_gradient():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((4, 8), np.float32), name="x")
        _, fwd = _Parent().create_graph(x)
        assert len(fwd.called_graphs_grad_info) == 1
        grad = addons.autodiff(fwd)
    kinds = _kinds(grad.graph)
    assert "scale" in kinds and "gelu_grad" not in kinds  # dy * 2.0: a tensor times a number, one scale
    assert kinds.count("matmul") == 2  # the caller's own matmul still by its backward rules (dx and dw)
    # with the plain autodiff instead (the called graph's ops differentiated inline) it is gelu's rule
    with ir.main_graph:
        _, fwd2 = _Parent().create_graph(x)
        plain = popxl.transforms.autodiff(fwd2.graph)
    assert "gelu_grad" in _kinds(plain.graph) and "scale" not in _kinds(plain.graph)


def test_build_grad_misuse_is_named():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((4, 8), np.float32), name="x")
        with pytest.raises(popxl.errors.PopXLError, match="can be read only inside build_grad"):
            _HandLinear(8).aux["x"]

        class Inline(addons.Module):
            def build(self, x):
                return _DoubleGrad()(x)
        with pytest.raises(popxl.errors.PopXLError, match="implements build_grad but is called inline"):
            Inline().create_graph(x)

        class NoBias(_HandLinear):
            def build_grad(self, dy):
                self.var_grad["w"] = (dy.T @ self.aux["x"]).T
                return dy @ self.aux["w"].T
        _, fwd = NoBias(8).create_graph(x)
        with pytest.raises(popxl.errors.PopXLError, match="no var_grad for b"):
            fwd.autodiff()
        with pytest.raises(ValueError, match="graph caching"):
            _DoubleGrad(cache=True)
