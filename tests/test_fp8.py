"""FP8 (Poplar's QUARTER) matmuls and convolutions on an IPU with FP8 AMP (ipu21: the C600).

The vertex costs are poplibs' estimators (lib/poplin/PerformanceEstimation.hpp at 7eac0f26,
``getConvPartial1x1Supervisor*CycleEstimateQuarter``); the reference below ports them from the C++
with the worker partitions spelled out, apart from the simulator's vectorised version.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import sim
from sim import GraphBuilder, Options, load_system
from sim.cost.amp import amp_mode, amp_quarter_vertex_cycles, quarter_cast_cycles
from sim.graph.ir import canonical_dtype

C600 = load_system("c600").ipu


def poplibs_1x1_quarter(m: int, k: int, n: int, workers: int = 6) -> int:
    """getConvPartial1x1SupervisorCycleEstimate for QUARTER activations, one conv group, the m
    positions split as partitionConvPartialByWorker does (ceil or floor of m / 6 each)."""
    parts = [m // workers + (1 if i < m % workers else 0) for i in range(workers)]
    parts = [p for p in parts if p]

    def inner(zeroing):
        cycles = []
        for p in parts:
            c = 17 + {1: 18, 2: 23}.get(p, 27 + (p - 3) * 4) - (5 if zeroing else 0)
            cycles.append(workers * c)
        low = min(cycles) if len(parts) == workers else 0
        return max(max(cycles), low + 14)

    in_groups, out_groups = math.ceil(k / 32), math.ceil(n / 16)
    loads = 16 * 32 // 8
    return (46 + (workers * 2 + 9) + out_groups * ((workers * 6 + 10)
            + (workers * 14 + 11 + workers * 6) + loads + inner(True)
            + (in_groups - 1) * ((workers * 11 + 6 + workers * 6) + loads + inner(False))))


@pytest.mark.parametrize("m,k,n", [(12, 64, 32), (1, 32, 16), (100, 320, 48), (7, 96, 16)])
def test_the_fp8_1x1_vertex_costs_what_poplibs_estimates(m, k, n):
    mode = amp_mode(C600, 1, 2)
    assert (mode.in_group, mode.out_group, mode.quarter) == (32, 16, True)
    cycles, fixed = amp_quarter_vertex_cycles(mode, 1, m, k, n)
    assert int(cycles) == poplibs_1x1_quarter(m, k, n)
    # everything but 4 cycles per position per (input, output) group pair is fixed
    assert int(cycles - fixed) == m * math.ceil(k / 32) * math.ceil(n / 16) * 4


def test_the_c600_fp8_rate_is_twice_fp16_and_its_datasheet_peak():
    assert amp_mode(C600, 1, 2).flops_per_cycle == 2 * amp_mode(C600, 2, 2).flops_per_cycle == 256
    # 1472 tiles x 256 FLOP x 1.5 GHz = 565 TFLOP/s against the C600 datasheet's 560 TFLOP/s FP8
    assert C600.tiles * C600.amp_fp8_flops_per_cycle * C600.clock_hz / 1e12 == pytest.approx(560, rel=0.01)


def test_fp8_with_fp32_partials_runs_the_fp16_vertex_after_casting_on_the_tile():
    mode = amp_mode(C600, 1, 4)
    assert mode == replace(amp_mode(C600, 2, 4), cast_from_quarter=True)
    # poplin estimateCastCycles: (ceil(per worker / 4) + 26) x 6
    assert int(quarter_cast_cycles(6000)) == (math.ceil(1000 / 4) + 26) * 6


def _matmul(dtype: str, partials: str = "half", m: int = 2048, k: int = 1024, n: int = 4096):
    b = GraphBuilder("fp8", "float16")
    b.output(b.matmul(b.input("x", (m, k), dtype=dtype), b.weight("w", (k, n), dtype=dtype),
                      name="proj", partials_type=partials))
    return b.graph


def _matmul_cost(dtype, partials="half"):
    run = sim.simulate(_matmul(dtype, partials), "c600", Options().enableSyntheticData(True))
    return run, run.executable.costs["proj"]


def test_an_fp8_matmul_returns_fp16_and_keeps_its_weights_in_one_byte():
    g = _matmul("float8")
    assert g.tensors[g.outputs[0]].dtype == "float16"
    assert g.tensors["w"].nbytes == 1024 * 4096
    b = GraphBuilder("conv8", "float8")
    y = b.conv2d(b.input("x", (4, 64, 28, 28)), 64, 3, padding=1, bias=True)
    assert b.dtype_of(y) == "float16"


def test_a_large_fp8_matmul_computes_faster_than_fp16_but_not_more_than_twice():
    # the AMP does twice the FLOPs per cycle; the fixed cycles per vertex and pair do not shrink
    _, fp16 = _matmul_cost("float16")
    _, fp8 = _matmul_cost("float8")
    assert fp16.compute_cycles / 2 < fp8.compute_cycles < fp16.compute_cycles
    # and the operands it exchanges are half the bytes
    assert fp8.exchange_bytes < fp16.exchange_bytes


def test_fp8_with_fp32_partials_pays_for_the_casts():
    _, half_partials = _matmul_cost("float8", "half")
    _, float_partials = _matmul_cost("float8", "float")
    assert float_partials.compute_cycles > half_partials.compute_cycles


def test_an_fp8_convolution_on_the_nx1_vertex_is_cheaper_than_fp16():
    def conv(dtype):
        b = GraphBuilder("conv", dtype)
        b.output(b.conv2d(b.input("x", (16, 128, 28, 28)), 128, 3, padding=1, name="c3"))
        o = Options().enableSyntheticData(True)
        o.Precision.setPartialsType("half")
        run = sim.simulate(b.graph, "c600", o)
        return run.executable.costs["c3/conv2d"]
    fp16, fp8 = conv("float16"), conv("float8")
    assert fp8.compute_cycles < fp16.compute_cycles


@pytest.mark.parametrize("system", ["ipu-mk2", "bow-pod16", "ipu-mk1-c2"])
def test_fp8_operands_are_refused_on_ipus_without_fp8(system):
    with pytest.raises(sim.UnsupportedOpError, match=r"op 'proj' \(kind 'matmul'\): FP8 \(float8\) operands need "
                       r"an IPU with FP8 AMP \(ipu21: the c600 system\); this \w+ IPU has none: use float16"):
        sim.compile(_matmul("float8", m=64, k=64, n=64), system)


@pytest.mark.parametrize("name", ["float8", "fp8", "float8_143", "float8_152", "quarter"])
def test_fp8_dtype_names(name):
    assert canonical_dtype(name) == "float8"


def test_the_zoo_resnet50_converts_as_poprt_fp8_with_the_stem_and_classifier_in_fp16():
    import models
    fp16 = models.get("resnet50", micro_batch=2, with_loss=False)
    g = models.get("resnet50", micro_batch=2, with_loss=False, fp8_convs=True)
    convs = [op for op in g.ops if op.kind == "conv2d"]
    assert len(convs) == 53
    eight = [op for op in convs if g.tensors[op.inputs[0]].dtype == "float8"]
    assert [op.name for op in convs if op not in eight] == ["stem/conv1/conv2d"]
    kinds = {op.name: op.kind for op in g.ops}
    for op in eight:  # each fed by its own cast, FP8 weights, an fp16 result
        assert kinds[g.tensors[op.inputs[0]].producer] == "cast"
        assert g.tensors[op.inputs[1]].dtype == "float8" and g.tensors[op.outputs[0]].dtype == "float16"
    fc = [op for op in g.ops if op.kind == "matmul"]
    assert len(fc) == 1 and g.tensors[fc[0].inputs[1]].dtype == "float16"

    def weight_bytes(graph):
        return sum(t.nbytes for t in graph.tensors.values() if t.role == "weight")
    # the convolutions' weights (23.5 M of ResNet-50's 25.6 M parameters) halve
    assert 0.5 < weight_bytes(g) / weight_bytes(fp16) < 0.6
    with pytest.raises(sim.GraphError, match="fp8_convs.*dtype='float16'"):
        models.get("resnet50", dtype="float32", fp8_convs=True)


def test_the_zoo_swin_converts_its_weighted_layers_to_fp8_and_keeps_attention_in_fp16():
    """PopRT's precision fp8 on ByteMLPerf's Swin-L (models/swin.py fp8_matmuls): the patch embedding and every
    linear layer (QKV, output projection, MLP, patch merging, head) take FP8 inputs and weights; the two
    products of activations in each window's attention stay fp16; on the C600, with the half partials of
    PopRT's compiler default (the quarter AMP gives no fp32 partials), the FP8 model is faster."""
    import models
    kw = dict(micro_batch=8, with_loss=False, drop_path=0.0, depths=[2, 2, 2, 2])
    g = models.get("swin-tiny", fp8_matmuls=True, **kw)
    weighted = [op for op in g.ops if op.kind in ("matmul", "conv2d") and g.tensors[op.inputs[1]].role == "weight"]
    attention = [op for op in g.ops if op.kind == "matmul" and op not in weighted]
    assert len(weighted) == 1 + 8 * 4 + 3 + 1 and len(attention) == 2 * 8
    assert all(g.tensors[t].dtype == "float8" for op in weighted for t in op.inputs[:2])
    assert all(g.tensors[op.outputs[0]].dtype == "float16" for op in weighted)
    assert all(g.tensors[t].dtype == "float16" for op in attention for t in op.inputs[:2])
    options = sim.Options().enableSyntheticData(True)
    options.Precision.setPartialsType("half")
    fp16 = sim.simulate(models.get("swin-tiny", **kw), "c600", options, training=False)
    fp8 = sim.simulate(g, "c600", options, training=False)
    assert fp8.cycle_count < 0.9 * fp16.cycle_count
    with pytest.raises(sim.GraphError, match="fp8_matmuls.*dtype='float16'"):
        models.get("swin-tiny", dtype="float32", fp8_matmuls=True)


def test_training_an_fp8_model_is_refused_naming_the_backward_pass():
    import models
    with pytest.raises(sim.UnsupportedOpError, match=r"grad_input.*float16 and float8; poplin needs both of one "
                       r"type .*FP8 layers are modelled in inference"):
        sim.compile(models.get("resnet50", micro_batch=2, fp8_convs=True), "c600", None, True)


# --- PopXL's FP8 ops ----------------------------------------------------------------------------

def _popxl_program(fp8: bool):
    import numpy as np
    import sim.popxl as popxl
    from sim.popxl import ops
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((512, 1024), popxl.float16, name="x"))
        if fp8:
            scale = popxl.constant(np.int32(0), popxl.int32, name="log2_scale")
            w = popxl.variable(np.zeros((1024, 4096), np.uint8), popxl.float8_143, name="w")
            y = ops.matmul_pow2scaled(ops.pow2scale_cast_to_fp8(x, scale, popxl.float8_143), w, scale)
        else:
            y = x @ popxl.variable(np.zeros((1024, 4096), np.float16), name="w")
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, name="y"), y)
    return ir, y


def test_popxl_matmul_pow2scaled_runs_on_the_fp8_amp_into_float16():
    import sim.popxl as popxl
    costs = {}
    for fp8 in (False, True):
        ir, y = _popxl_program(fp8)
        assert y.dtype == popxl.float16
        with popxl.Session(ir, "ipu_hw", system="c600") as session:
            costs[fp8] = session._executable.costs["matmul"]
    assert costs[True].compute_cycles < costs[False].compute_cycles
    with pytest.raises(sim.UnsupportedOpError, match="FP8 .*need an IPU with FP8 AMP"):
        popxl.Session(_popxl_program(True)[0], "ipu_hw", system="ipu-mk2")


def test_popxl_fp8_ops_check_their_arguments_as_popxl_does():
    import numpy as np
    import sim.popxl as popxl
    from sim.popxl import ops
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((16, 16), np.float16), name="x")
        x8 = popxl.variable(np.zeros((16, 16), np.uint8), popxl.float8_152, name="x8")
        scale = popxl.constant(np.int32(1), popxl.int32, name="s")
        with pytest.raises(TypeError, match="ops.matmul: FP8 operands .* log2 scale .* use ops.matmul_pow2scaled"):
            ops.matmul(x8, x8)
        with pytest.raises(TypeError, match="Scaled matmul operands must be of dtype popxl.float8_143 or"):
            ops.matmul_pow2scaled(x, x, scale)
        with pytest.raises(TypeError, match="Log2 scale tensor must be of type popxl.int32"):
            ops.pow2scale_cast_to_fp8(x, popxl.constant(np.float16(1), popxl.float16, name="f"), popxl.float8_143)
        with pytest.raises(ValueError, match="Log2 scale argument must be a scalar tensor"):
            ops.pow2scale_cast_to_fp8(x, popxl.constant(np.zeros(2, np.int32), popxl.int32, name="v"),
                                      popxl.float8_143)
        with pytest.raises(TypeError, match="not supported for pow2scale_cast_to_fp8"):
            ops.pow2scale_cast_to_fp8(x, scale, popxl.float16)
        with pytest.raises(TypeError, match="not supported for pow2scale_cast_from_fp8"):
            ops.pow2scale_cast_from_fp8(x8, scale, popxl.float8_143)
        assert ops.pow2scale_cast_from_fp8(x8, scale, popxl.float32).dtype == popxl.float32


def test_popxl_conv_pow2scaled_runs_on_the_fp8_amp_into_float16():
    """PopXL's FP8 convolution (ops/conv.py conv_pow2scaled): FP8 operands, a float16 result, half
    partials; cheaper than the fp16 convolution on the C600, refused on an IPU without FP8; plain
    ops.conv refuses FP8 operands and checks partials_types."""
    import numpy as np
    import sim.popxl as popxl
    from sim.popxl import ops

    def program(fp8: bool):
        ir = popxl.Ir()
        with ir.main_graph:
            scale = popxl.constant(np.int32(0), popxl.int32, name="s")
            dt = popxl.float8_143 if fp8 else popxl.float16
            x = popxl.variable(np.zeros((16, 256, 28, 28), np.float16), name="x")
            w = popxl.variable(np.zeros((256, 256, 3, 3), np.float16), name="w")
            if fp8:
                x, w = ops.pow2scale_cast_to_fp8(x, scale, dt), ops.pow2scale_cast_to_fp8(w, scale, dt)
                y = ops.conv_pow2scaled(x, w, scale, padding=(1, 1, 1, 1))
            else:
                y = ops.conv(x, w, padding=(1, 1, 1, 1), partials_types=["half"])
            ops.host_store(popxl.d2h_stream(y.shape, y.dtype, name="y"), y)
        return ir, y

    cycles = {}
    for fp8 in (False, True):
        ir, y = program(fp8)
        assert y.dtype == popxl.float16 and y.shape == (16, 256, 28, 28)
        with popxl.Session(ir, "ipu_hw", system="c600") as session:
            (conv,) = [op for op in session._executable.graph.ops if op.kind == "conv2d"]
            assert conv.attrs["partials_type"] == "half"
            cycles[fp8] = session._executable.costs[conv.name].compute_cycles
    assert cycles[True] < cycles[False]
    with pytest.raises(sim.UnsupportedOpError, match="FP8 .*need an IPU with FP8 AMP"):
        popxl.Session(program(True)[0], "ipu_hw", system="ipu-mk2")
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((1, 16, 8, 8), np.float16), name="x")
        w = popxl.variable(np.zeros((16, 16, 3, 3), np.float16), name="w")
        x8 = popxl.variable(np.zeros((1, 16, 8, 8), np.uint8), popxl.float8_143, name="x8")
        with pytest.raises(TypeError, match="ops.conv: FP8 operands .* use ops.conv_pow2scaled"):
            ops.conv(x8, w)
        with pytest.raises(TypeError, match="Scaled conv operands must be of dtype popxl.float8_143 or"):
            ops.conv_pow2scaled(x, w, popxl.constant(np.int32(0), popxl.int32, name="s"))
        with pytest.raises(ValueError, match="partials_types .* expected one entry"):
            ops.conv(x, w, partials_types=["quarter"])


def test_popxl_fp8_host_casts_round_trip_every_code():
    """popxl.fp8_utils (PopXL's host conversions for its float8 examples): every byte of each format
    decodes to a value that encodes back to it (0x80 is the one NaN); the largest values are 240 and
    57,344; a value beyond them is NaN with nan_on_overflow, else clamped; log2_scale multiplies first."""
    from sim.popxl import float8_143, float8_152, float32, fp8_utils
    for name, dtype, largest in (("float8_143", float8_143, 240.0), ("float8_152", float8_152, 57344.0)):
        codes = np.arange(256, dtype=np.uint8).astype(np.dtype([(name, "u1")]))
        values = fp8_utils.host_pow2scale_cast_from_fp8(codes, float32)
        assert np.isnan(values[0x80]) and np.nanmax(values) == largest
        back = fp8_utils.host_pow2scale_cast_to_fp8(values.astype(np.float64), dtype)[name]
        keep = np.arange(256) != 0x80
        assert (back[keep] == np.arange(256)[keep]).all()
        over = np.array([4 * largest], np.float32)
        assert fp8_utils.host_pow2scale_cast_to_fp8(over, dtype)[name][0] == 0x80
        assert fp8_utils.host_pow2scale_cast_from_fp8(fp8_utils.host_pow2scale_cast_to_fp8(over, dtype, 0, False),
                                                     float32)[0] == largest
    one = fp8_utils.host_pow2scale_cast_to_fp8(np.array([1.0], np.float32), float8_143, 2)
    assert fp8_utils.host_pow2scale_cast_from_fp8(one, float32)[0] == 4.0
