"""sim.popxl against PopXL 3.4's own code (graphcore/popart sdk-release-3.4, python/popxl): what a
PopXL program gets back (shapes, dtypes, errors), which optimizer and weights a training program
is priced with, and the ops and names PopXL programs use."""

from __future__ import annotations

import numpy as np
import pytest

import sim.popxl as popxl
import sim.popxl.ops as ops


def _session(ir) -> popxl.Session:
    s = popxl.Session(ir, "ipu_hw")
    return s


def test_numpy_on_the_left_and_iteration():
    """PopXL's Tensor sets ``__array_ufunc__`` and ``__iter__`` to None (tensor.py); its operators
    ``**``, ``%``, ``~`` are ops.pow, ops.fmod and ops.logical_not."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((3, 4), np.float32))
        before = len(ir.main_graph.sim_graph.ops)
        y = np.float32(0.5) * x
        assert isinstance(y, popxl.Tensor) and y.shape == (3, 4)
        assert len(ir.main_graph.sim_graph.ops) == before + 1  # one op, not 1,518 slices
        with pytest.raises(TypeError):
            list(x)
        assert [op.kind for op in ir.main_graph.sim_graph.ops[-1:]] == ["scale"]  # a tensor times a number
        squared, left = x ** 2.0, 2.0 ** x  # ops.pow, with the number on either side
        flags = ~ops.greater(x % 3.0, 1.0)  # ops.fmod, ops.logical_not
        assert (squared.shape, left.shape, flags.dtype) == ((3, 4), (3, 4), popxl.bool)
        assert [op.kind for op in ir.main_graph.sim_graph.ops[-5:]] == ["pow", "pow", "remainder", "compare",
                                                                        "logical_not"]


def test_indexing_drops_integer_axes_and_takes_negative_steps():
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.zeros(5, np.float32))
        m = popxl.variable(np.zeros((3, 4), np.float32))
        assert (v[0].shape, m[0, 1].shape, m[-1].shape) == ((), (), (4,))
        assert (v[::-1].shape, m[1:, ::2].shape, v[-2:].shape) == ((5,), (2, 2), (2,))


def _adam_program(lamb: bool):
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((8, 16), popxl.float32, "x"))
        w = popxl.variable(np.zeros((16, 16), np.float32), name="w")
        m = popxl.variable(np.zeros((16, 16), np.float32), name="m")
        v = popxl.variable(np.zeros((16, 16), np.float32), name="v")
        labels = ops.host_load(popxl.h2d_stream((8,), popxl.int32, "labels"))
        fwd = ir.create_graph(lambda a, b: ops.softmax(a @ b, axis=1), x, w)
        info = popxl.transforms.autodiff(fwd)
        probs, = ops.call(fwd, x, w)
        _, dprobs = ops.nll_loss_with_softmax_grad(probs, labels)
        _, dw = ops.call(info.graph, dprobs)
        ops.var_updates.accumulate_moving_average_(m, dw, 0.9)
        ops.var_updates.accumulate_moving_average_square_(v, dw, 0.999)
        upd = ops.var_updates.adam_updater(m, v)
        one = popxl.constant(1.0)
        r1, r2 = (ops.var_updates.lamb_square(upd), ops.var_updates.lamb_square(w)) if lamb else (one, one)
        ops.var_updates.adam_var_update(w, upd, r1, r2, learning_rate=1e-3)
    return ir


def test_adam_var_update_with_r1_r2_is_adam_lamb_square_makes_lamb():
    """PopXL's adam_var_update always takes r1 and r2 (adam_var_update.py); LAMB is the program that
    computes them with lamb_square."""
    assert _adam_program(lamb=False)._optimizer == "adam"
    assert _adam_program(lamb=True)._optimizer == "lamb"


def _two_weight_program(update: set[str]) -> popxl.Session:
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((8, 64), popxl.float32, "x"))
        labels = ops.host_load(popxl.h2d_stream((8,), popxl.int32, "labels"))
        w0 = popxl.variable(np.zeros((64, 64), np.float32), name="w0")
        w1 = popxl.variable(np.zeros((64, 10), np.float32), name="w1")
        fwd = ir.create_graph(lambda a, b, c: ops.softmax((a @ b) @ c, axis=1), x, w0, w1)
        info = popxl.transforms.autodiff(fwd)
        probs = ops.call(fwd, x, w0, w1)[0]  # autodiff added the activations its grad graph reads
        _, dprobs = ops.nll_loss_with_softmax_grad(probs, labels)
        _, d0, d1 = ops.call(info.graph, dprobs)
        for name, w, d in (("w0", w0, d0), ("w1", w1, d1)):
            if name in update:
                ops.scaled_add_(w, d, b=-0.01)
    s = _session(ir)
    with s:
        s.run({t: np.zeros(t.shape, t.dtype.as_numpy()) for t in ir.get_all_h2d_streams()})
    return s


def test_only_the_weights_the_program_updates_are_trained():
    both, last = _two_weight_program({"w0", "w1"}), _two_weight_program({"w1"})
    assert last.cycle_count < both.cycle_count
    assert any(n.startswith("variables w0: no update of the program writes them") for n in last.executable.notes)
    assert not any("no update of the program writes" in n for n in both.executable.notes)


def test_call_flattens_lists_and_takes_numbers_repeat_checks_its_outputs():
    """ops/call.py flattens iterables and makes constants of numbers; ops/repeat.py needs as many
    inputs as outputs; both raise ValueError."""
    ir = popxl.Ir()
    with ir.main_graph:
        xs = [popxl.variable(np.zeros(4, np.float32)) for _ in range(3)]
        g = ir.create_graph(lambda ts: ts[0] + ts[1] + ts[2], xs)
        assert ops.call(g, xs)[0].shape == (4,)
        scale = ir.create_graph(lambda a, b: a * b, xs[0], popxl.TensorSpec((), popxl.float32))
        assert ops.call(scale, xs[0], 2.0)[0].shape == (4,)
        with pytest.raises(ValueError, match="2 inputs given but graph"):
            ops.call(ir.create_graph(lambda a: a + 1, xs[0]), xs[0], xs[1])
        with pytest.raises(ValueError, match="is float32 but is given"):
            ops.call(ir.create_graph(lambda a: a + 1, xs[0]), popxl.variable(np.zeros(4, np.float16)))
        with pytest.raises(ValueError, match="number of inputs must be greater than or equal to the number of outputs"):
            ops.repeat(ir.create_graph(lambda a: (a + 1, a + 2), xs[0]), 2, xs[0])


def test_matmul_follows_popxl_arguments():
    """ops/matmul.py: (lhs, rhs, available_memory_proportion, output_type, partials_type)."""
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros((64, 64), np.float16))
        y = ops.matmul(a, a, 0.2, popxl.float32, popxl.float16)
        op = [o for o in ir.main_graph.sim_graph.ops if o.kind == "matmul"][-1]
        assert y.dtype == popxl.float32
        assert op.attrs == {"partials_type": "half", "available_memory_proportion": 0.2}
        with pytest.raises(ValueError, match="available_memory_proportion must be in"):
            ops.matmul(a, a, 1.5)


def test_host_transfers_alone_are_a_program():
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((1024,), popxl.float32, "x")
        ops.host_store(popxl.d2h_stream((1024,), popxl.float32, "y"), ops.host_load(h))
    s = _session(ir)
    with s:
        s.run({h: np.ones(1024, np.float32)})
    assert s.cycle_count > 0 and s.simulation.breakdown.loc[0, "host_io"] > 0


def test_names_popxl_programs_use():
    from sim.popxl.ops.call import CallSiteInfo
    assert CallSiteInfo is ops.CallSiteInfo and callable(ops.call)
    with pytest.raises(AttributeError, match="no attribute 'no_such_transform'"):
        popxl.transforms.no_such_transform
    ir = popxl.Ir()
    with ir.main_graph:
        assert popxl.gir() is ir
        # the exchange transforms: io_tile_exchange puts its remote copies on the IO tiles; merging is noted
        buffer = popxl.remote_buffer((4,), popxl.float32)
        with popxl.transforms.io_tile_exchange():
            loaded = ops.remote_load(buffer, 0)
        assert ir.main_graph.sim_graph.ops[-1].attrs.get("io_tiles") and loaded.shape == (4,)
        assert popxl.transforms.decompose_sum(ir.main_graph) is ir.main_graph
        assert any("merge_exchange" in n for n in ir._notes) and any("DecomposeSum" in n for n in ir._notes)
        x = popxl.variable(np.zeros((4, 4), np.float32))
        assert ops.relu_(x).shape == x.T_.shape == (4, 4)
        assert ops.layer_norm(x, popxl.variable(np.ones(4, np.float32)), popxl.variable(np.zeros(4, np.float32)),
                              eps=1e-6).shape == (4, 4)
        assert ops.identity(x, output_name="o").shape == (4, 4)
        g = ir.create_graph(lambda a: ops.relu(a), x)
        info = popxl.transforms.autodiff(g, return_all_grad_graphs=True)
        assert list(info) == [g]
        assert info[g].expected_inputs[0].connection_type is popxl.transforms.ExpectedConnectionType.FwdGrad
        site = ops.call_with_info(g, x)
        assert site.inputs == (x,)
        site.set_parent_input_modified(g._inputs[0])


def test_constants_take_tuples_as_data_and_checks_popxl_makes():
    ir = popxl.Ir()
    with ir.main_graph:
        c = popxl.constant((3, 5))
        assert (c.shape, c.dtype) == ((2,), popxl.int32)
        a, b = popxl.variable(np.zeros(4, np.float32)), popxl.variable(np.zeros(4, np.float16))
        with pytest.raises(TypeError, match="different dtypes"):
            ops.concat([a, b])
        with pytest.raises(TypeError, match="different dtypes"):
            a + b
        with pytest.raises(ValueError, match="cannot be copied into"):
            ops.var_updates.copy_var_update_(popxl.variable(np.zeros((4, 4), np.float32)), a)
        with pytest.raises(ValueError, match="Bias correction requires both beta1 and beta2"):
            ops.var_updates.adam_updater(a, a, time_step=popxl.variable(np.zeros((), np.float32)))


def _dropout_cycles(drop: bool) -> int:
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((64, 4096), popxl.float16, "x")
        x = ops.host_load(h)
        y = ops.dropout(x, None, 0.1) if drop else x
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), ops.relu(y))
    s = _session(ir)
    with s:
        s.run({h: np.zeros((64, 4096), np.float16)})
    return s.cycle_count


def test_dropout_runs_without_autodiff():
    """PopXL has no inference mode: the dropout the program has is priced."""
    assert _dropout_cycles(True) > _dropout_cycles(False)


def test_contexts_the_simulator_does_not_model_are_noted():
    ir = popxl.Ir()
    with popxl.io_tiles(), ir.main_graph, popxl.in_sequence(False):
        v = popxl.variable(np.ones(4, np.float32))
        ops.host_store(popxl.d2h_stream((4,), popxl.float32, "y"), v + 1)
    notes = _session(ir).executable.notes
    assert any(n.startswith("popxl.io_tiles(): only remote buffer copies run on the IO tiles; other ops made in "
                            "it are simulated on the compute tiles") for n in notes)
    assert any(n.startswith("popxl.in_sequence(False): ops run in the order they are created") for n in notes)


def test_variables_group_every_replica_by_default_and_read_back_per_replica():
    """tensor.py ``variable``: replica_grouping defaults to ``ir.replica_grouping()``;
    ``retrieval_mode="all_replicas"`` reads one value per replica (session.py get_tensors_data)."""
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        v = popxl.variable(np.ones((2, 3), np.float32), retrieval_mode="all_replicas")
        pairs = popxl.variable(np.stack([np.zeros((2, 3)), np.ones((2, 3))]).astype(np.float32),
                               replica_grouping=ir.replica_grouping(1, 2), retrieval_mode="all_replicas")
        ops.host_store(popxl.d2h_stream((2, 3), popxl.float32, "y"), v + pairs)
    assert v.replica_grouping.num_groups == 1
    assert ir.main_graph.variables == (v, pairs) and ir.main_graph.constants == ()
    assert ir.replica_grouping(2, 1) == ir.replica_grouping(1, 1)  # groups of one: the same groups
    s = _session(ir)
    assert s.get_tensor_data(v).shape == (4, 2, 3)
    assert s.get_tensor_data(pairs)[:, 0, 0].tolist() == [0, 0, 1, 1]
    with pytest.raises(TypeError, match="must match the dtype"):
        s.write_variable_data(v, np.ones((2, 3), np.float16))
