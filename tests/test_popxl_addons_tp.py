"""sim.popxl_addons' pieces of Graphcore's tensor-parallel PopXL models (GPT-J, GPT-3): the tensor-parallel
all-reduces and their gradients, the rotary embedding, TaskSession, variables made empty, the modules
that import and refuse at use; and the PopXL surface those models use (tensor indexing, the matmuls'
partials type from ir.options)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from sim import popxl
from sim import popxl_addons as addons
from sim.popxl import ops
from sim.popxl_addons.ops.replicated_all_reduce_TP import (replicated_all_reduce_identical_grad_inputs,
                                                           replicated_all_reduce_identical_inputs)
from sim.popxl_addons.ops.rotary_pos_embed import rotary_pos_embed, trig_table_constants, trig_tables


class ShardedMLP(addons.Module):
    """Megatron's MLP over 4 tensor-parallel replicas after a replicated layer: the input's gradient
    all-reduced (an identity forward), a column-sharded then a row-sharded matmul, the output
    all-reduced (an identity backward)."""

    def __init__(self, tp: int, hidden: int):
        super().__init__()
        self.tp, self.hidden = tp, hidden

    def build(self, x):
        rg = popxl.gcg().ir.replica_grouping(group_size=self.tp)
        x = x @ self.add_variable_input("w0", partial(np.zeros, (self.hidden, self.hidden)), x.dtype)  # replicated
        x = replicated_all_reduce_identical_inputs(x, group=rg)
        w1 = self.add_variable_input("w1", partial(np.zeros, (self.hidden, 4 * self.hidden // self.tp)), x.dtype)
        w2 = self.add_variable_input("w2", partial(np.zeros, (4 * self.hidden // self.tp, self.hidden)), x.dtype)
        y = ops.gelu(x @ w1) @ w2
        return replicated_all_reduce_identical_grad_inputs(y, group=rg)


def _tp_program(training: bool):
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((32, 64), popxl.float16, "x")
        facts, graph = ShardedMLP(4, 64).create_graph(popxl.TensorSpec((32, 64), popxl.float16))
        variables = facts.init()
        x = ops.host_load(x_h2d)
        if training:
            labels = ops.host_load(popxl.h2d_stream((32,), popxl.int32, "labels"))
            bwd = addons.autodiff(graph)
            info = graph.bind(variables).call_with_info(x)
            loss, dx = addons.ops.cross_entropy_with_grad(info.outputs[0], labels)
            grads = bwd.call_with_info(dx, args=bwd.grad_graph_info.inputs_dict(info))
            for w in variables.tensors:
                ops.scaled_add_(w, bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(info, grads)[w], b=-0.01)
        else:
            (y,) = graph.bind(variables).call(x)
            ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
    return ir


def test_tensor_parallel_all_reduces_forward_and_gradient():
    ir = _tp_program(training=False)
    ops_ = ir.main_graph.sim_graph.ops
    ident = next(op for op in ops_ if op.kind == "identity" and op.attrs.get("grad") == "replicated_all_reduce")
    reduce = next(op for op in ops_ if op.kind == "replicated_all_reduce")
    assert (ident.attrs["group_size"], reduce.attrs["group_size"], reduce.attrs["grad"]) == (4, 4, "identity")
    infer = popxl.Session(ir, "ipu_hw")
    names = [n for n in infer.executable.graph.ops if n.kind == "replicated_all_reduce"]
    assert len(names) == 1  # the forward's one all-reduce; the identity is free

    trained = popxl.Session(_tp_program(training=True), "ipu_hw").executable.graph
    backward = [(op.kind, op.name.split("/")[-2]) for op in trained.ops if op.pass_ == "backward"]
    # the output's gradient passes through its all-reduce: the backward starts with the second matmul's
    # gradients; the identity's gradient is the all-reduce, after the first matmul's input gradient
    assert backward[1:] == [("matmul", "matmul_3"), ("matmul", "matmul_3"), ("gelu_grad", "gelu"),
                            ("matmul", "matmul_2"), ("matmul", "matmul_2"),
                            ("replicated_all_reduce", "replicated_all_reduce_TP_identity"), ("matmul", "matmul")]
    assert [op.pass_ for op in trained.ops if op.kind == "replicated_all_reduce"] == ["forward", "backward"]


def test_rotary_embedding_is_two_maps_and_a_copy():
    sin, cos = trig_tables(8, 8)
    assert sin.shape == cos.shape == (8, 4)
    assert np.allclose(sin[1], np.sin(10000 ** (-np.arange(0, 8, 2) / 8)))
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((2, 8, 4, 16), np.float16))
        s, c = trig_table_constants(8, 8, dtype=popxl.float16)
        y = rotary_pos_embed(x, s, c, 8)
        assert y.shape == x.shape and y.dtype == popxl.float16
        kinds = [op.kind for op in ir.main_graph.sim_graph.ops]
        assert kinds == ["slice", "map", "map", "concat", "slice", "concat", "copy"]
        maps = [op for op in ir.main_graph.sim_graph.ops if op.kind == "map"]
        assert [op.attrs["steps"] for op in maps] == [["mul", "mul", "sub"], ["mul", "mul", "add"]]
        assert maps[0].attrs["grad"][0] and not maps[1].attrs["grad"]  # one gradient map of the rotated part
        with pytest.raises(ValueError, match="must be even"):
            rotary_pos_embed(x, s, c, 7)
        with pytest.raises(ValueError, match="rank 4"):
            rotary_pos_embed(popxl.variable(np.zeros((8, 16), np.float16)), s, c)


def test_task_session_counts_runs_and_round_trips_checkpoints(tmp_path):
    ir = popxl.Ir()
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((4,), popxl.float32, "x")
        w = popxl.variable(np.arange(4, dtype=np.float32), name="w")
        y = ops.host_load(x_h2d) * w
        y_d2h = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(y_d2h, y)
    session = addons.TaskSession([x_h2d], [y_d2h], addons.NamedTensors.from_dict({"w": w}), ir=ir,
                                 device_desc="ipu_hw", weights_to_host_on_exit=False)  # PopXL's, as Llama passes
    assert session.inputs.x is x_h2d and session.outputs.y is y_d2h and not session.weights_to_host_on_exit
    with session:
        session.run({x_h2d: np.ones(4, np.float32)})
        session.run({x_h2d: np.ones(4, np.float32)})
    assert session.session_state["steps"] == 2
    session.add_session_state_info({"lr": 0.1})
    session.save_checkpoint(str(tmp_path / "ckpt"))
    assert np.array_equal(np.load(tmp_path / "ckpt" / "model" / "w.npy"), np.arange(4))
    session.write_variables_data({w: np.zeros(4, np.float32)})
    session.session_state["steps"] = 0
    session.load_checkpoint(str(tmp_path / "ckpt"))
    assert np.array_equal(session.get_named_tensors_data().w, np.arange(4)) and session.session_state == {
        "steps": 2, "lr": 0.1}
    with pytest.raises(FileNotFoundError, match="no model/ directory"):
        session.load_checkpoint(str(tmp_path / "nowhere"))
    with pytest.raises(popxl.NotModelledError, match="wandb"):
        session.save_checkpoint("wandb://run")


def test_empty_variables_hold_no_memory_and_grouped_data_is_per_group():
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        tp = ir.replica_grouping(stride=1, group_size=1)  # 4 groups: each replica its own shard
        f = addons.VariableFactory(lambda: np.ones((1000, 1000)), popxl.float16, "w", replica_grouping=tp)
        empty = addons.NamedVariableFactories.from_dict({"w": f}).init(empty=True)
        data = empty.w._data
        assert data.shape == (4, 1000, 1000) and data.strides == (0, 0, 0) and not data.any()
        full = addons.NamedVariableFactories.from_dict({"w": f}).init()
        assert full.w._data.shape == (4, 1000, 1000) and full.w._data.all()


def test_quantised_layers_import_and_refuse_at_use():
    from sim.popxl_addons.layers.linear_gq import LinearGQ, group_quantize_compress_numpy
    with pytest.raises(popxl.NotModelledError, match="group_quantize_decompress"):
        LinearGQ(64)
    with pytest.raises(popxl.NotModelledError, match="group_quantize_decompress"):
        group_quantize_compress_numpy(np.zeros(4), 4)
    from sim.popxl_addons.named_replica_grouping import fill_none_group
    assert fill_none_group(None, 3) == 3 and fill_none_group(2, 3) == 2


def test_sharded_cross_entropy_and_its_one_map_gradient():
    from sim.popxl_addons.ops.cross_entropy_sharded_loss import cross_entropy_sharded_loss
    from sim.popxl_addons.ops.grad_reduce_square_add import grad_reduce_square_add
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        group = ir.replica_grouping(group_size=4)
        fwd = ir.create_graph(lambda z, y: cross_entropy_sharded_loss(z, y, replica_grouping=group),
                              popxl.TensorSpec((2048, 12565), popxl.float16), popxl.TensorSpec((2048,), popxl.int32))
        info = popxl.transforms.autodiff(fwd, grads_required=fwd.inputs[:1])
        norm = grad_reduce_square_add(popxl.variable(np.zeros((64, 8), np.float16)), loss_scaling=64)
    kinds = [op.kind for op in fwd.sim_graph.ops]
    # the rows' maxima and their MAX all-reduce, the shard's softmax, log and label slice, the sums' and
    # the losses' all-reduces, the mean
    assert kinds == ["reduce_max", "replicated_all_reduce", "softmax_cross_entropy", "replicated_all_reduce",
                     "replicated_all_reduce", "reduce_mean", "reshape"]
    assert all(op.attrs.get("group_size") == 4 for op in fwd.sim_graph.ops if op.kind == "replicated_all_reduce")
    # its gradient: the scalar's view, the mean's (ReduceMeanGradOpx: a copy, its broadcast view, a divide by the
    # count), then one map of the shard (the losses' all-reduce passes it through)
    assert [op.kind for op in info.graph.sim_graph.ops] == ["reshape", "copy", "reshape", "div",
                                                            "softmax_cross_entropy_grad"]
    assert info.graph.outputs[0].shape == (2048, 12565)
    assert norm.shape == () and norm.dtype == popxl.float32  # a float32 sum of squares, as LambSquareOp's


def test_tensor_indexing_with_integer_and_boolean_tensors():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((16, 8), np.float16))
        assert x[popxl.constant(np.array([1, 3], np.int32))].shape == (2, 8)
        assert x[np.array([0, 5, 7])].shape == (3, 8)
        assert x[popxl.constant(np.ones((16, 1), bool))].shape == (16, 8)
        kinds = [op.kind for op in ir.main_graph.sim_graph.ops]
        assert kinds == ["gather", "gather", "select"]  # ops.where is a popops select
        with pytest.raises(TypeError, match="integers or booleans"):
            x[popxl.constant(np.ones(2, np.float32))]


def test_matmul_partials_type_from_ir_options():
    def matmul(partials):
        ir = popxl.Ir()
        if partials:
            ir.options.partialsTypeMatMuls = partials
        with ir.main_graph:
            a = popxl.variable(np.zeros((1024, 1024), np.float16))
            y = a @ popxl.variable(np.zeros((1024, 1024), np.float16))
            ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
        s = popxl.Session(ir, "ipu_hw")
        s.run()
        return s
    half, default = matmul("half"), matmul(None)
    assert half.executable.options.partials_type() == "half" and default.executable.options.partials_type() == "float"
    assert half.cycle_count < default.cycle_count  # fp16 partials: the AMP at twice the rate
    assert not any("partialsTypeMatMuls" in n for n in half.executable.notes)


def test_array_munging_shards_and_tensor_parallel_data():
    from sim.popxl_addons import array_munging as am
    d = np.arange(8).reshape(4, 2)
    assert am.shard(d, 2, 0).tolist() == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    assert am.shard(d, 2, 1).tolist() == [[[0], [2], [4], [6]], [[1], [3], [5], [7]]]
    x = np.arange(120.0).reshape(10, 3, 4)
    assert np.array_equal(am.unshard(am.shard(x, 2, 2), 2), x)
    assert am.shard2D(x, 2, 4, 0, 2).shape == (8, 5, 3, 1)
    assert np.array_equal(am.unshard2D(am.shard2D(x, 2, 4, 0, 2), 2, 4, 0, 2), x)
    assert am.repeat_shard(np.arange(4), 2, 2, 0).tolist() == [[0, 1], [2, 3], [0, 1], [2, 3]]
    assert am.repeat_shard(np.arange(4), 2, 2, 0, "strided").tolist() == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert am.repeat(d, 2, 1).shape == (4, 2, 2) and am.repeat_axis(d, 2, 1).shape == (4, 4)
    a = np.arange(4)
    shapes = [am.tensor_parallel_input(a, tp, rf).shape for tp, rf in ((1, 2), (2, 2), (2, 4))]
    assert shapes == [(2, 2), (4, 2), (2, 4)]
    assert am.tensor_parallel_input(a, 2, 4, repeat_fn=lambda x, i: x * (i + 1))[0].tolist() == [0, 0, 1, 2]
    out = np.arange(2 * 4 * 3).reshape(2, 4, 3)
    assert am.tensor_parallel_output(out, 2, 2, 4, (3,)).tolist() == [[0, 1, 2], [6, 7, 8], [12, 13, 14], [18, 19, 20]]
    assert am.pad_axis(np.ones((3, 2)), 5, 1).shape == (3, 5)
    assert am.squeeze_safe(np.zeros((1, 3, 1)), [0, 1]).shape == (3, 1)
    with pytest.raises(ValueError, match="does not equally divide"):
        am.tensor_parallel_input(a, 3, 4)


def test_seed_variable_and_top_level_names():
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        var, seed = addons.seed_variable(7, ir.replica_grouping(group_size=2))
        assert var is seed and (var.shape, var.dtype, var._data.shape) == ((2,), popxl.uint32, (2, 2))
        assert np.array_equal(var._data, popxl.create_seeds(7, replicas=2))
    # popxl-addons exports its remote-buffer and array helpers at the top too
    assert addons.shard is addons.array_munging.shard
    assert addons.create_remote_buffer is addons.remote.create_remote_buffer


class Block(addons.Module):
    """A decoder block shaped as GPT-J's (tensor-parallel attention projections with the rotary
    embedding, a sharded feed-forward, the all-reduces around them)."""

    def __init__(self, tp: int, hidden: int, heads: int):
        super().__init__()
        self.tp, self.hidden, self.heads = tp, hidden, heads

    def build(self, x):
        rg = popxl.gcg().ir.replica_grouping(group_size=self.tp)
        local_heads, head = self.heads // self.tp, self.hidden // self.heads
        x = replicated_all_reduce_identical_inputs(x, group=rg)
        qkv = x @ self.add_variable_input("qkv", partial(np.zeros, (self.hidden, 3 * self.hidden // self.tp)), x.dtype)
        q = qkv[:, :self.hidden // self.tp].reshape((1, x.shape[0], local_heads, head))
        sin, cos = trig_table_constants(x.shape[0], head, dtype=x.dtype)
        q = rotary_pos_embed(q, sin, cos, head).reshape((x.shape[0], self.hidden // self.tp))
        y = q @ self.add_variable_input("out", partial(np.zeros, (self.hidden // self.tp, self.hidden)), x.dtype)
        return replicated_all_reduce_identical_grad_inputs(y, group=rg)


def test_a_tensor_parallel_decoder_with_weights_streamed_per_layer_runs():
    """GPT-J inference's structure: each layer's weights loaded from remote buffers inside ops.repeat,
    the block's tensor-parallel all-reduces, and a TaskSession; priced with its remote loads."""
    def run(layers: int):
        ir = popxl.Ir(replication=4)
        ir.options.partialsTypeMatMuls = "half"
        with ir.main_graph:
            streams = addons.InputStreams(x=((64, 256), popxl.float16))
            outputs = addons.OutputStreams(y=((64, 256), popxl.float16))
            facts, graph = Block(4, 256, 8).create_graph(streams.x.spec)
            buffers = addons.named_variable_buffers(facts, entries=layers, shard_over_dict=False)
            state = {n: facts.init_remote(buffers, n, f"layer{n}", empty=True) for n in range(layers)}
            with popxl.in_sequence():
                x = ops.host_load(streams.x)

                def layer(x, n):
                    load, names = addons.load_remote_graph(buffers)
                    (x,) = graph.bind(addons.NamedTensors.pack(names, load.call(n))).call(x)
                    return x, n + 1

                layers_graph = ir.create_graph(layer, x, popxl.constant(0, name="layer_index"))
                x, _ = ops.repeat(layers_graph, layers, x, popxl.constant(0, name="start"))
                ops.host_store(outputs.y, x)
        session = addons.TaskSession(streams, outputs, addons.NamedTensors.from_dict(state), ir=ir,
                                     device_desc="ipu_hw")
        with session:
            session.run({streams.x: np.zeros((4, 64, 256), np.float16)})
        return session
    two, four = run(2), run(4)
    assert two.session_state["steps"] == 1
    lines = [s.simulation.breakdown.iloc[0] for s in (two, four)]
    # each layer loads its weights and runs its forward all-reduce: twice the layers, twice those cycles
    assert lines[0]["remote_io"] > 0 and lines[0]["collective"] > 0
    assert lines[1]["remote_io"] == 2 * lines[0]["remote_io"] and lines[1]["collective"] == 2 * lines[0]["collective"]
    assert four.cycle_count > two.cycle_count


def test_disable_fc_pass_turns_off_the_fully_connected_pass():
    from sim.popxl_addons.transforms.use_fc_pass import disable_fc_pass, enable_fc_pass
    sessions = []
    for disable in (False, True):
        ir = _tp_program(training=True)
        if disable:
            disable_fc_pass(ir)
        sessions.append(popxl.Session(ir, "ipu_hw"))
    assert [s.executable.options.fully_connected_pass for s in sessions] == [True, False]
    ir = popxl.Ir()
    disable_fc_pass(ir)
    enable_fc_pass(ir)
    assert ir._fully_connected_pass


def test_distributed_layer_norm_all_reduces_its_statistics():
    from sim.popxl_addons.layers.layer_norm_distributed import LayerNormDistributed
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        rg = ir.replica_grouping(group_size=4)
        facts, graph = LayerNormDistributed(rg).create_graph(popxl.TensorSpec((16, 64), popxl.float16))
        assert facts.weight.replica_grouping.num_groups == 4  # each member its own features' scale
        (y,) = graph.bind(facts.init()).call(popxl.variable(np.zeros((16, 64), np.float16)))
        ops_ = ir.main_graph.sim_graph.ops
        assert y.shape == (16, 64) and [op.kind for op in ops_ if op.kind not in ("reshape", "concat")] == [
            "map", "reduce_sum", "replicated_all_reduce", "map"]
        reduce = next(op for op in ops_ if op.kind == "replicated_all_reduce")
        assert ir.main_graph.sim_graph.tensors[reduce.inputs[0]].shape == (16, 2)  # each row's two sums
        assert reduce.attrs["group_size"] == 4
        with pytest.raises(ValueError, match="expected t"):
            from sim.popxl_addons.ops.layer_norm_distributed import layer_norm_distributed
            layer_norm_distributed(popxl.variable(np.zeros(4, np.float16)), facts.init().weight, facts.init().bias)


def test_variable_factories_take_an_iterable_of_values():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        values = iter([np.zeros(3), np.ones(3), np.full(3, 2.0)])
        f = addons.VariableFactory(values, popxl.float32, "v", replica_grouping=ir.replica_grouping(group_size=1))
        assert f.shape == (3,)  # read ahead, not taken
        v = addons.NamedVariableFactories.from_dict({"v": f}).init().v
        assert v._data.tolist() == [[0, 0, 0], [1, 1, 1]]  # one value a group, in order
        with pytest.raises(ValueError, match="ran out"):
            addons.NamedVariableFactories.from_dict({"v": f}).init()
    with pytest.raises(TypeError, match="or an iterable of values"):
        addons.VariableFactory(3)


def test_adam_optimizer_step_is_the_simulated_adam_update():
    from sim.popxl_addons.optimizers import AdamOptimizerStep
    ir = popxl.Ir(replication=1)
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((32, 64), popxl.float16, "x")
        labels = ops.host_load(popxl.h2d_stream((32,), popxl.int32, "labels"))
        facts, graph = ShardedMLP(1, 64).create_graph(popxl.TensorSpec((32, 64), popxl.float16))
        variables = facts.init()
        bwd = addons.autodiff(graph)
        info = graph.bind(variables).call_with_info(ops.host_load(x_h2d))
        loss, dx = addons.ops.cross_entropy_with_grad(info.outputs[0], labels)
        grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(
            info, bwd.call_with_info(dx, args=bwd.grad_graph_info.inputs_dict(info)))
        for w in variables.tensors:
            opt_facts, opt = AdamOptimizerStep(cache=True).create_graph(w, w.spec, lr=1e-3, loss_scaling=128)
            opt.bind(opt_facts.init()).call(w, grads[w])
    session = popxl.Session(ir, "ipu_hw")
    kinds = [op.kind for op in session.executable.graph.ops]
    # its moments as popxl-addons makes them (first_order_dtype float16 by default, the second float32)
    assert kinds.count("adam_update") == 3
    assert session.executable.optimizer == "adam (state: first moment float16, second moment float32)"
    assert any("gradient's scaling" in n for n in session.executable.notes)


def test_repeat_graph_of_the_main_graph_is_device_iterations():
    from sim.popxl_addons.transforms.repeat_graph import repeat_graph

    def program(repeats: int, transfers: int):
        ir = popxl.Ir()
        with ir.main_graph:
            x_h2d = popxl.h2d_stream((64, 64), popxl.float16, "x")
            y = ops.host_load(x_h2d) @ popxl.variable(np.zeros((64, 64), np.float16))
            ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
        assert repeat_graph(ir.main_graph, repeats) is ir.main_graph
        ir.num_host_transfers = transfers
        return ir
    s = popxl.Session(program(4, 8), "ipu_hw")
    assert s.executable.options.device_iterations == 8 and any("repeat_graph" in n for n in s.executable.notes)
    with pytest.raises(Exception, match="set it to a multiple of 4"):
        popxl.Session(program(4, 6), "ipu_hw")
    ir = popxl.Ir()
    with pytest.raises(popxl.NotModelledError, match="only the main graph"):
        repeat_graph(ir.create_empty_graph("g"), 2)


def test_a_helper_graph_called_with_the_wrong_inputs_says_so():
    from sim.popxl_addons import remote
    ir = popxl.Ir()
    with ir.main_graph:
        buffers = remote.named_buffers(addons.NamedTensors.from_dict(
            {"w": popxl.variable(np.zeros(4, np.float32), name="w")}))
        load, _ = remote.load_remote_graph(buffers)
        with pytest.raises(popxl.PopXLError, match=r"takes 1 input\(s\) besides its named ones \(none\), 0 given"):
            load.call()
