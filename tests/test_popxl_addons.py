"""sim.popxl_addons: popxl-addons' modules, named tensors, factories, bound graphs, autodiff (with
accumulation) and losses on the simulator's PopXL, as Graphcore's PopXL tutorials use them; and the
main-graph loops those tutorials write (several loads of a stream, a loss a micro-batch)."""

from __future__ import annotations

import textwrap
from functools import partial

import numpy as np
import pytest

from sim import popxl
from sim import popxl_addons as addons
from sim.cli.main import main
from sim.popxl import ops


class Linear(addons.Module):
    def __init__(self, out_features: int, bias: bool = True):
        super().__init__()
        self.out_features, self.bias = out_features, bias

    def build(self, x):
        w = self.add_variable_input("weight", partial(np.random.normal, 0, 0.02, (x.shape[-1], self.out_features)),
                                    x.dtype)
        y = x @ w
        if self.bias:
            y = y + self.add_variable_input("bias", partial(np.zeros, self.out_features), x.dtype)
        return y


class Net(addons.Module):
    def __init__(self, cache=None):
        super().__init__(cache=cache)
        self.fc1, self.fc2 = Linear(128), Linear(10)

    def build(self, x):
        return self.fc2(ops.gelu(self.fc1(x.reshape((-1, 784)))))


class Adam(addons.Module):
    """An optimizer written as a module, as Graphcore's PopXL tutorial 2 writes it."""

    @popxl.in_sequence()
    def build(self, weight, grad, *, lr=1e-3):
        m = self.add_variable_input("first_order", partial(np.zeros, weight.shape), popxl.float32, by_ref=True)
        ops.var_updates.accumulate_moving_average_(m, grad, f=0.9)
        v = self.add_variable_input("second_order", partial(np.zeros, weight.shape), popxl.float32, by_ref=True)
        ops.var_updates.accumulate_moving_average_square_(v, grad, f=0.999)
        ops.scaled_add_(weight, ops.var_updates.adam_updater(m, v, weight=weight, weight_decay=0.0), b=-lr)


def test_dot_tree_and_named_tensors():
    tree = addons.DotTree()
    tree.insert("layer1.weight", 1)
    tree.insert("layer1.bias", 2)
    tree.insert("head", 3)
    assert tree.to_dict() == {"head": 3, "layer1.bias": 2, "layer1.weight": 1}
    assert tree.keys() == ["head", "layer1"] and tree.keys_flat() == ["head", "layer1.bias", "layer1.weight"]
    assert tree.layer1.weight == 1 and tree["layer1.bias"] == 2 and tree.len() == 2 and tree.len_flat() == 3
    with pytest.raises(ValueError, match="already in the tree"):
        tree.insert("head", 4)
    with pytest.raises(AttributeError, match="has no key 'tail'"):
        _ = tree.tail
    keys, values = tree.unpack()
    assert addons.DotTree.pack(keys, values).to_dict() == tree.to_dict()
    assert tree.to_mapping(tree.map(lambda v: 10 * v)) == {1: 10, 2: 20, 3: 30}
    assert tree.filter_keys(["layer1"]).keys_flat() == ["layer1.bias", "layer1.weight"]
    assert tree.pop("head") == 3 and "head" not in tree


def test_module_named_inputs_factories_and_bound_calls():
    ir = popxl.Ir()
    with ir.main_graph:
        facts, graph = Net().create_graph(popxl.TensorSpec((28, 28), popxl.float32))
        assert facts.keys_flat() == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
        assert facts.fc1.weight.shape == (784, 128) and graph.args.fc2.weight.shape == (128, 10)
        variables = facts.init()
        assert [v.shape for v in variables.tensors] == [(128,), (784, 128), (10,), (128, 10)]
        x = popxl.variable(np.ones((28, 28), np.float32), name="x")
        y, = graph.bind(variables).call(x)
        assert y.shape == (1, 10)
        # names the graph does not have are left out, as popxl-addons' to_mapping does; a missing one is an error
        assert graph.bind(addons.NamedTensors.from_dict({"fc3.weight": x})).args == {}
        with pytest.raises(popxl.errors.GraphInputError, match="was given no tensor"):
            graph.bind(addons.NamedTensors.from_dict({"fc3.weight": x})).call(x)
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
    with popxl.Session(ir, "ipu_hw") as s:
        s.run()
    assert [op.kind for op in s.executable.graph.ops] == ["reshape", "matmul", "add", "gelu", "matmul", "add"]
    with pytest.raises(popxl.PopXLError, match="no graph is being built"):
        Linear(4)(x)


def test_graph_cache_builds_each_setting_once():
    ir = popxl.Ir()
    cache = addons.GraphCache()
    with ir.main_graph:
        spec = popxl.TensorSpec((4, 8), popxl.float32)
        _, a = cache.create_graph(Linear(16), spec)
        _, b = cache.create_graph(Linear(16), spec)
        _, c = cache.create_graph(Linear(32), spec)
        _, d = Linear(16, bias=False).create_graph(spec)
    assert a.graph is b.graph and a.graph is not c.graph and d.args.keys_flat() == ["weight"]


def _train(module_optimizer: bool, micro_batches: int = 1, addons_api: bool = True, recompute: bool = False,
           activations: bool = True):
    """A tutorial-1 program (Net, cross-entropy, SGD or an Adam module), ``micro_batches`` written out, its
    grad graph made by ``recompute_graph`` when ``recompute``, and given the forward call's tensors
    (``inputs_dict(call_info)``) when ``activations``."""
    ir = popxl.Ir()
    with ir.main_graph:
        img_h2d = popxl.h2d_stream((8, 28, 28), popxl.float32, "image")
        lbl_h2d = popxl.h2d_stream((8,), popxl.int32, "labels")
        loss_d2h = popxl.d2h_stream((), popxl.float32, "loss")
        facts, fwd = Net().create_graph(popxl.TensorSpec((8, 28, 28), popxl.float32))
        variables = facts.init()
        if micro_batches > 1:
            bwd_facts, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors)
            bwd = addons.transforms.recompute_graph(bwd) if recompute else bwd
            accums = bwd_facts.init()
            assert accums.keys_flat()[-1] == "mean_accum_counter"
            bound_bwd = bwd.bind(accums)
        else:
            bwd = addons.autodiff(fwd)
            bwd = addons.transforms.recompute_graph(bwd) if recompute else bwd
        with popxl.in_sequence(True):
            for _ in range(micro_batches):
                img, lbl = ops.host_load(img_h2d), ops.host_load(lbl_h2d)
                info = fwd.bind(variables).call_with_info(img)
                loss, dx = addons.ops.cross_entropy_with_grad(info.outputs[0], lbl)
                ops.host_store(loss_d2h, loss)
                activations = bwd.grad_graph_info.inputs_dict(info) if activations else {}
                if micro_batches > 1:
                    bound_bwd.call(dx, args=activations)
                else:
                    grads_info = bwd.call_with_info(dx, args=activations)
            if micro_batches > 1:
                grads = dict(zip(variables.tensors, accums.tensors[:-1]))
            else:
                grads = bwd.grad_graph_info.fwd_parent_ins_to_grad_parent_outs(info, grads_info)
            for t in variables.tensors:
                if module_optimizer:
                    opt_facts, opt = Adam(cache=True).create_graph(t, t.spec, lr=1e-3)
                    opt.bind(opt_facts.init()).call(t, grads[t])
                else:
                    ops.scaled_add_(t, grads[t], b=-0.05)
    ir.num_host_transfers = 2 * micro_batches
    session = popxl.Session(ir, "ipu_hw")
    session.run({img_h2d: np.zeros((2 * micro_batches, 8, 28, 28), np.float32),
                 lbl_h2d: np.zeros((2 * micro_batches, 8), np.int32)})
    return session


def test_training_with_modules_is_the_simulated_training():
    s = _train(module_optimizer=False)
    ex = s.executable
    kinds = [op.kind for op in ex.graph.ops]
    assert ex.training and kinds.count("sgd_update") == 4 and "gelu_grad" in kinds
    assert ex.options.device_iterations == 2
    adam = _train(module_optimizer=True)
    assert [op.kind for op in adam.executable.graph.ops].count("adam_update") == 4
    assert any("built again inline" in n for n in adam.executable.notes)
    assert adam.cycle_count > s.cycle_count  # Adam's moments and updater cost more than SGD


def test_recompute_graph_from_the_main_graph_reruns_the_forward_call():
    """recompute_graph called from the main graph of a training that is not pipelined: the ops of the forward
    call whose tensors the grad graph's call is given are marked Recompute (autoRecomputation None) and rerun
    before the backward ops that read them; each written-out micro-batch reruns its own call."""
    for micro_batches in (1, 2):
        kept, again = _train(False, micro_batches), _train(False, micro_batches, recompute=True)
        stage = again.executable.stages[0]
        forward = [op.name for op in again.executable.graph.ops if op.pass_ == "forward"]
        calls = [n for n in forward if n.startswith("Net")]
        assert len(calls) == 6 * micro_batches and {op.name for op in stage.recomputed} == set(calls)
        assert not kept.executable.stages[0].recomputed
        assert again.cycle_count > kept.cycle_count
        assert not any("no modelled effect" in n for n in again.executable.notes)
        # not given the forward call's tensors, each grad call takes the last forward call before it
        paired = _train(False, micro_batches, recompute=True, activations=False).executable
        assert {op.name for op in paired.stages[0].recomputed} == set(calls)


def test_micro_batches_written_out_each_get_their_backward_pass():
    one, two = _train(False, micro_batches=1), _train(False, micro_batches=2)
    assert two.executable.options.device_iterations == 2  # 4 transfers, 2 a pass
    ops_ = two.executable.graph.ops
    passes = [op.pass_ for op in ops_ if op.kind in ("matmul", "softmax_cross_entropy", "softmax_cross_entropy_grad")]
    # forward, backward, forward, backward: each micro-batch's backward pass follows its loss
    first_backward = passes.index("backward")
    assert "forward" in passes[first_backward:] and passes.count("backward") == 2 * [
        op.pass_ for op in one.executable.graph.ops if op.kind in ("matmul", "softmax_cross_entropy",
                                                                   "softmax_cross_entropy_grad")].count("backward")
    assert [op.kind for op in ops_].count("sgd_update") == 4
    assert any("2 losses in the main graph" in n for n in two.executable.notes)
    assert two.cycle_count > one.cycle_count


def test_streams_loaded_different_numbers_of_times():
    # a pass makes the transfers of the stream used most (a: 2); b and y make their one each (a learning
    # rate loaded once a step, as Graphcore's GPT pre-training does)
    ir = popxl.Ir()
    ir.num_host_transfers = 4
    with ir.main_graph:
        a, b = popxl.h2d_stream((4,), popxl.float32, "a"), popxl.h2d_stream((4,), popxl.float32, "b")
        y = ops.add(ops.add(ops.host_load(a), ops.host_load(a)), ops.host_load(b))
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
    session = popxl.Session(ir, "ipu_hw")
    assert session._executable.options.device_iterations == 2
    assert "fewer times a pass than the 2 of the others: b 1, y 1" in " ".join(session._executable.notes)
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.h2d_stream((4,), popxl.float32, "a")
        y = ops.add(ops.host_load(a), ops.host_load(a))
        out = popxl.d2h_stream(y.shape, y.dtype, "y")
        ops.host_store(out, y)
        ops.host_store(out, y)  # the same tensor twice: a copy of it goes the second time
    ir.num_host_transfers = 3
    with pytest.raises(Exception, match="set it to a multiple of 2"):
        popxl.Session(ir, "ipu_hw")


def test_script_imports_popxl_addons(tmp_path, capsys):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent('''
        import numpy as np
        import popxl, popxl.ops as ops
        import popxl_addons as addons
        from popxl_addons.named_tensors import NamedTensors
        from popxl_addons.graph import GraphWithNamedArgs

        class Scale(addons.Module):
            def build(self, x):
                return x * self.add_variable_input("s", lambda: np.ones(()), popxl.float32)

        ir = popxl.Ir()
        with ir.main_graph:
            facts, graph = Scale().create_graph(popxl.TensorSpec((4,), popxl.float32))
            assert isinstance(graph, GraphWithNamedArgs) and isinstance(facts.init(), NamedTensors)
            y, = graph.bind(facts.init()).call(popxl.variable(np.ones(4, np.float32)))
            ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
        popxl.Session(ir, "ipu_hw").run()
        addons.route_tensor_into_graph
    '''))
    assert main(["script", str(script)]) == 1
    _, err = capsys.readouterr()
    assert "popxl_addons.route_tensor_into_graph is not modelled" in err and "1 simulated device call(s)" in err


def _pipelined(recompute: bool, steps: int = 4):
    """Tutorial 4's shape: a layer a stage, a stage an IPU, the loss and the last layer's backward on
    IPU 1, the first layer's backward on IPU 0, gradients accumulated over ``steps`` micro-batches."""
    ir = popxl.Ir()
    with ir.main_graph:
        img_h2d = popxl.h2d_stream((5, 784), popxl.float32, "image")
        lbl_h2d = popxl.h2d_stream((5,), popxl.int32, "labels")
        layers = []
        for ipu, (spec, out, needs_dx) in enumerate([((5, 784), 512, False), ((5, 512), 10, True)]):
            with popxl.ipu(ipu):
                facts, fwd = Linear(out).create_graph(popxl.TensorSpec(spec, popxl.float32))
                required = (fwd.graph.inputs[0],) if needs_dx else ()
                bwd_facts, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors, grads_required=required)
                if recompute:
                    bwd = addons.transforms.recompute_graph(bwd)
                layers.append((fwd.bind(facts.init(f"fc{ipu}")), bwd, bwd_facts.init(f"fc{ipu}")))
        with popxl.in_sequence(True), addons.pipelined_execution(steps) as pipeline:
            with pipeline.stage(0), popxl.ipu(0):
                info0 = layers[0][0].call_with_info(ops.host_load(img_h2d))
                x = info0.outputs[0].copy_to_ipu(1)
            with pipeline.stage(1), popxl.ipu(1):
                info1 = layers[1][0].call_with_info(x)
                loss, dx = addons.ops.cross_entropy_with_grad(info1.outputs[0], ops.host_load(lbl_h2d))
                dx, = layers[1][1].bind(layers[1][2]).call(dx, args=layers[1][1].grad_graph_info.inputs_dict(info1))
                dx = dx.copy_to_ipu(0)
            with pipeline.stage(2), popxl.ipu(0):
                activations = pipeline.stash_and_restore_activations(info0, layers[0][1].grad_graph_info)
                layers[0][1].bind(layers[0][2]).call(dx, args=activations)
        for (fwd, _, accums), ipu in zip(layers, (0, 1)):
            with popxl.ipu(ipu):
                for w, g in zip(fwd.args.values(), accums.tensors[:-1]):
                    ops.scaled_add_(w, g, b=-0.01)
    ir.num_host_transfers = 2 * steps
    session = popxl.Session(ir, "ipu_hw")
    session.run({img_h2d: np.zeros((2 * steps, 5, 784), np.float32), lbl_h2d: np.zeros((2 * steps, 5), np.int32)})
    return session


def test_pipelined_execution_is_popart_pipelining_with_accumulation():
    s = _pipelined(recompute=True)
    ex = s.executable
    assert ex.strategy == "pipelined" and ex.training
    assert (ex.options.Training.gradient_accumulation, ex.options.device_iterations) == (4, 2)
    # a stage an IPU, each with its forward and backward ops (the simulator's PopART pipeline)
    assert {(op.ipu, op.stage) for op in ex.graph.ops} == {(0, 0), (1, 1)}
    assert {op.pass_ for op in ex.graph.ops if op.ipu == 0} == {"forward", "backward", "update"}
    assert [op.kind for op in ex.graph.ops].count("sgd_update") == 4
    assert any("pipelined_execution(4)" in n for n in ex.notes)
    assert ex.options.pipeline_recomputation() and ex.options.explicit_pipelining  # PopXL's pipelines are explicit
    assert not _pipelined(recompute=False).executable.options.pipeline_recomputation()
    with pytest.raises(Exception, match="set it to a multiple of 4"):
        ir = popxl.Ir()
        with ir.main_graph:
            h2d = popxl.h2d_stream((4,), popxl.float32, "x")
            with addons.pipelined_execution(4) as pipeline, pipeline.stage(0):
                y = ops.relu(ops.host_load(h2d))
            ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
        ir.num_host_transfers = 6
        popxl.Session(ir, "ipu_hw")


def test_layers_streams_and_helpers():
    ir = popxl.Ir(replication=2)
    inputs = addons.InputStreams(ids=((4, 16), popxl.int32))
    with ir.main_graph:
        outputs = addons.OutputStreams(y=((64, 8), popxl.float16))
        assert inputs.ids is inputs[0] and list(inputs) == [inputs.ids]

        class Block(addons.Module):
            def __init__(self):
                super().__init__()
                self.embed = addons.layers.Embedding(popxl.float16, 1000, 32,
                                                     replica_grouping=ir.replica_grouping(group_size=1))
                self.norm, self.proj = addons.layers.LayerNorm(), addons.layers.Linear(8)

            def build(self, ids):
                return self.proj(self.norm(self.embed(ids).reshape((64, 32))))

        facts, graph = Block().create_graph(popxl.TensorSpec((4, 16), popxl.int32))
        assert facts.embed.weight.shape == (512, 32)  # 1,000 rows over 2 shards, padded to 16
        assert addons.layers.Embedding.get_offsets(1000, 2).tolist() == [0, 512]
        y, = graph.bind(facts.init()).call(ops.host_load(inputs.ids))
        ops.host_store(outputs.y, y)
        data, stream, loaded = addons.host_load(np.zeros((2, 3)), popxl.float32, "extra")
        assert data.dtype == np.float32 and stream.shape == (2, 3) and loaded.shape == (2, 3)
        addons.host_store(ops.sum(loaded))
    addons.set_available_memory_proportion_by_ipu(ir, [0.2])
    addons.patterns.apply_pre_alias_patterns(ir)
    amp = [op.attrs.get("available_memory_proportion") for g in ir._graphs for op in g.sim_graph.ops
           if op.kind == "matmul"]
    assert amp and set(amp) == {0.2}
    assert any("patterns are not run" in n for n in ir._notes)
    kinds = [op.kind for op in ir.main_graph.sim_graph.ops]
    assert kinds[:4] == ["gather", "reshape", "layernorm", "matmul"]


def test_replica_groupings_by_name_and_sharded_specs():
    from sim.popxl_addons.named_replica_grouping import NamedReplicaGrouping, get_instance_replica_grouping
    from sim.popxl_addons.rts import replica_sharded_spec
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        rg = ir.replica_grouping(group_size=2)
        facts, _ = Linear(8).create_graph(popxl.TensorSpec((3, 6), popxl.float32))
        groups = facts.replica_groupings
        assert isinstance(groups, NamedReplicaGrouping) and groups.keys_flat() == ["bias", "weight"]
        assert all(g.group_size == 4 for g in groups.values_flat())  # none given: every replica
        assert NamedReplicaGrouping.build_groups(["a", "b"], rg).b is rg
        assert get_instance_replica_grouping(rg) is rg
        w = popxl.variable(np.zeros((6, 8), np.float32))
        spec = replica_sharded_spec(w, rg)
        assert (spec.shape, spec.meta_shape) == ((24,), (6, 8))
        assert replica_sharded_spec(w, ir.replica_grouping(group_size=1)).shape == (6, 8)
        assert replica_sharded_spec(popxl.variable(np.zeros(5, np.float32)), rg).shape == (5,)  # 5 does not split


def test_rts_helpers_reduce_gather_and_remote_buffers():
    from sim.popxl_addons import remote, rts
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        every, pairs = ir.replica_grouping(), ir.replica_grouping(group_size=2)
        ts = addons.NamedTensors.from_dict({"a": popxl.variable(np.zeros((4, 8), np.float32), name="a"),
                                            "b": popxl.variable(np.zeros(6, np.float32), name="b")})
        graph, names = rts.reduce_replica_sharded_graph(ts, "mean", shard_groups=addons.named_replica_grouping.
                                                        NamedReplicaGrouping.from_dict({"a": pairs}))
        assert names == ["a", "b"] and [t.shape for t in graph.graph.inputs] == [(4, 8), (6,)]
        a, b = graph.bind(ts).call()  # built inline: the collectives act on the main graph's tensors
        assert (a.shape, a.meta_shape, b.shape) == ((16,), (4, 8), (6,))  # a: all-reduced, sliced over pairs
        whole = rts.gather_replica_sharded_tensor(rts.reduce_replica_sharded_tensor(ts.a, "add", every), False, every)
        assert whole.shape == (4, 8)
        kinds = [op.kind for op in ir.main_graph.sim_graph.ops]
        assert kinds.count("replicated_all_reduce") == 2 and kinds.count("replicated_reduce_scatter") == 1
        assert kinds.count("replicated_all_gather") == 1
        factories = addons.NamedVariableFactories.from_dict({
            "m": addons.VariableFactory(lambda: np.zeros((4, 8)), popxl.float16, "m", replica_grouping=every),
            "s": addons.VariableFactory(lambda: np.zeros(()), popxl.float32, "s")})
        buffers = remote.named_variable_buffers(factories, entries=2, shard_over_dict={"m": 4, "s": 1})
        assert (buffers.m.tensor_shape, buffers.m.meta_shape, buffers.s.tensor_shape) == ((8,), (4, 8), ())
        held = factories.init_remote(buffers, entry=1)
        assert held.m.remote_buffer is buffers.m and held.s.offset == 1
        load, names = remote.load_remote_graph(buffers, entries=3)
        assert names == ["m", "s"] and buffers.m.entries == 3 and load.graph.inputs[0].shape == ()
        loaded = addons.NamedTensors.pack(names, load.call(1))
        store = remote.store_remote_graph(buffers)
        store.bind(loaded).call(1)
        ops_ = [op for op in ir.main_graph.sim_graph.ops if op.kind in ("remote_load", "remote_store")]
        assert [(op.kind, op.attrs["offset"]) for op in ops_] == [("remote_load", 1)] * 2 + [("remote_store", 1)] * 2
        with pytest.raises(ValueError, match="cannot be sharded over 4"):
            remote.create_remote_buffer(popxl.TensorSpec((3,), popxl.float32), replica_group=every)


class ShardedAdam(addons.Module):
    """Tutorial 5's Adam: moments of the weight's shard when the weight is one."""

    @popxl.in_sequence()
    def build(self, var, grad, replica_grouping=None, *, lr=1e-3):
        if var.meta_shape:
            shard_over = int(np.prod(var.meta_shape) // np.prod(var.shape))
            m = self.add_replica_sharded_variable_input("first_order", partial(np.zeros, var.meta_shape),
                                                        popxl.float16, by_ref=True,
                                                        replica_grouping=replica_grouping, shard_over=shard_over)
            v = self.add_replica_sharded_variable_input("second_order", partial(np.zeros, var.meta_shape),
                                                        popxl.float32, by_ref=True,
                                                        replica_grouping=replica_grouping, shard_over=shard_over)
        else:
            m = self.add_variable_input("first_order", partial(np.zeros, var.shape), popxl.float16, by_ref=True)
            v = self.add_variable_input("second_order", partial(np.zeros, var.shape), popxl.float32, by_ref=True)
        ops.var_updates.accumulate_moving_average_(m, grad, f=0.9)
        ops.var_updates.accumulate_moving_average_square_(v, grad, f=0.999)
        step = self.add_variable_input("step", partial(np.zeros, ()), popxl.float32, by_ref=True)
        updater = ops.var_updates.adam_updater(m, v, weight=var, time_step=step, beta1=0.9, beta2=0.999)
        ops.scaled_add_(var, updater, b=-lr)


def _rts_train(threshold: int):
    """Tutorial 5's program (graphcore/examples tutorials/popxl/5_remote_variables_and_rts): data
    parallel over 4 replicas, 2 micro-batches accumulated, gradients of at least ``threshold``
    elements reduce-scattered and their weights updated shard by shard with Adam's moments in remote
    buffers, then all-gathered and copied back; the others all-reduced and updated whole."""
    from sim.popxl_addons.named_replica_grouping import NamedReplicaGrouping
    from sim.popxl_addons.rts import reduce_replica_sharded_graph, replica_sharded_spec
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        img_h2d = popxl.h2d_stream((8, 28, 28), popxl.float32, "image")
        lbl_h2d = popxl.h2d_stream((8,), popxl.int32, "labels")
        rg = ir.replica_grouping(group_size=4)
        facts, fwd = Net().create_graph(popxl.TensorSpec((8, 28, 28), popxl.float32))
        variables = facts.init()

        def shard_group(n):
            return rg if n >= threshold and n % 4 == 0 else ir.replica_grouping(group_size=1)

        groups = {k: shard_group(int(np.prod(f.shape))) for k, f in facts.to_dict().items()}
        bwd_facts, bwd = addons.autodiff_with_accumulation(fwd, fwd.args.tensors)
        accums = bwd_facts.init()
        with popxl.in_sequence(True):
            for _ in range(2):
                info = fwd.bind(variables).call_with_info(ops.host_load(img_h2d))
                loss, dx = addons.ops.cross_entropy_with_grad(info.outputs[0], ops.host_load(lbl_h2d))
                bwd.bind(accums).call(dx, args=bwd.grad_graph_info.inputs_dict(info))
            names = [n for n in accums.keys_flat() if n != "mean_accum_counter"]
            accum_groups = NamedReplicaGrouping.from_dict({f"accum.{k}": g for k, g in groups.items()})
            reduce, names = reduce_replica_sharded_graph(addons.NamedTensors.pack(names, accums.tensors[:-1]), "mean",
                                                         shard_groups=accum_groups,
                                                         replica_group=rg)
            grads = reduce.bind(addons.NamedTensors.pack(names, accums.tensors[:-1])).call()
            for (name, v), grad in zip(variables.named_tensors.items(), grads):
                shard = ops.collectives.replica_sharded_slice(v, group=groups[name]) if groups[name].group_size > 1 \
                    else v
                opt_facts, opt = ShardedAdam(cache=False).create_graph(
                    replica_sharded_spec(shard, groups[name]), replica_sharded_spec(grad, groups[name]), rg, lr=1e-3)
                buffers = addons.named_variable_buffers(  # the moments sharded as the weight, the step count not
                    opt_facts, shard_over_dict={n: shard_group(int(np.prod(f.shape))).group_size
                                                for n, f in opt_facts.to_dict().items()})
                opt_facts.init_remote(buffers)
                load, state_names = addons.load_remote_graph(buffers)
                state = addons.NamedTensors.pack(state_names, load.call(0))
                opt.bind(state).call(shard, grad)
                addons.store_remote_graph(buffers).bind(state).call(0)
                if shard.meta_shape:
                    ops.var_updates.copy_var_update_(v, ops.collectives.replicated_all_gather(shard, group=rg))
            ops.var_updates.accumulator_scale_(accums.mean_accum_counter, 0.0)
    ir.num_host_transfers = 2
    session = popxl.Session(ir, "ipu_hw")
    session.run({img_h2d: np.zeros((2, 4, 8, 28, 28), np.float32), lbl_h2d: np.zeros((2, 4, 8), np.int32)})
    return session


def test_sharded_updates_with_remote_moments_are_the_simulated_rts_update():
    sharded, whole = _rts_train(threshold=128), _rts_train(threshold=10 ** 9)
    ex = sharded.executable
    state = ex.options.TensorLocations.locations["optimizer"]
    # the smallest sharded weight: fc1.bias (128 elements); fc2.bias (10) is updated whole
    assert (state.replicated_tensor_sharding, state.min_elements_rts, state.on_chip) == (True, 128, False)
    assert ex.options.sharding_domain("optimizer") == (1, 4)
    kinds = [op.kind for op in ex.graph.ops]
    assert "replicated_all_gather" not in kinds and "copy" not in kinds  # the simulated update gathers
    assert not any(ex.graph.tensors[w].grad_collectives for w in ("fc1.weight", "fc1.bias", "fc2.weight"))
    assert ex.graph.tensors["fc2.bias"].grad_collectives == (("all_reduce", 1, 4, 40),)
    names = list(sharded.simulation.trace.query("ipu == 0 and kind == 'collective'").name)
    assert sum("gradient reduce-scatter" in n for n in names) == 3 and sum("weight all-gather" in n for n in names) == 3
    assert sum("gradient all-reduce" in n for n in names) == 1
    assert any("updated shard by shard over replica groups of 4" in n for n in ex.notes)
    assert any("kept in remote buffers" in n for n in ex.notes)
    # updated whole: every gradient all-reduced, no sharding, and a dearer update
    plain = whole.executable
    assert not plain.options.TensorLocations.locations["optimizer"].replicated_tensor_sharding
    assert all(plain.graph.tensors[w].grad_collectives[0][0] == "all_reduce" for w in ("fc1.weight", "fc2.bias"))
    assert sharded.cycle_count < whole.cycle_count
