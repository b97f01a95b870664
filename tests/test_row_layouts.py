"""Where a slice of a matmul's rows lives (sim/compiler/row_layouts.py), and GPT-2's loss over such slices."""

from __future__ import annotations

import re

import pytest

import models
from sim.compiler.executable import compile
from sim.compiler.row_layouts import RowLayout, _sliced
from sim.cost import op_cost
from sim.errors import GraphError
from sim.graph.ir import GraphBuilder, Op
from sim.hardware.system import load_system

IPU = load_system("bow-ipu").ipu


def _slice(axis, start, stop) -> Op:
    return Op("s", "slice", ["x"], ["y"], {"axis": axis, "start": start, "stop": stop})


@pytest.mark.parametrize("shape, axis, start, stop, expected", [
    ((1024, 50272), 0, 0, 128, RowLayout(1, 1 / 8)),  # one of 8 blocks of 128 rows
    ((1024, 50272), 0, 100, 300, RowLayout(3, 3 / 8)),  # rows 100-299 touch blocks 0, 1 and 2
    ((1, 1024, 50272), 1, 896, 1024, RowLayout(1, 1 / 8)),  # the last block, through a leading 1
    ((1024, 50272), 1, 0, 128, None),  # columns: every block
    ((2, 512, 50272), 1, 0, 128, None),  # rows of each of 2 sequences: not one range
    ((1024, 50272), 0, -128, 1024, None),  # a region the front end did not normalise: not followed
])
def test_a_slice_of_rows_lives_on_the_blocks_it_covers(shape, axis, start, stop, expected):
    assert _sliced(RowLayout(8, 1.0), _slice(axis, start, stop), shape) == expected


def _sliced_loss_graph(rows: int = 1024, width: int = 768, vocab: int = 12568, chunk: int = 128):
    b = GraphBuilder("sliced", "float16")
    x = b.relu(b.input("x", (rows, width)))
    logits = b.matmul(x, b.relu(b.input("w", (width, vocab))), name="head")
    part = b.slice(logits, 0, 0, chunk, name="part")
    b.softmax_cross_entropy(part, b.input("labels", (chunk,), "int32"))
    b.output(b.remap(part, name="spread"))
    return b.graph


def test_ops_on_a_slice_of_a_matmuls_rows_run_on_its_tiles():
    """The matmul's plan splits its 1,024 rows in P blocks; the loss on the first 128 rows runs on
    the tiles of the blocks those rows cover, priced as the same loss on that many tiles."""
    g = _sliced_loss_graph()
    exe = compile(g, "bow-ipu", training=False)
    plan_rows = int(re.search(r"rows/(\d+)", exe.costs["head"].plan).group(1))
    assert plan_rows > 1, "the test needs a plan that splits the rows"
    blocks = -(-128 * plan_rows // 1024)  # blocks of 1024 / P rows the slice covers
    narrow = round(exe.tiles * blocks / plan_rows)
    loss = next(op for op in exe.graph.ops if op.kind == "softmax_cross_entropy")
    alone = op_cost(loss, exe.graph, IPU, narrow, 0.6, "float")
    assert exe.costs[loss.name].cycles == alone.cycles
    assert exe.costs[loss.name].cycles > op_cost(loss, exe.graph, IPU, exe.tiles, 0.6, "float").cycles
    # the run says so
    note = next(n for n in exe.notes if "slice of a matmul's rows" in n)
    assert f"IPU 0: 1 op on {narrow:,} of {exe.tiles:,} tiles, {exe.costs[loss.name].cycles:,} cycles" in note
    # its per-tile profile is the IPU's width, zero beyond the slice's tiles
    profile = exe.costs[loss.name].profile
    if profile is not None:
        assert len(profile.compute) == exe.tiles and not profile.compute[narrow:].any()


def test_a_remap_of_a_slice_is_sent_by_the_slices_tiles():
    """RemapCE copies the slice onto every tile: the exchange lasts as long as the slice's tiles take to
    send their larger share, so it costs more than the same copy from an even spread."""
    exe = compile(_sliced_loss_graph(), "bow-ipu", training=False)
    remap = next(op for op in exe.graph.ops if op.kind == "remap")
    assert remap.attrs["source_tiles"] < exe.tiles
    spread = dict(remap.attrs)
    del spread["source_tiles"]
    even = op_cost(Op(remap.name, "remap", remap.inputs, remap.outputs, spread), exe.graph, IPU, exe.tiles)
    assert exe.costs[remap.name].exchange_cycles > even.exchange_cycles
    assert exe.costs[remap.name].compute_cycles == even.compute_cycles  # every tile receives its share


def test_a_slice_of_an_input_keeps_the_even_spread():
    """Only a matmul's result has a known row layout: a slice of a graph input is priced on every tile."""
    b = GraphBuilder("plain", "float16")
    part = b.slice(b.input("x", (1024, 4096)), 0, 0, 128)
    b.output(b.softmax(part))
    exe = compile(b.graph, "bow-ipu", training=False)
    op = next(op for op in exe.graph.ops if op.kind == "softmax")
    assert exe.costs[op.name].cycles == op_cost(op, exe.graph, IPU, exe.tiles, 0.6, "float").cycles
    assert not any("slice of a matmul's rows" in n for n in exe.notes)


def test_gpt2_loss_over_slices_sums_one_cross_entropy_per_slice():
    g = models.get("gpt2-small", num_layers=1, seq_len=256, n_positions=256, loss_chunk=64, remap_logits=True)
    losses = [op for op in g.ops if op.kind == "softmax_cross_entropy"]
    assert len(losses) == 4 and all(g.tensors[op.inputs[0]].shape == (64, 50257) for op in losses)
    assert sum(op.kind == "remap" for op in g.ops) == 4
    assert g.producer_op(g.loss).kind == "add"
    assert len(g.outputs) == 3  # the last position's logits, the loss, the accuracy


@pytest.mark.parametrize("params, message", [
    (dict(remap_logits=True), "give loss_chunk too"),
    (dict(loss_chunk=100), "must divide"),
])
def test_gpt2_loss_slicing_errors(params, message):
    with pytest.raises(GraphError, match=message):
        models.get("gpt2-small", num_layers=1, seq_len=256, n_positions=256, **params)
