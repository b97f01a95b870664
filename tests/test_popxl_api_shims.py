"""The corners of PopXL's API that popxl-addons (Graphcore's PopXL layer library) and Graphcore's
PopXL examples import: module paths, type hints, helpers and refusals (docs/popxl.md "Graphcore's
PopXL code")."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from sim import popxl
from sim.popxl import ops


def test_modules_popxl_addons_imports():
    # PopXL's module paths, as popxl-addons imports them; the package attributes stay the functions
    from sim.popxl.ops.collectives.collectives import CollectiveOps, to_collective_op
    from sim.popxl.ops.conv import PadType
    from sim.popxl.ops.negative_log_likelihood import REDUCTION_TYPE
    from sim.popxl.transforms.autodiff import ExpectedConnectionType, GradGraphInfo
    assert callable(popxl.transforms.autodiff) and callable(ops.conv) and callable(ops.call)
    assert GradGraphInfo is popxl.transforms.GradGraphInfo and ExpectedConnectionType.FwdGrad
    assert to_collective_op("square_add") == "square_add" and CollectiveOps and PadType and REDUCTION_TYPE
    assert ops.PadType is PadType  # as PopXL's popxl.ops exports it
    with pytest.raises(ValueError, match="collective op .sum. is not one of"):
        to_collective_op("sum")
    for name in ("HostTensor", "host_tensor_types", "HostScalarTensor"):
        assert hasattr(importlib.import_module("sim.popxl.tensor"), name)
    from sim.popxl.session import d2hStreamBufferMaps, h2dStreamBufferMaps  # noqa: F401
    from sim.popxl.errors import UndefinedValue
    assert issubclass(UndefinedValue, Exception)
    assert issubclass(popxl.HostToDeviceStream, popxl.streams.Stream)


def test_op_debug_context_and_frame_offset_run_the_function():
    from sim.popxl.context import debug_context_frame_offset, op_debug_context

    @op_debug_context
    def f(x):
        return x + 1

    @op_debug_context("named")
    def g(x):
        return x * 2

    assert f(1) == 2 and g(3) == 6 and f.__name__ == "f"
    with debug_context_frame_offset(1) as i:
        assert i == 1


def test_to_numpy_and_table_to_string():
    from sim.popxl.utils import table_to_string, to_numpy
    assert to_numpy(np.arange(3, dtype=np.int64)).dtype == np.int32
    assert to_numpy([1.0, 2.0]).dtype == np.float32
    assert to_numpy(np.ones(2), popxl.float16).dtype == np.float16
    assert to_numpy(np.ones(2, np.float64), downcast=False).dtype == np.float64
    assert to_numpy(np.ones((2, 3)), popxl.float8_143).shape == (2, 3)
    with pytest.raises(RuntimeError, match="log2scale"):
        to_numpy([1.0], log2_scale=2)
    assert table_to_string([["a", "bb"], [100, 2]]) == "a   | bb\n---------\n100 | 2 \n"


def test_check_in_graph():
    from sim.popxl.ops.utils import check_in_graph, check_tensor_ipu_and_tile_set
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((2,), np.float32), name="x")
        check_in_graph(ir.main_graph, x=x)
        with pytest.raises(TypeError, match="is not a Tensor"):
            check_in_graph(ir.main_graph, x=1.0)
        with popxl.ipu(1):
            y = popxl.variable(np.zeros((2,), np.float32), name="y")
        z = popxl.variable(np.zeros((2,), np.float32), name="z")
        check_tensor_ipu_and_tile_set(x=x, z=z)
    sub = ir.create_empty_graph("sub")
    with pytest.raises(ValueError, match="another graph than sub"):
        check_in_graph(sub, x=x)
    with ir.main_graph, popxl.ipu(0):
        w = popxl.variable(np.zeros((2,), np.float32), name="w")
    with pytest.raises(ValueError, match="different IPUs"):
        check_tensor_ipu_and_tile_set(w=w, y=y)


def test_create_seeds_as_popxl():
    seeds = popxl.create_seeds(42)
    assert seeds.shape == (2,) and seeds.dtype == np.uint32
    rng = np.random.default_rng(42).integers(0, 2 ** 64 - 1, endpoint=True, dtype="uint64", size=1)
    assert popxl.two_uint32_to_uint64(seeds) == int(rng[0])
    assert popxl.create_seeds(1, replicas=3).shape == (3, 2)
    assert popxl.create_seeds(1, batches_per_step=2, replicas=3).shape == (2, 3, 2)


def test_popart_internals_refused():
    ir = popxl.Ir()
    with pytest.raises(popxl.NotModelledError, match="PopART's C\\+\\+ graph"):
        _ = ir.main_graph._pb_graph
    with pytest.raises(popxl.NotModelledError, match="getSessionOptions"):
        ir._pb_ir.getAllGraphs()
    assert ir._pb_ir.getSessionOptions() is ir.options


def _run(ir):
    with ir.main_graph:
        pass
    s = popxl.Session(ir, "ipu_hw")
    return s.executable.notes


def _small_ir():
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((4, 8), popxl.float16, name="x"))
        w = popxl.variable(np.zeros((8, 8), np.float16), name="w")
        y = x @ w
        out = popxl.d2h_stream(y.shape, y.dtype, name="y")
        ops.host_store(out, y)
    return ir


def test_engine_options_map_is_recorded_and_noted():
    ir = _small_ir()
    opts = ir._pb_ir.getSessionOptions()
    assert opts.engineOptions == {} and dict(opts.items()) == {}
    opts.engineOptions["target.syncReplicasIndependently"] = "true"
    notes = _run(ir)
    assert any("engineOptions" in n and "syncReplicasIndependently" in n and "no modelled effect" in n
               for n in notes)


def test_execution_context_is_noted():
    from sim.popxl.context import _execution_context
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((4,), popxl.float32, name="x"))
        with _execution_context("WeightsFromHostFragment"):
            y = ops.relu(x)
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, name="y"), y)
    notes = _run(ir)
    assert any("_execution_context('WeightsFromHostFragment')" in n and "no modelled effect" in n for n in notes)


def test_split_and_sqrt():
    # GPT attention splits the fused QKV projection (ops.split); GPT pretraining takes the global norm's sqrt
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((4, 96), popxl.float16, name="x"))
        q, k, v = ops.split(x, 3, axis=1)
        assert q.shape == k.shape == v.shape == (4, 32)
        a, b = ops.split(x, [64, 32], axis=-1)
        assert (a.shape, b.shape) == ((4, 64), (4, 32))
        with pytest.raises(ValueError, match="equal parts do not divide"):
            ops.split(x, 5, axis=1)
        y = ops.sqrt(q + k + v + a[:, :32] + b)
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, name="y"), y)
    s = popxl.Session(ir, "ipu_hw")
    kinds = [op.kind for op in s.executable.graph.ops]
    assert "sqrt" in kinds and kinds.count("slice") >= 5
    with s:
        s.run({ir.main_graph._loads and next(iter(ir.get_all_h2d_streams())): np.zeros((4, 96), np.float16)})
    assert s.cycle_count > 0


def test_replica_grouping_from_assignments_is_the_stride_grouping_that_gives_it():
    ir = popxl.Ir(replication=8)
    for assignment, stride, size in (([0, 1, 0, 1, 2, 3, 2, 3], 2, 2), ([0] * 8, 1, 8), ([0, 0, 1, 1, 2, 2, 3, 3], 1, 2),
                                     ([0, 1, 2, 3, 0, 1, 2, 3], 4, 2), (list(range(8)), 1, 1)):
        grouping = ir.replica_grouping_from_assignments(assignment)
        assert (grouping.stride, grouping.group_size, grouping.assignment) == (stride, size, assignment)
        assert grouping == ir.replica_grouping(stride, size)
    with pytest.raises(popxl.NotModelledError, match=r"groups \[\[0, 3\], \[1, 2\]"):
        ir.replica_grouping_from_assignments([0, 1, 1, 0, 2, 3, 3, 2])  # no constant stride
    with pytest.raises(ValueError, match="a list of 8 group indices"):
        ir.replica_grouping_from_assignments([0, 0, 0])


def test_an_inference_session_has_no_optimizer_note():
    ir = popxl.Ir()
    with ir.main_graph:
        h2d = popxl.h2d_stream((4, 8), popxl.float32, "x")
        y = ops.gelu(ops.host_load(h2d))
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
    with popxl.Session(ir, "ipu_hw") as session:
        session.run({h2d: np.zeros((4, 8), np.float32)})
    assert not any("optimizer" in note for note in session.simulation.summary()["notes"])
