"""PopXL programs from Graphcore's own sources, run on ``sim.popxl`` as a user would run them.

The programs are the PopXL user guide's examples (graphcore/popart ``docs/popxl/files``) and the
PopXL integration tests (``tests/integration/popxl``), each with ``import popxl`` swapped for
``import sim.popxl as popxl`` and sizes kept as they are; only what the simulator computes (shapes,
dtypes, host data, errors, the ops priced) is checked, as numerics are not modelled. Each test
covers a fix in ``sim/popxl``: the program failed, or did something PopXL does not, before it.
"""

from __future__ import annotations

import numpy as np
import pytest

import sim.popxl as popxl
import sim.popxl.ops as ops
from sim.popxl.fp8_utils import host_pow2scale_cast_to_fp8


def _run(ir, inputs=None):
    with popxl.Session(ir, "ipu_model") as session:
        outputs = session.run(inputs or {})
    return session, outputs


# --- the user guide's autodiff example (docs/popxl/files/autodiff.py) ------------------------------
class _Linear(popxl.Module):
    def __init__(self):
        self.W = None
        self.b = None

    def build(self, x, out_features: int, bias: bool = True):
        self.W = popxl.graph_input((x.shape[-1], out_features), popxl.float32, "W")
        y = x @ self.W
        if bias:
            self.b = popxl.graph_input((out_features,), popxl.float32, "b")
            y = y + self.b
        return y


def test_user_guide_autodiff_stores_the_gradients_a_constant_seed_gives():
    # the grad graph is called from the main graph with a constant gradient (no loss), and its weight
    # gradient is sent to the host: PopXL runs the grad graph as written, and so must the simulator
    ir = popxl.Ir()
    with ir.main_graph:
        input_ = popxl.h2d_stream([2, 2], popxl.float32, name="input_stream")
        x = ops.host_load(input_, "x")
        W = popxl.variable(np.random.normal(0, 0.1, (2, 2)).astype(np.float32), name="W")
        b = popxl.variable(np.random.normal(0, 0.4, (2,)).astype(np.float32), name="b")
        linear = _Linear()
        linear_graph = ir.create_graph(linear, x, out_features=2)
        fwd_call_info = ops.call_with_info(linear_graph, x, inputs_dict={linear.W: W, linear.b: b})
        y = fwd_call_info.outputs[0]
        bwd_graph_info = popxl.transforms.autodiff(linear_graph)
        grad_seed = popxl.constant(np.ones((2, 2), np.float32))
        activations = bwd_graph_info.inputs_dict(fwd_call_info)
        grads_x, grads_w, grads_b = ops.call(bwd_graph_info.graph, grad_seed, inputs_dict=activations)
        o_d2h = popxl.d2h_stream(y.shape, y.dtype, name="output_stream")
        ops.host_store(o_d2h, y)
        grad_d2h = popxl.d2h_stream(grads_w.shape, grads_w.dtype, name="grad_stream")
        ops.host_store(grad_d2h, grads_w)
    assert (grads_x.shape, grads_w.shape, grads_b.shape) == ((2, 2), (2, 2), (2,))
    session, outputs = _run(ir, {input_: np.random.rand(2, 2).astype(np.float32)})
    assert outputs[grad_d2h].shape == (2, 2) and outputs[grad_d2h].dtype == np.float32
    kinds = [op.kind for op in session.executable.graph.ops]
    assert kinds.count("matmul") == 3 and "reduce_sum" in kinds  # y = xW, dx, dW and db
    assert any("priced as written" in n for n in session.simulation.all_notes)


def test_dtype_as_dtype_takes_what_popxl_takes():
    assert popxl.dtype.as_dtype(np.zeros(3, np.int8)) is popxl.int8  # an array: its dtype
    assert popxl.dtype.as_dtype(float) is popxl.float32 and popxl.dtype.as_dtype("double") is popxl.float64
    assert popxl.double is popxl.float64 and popxl.dtype.from_name("float16") is popxl.float16
    with pytest.raises(ValueError, match="There is not a `popxl.dtype` that is compatible"):
        popxl.dtype.as_dtype(np.complex64)
    with pytest.raises(ValueError, match="has a name"):
        popxl.dtype.from_name("float17")
    torch = pytest.importorskip("torch")
    assert popxl.dtype.as_dtype(torch.int32) is popxl.int32 and popxl.dtype.as_dtype(torch.half) is popxl.float16
    assert popxl.dtype.as_dtype(torch.zeros(2)) is popxl.float32


def test_slicing_program_with_a_torch_dtype():
    torch = pytest.importorskip("torch")
    pt_input = torch.randint(0, 20, (3, 7), dtype=torch.int32)
    ir = popxl.Ir(replication=1)
    with ir.main_graph:
        dtype = popxl.dtype.as_dtype(pt_input.dtype)
        input_stream = popxl.h2d_stream(pt_input.shape, dtype=dtype, name="input")
        input_tensor = ops.host_load(input_stream)
        with popxl.in_sequence(True):
            o = input_tensor[0:2, 1:7:2]
            out_stream = popxl.d2h_stream(o.shape, o.dtype, "outputs")
            ops.host_store(out_stream, o)
    _, outputs = _run(ir, {input_stream: pt_input})
    assert outputs[out_stream].shape == tuple(pt_input[0:2, 1:7:2].shape) and outputs[out_stream].dtype == np.int32


# --- pooling and subsample defaults -------------------------------------------------------------
@pytest.mark.parametrize("pool", ["max_pool", "average_pool"])
def test_pooling_stride_defaults_to_one(pool):
    # popart test_maxpool.py / test_averagepool.py: kernel (3, 3), no stride, compared with torch's stride 1
    ir = popxl.Ir()
    with ir.main_graph:
        input0 = popxl.h2d_stream([2, 10, 50, 50], popxl.float32, name="in_stream_0")
        a = ops.host_load(input0, "a")
        o = getattr(ops, pool)(a, kernel_size=(3, 3))
        o_d2h = popxl.d2h_stream(o.shape, o.dtype, name="out_stream")
        ops.host_store(o_d2h, o)
    assert o.shape == (2, 10, 48, 48)
    _, outputs = _run(ir, {input0: np.random.rand(2, 10, 50, 50).astype(np.float32)})
    assert outputs[o_d2h].shape == (2, 10, 48, 48)


def test_subsample_pads_strides_with_ones_as_popxl():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((50, 24), np.int32))
        assert ops.subsample(x, [2]).shape == (25, 24)  # PyTorch's x[::2]
        assert ops.subsample(x, 2).shape == (25, 24)  # an int is the first axis' stride
        assert ops.subsample(x, [2, 4]).shape == (25, 6)
        with pytest.raises(ValueError, match="must not be greater than the rank"):
            ops.subsample(x, [2, 2, 2])


# --- call sites (popart test_milestone2_autodiff.py, test_rts_autodiff.py) ------------------------
def test_call_site_info_index_maps_and_popxl_errors():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((2, 4), np.float32), name="x")
        W = popxl.variable(np.zeros((4, 3), np.float32), name="W")
        b = popxl.variable(np.zeros((3,), np.float32), name="b")
        lin = _Linear()
        graph = ir.create_graph(lin, x, out_features=3)
        info = ops.call_with_info(graph, x, inputs_dict={lin.W: W, lin.b: b})
        bwd = popxl.transforms.autodiff(graph)
        bwd_info = ops.call_with_info(bwd.graph, popxl.constant(np.ones((2, 3), np.float32)),
                                      inputs_dict=bwd.inputs_dict(info))
        sg_W = info.parent_to_graph(W)
        assert sg_W is lin.W
        for ec in bwd.expected_outputs:
            idx = bwd.expected_outputs.index(ec)
            grad = bwd_info.parent_output(bwd_info.graph_to_parent_input_index(idx))
            assert grad.shape == ec.fwd_tensor.shape
        assert info.graph_to_parent_output_index(0) == info.parent_to_graph_output_index(0) == 0
        assert info.parent_to_graph_input_index(2) == 2
        with pytest.raises(IndexError):
            info.graph_to_parent_input_index(3)
        with pytest.raises(ValueError, match="not a parent graph input"):
            info.parent_to_graph(popxl.constant(1.0))
        with pytest.raises(ValueError, match="not an input or output of the called graph"):
            info.graph_to_parent(popxl.constant(1.0))


# --- FP8 host data (popart test_float8_variables.py, test_fp8_hostcopy.py) ----------------------------
@pytest.mark.parametrize("dtype", [popxl.float8_143, popxl.float8_152])
def test_float8_variables_keep_popxl_bytes(dtype):
    x_vals = [1.0, 2.0]
    expected = host_pow2scale_cast_to_fp8(x_vals, dtype=dtype, log2_scale=1)
    ir = popxl.Ir(replication=2)
    with ir.main_graph, popxl.in_sequence():
        args = {"dtype": dtype, "log2_scale": 1, "nan_on_overflow": True}
        x = popxl.variable(x_vals, **args)
        buffer = popxl.RemoteBuffer([2], dtype, 1)
        r = popxl.remote_variable(x_vals, buffer, 0, **args)
        s, shard = popxl.replica_sharded_variable(x_vals, **args)
        c = popxl.constant(np.array(x_vals, np.float32), dtype=dtype)
        ops.print_tensor(ops.remote_load(buffer, 0))
        ops.print_tensor(ops.collectives.replicated_all_gather(shard))
        ops.print_tensor(x)
    session, _ = _run(ir)
    for t in (x, r, s):
        got = session.get_tensor_data(t)
        assert got.dtype == dtype.as_numpy() and np.array_equal(got, expected)
    assert np.array_equal(session.get_tensor_data(c), host_pow2scale_cast_to_fp8(np.array(x_vals), dtype=dtype))
    assert np.array_equal(popxl.utils.to_numpy(x_vals, dtype, log2_scale=1), expected)
    with pytest.raises(TypeError, match="must be passed in as an np.array"):
        session.write_variable_data(x, 1.0)


def test_log2_scale_on_another_dtype_is_popxls_runtime_error():
    from sim.popxl.utils import host_pow2scale_cast_to_fp8 as from_utils  # as PopXL's tests import it

    assert from_utils is host_pow2scale_cast_to_fp8
    from sim.popxl.dtypes import np_dtype_float8_143

    assert popxl.float8_143.as_numpy() == np_dtype_float8_143
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(RuntimeError, match="log2scale"):
            popxl.variable([1.0, 2.0], popxl.float32, log2_scale=1)


# --- misuse gets PopXL's exception types ------------------------------------------------------------
def test_variable_in_a_subgraph_is_a_value_error():
    ir = popxl.Ir()

    def make_variable():
        popxl.variable(1.0)

    with pytest.raises(ValueError, match="only be created in the main graph"):
        ir.create_graph(make_variable)


def test_concat_of_two_dtypes_is_popxls_type_error():
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.zeros((4, 4, 4), np.float16))
        u = popxl.variable(np.zeros((4, 4, 4), np.float32))
        with pytest.raises(TypeError, match="All inputs to a concat operation must have the same type:"):
            ops.concat_([t, u], 0)


def test_write_all_replicas_variable_is_not_implemented_as_in_popxl():
    # popart test_tensor_data.py: "all_replicas" variables of groups of more than one replica
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        rg = ir.replica_grouping(stride=1, group_size=2)
        v1 = popxl.variable(np.zeros((2, 3), np.float32), name="v1", replica_grouping=rg,
                            retrieval_mode="all_replicas")
        ops.host_store(popxl.d2h_stream(v1.shape, v1.dtype, "v1_stream"), v1)
    session = popxl.Session(ir, "ipu_model")
    with session, pytest.raises(NotImplementedError, match="all_replicas"):
        session.write_variable_data(v1, np.ones((2, 3), np.float32))


# --- PopXL's API surface that the integration tests use ----------------------------------------------
def test_tensor_and_graph_helpers():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.variable(np.zeros((3, 3), np.float32))
        assert x.diag().shape == (3,) and x.strides() == (12, 4) and x.strides((2, 5)) == (20, 4)
        assert x.tile_set == "compute" and x.scope == "" and x.shape_on_replica == (3, 3)
        with pytest.raises(ValueError, match="Diag expected a 2d tensor"):
            popxl.variable(np.zeros(3, np.float32)).diag()
    spec = popxl.TensorSpec((2,), popxl.float16)
    assert spec.to_tuple() == ((2,), popxl.float16, ()) and spec.to_dict()["dtype"] is popxl.float16
    g = ir.create_graph(lambda a, b: a + b, spec, spec)
    assert list(g.inputs_by_name) == ["a", "b"]
    assert ir.replica_grouping().is_const
    from sim.popxl.replica_grouping import ReplicaGrouping

    assert isinstance(ir.replica_grouping(), ReplicaGrouping)


def test_greater_takes_popxls_argument_names_and_log2_is_there():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros(4, np.float32))
        assert ops.greater(input=a, other=a).dtype == popxl.bool
        y = ops.log2(a)
        assert y.shape == (4,) and y.dtype == popxl.float32
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
    session, _ = _run(ir)
    assert [op.kind for op in session.executable.graph.ops].count("log") == 2  # PopXL's log(t) / log(2)


def test_lamb_and_adamax_updaters():
    ir = popxl.Ir()
    with ir.main_graph:
        w, m, v = (popxl.variable(np.ones((4, 4), np.float32), name=n) for n in "wmv")
        step = popxl.variable(np.zeros((), np.float32), name="step")
        updater = ops.var_updates.lamb_updater(m, v, w, step, 0.01, 0.9, 0.999)
        r1, r2 = ops.lamb_square(w), ops.lamb_square(updater)
        ops.var_updates.adam_var_update(w, updater, r1, r2, learning_rate=1e-3)
        assert ops.var_updates.adamax_updater(m, v, time_step=step).shape == (4, 4)
        with pytest.raises(ValueError, match="AdaMax requires time_step"):
            ops.var_updates.adamax_updater(m, v)
        with pytest.raises(ValueError, match="Bias correction requires both beta1 and beta2"):
            ops.var_updates.lamb_updater(m, v, time_step=step)
    session, _ = _run(ir)
    assert [op.kind for op in session.executable.graph.ops].count("adam_updater") == 2


def test_lamb_updater_of_autodiff_gradients_trains_with_lamb():
    ir = popxl.Ir()
    with ir.main_graph:
        img = ops.host_load(popxl.h2d_stream((8, 16), popxl.float32, "img"))
        lbl = ops.host_load(popxl.h2d_stream((8,), popxl.int32, "label"))
        W = popxl.variable(np.zeros((16, 10), np.float32), name="W")
        fwd = ir.create_graph(lambda x, w: x @ w, img, W)
        bwd = popxl.transforms.autodiff(fwd)
        call = ops.call_with_info(fwd, img, W)
        loss, dy = ops.nll_loss_with_softmax_grad(ops.softmax(call.outputs[0], axis=-1), lbl)
        grads = bwd.fwd_parent_ins_to_grad_parent_outs(call, ops.call_with_info(
            bwd.graph, dy, inputs_dict=bwd.inputs_dict(call)))
        m = popxl.variable(np.zeros((16, 10), np.float32), name="m")
        v = popxl.variable(np.zeros((16, 10), np.float32), name="v")
        ops.var_updates.accumulate_moving_average_(m, grads[W], 0.9)
        ops.var_updates.accumulate_moving_average_square_(v, grads[W], 0.999)
        updater = ops.var_updates.lamb_updater(m, v)
        ops.var_updates.adam_var_update(W, updater, ops.lamb_square(W), ops.lamb_square(updater), learning_rate=1e-3)
        ops.host_store(popxl.d2h_stream(loss.shape, loss.dtype, "loss"), loss)
    assert ir._optimizer == "lamb" and ir._training


def test_remote_variable_with_a_group_axis_of_one_group():
    # popart test_replica_grouping.py: data (num_groups, 1) for a (1,) slot, one group of 8 replicas
    ir = popxl.Ir(8)
    with ir.main_graph, popxl.in_sequence():
        grouping = ir.replica_grouping(1, 8)
        data = np.arange(grouping.num_groups, dtype=np.int32)[:, None]
        buffer = popxl.RemoteBuffer((1,), popxl.int32, 8)
        popxl.remote_variable(data, buffer, replica_grouping=grouping)
        x = ops.remote_load(buffer, 0)
        ops.host_store(popxl.d2h_stream(x.shape, x.dtype), x)
        with pytest.raises(ValueError, match="does not fit"):  # other elements than a slot holds: refused
            popxl.remote_variable(np.zeros((2, 2), np.int32), buffer, 1)
    _, outputs = _run(ir)
    assert next(iter(outputs.values())).shape == (8, 1)


# --- the user guide's code loading examples (docs/popxl/files/code_loading*.py) ----------------------
def test_user_guide_remote_code_load_is_accepted_and_noted():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(1, popxl.float32)
    g = ir.create_graph(lambda t: t.T.T, x.spec)
    with ir.main_graph, popxl.in_sequence():
        ops.remote_code_load(g, destination="executable")
        ops.call(g, x)
        ops.remote_code_load(g, destination="executable")
        ops.call(g, x)
        with pytest.raises(NotImplementedError, match="compute_buffer"):
            ops.remote_code_load(g, destination="compute_buffer")
        with pytest.raises(ValueError, match="Not a valid location"):
            ops.remote_code_load(g, destination="dram")
        with pytest.raises(NotImplementedError):
            ops.code_copy.code_copy(g, "executable", "executable")

    def load_itself():
        ops.remote_code_load(popxl.gcg(), destination="executable")

    with pytest.raises(ValueError, match="cannot load the code for the graph it resides in"):
        ir.create_graph(load_itself)
    session, _ = _run(ir)
    assert any("remote_code_load" in n and "not priced" in n for n in session.simulation.all_notes)


# --- popxl-addons (graphcore/popxl-addons tests/unit/test_dot_tree.py, tests/integration/test_task_session.py)
def test_dot_tree_negative_numerical_keys():
    from sim.popxl_addons import DotTree

    tree = DotTree()
    tree.insert(0, "a")
    tree.insert(1, "b")
    tree.insert(3, "d")
    assert tree[-1] == "d" and tree[-3] == "b"
    for missing in (-2, -5):
        with pytest.raises(KeyError):
            tree[missing]
    with pytest.raises(ValueError, match="cannot be negative"):
        tree.insert(-1, "a")


class _Loader:
    """A data loader as popxl-addons' TaskSession drives it: ``save(filename)``, ``resume(filename=...)``."""

    def __init__(self):
        self.position = 7

    def save(self, filename):
        with open(filename, "w") as f:
            f.write(str(self.position))

    def resume(self, filename):
        with open(filename) as f:
            self.position = int(f.read())


def test_task_session_reads_popxl_addons_checkpoints(tmp_path):
    import sim.popxl_addons as addons

    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.zeros(4, np.float32), name="w")
        b = popxl.variable(np.zeros(2, np.float32), name="b")
        ops.host_store(popxl.d2h_stream((4,), popxl.float32, "y"), w * 2.0)
    session = addons.TaskSession([], [], addons.NamedTensors.from_dict({"l.w": w, "l.b": b}), ir=ir,
                                 device_desc="ipu_hw")
    session.dataloader = _Loader()
    session.save_checkpoint(str(tmp_path / "ours"))
    session.dataloader.position = 0
    session.load_checkpoint(str(tmp_path / "ours"))
    assert session.dataloader.position == 7
    # a checkpoint popxl-addons wrote on hardware: model/<name>.npz, each np.savez(name=array)
    (tmp_path / "hw" / "model").mkdir(parents=True)
    np.savez(tmp_path / "hw" / "model" / "l.w.npz", **{"l.w": np.arange(4, dtype=np.float32)})
    np.savez(tmp_path / "hw" / "model" / "l.b.npz", **{"l.b": np.ones(2, np.float32)})
    (tmp_path / "hw" / "dataloader.bin").write_text("3")
    session.load_checkpoint(str(tmp_path / "hw"), report_missing="error")
    data = session.get_named_tensors_data()
    assert np.array_equal(data.l.w, np.arange(4)) and np.array_equal(data.l.b, np.ones(2))
    assert session.dataloader.position == 3


def test_build_grad_grads_provided_not_an_output_is_a_value_error():
    # popxl-addons tests/unit/test_modules_build_graph.py test_grads_provided / test_grads_required
    from functools import partial

    import sim.popxl_addons as addons

    class Linear(addons.Module):
        def build(self, x):
            w = self.add_variable_input("w", partial(np.zeros, (x.shape[-1], 3)), popxl.float32)
            self.aux["x"], self.aux["w"] = x, w
            return x @ w

        def build_grad(self, dLdy):
            self.var_grad["w"] = self.aux["x"].T @ dLdy
            return dLdy @ self.aux["w"].T

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((3, 2), np.float32))
        dy = popxl.variable(np.zeros((3, 3), np.float32))
        _, fwd_graph = Linear().create_graph(x)
        with pytest.raises(ValueError, match="`grads_provided` is not a output of `fwd_graph`"):
            fwd_graph.autodiff(method="build_grad", grads_provided=[dy])
        with pytest.raises(ValueError, match="`grads_required` is not a input of `fwd_graph`"):
            fwd_graph.autodiff(method="build_grad", grads_required=[dy])
        grad = fwd_graph.autodiff(method="build_grad")  # the right ones still work
        assert [t.shape for t in grad.graph.outputs] == [(3, 2), (2, 3)]


def test_variable_inputs_take_the_datas_dtype_as_popxl_addons():
    # popxl-addons' add_variable_input(name, data_iter, dtype=None): no dtype is the data's (tests/unit/
    # test_input_factory.py); a float16 model's weights made from float16 data must meet float16 activations
    from functools import partial

    import sim.popxl_addons as addons

    class Scale(addons.Module):
        def build(self, x):
            return x * self.add_variable_input("scale", partial(np.ones, x.shape, np.float16))

    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((2, 2), popxl.float16, "x"))
        args, graph = Scale().create_graph(x)
        y, = graph.bind(args.init()).call(x)
        assert args.scale.dtype == popxl.float16 and y.dtype == popxl.float16
        assert addons.VariableFactory(data_iter=lambda: np.zeros(3)).dtype == popxl.float32  # float64 data, downcast
        with pytest.raises(ValueError, match="throws error"):
            addons.VariableFactory(data_iter=lambda: sum(1))


def test_addons_handle_negative_axis_and_graph_memory_proportions():
    import sim.popxl_addons as addons
    from sim.popxl_addons.array_munging import handle_negative_axis

    data = np.zeros((1, 1, 1, 1))
    assert handle_negative_axis(data, -1) == 3 and handle_negative_axis(data, 3) == 3
    for axis in (4, -5):
        with pytest.raises(IndexError, match="out of range"):
            handle_negative_axis(data, axis)
    with pytest.raises(IndexError, match="0-dimensional"):
        handle_negative_axis(np.array(0), 0)

    # tests/unit/test_available_memory_proportion.py: the graph's ops and its called graphs' ops, not others
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((4, 4), np.float32))
        inner = ir.create_graph(lambda t: t @ t, x)
        outer = ir.create_graph(lambda t: ops.call(inner, t)[0] @ t, x)
        other = ir.create_graph(lambda t: t @ t, x)
    addons.set_graph_available_memory_proportion_by_ipu(outer, [0.3])
    proportions = {g.name: [op.attrs.get("available_memory_proportion") for op in g.sim_graph.ops
                            if op.kind == "matmul"] for g in (inner, outer, other)}
    assert proportions == {inner.name: [0.3], outer.name: [0.3, 0.3], other.name: [None]}


def test_memory_mapped_variable_data_gets_popxls_checks(tmp_path):
    # popart tests/integration/popxl/test_mmap_variable.py: PopXL uses a np.memmap as it is, so it refuses one
    # it would have to convert
    ir = popxl.Ir()
    good = np.memmap(str(tmp_path / "w.npy"), dtype=np.float32, shape=(4, 4), mode="w+")
    fortran = np.memmap(str(tmp_path / "f.npy"), dtype=np.float32, shape=(4, 4), mode="w+", order="F")
    wide = np.memmap(str(tmp_path / "d.npy"), dtype=np.float64, shape=(4,), mode="w+")
    with ir.main_graph:
        assert popxl.variable(good).shape == (4, 4)
        with pytest.raises(ValueError, match="^When passing a memory-mapped NumPy array, the `dtype` parameter"):
            popxl.variable(good, dtype=popxl.float16)
        with pytest.raises(ValueError, match="^When passing a memory-mapped NumPy array, it must already be in C"):
            popxl.variable(fortran)
        with pytest.raises(ValueError, match="^When passing a memory-mapped NumPy array, the dtype None is not"):
            popxl.variable(wide)
        buffer = popxl.remote_buffer((4, 4), popxl.float32)
        with pytest.raises(ValueError, match="`dtype` parameter"):
            popxl.remote_variable(good, buffer, dtype=popxl.float16)
