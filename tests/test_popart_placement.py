"""PopART's placement modes on the simulator (sim/popart/placement.py): VirtualGraphMode.Auto splits the ops over
a replica's IPUs as PopART's AutoVirtualGraph transform does, and VirtualGraphMode.ExecutionPhases runs the
ops' execution phases as the simulator's phased execution. The expected IPUs below are worked by hand from
auto_virtual_graph.cpp's rules (the costs in the comments, in bytes)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

pytest.importorskip("onnx")

import onnx  # noqa: E402
import sim.popart as popart  # noqa: E402
from sim.errors import OptionsError  # noqa: E402
from sim.strategy import Liveness  # noqa: E402

WIDTH, BATCH = 64, 8  # a weight is 64 x 64 fp16 = 8,192 bytes, an activation 8 x 64 fp16 = 1,024


def _chain(layers: int = 4, loss: bool = True, phases: bool = False, stages: int = 2):
    """x -> (matmul -> relu) x layers [-> softmax -> nll]; with ``phases``, layer i in execution phase i on
    virtual graph i % stages, the loss with the last layer."""
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT16", [BATCH, WIDTH]), "x")
    h = x
    for i in range(layers):
        w = b.addInitializedInputTensor(np.zeros((WIDTH, WIDTH), np.float16), f"w{i}")
        if phases:
            with b.executionPhase(i), b.virtualGraph(i % stages):
                h = b.aiOnnx.relu([b.aiOnnx.matmul([h, w])])
        else:
            h = b.aiOnnx.relu([b.aiOnnx.matmul([h, w])])
    if not loss:
        return b, h
    label = b.addInputTensor(popart.TensorInfo("INT32", [BATCH]), "label")
    if phases:
        with b.executionPhase(layers - 1), b.virtualGraph((layers - 1) % stages):
            return b, b.aiGraphcore.nllloss([b.aiOnnx.softmax([h], axis=1), label])
    return b, b.aiGraphcore.nllloss([b.aiOnnx.softmax([h], axis=1), label])


def _session(b, out, ipus: int, opts, training: bool = True):
    device = popart.DeviceManager().acquireAvailableDevice(ipus)
    flow = popart.DataFlow(1, [out])
    if training:
        return popart.TrainingSession(b.getModelProto(), flow, out, popart.ConstSGD(0.01), device, userOptions=opts)
    return popart.InferenceSession(b.getModelProto(), flow, device, userOptions=opts)


def _auto(**settings):
    opts = popart.SessionOptions()
    opts.virtualGraphMode = popart.VirtualGraphMode.Auto
    for k, v in settings.items():
        setattr(opts, k, v)
    return opts


def _ipus(sess) -> dict[str, int]:
    return {op.name: op.ipu for op in sess._graph.ops}


def test_auto_splits_training_at_the_op_nearest_half_the_cost():
    """Training: a matmul costs its weight and the input its gradient reads (9,216), a relu its output (1,024),
    so a layer 10,240; the loss adds 2,080 (softmax output 1,024, nll's probabilities 1,024 and labels 32): 43,040
    in all. Half is 21,520; the nearest split is after layer 1's relu (20,480), so layers 0-1 go on IPU 0."""
    b, loss = _chain()
    sess = _session(b, loss, 2, _auto())
    assert _ipus(sess) == {"MatMul_0": 0, "Relu_1": 0, "MatMul_2": 0, "Relu_3": 0, "MatMul_4": 1, "Relu_5": 1,
                           "MatMul_6": 1, "Relu_7": 1, "Softmax_8": 1, "Nll_9": 1}
    sess.prepareDevice()
    assert sess.executable.strategy == "sharded"  # Auto without pipelining runs one IPU at a time, as Manual


def test_auto_in_inference_counts_weights_only_and_keeps_the_first_op_of_a_cost():
    """Inference: only the weights cost (8,192 a matmul). Half of 32,768 is 16,384, which the split candidates
    MatMul_2 and Relu_3 both reach; the first keeps the place (PopART's std::map insert), so the split falls
    after MatMul_2 and Relu_3 runs on IPU 1."""
    b, y = _chain(loss=False)
    sess = _session(b, y, 2, _auto(), training=False)
    assert _ipus(sess) == {"MatMul_0": 0, "Relu_1": 0, "MatMul_2": 0, "Relu_3": 1, "MatMul_4": 1, "Relu_5": 1,
                           "MatMul_6": 1, "Relu_7": 1}


def test_auto_split_ratios_and_accumulation_weigh_the_shares():
    """virtualGraphSplitRatios [0.25, 0.75]: IPU 0's share is 10,760 of 43,040, nearest the split after layer 0
    (10,240). Gradient accumulation doubles the weights' cost (a matmul 17,408, a layer 18,432, in all 75,808);
    half is 37,904, nearest after layer 1 (36,864)."""
    b, loss = _chain()
    sess = _session(b, loss, 2, _auto(virtualGraphSplitRatios=[0.25, 0.75]))
    assert [_ipus(sess)[f"MatMul_{i}"] for i in (0, 2, 4, 6)] == [0, 1, 1, 1]
    sess = _session(b, loss, 2, _auto(enableGradientAccumulation=True, accumulationFactor=2))
    assert [_ipus(sess)[f"MatMul_{i}"] for i in (0, 2, 4, 6)] == [0, 0, 1, 1]
    with pytest.raises(OptionsError, match="virtualGraphSplitRatios has 3 value\\(s\\), but a replica has 2 IPUs"):
        _session(b, loss, 2, _auto(virtualGraphSplitRatios=[0.2, 0.3, 0.5]))
    with pytest.raises(OptionsError, match="must sum to 1"):
        _session(b, loss, 2, _auto(virtualGraphSplitRatios=[0.2, 0.3]))


def _branches():
    """x1 @ Wa and x2 @ Wb (8,192 each), added, then @ Wc (64 x 256: 32,768): inference."""
    b = popart.Builder()
    x1 = b.addInputTensor(popart.TensorInfo("FLOAT16", [BATCH, WIDTH]), "x1")
    x2 = b.addInputTensor(popart.TensorInfo("FLOAT16", [BATCH, WIDTH]), "x2")
    wa, wb = (b.addInitializedInputTensor(np.zeros((WIDTH, WIDTH), np.float16), n) for n in ("wa", "wb"))
    wc = b.addInitializedInputTensor(np.zeros((WIDTH, 256), np.float16), "wc")
    added = b.aiOnnx.add([b.aiOnnx.matmul([x1, wa]), b.aiOnnx.matmul([x2, wb])])
    return b, b.aiOnnx.matmul([added, wc])


def test_auto_subgraphs_start_at_each_input_and_where_two_meet():
    """Each input starts a subgraph; the add, reached from both, starts a third (with the last matmul). On two
    IPUs, the first two subgraphs (16,384) fit under half of 49,152 and the third splits after the add (cost 0,
    nearer the 8,192 wanted than 32,768). On four, IPU 0 takes the first matmul and the second's subgraph splits
    at its only op; the third splits after the add and again after the last matmul, so IPU 3 is left empty, as
    PopART leaves it."""
    b, y = _branches()
    sess = _session(b, y, 2, _auto(), training=False)
    assert list(_ipus(sess).values()) == [0, 0, 0, 1]
    sess = _session(b, y, 4, _auto(), training=False)
    assert list(_ipus(sess).values()) == [0, 0, 1, 2]
    sess.prepareDevice()  # the model uses 3 of the device's 4 IPUs


def test_auto_without_enough_splits_says_so():
    """One matmul on three IPUs: after the one split, nothing is left to split."""
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT16", [BATCH, WIDTH]), "x")
    y = b.aiOnnx.matmul([x, b.addInitializedInputTensor(np.zeros((WIDTH, WIDTH), np.float16), "w")])
    with pytest.raises(OptionsError, match="could not split the model over 3 IPUs \\(it found 1 place"):
        _session(b, y, 3, _auto(), training=False)
    assert set(_ipus(_session(b, y, 1, _auto(), training=False)).values()) == {0}


def test_auto_with_pipelining_pipelines_the_placed_ops():
    b, loss = _chain()
    sess = _session(b, loss, 2, _auto(enablePipelining=True, enableGradientAccumulation=True, accumulationFactor=4))
    sess.prepareDevice()
    assert sess.executable.strategy == "pipelined"


def test_a_pipelines_recompute_marks_as_popart_takes_them():
    """A ReLU marked Recompute in a pipeline: PopART's implicit pipelining refuses it (Pipeline::apply); with
    explicit pipelining (useHostCopyOps and enableExplicitMainLoops) or explicitRecomputation it is accepted, and
    its backward stage reruns it instead of restoring its output."""
    def session(**settings):
        b, loss = _chain()
        relu = [n.output[0] for n in onnx.load_from_string(b.getModelProto()).graph.node if n.op_type == "Relu"][1]
        b.recomputeOutputInBackwardPass(relu)
        sess = _session(b, loss, 2, _auto(enablePipelining=True, enableGradientAccumulation=True, accumulationFactor=4,
                                          **settings))
        sess.prepareDevice()
        return sess
    with pytest.raises(OptionsError, match="user annotation for recomputation is not allowed"):
        session()
    explicit_pipelining = {"useHostCopyOps": True, "enableExplicitMainLoops": True, "explicitRecomputation": True}
    for settings in (explicit_pipelining, {"explicitRecomputation": True}):
        stages = session(**settings).executable.stages
        assert [op.kind for s in stages for op in s.recomputed] == ["relu"]


def test_an_explicit_pipeline_as_popart_takes_it():
    """PopART's checks of every explicit pipeline (ExplicitPipelineHelper::compatibilityChecks): it needs
    explicitRecomputation, and no output returned every N micro-batches."""
    def session(art="All", **settings):
        b, loss = _chain()
        opts = _auto(enablePipelining=True, enableGradientAccumulation=True, accumulationFactor=4,
                     useHostCopyOps=True, enableExplicitMainLoops=True, **settings)
        sess = popart.TrainingSession(b.getModelProto(), popart.DataFlow(2, {loss: popart.AnchorReturnType(art, 2)}),
                                      loss, popart.ConstSGD(0.1), popart.DeviceManager().acquireAvailableDevice(2),
                                      userOptions=opts)
        sess.prepareDevice()
        return sess
    with pytest.raises(OptionsError, match="SessionOption 'explicitRecomputation' must be true"):
        session()
    with pytest.raises(OptionsError, match="Cannot execute when an anchor has AnchorReturnType 'EveryN'"):
        session("EveryN", explicitRecomputation=True)
    sess = session(explicitRecomputation=True)
    assert sess.executable.strategy == "pipelined" and sess._sim_options.explicit_pipelining


def test_alias_zero_copy_as_popart_takes_it():
    """PopART (SDK 2.6 on, Ir::verifyAliasZeroCopySettings) refuses aliasZeroCopy with implicit pipelining and
    without explicitRecomputation; a pipeline with explicit main loops and host copy ops and explicitRecomputation
    takes it, and so does a model that is not pipelined with explicitRecomputation."""
    def session(pipelined=True, **settings):
        b, loss = _chain()
        pipeline = {"enablePipelining": True, "enableGradientAccumulation": True, "accumulationFactor": 4}
        sess = _session(b, loss, 2, _auto(aliasZeroCopy=True, **(pipeline if pipelined else {}), **settings))
        sess.prepareDevice()
        return sess
    with pytest.raises(OptionsError, match="not supported with implicit pipelining"):
        session(explicitRecomputation=True)
    with pytest.raises(OptionsError, match="not supported with implicit recomputation.*set _Popart "
                                           "explicitRecomputation True"):
        session(useHostCopyOps=True, enableExplicitMainLoops=True)
    assert session(useHostCopyOps=True, enableExplicitMainLoops=True,
                   explicitRecomputation=True).executable.strategy == "pipelined"
    assert session(pipelined=False, explicitRecomputation=True).executable.strategy == "sharded"


def _phased(phases: int = 4, stages: int = 2, **locations):
    opts = popart.SessionOptions()
    opts.virtualGraphMode = popart.VirtualGraphMode.ExecutionPhases
    opts.executionPhaseSettings.phases = phases
    opts.executionPhaseSettings.stages = stages
    for which, storage in locations.items():
        getattr(opts, f"{which}TensorLocationSettings").location.storage = storage
    return opts


def _run(sess):
    sess.prepareDevice()
    inputs = {"x": np.zeros((BATCH, WIDTH), np.float16), "label": np.zeros(BATCH, np.int32)}
    sess.run(popart.PyStepIO(inputs, sess.initAnchorArrays()))
    return sess.simulation


def test_execution_phases_run_forward_then_mirrored_backward_phases():
    """Layers in phases 0-3, alternating between IPUs 0 and 1 (stages 2: parallel phased). A backward op runs
    in phase 2 * phases - 2 - p: with phases 4 the last forward phase and its backward share phase 3 (7 phases);
    with phases 5 the backward runs in 8 - p, apart (8 phases)."""
    b, loss = _chain(phases=True)
    sess = _session(b, loss, 2, _phased(4))
    run = _run(sess)
    assert sess.executable.strategy == "parallel_phased"
    assert "parallel phased (7 phases on 2 IPUs)" in sess.getSummaryReport()
    assert {(op.name, op.phase, op.ipu) for op in sess._graph.ops if op.name.startswith("MatMul")} == {
        ("MatMul_0", 0, 0), ("MatMul_2", 1, 1), ("MatMul_4", 2, 0), ("MatMul_6", 3, 1)}
    assert run.breakdown["remote_io"].sum() == 0  # PopART keeps weights on chip unless told (unlike PopTorch)
    sess = _session(b, loss, 2, _phased(5))
    _run(sess)
    assert "parallel phased (8 phases on 2 IPUs)" in sess.getSummaryReport()


def test_execution_phases_tensor_locations_and_serial_stages():
    """Off-chip weights are loaded before each phase that reads them; off-chip activations are stored between
    phases (the simulator's OffChipAfterFwd); stages 1 runs every phase on IPU 0 (serial phased)."""
    b, loss = _chain(phases=True, stages=1)
    on_chip = _run(_session(b, loss, 1, _phased(stages=1)))
    sess = _session(b, loss, 1, _phased(stages=1, weight=popart.TensorStorage.OffChip))
    off_chip = _run(sess)
    assert sess.executable.strategy == "serial_phased"
    assert {op.ipu for op in sess._graph.ops} == {0}
    assert on_chip.breakdown["remote_io"].sum() == 0 < off_chip.breakdown["remote_io"].sum()
    assert off_chip.cycle_count > on_chip.cycle_count
    sess = _session(b, loss, 1, _phased(stages=1, activation=popart.TensorStorage.OffChip))
    assert sess._strategy.liveness == Liveness.OffChipAfterFwd
    assert _run(sess).breakdown["remote_io"].sum() > 0
    assert not any("activationTensorLocationSettings" in n for n in sess.simulation.all_notes)


def test_execution_phases_recompute_as_streaming_memory_marks_them():
    """The phased BERT's settings (autoRecomputation Standard, explicitRecomputation): PopART's StreamingMemory
    marks every forward op Recompute, and in each backward phase the forward ops its gradients read run again
    (each layer's ReLU and the matmul making its input, the loss's softmax); a ReLU the builder marks Recompute is
    recomputed with None too (from the matmul's output, kept), and one it checkpoints (RecomputeType.Checkpoint)
    is kept with Standard, with the matmul before it."""
    def recomputed(auto=None, mark=None) -> Counter:
        b, loss = _chain(phases=True, stages=1)
        if mark is not None:
            relu = [n.output[0] for n in onnx.load_from_string(b.getModelProto()).graph.node if n.op_type == "Relu"][1]
            b.recomputeOutputInBackwardPass(relu, mark)
        opts = _phased(stages=1, activation=popart.TensorStorage.OffChip)
        if auto is not None:
            opts.autoRecomputation, opts.explicitRecomputation = auto, True
        sess = _session(b, loss, 1, opts)
        _run(sess)
        return Counter(op.kind for s in sess.executable.stages for op in s.recomputed)
    assert recomputed() == Counter()
    assert recomputed(popart.RecomputationType.Standard) == Counter(matmul=4, relu=4, softmax=1)
    assert recomputed(mark=popart.RecomputeType.Recompute) == Counter(relu=1)
    assert recomputed(popart.RecomputationType.Standard, popart.RecomputeType.Checkpoint) == Counter(matmul=3, relu=3,
                                                                                                  softmax=1)


def test_execution_phase_settings_are_checked_as_popart_checks_them():
    b, loss = _chain(phases=True)
    b2, loss2 = _chain(phases=True, stages=1)  # every layer on virtual graph 0
    with pytest.raises(OptionsError, match="op 'MatMul_2': execution phase 1 and virtual graph 0 do not match"):
        _session(b2, loss2, 2, _phased(stages=2))
    with pytest.raises(OptionsError, match="in execution phase 3, but executionPhaseSettings.phases is 3"):
        _session(b, loss, 2, _phased(3))
    with pytest.raises(OptionsError, match="stages 3"):
        _session(b, loss, 2, _phased(stages=3))
    opts = _phased()
    opts.virtualGraphMode = popart.VirtualGraphMode.Manual
    with pytest.raises(OptionsError, match="> 1 execution phases requires VirtualGraphMode::ExecutionPhases"):
        _session(b, loss, 2, opts)
    plain, plain_loss = _chain()
    with pytest.raises(OptionsError, match="no op has an execution phase"):
        _session(plain, plain_loss, 2, _phased())
    sess = _session(b, loss, 2, _phased(phases=1))  # PopART disables phased execution below 2 phases
    _run(sess)
    assert sess.executable.strategy == "sharded"
    assert any("phased execution needs 2 or more" in n for n in sess.simulation.all_notes)


def test_phases_of_a_model_run_without_a_phased_strategy_are_named_and_ignored():
    """An ONNX model whose ops carry PopART's __execution_phase, simulated straight through sim.onnx (no phased
    strategy): the phases are dropped, and a note says so and how to run them."""
    import sim
    import sim.onnx
    b, loss = _chain(phases=True, stages=1)  # every phase on IPU 0
    run = sim.simulate(sim.onnx.load(b.getModelProto(), loss=loss), "ipu-mk2", training=True)
    assert any("10 op(s) carry an execution phase (PopART's __execution_phase), but the single strategy runs "
               "no phases" in n for n in run.all_notes)
