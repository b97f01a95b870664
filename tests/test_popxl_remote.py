"""Remote buffers in ``sim.popxl``: buffers and variables in streaming memory, the copies between
them and the tiles, replica-sharded variables, and the checks on them (docs/popxl.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import sim
from sim import popxl
from sim.popxl import ops
from sim.program import Collective, leaves
from sim.results import report


def _copy_cycles(system: str, nbytes: int) -> int:
    """One RemoteCopy on ``system``: the streaming memory's latency plus the bytes at its rate per
    IPU (configs/ipu-mk2.toml ``[streaming_memory]``)."""
    s = sim.load_system(system)
    mem = s.streaming_memory
    return mem.latency_cycles + math.ceil(nbytes / mem.bytes_per_s_per_ipu * s.ipu.clock_hz)


def _remote_rows(session):
    tr = session.simulation.trace
    return tr[tr.kind == "remote_io"]


def test_remote_variable_loaded_updated_and_stored():
    # PopXL's own remote-variable example (docs/popxl/files/remote_variable.py), as written for PopXL
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x = np.array(1).astype(np.int32)
        buffer = popxl.remote_buffer(x.shape, popxl.int32, 1)
        remote_x = popxl.remote_variable(x, buffer, 0)
        loaded_x = ops.remote_load(buffer, 0)
        ops.var_updates.accumulate_(loaded_x, popxl.variable(2))
        ops.remote_store(buffer, 0, loaded_x)
        y_d2h = popxl.d2h_stream(loaded_x.shape, loaded_x.dtype)
        ops.host_store(y_d2h, loaded_x)
    assert buffer.remote_buffer_id == 1 and buffer.entries == 1 and buffer.nbytes == 4
    assert remote_x in ir.main_graph.variables
    with popxl.Session(ir, "ipu_model") as session:
        session.run({})
        assert session.get_tensor_data(remote_x) == 1  # the host value it was made with (no numerics)
    rows = _remote_rows(session)
    assert list(rows.name) == ["remote_load", "remote_store"] and list(rows.bytes) == [4, 4]
    assert list(rows.cycles) == [_copy_cycles(session.executable.system.name, 4)] * 2
    # the load runs before the update and the store after it, the IPU waiting for each
    compute = session.simulation.trace.query("kind == 'compute'")
    assert rows.end.iloc[0] <= compute.start.min() and compute.end.max() <= rows.start.iloc[1]
    assert session.simulation.breakdown.loc[0, "remote_io"] == rows.cycles.sum()
    assert any(n.startswith("remote buffers: 1 in streaming memory, IPU 0 4 bytes") for n in session.executable.notes)


def _layers(remote: bool):
    """Four 2048 x 2048 fp16 layers, their weights on the tiles or in one remote buffer of 4 slots."""
    ir = popxl.Ir()
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((512, 2048), popxl.float16, name="x")
        x = ops.host_load(x_h2d)
        buf = popxl.remote_buffer((2048, 2048), popxl.float16, 4) if remote else None
        for i in range(4):
            data = np.zeros((2048, 2048), np.float16)
            if remote:
                popxl.remote_variable(data, buf, i, name=f"w{i}")
                w = ops.remote_load(buf, i, f"w{i}_loaded")
            else:
                w = popxl.variable(data, name=f"w{i}")
            x = ops.gelu(x @ w)
        ops.host_store(popxl.d2h_stream(x.shape, x.dtype, name="y"), x)
    session = popxl.Session(ir, "ipu_hw")
    session.run({x_h2d: np.zeros((512, 2048), np.float16)})
    return session


def test_weights_in_streaming_memory_leave_tile_memory_and_cost_their_loads():
    on_chip, remote = _layers(False), _layers(True)
    assert on_chip.simulation.memory[0]["by_role"]["weight"] == 4 * 2048 * 2048 * 2
    assert "weight" not in remote.simulation.memory[0]["by_role"]
    assert remote.simulation.memory[0]["peak_tile_parts"]["weights"] == 0
    rows = _remote_rows(remote)
    assert len(rows) == 4 and set(rows.bytes) == {2048 * 2048 * 2}
    assert remote.simulation.breakdown.loc[0, "remote_io"] == 4 * _copy_cycles("ipu-mk2", 2048 * 2048 * 2)
    assert on_chip.simulation.breakdown.loc[0, "remote_io"] == 0


def test_offset_from_a_tensor_in_a_repeated_subgraph():
    ir = popxl.Ir()
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((64, 256), popxl.float16, name="x")
        x = ops.host_load(x_h2d)
        buf = popxl.remote_buffer((256, 256), popxl.float16, 8)

        def layer(x, index):
            return ops.gelu(x @ ops.remote_load(buf, index, "w")), index + 1
        graph = ir.create_graph(layer, x, popxl.constant(0, popxl.uint32))
        y, _ = ops.repeat(graph, 8, x, popxl.variable(0, popxl.uint32, name="index"))
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, name="y"), y)
        with pytest.raises(TypeError, match="one int32 or uint32 value"):
            ops.remote_load(buf, popxl.variable(np.zeros(2, np.int32)))
    session = popxl.Session(ir, "ipu_hw")
    session.run({x_h2d: np.zeros((64, 256), np.float16)})
    assert session.simulation.breakdown.loc[0, "remote_io"] == 8 * _copy_cycles("ipu-mk2", 256 * 256 * 2)


def test_remote_replica_sharded_variable():
    # PopXL's remote RTS example (docs/popxl/files/remote_rts_var.py): 2 replicas, one element each
    ir = popxl.Ir()
    ir.replication_factor = 2
    with ir.main_graph, popxl.in_sequence():
        x = np.array([1, 2]).astype(np.int32)
        buffer = popxl.remote_buffer((x.size // 2,), popxl.int32, 1)
        remote_x = popxl.remote_replica_sharded_variable(x, buffer, 0)
        assert buffer.meta_shape == (2,)
        loaded_x = ops.remote_load(buffer, 0)
        assert loaded_x.shape == (1,) and loaded_x.meta_shape == (2,)
        full_x = ops.collectives.replicated_all_gather(loaded_x)  # "auto": the meta-shape
        assert full_x.shape == (2,)
        ops.var_updates.accumulate_(full_x, popxl.variable([3, 4]))
        updated_shard = ops.collectives.replica_sharded_slice(full_x)
        assert updated_shard.shape == (1,) and updated_shard.meta_shape == (2,)
        ops.remote_store(buffer, 0, updated_shard)
    with popxl.Session(ir, "ipu_model") as session:
        session.run({})
    assert (session.get_tensor_data(remote_x) == [1, 2]).all()
    trace = session.simulation.trace
    # each replica loads and stores its own 4-byte shard; the gather is the only collective
    assert sorted(_remote_rows(session).ipu) == [0, 0, 1, 1] and set(_remote_rows(session).bytes) == {4}
    assert list(trace.query("kind == 'collective'").name.unique()) == ["replicated_all_gather"]


def test_replica_sharded_variable_is_a_shard_on_the_tiles():
    # PopXL's RTS example (docs/popxl/files/rts_var.py)
    ir = popxl.Ir()
    ir.replication_factor = 2
    with ir.main_graph, popxl.in_sequence():
        x = np.arange(5, dtype=np.int32)
        remote_x, loaded_x = popxl.replica_sharded_variable(x, popxl.int32, name="x")
        assert loaded_x.shape == (3,) and loaded_x.meta_shape == (5,)  # ceil(5 / 2), as PopXL pads
        assert ir.main_graph.sim_graph.tensors[loaded_x.id].role == "weight"
        ops.var_updates.accumulate_(loaded_x, ops.collectives.replica_sharded_slice(popxl.variable(np.ones(5, np.int32))))
    with popxl.Session(ir, "ipu_model") as session:
        session.run({})
    assert (session.get_tensor_data(remote_x) == np.arange(5)).all()
    assert _remote_rows(session).empty  # loaded when the weights are written, not in a run
    assert any("WeightsFromHost" in n for n in session.executable.notes)
    assert session.simulation.trace.query("kind == 'collective'").empty  # the 'local' scatter moves nothing


def test_replica_sharded_buffer_shapes_and_checks():
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        b = popxl.replica_sharded_buffer((10, 3), popxl.float16)
        assert b.tensor_shape == (8,) and b.meta_shape == (10, 3) and b.remote_buffer_id == 1
        pairs = ir.replica_grouping(group_size=2)  # two groups: the data's first axis is the group
        b2 = popxl.replica_sharded_buffer((2, 10, 3), popxl.float16, pairs, entries=3)
        assert b2.tensor_shape == (15,) and b2.meta_shape == (10, 3) and b2.nbytes == 3 * 15 * 2
        with pytest.raises(ValueError, match="shard_over=8 is more replicas"):
            popxl.replica_sharded_buffer((8,), popxl.float16, shard_over=8)
        with pytest.raises(ValueError, match="does not split into shards over 3"):
            popxl.replica_sharded_buffer((8,), popxl.float16, shard_over=3)
        whole = popxl.remote_buffer((4,), popxl.float32)
        with pytest.raises(ValueError, match="hold the whole"):
            popxl.remote_replica_sharded_variable(np.zeros(4, np.float32), whole)


def test_remote_buffer_misuse_is_named():
    ir = popxl.Ir()
    with ir.main_graph:
        buf = popxl.remote_buffer((4,), popxl.float32, 2)
        v = popxl.remote_variable(np.zeros(4, np.float32), buf, 1, name="v")
        with pytest.raises(ValueError, match="offset 2 is outside RemoteBuffer\\[id=1\\], which has 2 entries"):
            ops.remote_load(buf, 2)
        with pytest.raises(popxl.PopXLError, match="'v' is a variable held in RemoteBuffer.*remote_load\\(buffer, 1\\)"):
            ops.gelu(v)
        with pytest.raises(ValueError, match="does not fit RemoteBuffer\\[id=1\\], whose slots hold float32 \\(4,\\)"):
            ops.remote_store(buf, 0, popxl.variable(np.zeros(3, np.float32)))
        with pytest.raises(popxl.PopXLError, match="slot 1 .* already holds variable 'v'"):
            popxl.remote_variable(np.zeros(4, np.float32), buf, 1)
        with pytest.raises(ValueError, match="entries >= 1"):
            popxl.remote_buffer((4,), popxl.float32, 0)
        with pytest.raises(ValueError, match="cannot shrink to 1 entries: slot 1 holds variable 'v'"):
            buf.entries = 1
        with pytest.raises(ValueError, match="replication factor is 1"):
            popxl.remote_replica_sharded_variable(np.zeros(4, np.float32), buf, 0)


def test_streaming_memory_is_checked():
    def program(entries: int):
        ir = popxl.Ir()
        with ir.main_graph:
            buf = popxl.remote_buffer((1024, 1024), popxl.float32, entries)
            t = ops.remote_load(buf, 0)
            ops.host_store(popxl.d2h_stream(t.shape, t.dtype), t)
        return ir
    room = sim.load_system("ipu-mk2").streaming_memory.bytes_per_ipu
    need = 30000 * 1024 * 1024 * 4
    with pytest.raises(sim.OutOfMemoryError, match="out of streaming memory on IPU 0") as e:
        popxl.Session(program(30000), "ipu_hw")
    assert e.value.ipu == 0 and e.value.shortfall_bytes == need - room
    with pytest.raises(sim.OptionsError, match="system c600 has no streaming memory"):
        popxl.Session(program(3), "ipu_hw", system="c600")


def _trained_remote_ir(remote: bool, adam: bool = False, store_activation: bool = False):
    """One 784 x 1024 layer trained on 2 replicas, its weight (and Adam's moments) in remote buffers,
    loaded and stored by the program as PopXL's phased programs do, or kept on the tiles."""
    class Net(popxl.Module):
        def build(self, x):
            self.W = popxl.graph_input((784, 1024), popxl.float32, "W")
            return x @ self.W

    def held(name, buffer, slot):
        if not remote:
            return popxl.variable(np.zeros((784, 1024), np.float32), name=name)
        popxl.remote_variable(np.zeros((784, 1024), np.float32), buffer, slot, name=name)
        return ops.remote_load(buffer, slot, f"{name}_loaded")

    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        img, lbl = (ops.host_load(popxl.h2d_stream((32, 784), popxl.float32, "img")),
                    ops.host_load(popxl.h2d_stream((32,), popxl.int32, "label")))
        weights = popxl.remote_buffer((784, 1024), popxl.float32) if remote else None
        W = held("W", weights, 0)
        net = Net()
        fwd = ir.create_graph(net, img)
        bwd = popxl.transforms.autodiff(fwd)
        fwd_call = ops.call_with_info(fwd, img, inputs_dict={net.W: W})
        logits = fwd_call.outputs[0]
        if store_activation:
            ops.remote_store(popxl.remote_buffer(logits.shape, logits.dtype), 0, logits)
        _, dx = ops.nll_loss_with_softmax_grad(ops.softmax(logits, axis=-1), lbl)
        bwd_call = ops.call_with_info(bwd.graph, dx, inputs_dict=bwd.inputs_dict(fwd_call))
        g = ops.collectives.replicated_all_reduce(bwd.fwd_parent_ins_to_grad_parent_outs(fwd_call, bwd_call)[W])
        if adam:
            moments = popxl.remote_buffer((784, 1024), popxl.float32, 2) if remote else None
            m, v = held("m", moments, 0), held("v", moments, 1)
            ops.var_updates.accumulate_moving_average_(m, g, 0.9)
            ops.var_updates.accumulate_moving_average_square_(v, g, 0.999)
            ops.var_updates.adam_var_update(W, ops.var_updates.adam_updater(m, v), learning_rate=1e-3)
            if remote:
                ops.remote_store(moments, 0, m)
                ops.remote_store(moments, 1, v)
        else:
            ops.scaled_add_(W, g, b=-0.01)
        if remote:
            ops.remote_store(weights, 0, W)
    return ir


@pytest.mark.parametrize("adam", [False, True])
def test_training_weights_held_in_remote_buffers(adam):
    on_chip = popxl.Session(_trained_remote_ir(False, adam), "ipu_hw")
    phased = popxl.Session(_trained_remote_ir(True, adam), "ipu_hw")
    for s in (on_chip, phased):
        s.run({st: np.zeros((2,) + st.shape, st.dtype.as_numpy()) for st in s.expected_inputs()})
    graph = phased.executable.graph
    # the loaded weight is the simulator's off-chip weight; the program's own copies of it (and of
    # the moments) give way to the off-chip weight's loads and stores
    assert graph.tensors["W_loaded"].role == "weight" and graph.tensors["W_loaded"].location == "off_chip"
    assert not [op for op in graph.ops if op.kind in ("remote_load", "remote_store")]
    assert [w.name for w in graph.weights()] == ["W_loaded"]
    memory = phased.simulation.memory[0]["by_role"]
    assert "weight" not in memory and "state" not in memory  # in streaming memory, not always live on the tiles
    assert on_chip.simulation.memory[0]["by_role"]["weight"] == 784 * 1024 * 4
    weight, state = 784 * 1024 * 4, 2 * 784 * 1024 * 4 * adam  # Adam's two fp32 moments
    rows = phased.simulation.trace.query("kind == 'remote_io' and ipu == 0")
    assert list(rows.name) == ["stage 0 load weights", "load optimizer inputs", "store optimizer outputs"]
    assert list(rows.bytes) == [weight, weight + state, weight + state]
    assert any(n.startswith("weights W_loaded: loaded from remote buffers and trained") for n in phased.executable.notes)
    assert adam == any(n.startswith("optimizer moments m_loaded, v_loaded kept in remote buffers")
                       for n in phased.executable.notes)


def test_training_with_other_remote_copies_is_refused():
    with pytest.raises(popxl.NotModelledError, match="of tensors that are not its trained weights"):
        popxl.Session(_trained_remote_ir(True, store_activation=True), "ipu_hw")


def test_training_replica_sharded_weights():
    # PopXL's RTS training: each replica keeps a shard of W, gathers it for the forward pass,
    # reduce-scatters the gradient and updates its shard
    class Net(popxl.Module):
        def build(self, x):
            self.W = popxl.graph_input((784, 10), popxl.float32, "W")
            return x @ self.W

    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        img, lbl = (ops.host_load(popxl.h2d_stream((32, 784), popxl.float32, "img")),
                    ops.host_load(popxl.h2d_stream((32,), popxl.int32, "label")))
        W, W_shard = popxl.replica_sharded_variable(np.zeros((784, 10), np.float32), name="W")
        W_full = ops.collectives.replicated_all_gather(W_shard)
        assert W_full.shape == (784, 10)
        net = Net()
        fwd = ir.create_graph(net, img)
        bwd = popxl.transforms.autodiff(fwd)
        fwd_call = ops.call_with_info(fwd, img, inputs_dict={net.W: W_full})
        _, dx = ops.nll_loss_with_softmax_grad(ops.softmax(fwd_call.outputs[0], axis=-1), lbl)
        bwd_call = ops.call_with_info(bwd.graph, dx, inputs_dict=bwd.inputs_dict(fwd_call))
        grad = bwd.fwd_parent_ins_to_grad_parent_outs(fwd_call, bwd_call)[W_full]
        grad_shard = ops.collectives.replicated_reduce_scatter(
            grad, configure_output_for_replicated_tensor_sharding=True)
        assert grad_shard.shape == W_shard.shape == (1960,)
        ops.scaled_add_(W_shard, grad_shard, b=-0.01)
    session = popxl.Session(ir, "ipu_hw")
    graph = session.executable.graph
    # the shard is the trained weight (a quarter of W in tile memory); the gather's backward is the
    # reduce-scatter of the gradient, so the weight update adds no collective of its own
    assert [w.name for w in graph.weights()] == [W_shard.id] and graph.tensors[W_shard.id].grad_collectives == ()
    assert [(op.kind, op.pass_) for op in graph.ops if op.kind.startswith("replicated")] == [
        ("replicated_all_gather", "forward"), ("replicated_reduce_scatter", "backward")]
    assert not [c for c in leaves(session.executable.program) if isinstance(c, Collective)
                and c.name.startswith("gradient")]
    assert ("gradient collectives of W_rts, as the program applies them: reduce-scatter in the backward pass of its "
            "all-gather") in session.executable.notes
    session.run({s: np.zeros((4,) + s.shape, s.dtype.as_numpy()) for s in session.expected_inputs()})
    assert session.simulation.memory[0]["by_role"]["weight"] == 1960 * 4


def _streamed_layers(io_tiles: int, explicit: bool = True, on_io: bool = True, n: int = 2048):
    """Four n x n fp16 layers whose weights come from one remote buffer, each loaded while the
    layer before computes (on the IO tiles, PopXL's overlapped IO) or before its layer."""
    ir = popxl.Ir()
    ir.options.numIOTiles = io_tiles
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((512, n), popxl.float16, name="x")
        x = ops.host_load(x_h2d)
        buf = popxl.remote_buffer((n, n), popxl.float16, 4)
        for i in range(4):
            popxl.remote_variable(np.zeros((n, n), np.float16), buf, i, name=f"w{i}")

        def load(i):
            if not on_io:
                return ops.remote_load(buf, i, f"w{i}_loaded")
            with popxl.io_tiles():
                return ops.remote_load(buf, i, f"w{i}_loaded")
        nxt = load(0)
        for i in range(4):
            w = ops.io_tile_copy(nxt) if explicit and on_io else nxt
            if i < 3:
                nxt = load(i + 1)
            x = ops.gelu(x @ w)
        ops.host_store(popxl.d2h_stream(x.shape, x.dtype, name="y"), x)
    session = popxl.Session(ir, "ipu_hw")
    session.run({x_h2d: np.zeros((512, n), np.float16)})
    return session


def test_remote_loads_on_io_tiles_overlap_compute():
    serial, overlapped, implicit = (_streamed_layers(64, on_io=False), _streamed_layers(64),
                                    _streamed_layers(64, explicit=False))
    one_load = _copy_cycles("ipu-mk2", 2048 * 2048 * 2)
    trace = overlapped.simulation.trace
    loads = trace[trace.kind == "remote_io_overlapped"].reset_index()
    copies = trace[trace.name.str.startswith("io-tile copy")].reset_index()
    assert list(loads.cycles) == [one_load] * 4 and len(copies) == 4
    # the IO tiles do one thing at a time in program order: each load after the IO-tile copy
    # before it, each copy after the load it moves; the compute tiles run the layers meanwhile
    assert (loads.start[1:].to_numpy() == copies.end[:3].to_numpy()).all()
    assert (copies.start.to_numpy() >= loads.end.to_numpy()).all()
    assert loads.start[0] == 0  # the first load runs alongside the input's host copy
    # the compute tiles wait, doing nothing, only for what the layers before do not cover: that wait is
    # the overlapped run's remote_io, less than the serial run's copies
    waited, copied = (r.simulation.breakdown.loc[0, "remote_io"] for r in (overlapped, serial))
    assert 0 < waited < copied
    assert overlapped.cycle_count < serial.cycle_count
    labels, lane_of = report._lanes(overlapped.simulation, trace)  # the timeline gives the IO tiles a lane
    assert labels == ["IPU 0", "IPU 0 IO tiles"] and lane_of(0, "remote_io_overlapped") == 1
    # the loaded weights live on the IO tiles, not in the compute tiles' memory
    graph = overlapped.executable.graph
    assert [graph.tensors[f"w{i}_loaded"].location for i in range(4)] == ["io_tiles"] * 4
    # without ops.io_tile_copy the copies are inserted before the ops that read them, as PopART does
    assert any("IO-tile copies inserted as PopART's IoComputeTileCopy" in n for n in implicit.executable.notes)
    assert len(implicit.simulation.trace.query("name.str.startswith('io-tile copy')", engine="python")) == 4


def test_io_tiles_are_needed_and_checked():
    with pytest.raises(sim.OptionsError, match="runs on the IO tiles, but the program has none: set "
                                               "ir.options.numIOTiles"):
        _streamed_layers(0)
    ipu = sim.load_system("ipu-mk2").ipu
    room = 32 * (ipu.sram_bytes_per_tile - ipu.reserved_bytes_per_tile)
    with pytest.raises(sim.OutOfMemoryError, match="out of IO-tile memory on IPU 0") as e:
        _streamed_layers(32, explicit=False, n=3072)  # the next weight loaded before the copy of this one
    assert e.value.shortfall_bytes == 2 * 3072 * 3072 * 2 - room  # two weights on them at once
