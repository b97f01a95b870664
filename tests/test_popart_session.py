"""PopART's sessions on the simulator (sim/popart/session.py): a session's call is the simulator's run of the
same ONNX model with the options PopART's settings stand for, its anchors come back as PopART shapes them, and
its errors and unmodelled options are named."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import sim  # noqa: E402
from sim import virtual_clock  # noqa: E402
import sim.onnx  # noqa: E402
import sim.popart as popart  # noqa: E402
from sim.errors import GraphError, OptionsError, UnsupportedOpError  # noqa: E402
from sim.options import OverlapMode  # noqa: E402
from sim.program import StreamCopy, leaves  # noqa: E402
from sim.strategy import AutoStage, PipelinedExecution  # noqa: E402


def _mlp(two_ipus: bool = False, loss: bool = False):
    """x [4, 16] fp32 -> matmul -> relu (IPU 0) -> matmul (IPU 1) [-> softmax -> nll loss]."""
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [4, 16]), "x")
    rng = np.random.default_rng(0)
    with b.virtualGraph(0):
        w0 = b.addInitializedInputTensor(rng.standard_normal([16, 32]).astype(np.float32), "w0")
        h = b.aiOnnx.relu([b.aiOnnx.matmul([x, w0])])
    with b.virtualGraph(1 if two_ipus else 0):
        w1 = b.addInitializedInputTensor(rng.standard_normal([32, 8]).astype(np.float32), "w1")
        y = b.aiOnnx.matmul([h, w1])
        if loss:
            label = b.addInputTensor(popart.TensorInfo("INT32", [4]), "label")
            y = b.aiGraphcore.nllloss([b.aiOnnx.softmax([y], axis=1), label])
    return b, x, y


def _device(n=1):
    return popart.DeviceManager().acquireAvailableDevice(n)


def test_inference_is_the_simulators_run_of_the_same_model():
    """batchesPerStep is the device iterations, the replicas PopART's; the cycles equal sim.simulate's."""
    b, x, y = _mlp()
    opts = popart.SessionOptions()
    opts.enableReplicatedGraphs, opts.replicatedGraphCount = True, 2
    opts.instrumentWithHardwareCycleCounter = True
    sess = popart.InferenceSession(b.getModelProto(), popart.DataFlow(3, {y: popart.AnchorReturnType("All")}),
                                   _device(2), userOptions=opts)
    sess.prepareDevice()
    anchors = sess.initAnchorArrays()
    assert anchors[y].shape == (3, 2, 4, 8)  # batchesPerStep, replicas, then the tensor
    data = np.random.default_rng(1).standard_normal([3, 2, 4, 16]).astype(np.float32)
    sess.run(popart.PyStepIO({x: data}, anchors))
    o = sim.Options().deviceIterations(3).replicationFactor(2).outputMode(sim.OutputMode.All)
    model = onnx.load_from_string(b.getModelProto())
    model.graph.output.extend([onnx.helper.make_empty_tensor_value_info(y)])
    expected = sim.simulate(sim.onnx.load(model, name="inference"), "ipu-m2000", o)
    assert sess.getCycleCount() == expected.cycle_count
    # the anchors computed on the CPU (ONNX's reference evaluator), micro-batch by micro-batch
    w0, w1 = (onnx.numpy_helper.to_array(i) for i in model.graph.initializer)
    np.testing.assert_allclose(anchors[y], np.maximum(data @ w0, 0) @ w1, rtol=1e-5, atol=1e-5)
    assert sess.simulation.cycle_count == expected.cycle_count
    assert "ONNX's reference evaluator" in " ".join(sess.simulation.all_notes)


@pytest.mark.parametrize("art, shape, reduce", [
    (("Final",), (2, 4, 8), lambda v: v[-1]), (("Sum",), (2, 4, 8), lambda v: v.sum(0)),
    (("EveryN", 2), (2, 2, 4, 8), lambda v: v[1::2])])
def test_anchor_return_types_shape_and_fill_the_arrays(art, shape, reduce):
    """popart's initAnchorArrays: Final and Sum one value a replica, EveryN every n-th step."""
    b, x, y = _mlp()
    opts = popart.SessionOptions()
    opts.enableReplicatedGraphs, opts.replicatedGraphCount = True, 2
    sess = popart.InferenceSession(b.getModelProto(), popart.DataFlow(4, {y: popart.AnchorReturnType(*art)}),
                                   _device(2), userOptions=opts)
    sess.prepareDevice()
    anchors = sess.initAnchorArrays()
    data = np.random.default_rng(2).standard_normal([4, 2, 4, 16]).astype(np.float32)
    sess.run(popart.PyStepIO({x: data}, anchors))
    all_ = popart.InferenceSession(b.getModelProto(), popart.DataFlow(4, [y]), _device(2), userOptions=opts)
    all_.prepareDevice()
    every = all_.initAnchorArrays()
    all_.run(popart.PyStepIO({x: data}, every))
    assert anchors[y].shape == shape
    np.testing.assert_allclose(anchors[y], reduce(every[y]), rtol=1e-5)
    mode = sess.executable.options.output_mode
    assert mode == {"Final": sim.OutputMode.Final, "Sum": sim.OutputMode.Sum, "EveryN": sim.OutputMode.EveryN}[art[0]]


def test_pipelined_training_is_the_simulators_pipeline():
    """Manual virtual graphs with pipelining: PipelinedExecution by IPU, the accumulation factor, SGD with a
    constant momentum as the simulator's momentum SGD (combined accumulator); the cycles equal sim's."""
    b, x, loss = _mlp(two_ipus=True, loss=True)
    opts = popart.SessionOptions()
    opts.virtualGraphMode = popart.VirtualGraphMode.Manual
    opts.enablePipelining = True
    opts.enableGradientAccumulation, opts.accumulationFactor = True, 6
    opts.instrumentWithHardwareCycleCounter = True
    sgd = popart.SGD({"defaultLearningRate": (0.01, False), "defaultMomentum": (0.9, True)})
    sess = popart.TrainingSession(b.getModelProto(), popart.DataFlow(2, {loss: popart.AnchorReturnType("Final")}),
                                  loss, sgd, _device(2), userOptions=opts)
    sess.prepareDevice()
    anchors = sess.initAnchorArrays()
    assert anchors[loss].shape == ()  # a scalar loss, Final, one replica
    sess.run(popart.PyStepIO({x: np.zeros([2, 6, 4, 16], np.float32), "label": np.zeros([2, 6, 4], np.int32)},
                             anchors))
    o = (sim.Options().deviceIterations(2).outputMode(sim.OutputMode.Final)
         .setExecutionStrategy(PipelinedExecution(AutoStage.SameAsIpu)))
    o.Training.gradientAccumulation(6)
    o._Popart.set("autoRecomputation", 0)  # PopART's default: the pipeline stashes, recomputes nothing
    model = onnx.load_from_string(b.getModelProto())
    model.graph.output.extend([onnx.helper.make_empty_tensor_value_info(loss)])
    expected = sim.simulate(sim.onnx.load(model, loss=loss, name="training"), "ipu-m2000", o, training=True,
                            optimizer=sim.Optimizer("sgd_momentum", accum_dtype="float32", combined_accum=True))
    assert sess.getCycleCount() == expected.cycle_count
    assert sess.executable.strategy == "pipelined"
    # OptimizerFromHost: the learning rate is the one compound scalar of SGD1 that is not constant, one tensor
    # for the default values of the fp32 weights, on the IPU of the first update
    start = virtual_clock.totals()[1]
    sess.updateOptimizerFromHost(popart.SGD({"defaultLearningRate": (0.005, False), "defaultMomentum": (0.9, True)}))
    spent = virtual_clock.totals()[1] - start
    assert spent == pytest.approx(sim.optimizer_write_seconds(sess.executable, {0: 1}), rel=1e-12)
    assert spent > 0
    with pytest.raises(RuntimeError, match="Can not replace optimizer of type SGD with new optimizer of type Adam"):
        sess.updateOptimizerFromHost(popart.Adam({}))


def test_anchors_of_popart_own_ops_are_computed_too():
    """Gelu (tanh form), Scale and the NLL loss (sim/popart/reference_ops.py) run on the CPU as PopART's ops."""
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [4, 8]))
    label = b.addInputTensor(popart.TensorInfo("INT32", [4]))
    g = b.aiGraphcore.scale([b.aiGraphcore.gelu([x])], 2.0)
    loss = b.aiGraphcore.nllloss([b.aiOnnx.softmax([g], axis=1), label], popart.ReductionType.Sum)
    sess = popart.InferenceSession(b.getModelProto(), popart.DataFlow(2, [g, loss]), _device())
    sess.prepareDevice()
    anchors = sess.initAnchorArrays()
    data, labels = np.random.default_rng(3).standard_normal([2, 4, 8]).astype(np.float32), np.array([[1, 2, 3, 4]] * 2)
    sess.run(popart.PyStepIO({x: data, label: labels.astype(np.int32)}, anchors))
    gelu = 2 * 0.5 * data * (1 + np.tanh(np.sqrt(2 / np.pi) * (data + 0.044715 * data ** 3)))
    np.testing.assert_allclose(anchors[g], gelu, rtol=1e-5)
    soft = np.exp(gelu) / np.exp(gelu).sum(-1, keepdims=True)
    nll = -np.log(np.take_along_axis(soft, labels[..., None], -1)).sum(axis=(1, 2))
    np.testing.assert_allclose(anchors[loss], nll, rtol=1e-5)


def test_anchors_are_computed_through_popart_annotations():
    """PopART's "__" node attributes (a checkpoint's identity, virtual graphs) are not the operators' own: the
    reference evaluator runs the model without them (its Identity had refused them)."""
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 4]))
    with b.virtualGraph(0):
        (y,) = b.checkpointOutput([b.aiOnnx.relu([x])])
    sess = popart.InferenceSession(b.getModelProto(), popart.DataFlow(1, [y]), _device())
    sess.prepareDevice()
    anchors = sess.initAnchorArrays()
    data = np.array([[1, -2, 3, -4], [-1, 2, -3, 4]], np.float32)
    sess.run(popart.PyStepIO({x: data}, anchors))
    np.testing.assert_array_equal(anchors[y], np.maximum(data, 0))


def test_optimizers_map_to_the_simulators_updates():
    adam = popart.Adam({"defaultLearningRate": (1e-3, False)}, popart.AdamMode.Lamb, accl1_type="FLOAT16")
    assert (adam.simulated().name, adam.simulated().state_dtype) == ("lamb", ("float16", "float32"))
    l2 = popart.Adam({}, popart.AdamMode.Adam, popart.WeightDecayMode.L2Regularization)
    assert l2.simulated().name == "adam" and popart.Adam({}).simulated().name == "adamw"
    assert popart.ConstSGD(0.1).simulated().name == "sgd" and popart.ConstSGD(0.1).variable_scalars() == 0
    clipped = popart.SGD({}, [popart.ClipNormSettings.clipAllWeights(1.5)])
    assert clipped.simulated().clip_norm == 1.5
    assert popart.Adaptive({"defaultMomentum": (0.9, True)}).simulated().name == "rmsprop_momentum"
    assert popart.Adam({}, popart.AdamMode.AdaMax, scaled_optimizer_state=True).notes() == [
        "popart.Adam mode AdaMax: priced as Adam (the same state and update ops; its bias correction or norm is a "
        "scalar difference)", "popart.Adam scaled_optimizer_state=True: accepted, no modelled effect"]
    # PopART takes Adam's deprecated key maxWeightNorm as defaultMaxWeightNorm (adam.cpp getComplete)
    assert popart.Adam({"maxWeightNorm": (10.0, True)}).values == {"defaultMaxWeightNorm": (10.0, True)}
    with pytest.raises(ValueError, match="Invalid SGD key, 'learningRate'"):
        popart.SGD({"learningRate": (0.1, True)})
    with pytest.raises(UnsupportedOpError, match="AdaGrad is not modelled"):
        popart.Adaptive({}, popart.AdaptiveMode.AdaGrad).simulated()


def test_settings_errors_and_unmodelled_options_are_named():
    b, x, y = _mlp(two_ipus=True)
    flow = popart.DataFlow(1, [y])
    opts = popart.SessionOptions()
    with pytest.raises(AttributeError, match="no attribute 'enableMagic'"):
        opts.enableMagic = True
    opts.enableGradientAccumulation, opts.accumulationFactor = True, 4
    with pytest.raises(OptionsError, match="only available when training"):
        popart.InferenceSession(b.getModelProto(), flow, _device(2), userOptions=opts)
    opts = popart.SessionOptions()
    opts.enablePipelining = True
    with pytest.raises(OptionsError, match="virtualGraphMode' session option to not be VirtualGraphMode::Off"):
        popart.InferenceSession(b.getModelProto(), flow, _device(2), userOptions=opts)
    opts = popart.SessionOptions()
    opts.virtualGraphMode = popart.VirtualGraphMode.Manual
    opts.enableStochasticRounding = True
    sess = popart.InferenceSession(b.getModelProto(), flow, _device(1), userOptions=opts)
    with pytest.raises(OptionsError, match="needs 2 IPU\\(s\\) a replica x 1 replica\\(s\\) = 2 IPUs, but the device "
                                           "has 1"):
        sess.prepareDevice()
    b.setPartialsType(y, "HALF")
    sess = popart.InferenceSession(b.getModelProto(), flow, _device(2), userOptions=opts)
    with pytest.raises(RuntimeError, match="Must call prepareDevice before run"):
        sess.run(popart.PyStepIO({x: np.zeros([4, 16], np.float32)}, {}))
    sess.prepareDevice()
    assert sess.executable.strategy == "sharded"  # Manual without pipelining: one IPU at a time
    with pytest.raises(GraphError, match="Unexpected number of input elements for tensor 'x'"):
        sess.run(popart.PyStepIO({x: np.zeros([2, 4, 16], np.float32)}, sess.initAnchorArrays()))
    with pytest.raises(GraphError, match="No input data for tensor 'x'"):
        sess.run(popart.PyStepIO({}, sess.initAnchorArrays()))
    sess.run(popart.PyStepIO({x: np.zeros([4, 16], np.float32)}, sess.initAnchorArrays()))
    notes = " ".join(sess.simulation.all_notes)
    assert "_Popart.enableStochasticRounding=True: accepted, no modelled effect" in notes
    assert "node attribute __partials_type (1 op(s)): accepted, no modelled effect" in notes
    with pytest.raises(RuntimeError, match="instrumentWithHardwareCycleCounter must be set"):
        sess.getCycleCount()
    with pytest.raises(GraphError, match="Anchor tensor\\(s\\) nope not in the model"):
        popart.InferenceSession(b.getModelProto(), popart.DataFlow(1, ["nope"]), _device(2), userOptions=opts)


def test_weights_read_back_as_the_model_holds_them():
    b, x, y = _mlp()
    sess = popart.InferenceSession(b.getModelProto(), popart.DataFlow(1, [y]), _device())
    sess.prepareDevice()
    held = np.empty([16, 32], np.float32)
    sess.readWeights(popart.PyWeightsIO({"w0": held}))
    model = onnx.load_from_string(b.getModelProto())
    np.testing.assert_array_equal(held, onnx.numpy_helper.to_array(model.graph.initializer[0]))
    sess.writeWeights(popart.PyWeightsIO({"w0": np.ones([16, 32], np.float32)}))
    sess.readWeights(popart.PyWeightsIO({"w0": held}))
    assert (held == 1).all()
    with pytest.raises(GraphError, match="no weight 'w9'"):
        sess.readWeights(popart.PyWeightsIO({"w9": held}))


def test_a_popart_script_runs_under_ipusim_script(tmp_path, capsys):
    """PopART's documentation example (docs/popart/files/simple_addition.py), unchanged, on the simulator."""
    from sim.cli.script import run_script
    script = tmp_path / "simple_addition.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import popart
        builder = popart.Builder()
        data_shape = popart.TensorInfo("FLOAT", [1])
        a = builder.addInputTensor(data_shape)
        b = builder.addInputTensor(data_shape)
        o = builder.aiOnnx.add([a, b])
        builder.addOutputTensor(o)
        proto = builder.getModelProto()
        dataFlow = popart.DataFlow(1, {o: popart.AnchorReturnType("All")})
        session = popart.InferenceSession(fnModel=proto, dataFlow=dataFlow,
                                          deviceInfo=popart.DeviceManager().createIpuModelDevice({}))
        session.prepareDevice()
        anchors = session.initAnchorArrays()
        stepio = popart.PyStepIO({a: np.array([1.5], np.float32), b: np.array([2.0], np.float32)}, anchors)
        session.run(stepio)
        print("Result is " + str(anchors[o]))
    """))
    assert run_script(str(script), []) == 0
    out, err = capsys.readouterr()
    assert "Result is [3.5]" in out
    assert "popart InferenceSession 'inference' on ipu-mk2: 1 call(s)" in err


def _three_stage_model():
    """Embedding-like op on IPU 0 (stage 0), a layer on IPU 1 (stage 1), a head back on IPU 0 (stage 2), as
    Graphcore's PopART BERT places its embedding, encoder and heads."""
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT16", [8, 64]), "x")
    label = b.addInputTensor(popart.TensorInfo("INT32", [8]), "label")
    layers = []
    for ipu, stage in ((0, 0), (1, 1), (0, 2)):
        with b.virtualGraph(ipu), b.pipelineStage(stage):
            w = b.addInitializedInputTensor(np.zeros([64, 64], np.float16), f"w{stage}")
            x = b.aiOnnx.relu([b.aiOnnx.matmul([x, w])])
            layers.append(x)
    with b.virtualGraph(0), b.pipelineStage(2):
        loss = b.aiGraphcore.nllloss([b.aiOnnx.softmax([x], axis=1), label])
    return b, loss, layers


def test_pipeline_stages_as_annotated_and_replicas_split_the_device():
    """The stages are the ops' pipelineStage (IPU 0 runs stages 0 and 2); 2 IPUs a replica x 2 replicas on a
    device of 8 IPUs: PopART gives each replica 4 and the model uses 2."""
    b, loss, _ = _three_stage_model()
    opts = popart.SessionOptions()
    opts.virtualGraphMode = popart.VirtualGraphMode.Manual
    opts.enablePipelining = True
    opts.enableGradientAccumulation, opts.accumulationFactor = True, 8
    opts.enableReplicatedGraphs, opts.replicatedGraphCount = True, 2
    sess = popart.TrainingSession(b.getModelProto(), popart.DataFlow(1, [loss]), loss, popart.ConstSGD(0.01),
                                  _device(8), userOptions=opts)
    sess.prepareDevice()
    stages = {(op.ipu, op.stage) for op in sess.executable.graph.ops if op.pass_ == "forward"}
    assert stages == {(0, 0), (1, 1), (0, 2)}
    sess.run(popart.PyStepIO({"x": np.zeros([8, 2, 8, 64], np.float16), "label": np.zeros([8, 2, 8], np.int32)},
                             sess.initAnchorArrays()))
    assert sess.simulation.cycle_count > 0


def test_sharding_returns_to_an_earlier_ipu_in_program_order():
    b, loss, _ = _three_stage_model()
    opts = popart.SessionOptions()
    opts.virtualGraphMode = popart.VirtualGraphMode.Manual
    sess = popart.InferenceSession(b.getModelProto(), popart.DataFlow(1, [loss]), _device(2), userOptions=opts)
    sess.prepareDevice()
    assert sess.executable.strategy == "sharded"
    order = [op.ipu for op in sess.executable.graph.ops if op.kind == "matmul"]
    assert order == [0, 1, 0]


def test_callbacks_feed_the_call_and_take_its_anchors():
    """PyStepIOCallback: each input asked for once a micro-batch and replica, each anchor returned as its
    return type makes it (All: every step), as PopART's low-latency inference uses it."""
    b, x, y = _mlp()
    sess = popart.InferenceSession(b.getModelProto(), popart.DataFlow(3, [y]), _device())
    sess.prepareDevice()
    data = np.random.default_rng(4).standard_normal([3, 4, 16]).astype(np.float32)
    fed, done, returned = [], [], []
    def give(name, prefetch):
        fed.append(name)
        return data[len(fed) - 1]
    target = np.zeros([4, 8], np.float32)
    def take(name):
        return target
    sess.run(popart.PyStepIOCallback(give, done.append, take, lambda name: returned.append(target.copy())))
    assert fed == done == [x] * 3 and len(returned) == 3
    w0, w1 = (onnx.numpy_helper.to_array(i) for i in onnx.load_from_string(b.getModelProto()).graph.initializer)
    np.testing.assert_allclose(returned[2], np.maximum(data[2] @ w0, 0) @ w1, rtol=1e-5)


def test_distributed_replicated_graphs_are_popdist_instances(tmp_path):
    """enableDistributedReplicatedGraphs: this instance's replicas of globalReplicationFactor (as
    popdist.popart.configureSessionOptions sets them), collectives spanning all of them."""
    b, _, loss = _mlp(loss=True)
    opts = popart.SessionOptions()
    opts.enableReplicatedGraphs, opts.replicatedGraphCount = True, 2
    opts.enableDistributedReplicatedGraphs, opts.globalReplicationFactor, opts.globalReplicaOffset = True, 8, 4
    sess = popart.TrainingSession(b.getModelProto(), popart.DataFlow(1, [loss]), loss, popart.ConstSGD(0.01),
                                  _device(2), userOptions=opts, system="ipu-pod16")
    sess.prepareDevice()
    o = sess.executable.options
    assert (o.num_instances(), o.instance_index(), o.total_replicas()) == (4, 2, 8)
    sess.modelToHost(str(tmp_path / "trained.onnx"))
    saved = onnx.load(str(tmp_path / "trained.onnx"))
    assert sorted(i.name for i in saved.graph.initializer) == ["w0", "w1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trained.onnx"]


def test_tensor_locations_reach_the_simulation():
    """bert.py's settings: optimizer state off chip and sharded over the replicas (a TensorLocationSettings made
    whole, then a field changed), a sharding domain; activations' location is not modelled and is named."""
    b, _, loss = _mlp(loss=True)
    opts = popart.SessionOptions()
    opts.enableReplicatedGraphs, opts.replicatedGraphCount = True, 4
    opts.optimizerStateTensorLocationSettings = popart.TensorLocationSettings(
        popart.TensorLocation(popart.TensorStorage.OffChip, popart.ReplicatedTensorSharding.On))
    opts.optimizerStateTensorLocationSettings.minElementsForReplicatedTensorSharding = 4
    opts.optimizerStateTensorLocationSettings.location.shardingDomain = popart.CommGroup(
        popart.CommGroupType.Consecutive, 2)
    opts.activationTensorLocationSettings.location.storage = popart.TensorStorage.OffChip
    sess = popart.TrainingSession(b.getModelProto(), popart.DataFlow(1, [loss]), loss, popart.Adam({}), _device(4),
                                  userOptions=opts)
    sess.prepareDevice()
    o = sess.executable.options
    state = o.TensorLocations.locations["optimizer"]
    assert (state.on_chip, state.replicated_tensor_sharding, state.min_elements_rts) == (False, True, 4)
    assert o.sharding_domain("optimizer") == (1, 2)  # (stride, group size): consecutive pairs
    assert "activationTensorLocationSettings.location" in " ".join(sess.executable.notes)


def test_a_matmuls_memory_proportion_holds_for_its_gradients():
    """PopART's MatMulBaseGradOp takes the forward op's availableMemoryProportion (matmul.cpp): a proportion set
    on the matmul plans its two gradient matmuls too (Graphcore's BERT-Base did not fit with them at 0.6)."""
    b, _, loss = _mlp(loss=True)
    model = onnx.load_from_string(b.getModelProto())
    matmul = next(n for n in model.graph.node if n.op_type == "MatMul")
    matmul.attribute.append(onnx.helper.make_attribute("__available_memory", 0.1))
    sess = popart.TrainingSession(model.SerializeToString(), popart.DataFlow(1, [loss]), loss, popart.ConstSGD(0.1),
                                  _device())
    sess.prepareDevice()
    ops = sess.executable.graph.ops
    forward = next(op for op in ops if matmul.output[0] in op.outputs)
    grads = [op for op in ops if op.forward_of == forward.name and op.kind == "matmul"]
    assert len(grads) == 1  # the first matmul's input is not trained: its weight gradient only
    assert grads[0].attrs["available_memory_proportion"] == pytest.approx(0.1)


def test_popdist_configures_a_session_for_its_instance(monkeypatch):
    """popdist.popart.configureSessionOptions under a PopRun launch of 8 replicas, 2 an instance, this the third:
    the session is one of 4 instances, its replicas 4 and 5 of 8."""
    from sim.popdist import popart as popdist_popart
    for name, value in (("POPDIST_NUM_TOTAL_REPLICAS", "8"), ("POPDIST_NUM_LOCAL_REPLICAS", "2"),
                        ("POPDIST_REPLICA_INDEX_OFFSET", "4")):
        monkeypatch.setenv(name, value)
    opts = popart.SessionOptions()
    popdist_popart.configureSessionOptions(opts)
    assert (opts.enableDistributedReplicatedGraphs, opts.globalReplicationFactor, opts.globalReplicaOffset,
            opts.enableReplicatedGraphs, opts.replicatedGraphCount) == (True, 8, 4, True, 2)
    b, _, loss = _mlp(loss=True)
    sess = popart.TrainingSession(b.getModelProto(), popart.DataFlow(1, [loss]), loss, popart.ConstSGD(0.1),
                                  _device(2), userOptions=opts, system="ipu-pod16")
    o = sess._sim_options
    assert (o.replication_factor, o.num_instances(), o.instance_index()) == (2, 4, 2)


def test_input_settings_and_anchor_exchange_strategies_overlap_the_streams():
    """addInputTensor's InputSettings (recorded in the model's metadata, as PopART's builder records them) and an
    anchor's ExchangeStrategy: OverlapInnerLoop is the stream's OverlapMode.OverlapAccumulationLoop, OverlapLoops
    its OverlapDeviceIterationLoop, with PopART's requirements of overlapped IO."""
    b = popart.Builder()
    settings = popart.InputSettings(popart.TileSet.IO, popart.ExchangeStrategy.OverlapInnerLoop)
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [4, 16]), settings, "x")
    w = b.addInitializedInputTensor(np.zeros([16, 8], np.float32), "w")
    label = b.addInputTensor(popart.TensorInfo("INT32", [4]),
                             popart.InputSettings(popart.ReplicatedStreamMode.Broadcast))
    y = b.aiOnnx.matmul([x, w])
    loss = b.aiGraphcore.nllloss([b.aiOnnx.softmax([y], axis=1), label])
    meta = {p.key: p.value for p in onnx.load_from_string(b.getModelProto()).metadata_props}
    assert (meta["__tile_set/x"], meta["__exchange_strategy/x"], meta["__replicated_stream_mode/x"]) == ("1", "1", "1")
    assert meta[f"__replicated_stream_mode/{label}"] == "0"  # Broadcast (replicatedstreammode.hpp)

    def session(**set_):
        opts = popart.SessionOptions()
        opts.enableGradientAccumulation, opts.accumulationFactor = True, 4
        opts.enableReplicatedGraphs, opts.replicatedGraphCount = True, 2
        for k, v in set_.items():
            setattr(opts, k, v)
        art = popart.AnchorReturnType("All", popart.TileSet.IO, popart.ExchangeStrategy.OverlapLoops)
        return popart.TrainingSession(b.getModelProto(), popart.DataFlow(2, {loss: art}), loss, popart.ConstSGD(0.1),
                                      _device(2), userOptions=opts)

    with pytest.raises(OptionsError, match="require SessionOptions::useHostCopyOps, SessionOptions::enableExplicit"):
        session()
    ready = dict(useHostCopyOps=True, enableExplicitMainLoops=True, virtualGraphMode=popart.VirtualGraphMode.Manual)
    with pytest.raises(OptionsError, match="need IO tiles: set SessionOptions.numIOTiles"):
        session(**ready)
    sess = session(numIOTiles=32, **ready)
    sess.prepareDevice()
    overlap = sess.executable.graph.overlap
    assert overlap["x"] == OverlapMode.OverlapAccumulationLoop and label not in overlap
    assert overlap[sess._graph.onnx_outputs[loss][0]] == OverlapMode.OverlapDeviceIterationLoop
    notes = " ".join(sess.executable.notes)
    assert f"inputs {label} are ReplicatedStreamMode.Broadcast: not modelled" in notes
    assert "useHostCopyOps" not in notes
    step = popart.InputSettings(popart.TileSet.IO, popart.ExchangeStrategy.OverlapStep)
    b.addInputTensor(popart.TensorInfo("FLOAT", [4]), step, "unused")
    with pytest.raises(OptionsError, match="OverlapStep is not yet supported"):
        session(numIOTiles=32, **ready)


def test_the_devices_sync_pattern_is_the_runs():
    """DeviceManager's acquireAvailableDevice(numIpus, tilesPerIpu, pattern) and createOfflineIPUDevice's
    "syncPattern" option: how the device's IPUs sync, which the simulated run follows (PopART sets it on the
    device, not in the session options)."""
    b, x, y = _mlp(two_ipus=True)
    opts = popart.SessionOptions()
    opts.virtualGraphMode = popart.VirtualGraphMode.Manual
    device = popart.DeviceManager().acquireAvailableDevice(2, 0, popart.SyncPattern.ReplicaAndLadder)
    sess = popart.InferenceSession(b.getModelProto(), popart.DataFlow(1, [y]), device, userOptions=opts)
    assert sess._sim_options.sync_pattern.name == "ReplicaAndLadder"
    offline = popart.DeviceManager().createOfflineIPUDevice({"numIPUs": 2, "syncPattern": "singlePipeline"})
    assert offline.sync_pattern.name == "SinglePipeline" and _device(2).sync_pattern.name == "Full"
    # Graphcore's bert.py gives the enum itself (utils/device.py); taken as the pattern it names
    given = popart.DeviceManager().createOfflineIPUDevice({"numIPUs": 2, "syncPattern": popart.SyncPattern.Full})
    assert given.sync_pattern.name == "Full"
    with pytest.raises(ValueError, match="Unknown syncPattern setting: ladder"):
        popart.DeviceManager().createOfflineIPUDevice({"numIPUs": 2, "syncPattern": "ladder"})


def test_out_of_memory_and_executables_as_popart_has_them(tmp_path):
    """prepareDevice raises popart.OutOfMemoryException (the simulator's OutOfMemoryError, with PopART's
    accessors), or keeps it in a popart.OutOfMemoryError given as err; compileAndExport / saveExecutable write the
    executable and loadExecutable reads it back for a session of the same model and options."""
    big = popart.Builder()
    x = big.addInputTensor(popart.TensorInfo("FLOAT16", [131072, 4096]), "x")  # 1 GiB: more than an IPU holds
    y = big.aiOnnx.matmul([x, big.addInitializedInputTensor(np.zeros([4096, 8], np.float16), "w")])
    sess = popart.InferenceSession(big.getModelProto(), popart.DataFlow(1, [y]), _device())
    with pytest.raises(popart.OutOfMemoryException) as raised:
        sess.prepareDevice()
    assert isinstance(raised.value, sim.OutOfMemoryError) and raised.value.getProfilePath() == ""
    assert "Out of memory on IPU 0" in raised.value.getSummaryReport()
    err = popart.OutOfMemoryError()
    assert err.isSuccessful()
    sess.prepareDevice(err=err)
    assert not err.isSuccessful() and err.getSummaryReport() == raised.value.getSummaryReport()
    assert not (tmp_path / "big.popef").exists()
    sess.compileAndExport(str(tmp_path / "big.popef"), err)
    assert not (tmp_path / "big.popef").exists()  # nothing written for a program that does not fit

    b, x, y = _mlp()
    opts = popart.SessionOptions()
    opts.instrumentWithHardwareCycleCounter = True

    def session(options=opts):
        return popart.InferenceSession(b.getModelProto(), popart.DataFlow(2, [y]), _device(), userOptions=options)
    first = session()
    first.compileAndExport(str(tmp_path / "mlp.popef"))
    second = session()
    second.loadExecutable(str(tmp_path / "mlp.popef"))
    second.prepareDevice()
    assert second.executable.notes == first._compile().notes
    second.run(popart.PyStepIO({x: np.zeros([2, 4, 16], np.float32)}, second.initAnchorArrays()))
    first.prepareDevice()
    first.run(popart.PyStepIO({x: np.zeros([2, 4, 16], np.float32)}, first.initAnchorArrays()))
    assert second.getCycleCount() == first.getCycleCount()
    first.saveExecutable(str(tmp_path))
    assert (tmp_path / "executable.popef").exists()
    other = popart.SessionOptions()
    other.enableOutlining = False
    with pytest.raises(GraphError, match="compiled from another model, other options or another device"):
        session(other).loadExecutable(str(tmp_path / "mlp.popef"))
    (tmp_path / "junk").write_bytes(b"not a pickle")
    with pytest.raises(GraphError, match="not an executable compileAndExport or saveExecutable wrote"):
        session().loadExecutable(str(tmp_path / "junk"))


def _recompute_session(auto=None):
    """The MLP's training session on one IPU, its ReLU marked Recompute (recomputeOutputInBackwardPass)."""
    b, x, loss = _mlp(loss=True)
    relu = next(n for n in onnx.load_from_string(b.getModelProto()).graph.node if n.op_type == "Relu").output[0]
    b.recomputeOutputInBackwardPass(relu)
    opts = popart.SessionOptions()
    if auto is not None:
        opts.autoRecomputation = auto
    return popart.TrainingSession(b.getModelProto(), popart.DataFlow(1, [loss]), loss,
                                  popart.ConstSGD(0.01), _device(), userOptions=opts)


def test_an_op_marked_recompute_is_recomputed_on_one_ipu():
    """PopART reruns the marked ReLU before the backward op that reads its output (the second matmul's
    gradient) instead of keeping it; with autoRecomputation set too, PopART refuses the mixture."""
    sess = _recompute_session()
    sess.prepareDevice()
    assert [op.kind for op in sess.executable.stages[0].recomputed] == ["relu"]
    with pytest.raises(OptionsError, match="A mixture of auto and manual recomputation"):
        _recompute_session(popart.RecomputationType.RecomputeAll).prepareDevice()


def test_the_rng_state_is_read_and_written_as_popart_does():
    """getRNGState / setRNGState (enableLoadAndOffloadRNGState): every replica's state side by side, 2 generators
    x 4 words for each of the 6 workers of each tile of the device's share of a replica (RngStateLowering), each
    copy a priced engine run of one stream copy an IPU; PopART's errors without the option, before
    prepareDevice and for a state of another size; none with synthetic data."""
    b, x, y = _mlp(two_ipus=True)

    def session(**set_):
        opts = popart.SessionOptions()
        opts.virtualGraphMode = popart.VirtualGraphMode.Manual
        opts.enableReplicatedGraphs, opts.replicatedGraphCount = True, 2
        for k, v in set_.items():
            setattr(opts, k, v)
        return popart.InferenceSession(b.getModelProto(), popart.DataFlow(1, [y]), _device(4), userOptions=opts)

    with pytest.raises(RuntimeError, match="enableLoadAndOffloadRNGState must be set to True"):
        session().getRNGState()
    sess = session(enableLoadAndOffloadRNGState=True)
    with pytest.raises(RuntimeError, match="Must call prepareDevice before getRNGState"):
        sess.getRNGState()
    sess.prepareDevice()
    assert not any("enableLoadAndOffloadRNGState" in n for n in sess.executable.notes)
    before = virtual_clock.totals()
    state = sess.getRNGState()
    assert len(state) == 2 * (2 * 2 * 1472 * 6 * 4) and all(0 <= w < 2 ** 32 for w in state)
    assert virtual_clock.totals()[1] - before[1] == pytest.approx(sim.rng_state_copy_seconds(sess.executable, False, 2))
    assert sess.getRNGState() == state  # the simulated program draws no numbers
    sess.setRNGState(state[::-1])
    assert sess.getRNGState() == state[::-1]
    with pytest.raises(RuntimeError, match=f"received rngState of size 5; was expecting size {len(state)}"):
        sess.setRNGState(state[:5])
    synthetic = session(enableLoadAndOffloadRNGState=True, syntheticDataMode=popart.SyntheticDataMode.Zeros)
    synthetic.prepareDevice()
    assert synthetic.getRNGState() == [] and sim.rng_state_copy_seconds(synthetic.executable, False) == 0.0


def test_a_popart_session_method_without_a_model_is_named():
    """A method of PopART's sessions the simulator has no model of is a NotModelledError (an AttributeError)
    naming the methods it has; a name PopART does not have is Python's AttributeError."""
    b, x, y = _mlp()
    sess = popart.InferenceSession(b.getModelProto(), popart.DataFlow(1, [y]), _device())
    with pytest.raises(popart.NotModelledError, match="InferenceSession.connectStreamToCallback is not modelled "
                                                       "by the simulator .* getRNGState, getRandomSeed"):
        sess.connectStreamToCallback("x", lambda ptr: None)
    assert not hasattr(sess, "getSerializedGraph")
    with pytest.raises(AttributeError, match="'InferenceSession' object has no attribute 'runSomething'") as e:
        sess.runSomething()
    assert not isinstance(e.value, popart.NotModelledError)


def _grouped_mlp(settings, groups: int = 2):
    """x [4, 16] -> matmul by a weight with a value per group of replicas (VariableSettings) -> relu [-> loss]."""
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [4, 16]), "x")
    values = np.stack([np.full((16, 8), g + 1, np.float32) for g in range(groups)]) if groups > 1 else \
        np.ones((16, 8), np.float32)
    w = b.addInitializedInputTensor(values, settings, "w")
    y = b.aiOnnx.relu([b.aiOnnx.matmul([x, w])])
    return b, x, y, w


def test_variable_settings_give_each_group_of_replicas_its_value():
    """PopART's VariableSettings: the host array holds a value per group on its leading dimension (checked as
    shapeOnReplica checks it), each replica runs with its group's (Orthogonal groups of 2 over 4 replicas:
    {0, 2} and {1, 3}), readWeights returns a value per group or, with AllReplicas, per replica, and in training
    the weight's gradient is all-reduced within its group only."""
    grouping = popart.CommGroup(popart.CommGroupType.Orthogonal, 2)

    def session(settings, groups=2, training=False):
        b, x, y, w = _grouped_mlp(settings, groups)
        opts = popart.SessionOptions()
        opts.enableReplicatedGraphs, opts.replicatedGraphCount = True, 4
        if training:
            loss = b.aiGraphcore.l1loss([y], 0.1)
            return popart.TrainingSession(b.getModelProto(), popart.DataFlow(1, [loss]), loss, popart.ConstSGD(0.1),
                                          _device(4), userOptions=opts), x, y, w
        return popart.InferenceSession(b.getModelProto(), popart.DataFlow(1, {y: popart.AnchorReturnType("All")}),
                                       _device(4), userOptions=opts), x, y, w

    with pytest.raises(RuntimeError, match='outer dimension \\(3\\) of Tensor: "w". should match numGroups: 2'):
        session(popart.VariableSettings(grouping), groups=3)
    sess, x, y, w = session(popart.VariableSettings(grouping))
    assert sess.getInfo(w).shape() == [16, 8]
    sess.prepareDevice()
    anchors = sess.initAnchorArrays()
    sess.run(popart.PyStepIO({x: np.ones([4, 4, 16], np.float32)}, anchors))
    assert [float(anchors[y][r].max()) for r in range(4)] == [16.0, 32.0, 16.0, 32.0]
    assert any(n.startswith("VariableSettings: 1 variable(s) hold a value per group") for n in sess.executable.notes)
    read = {w: np.zeros([2, 16, 8], np.float32)}
    sess.readWeights(popart.PyWeightsIO(read))
    assert read[w][:, 0, 0].tolist() == [1.0, 2.0]
    every, *_ = session(popart.VariableSettings(grouping, popart.VariableRetrievalMode.AllReplicas))
    every.prepareDevice()
    read = {w: np.zeros([4, 16, 8], np.float32)}
    every.readWeights(popart.PyWeightsIO(read))
    assert read[w][:, 0, 0].tolist() == [1.0, 2.0, 1.0, 2.0]
    trained, *_ = session(popart.VariableSettings(grouping), training=True)
    assert trained._graph.tensors[w].grad_collectives == (("all_reduce", 2, 2, 16 * 8 * 4),)
    shared, *_ = session(popart.VariableSettings(), groups=1, training=True)
    assert shared._graph.tensors[w].grad_collectives is None  # one group: every replica's all-reduce
    alone, *_ = session(popart.VariableSettings(popart.CommGroup(popart.CommGroupType.Ungrouped, 0)), groups=4,
                        training=True)
    assert alone._graph.tensors[w].grad_collectives == ()  # a value a replica: nothing to reduce


def test_anchors_the_host_rearranges_stream_at_one_buffer():
    """PopART rearranges anchors on the host by default (rearrangeAnchorsOnHost, which PopTorch turns off) and
    keeps such streams at one buffer whatever defaultBufferingDepth says (SessionOptions::getBufferingDepth);
    its default is not named in the run's notes."""
    b, x, y = _mlp()
    depths = {}
    for rearranged in (True, False):
        opts = popart.SessionOptions()
        opts.defaultBufferingDepth = 3
        if not rearranged:
            opts.rearrangeAnchorsOnHost = False
        sess = popart.InferenceSession(b.getModelProto(), popart.DataFlow(4, {y: popart.AnchorReturnType("All")}),
                                       _device(), userOptions=opts)
        sess.prepareDevice()
        depths[rearranged] = {c.direction: c.prefetch for c in leaves(sess.executable.program)
                              if isinstance(c, StreamCopy)}
        assert not [n for n in sess.executable.notes if "OnHost" in n]
    assert depths == {True: {"to_ipu": 3, "from_ipu": 1}, False: {"to_ipu": 3, "from_ipu": 3}}
