"""Recomputation between checkpoints in a one-stage training model."""

import sim


def _stack(checkpoints: bool, layers: int = 8) -> sim.Graph:
    b = sim.GraphBuilder("stack", "float16")
    x = b.input("x", (512, 1024))
    labels = b.input("labels", (512,), "int32")
    h = x
    for i in range(layers):
        with b.scope(f"l{i}"):
            h = b.gelu(b.linear(h, 1024))
        if checkpoints and i % 2 == 1:
            b.checkpoint(h)
    b.softmax_cross_entropy(b.linear(h, 16, name="head"), labels)
    b.output(b.graph.loss)
    return b.graph


def _run(checkpoints: bool) -> sim.Run:
    o = sim.Options().enableSyntheticData(True)
    o._Popart.set("enableOutlining", False)  # the ops' own costs: the checkpoints would move PopART's calls
    return sim.simulate(_stack(checkpoints), "ipu-mk2", o, training=True)


def test_checkpoints_trade_compute_for_memory():
    """With checkpoints every two layers, the non-checkpoint activations of all but the last
    segment are recomputed: less tile memory, more compute, the extra compute being exactly
    the recomputed forward ops."""
    plain, ckpt = _run(False), _run(True)
    assert ckpt.memory[0]["peak_tile_bytes"] < plain.memory[0]["peak_tile_bytes"]
    stage = ckpt.executable.stages[0]
    recomputed = {op.name for op in stage.recomputed}
    assert recomputed and all(not op.attrs.get("recomputation_checkpoint") for op in stage.recomputed)
    extra = sum(ckpt.executable.costs[n].cycles for n in recomputed)
    assert ckpt.cycle_count - plain.cycle_count == extra
    ops = ckpt.op_trace()
    assert ops["name"].str.endswith("(recompute)").sum() == len(stage.recomputed)


def test_recomputed_segments_run_just_before_their_backward():
    """Each segment is recomputed right before the backward ops of that segment, last first;
    the last segment (after the last checkpoint) is not recomputed."""
    stage = sim.compile(_stack(True), "ipu-mk2", training=True).stages[0]
    forward, run2 = stage.memory_runs
    recomputed = {id(op) for op in stage.recomputed}

    def segment(op):  # layers l0,l1 | l2,l3 | l4,l5 | l6,l7 | head
        layer = op.name.split("/")[0]
        return 4 if layer == "head" or not layer.startswith("l") else int(layer[1:]) // 2
    blocks, current = [], None
    for i, op in enumerate(run2):
        if id(op) in recomputed:
            if current is None:
                current = (segment(op), i)
        elif current is not None:
            blocks.append((current[0], run2[i]))
            current = None
    assert [seg for seg, _ in blocks] == [3, 2, 1, 0]  # last segment first; segment 4 kept
    by_name = {op.name: op for op in forward}
    for seg, first_backward in blocks:
        assert segment(by_name[first_backward.forward_of]) == seg


def test_only_what_the_backward_pass_reads_is_recomputed():
    """A segment's recomputed copies are the ops whose outputs the backward pass reads and what they
    need; PopART prunes the others. Here the matmul of a linear layer whose bias add is the checkpoint:
    the add's gradient reads no activation, the matmul's reads its input, so the matmul is not recomputed,
    while the second layer's (read by the GELU's gradient) is."""
    b = sim.GraphBuilder("prune", "float16")
    x = b.input("x", (256, 256))
    labels = b.input("labels", (256,), "int32")
    with b.scope("a"):
        h = b.linear(x, 256)  # matmul, then the bias add: the checkpoint
    b.checkpoint(h)
    with b.scope("b"):
        h = b.gelu(b.linear(h, 256))
    b.checkpoint(h)
    b.softmax_cross_entropy(b.linear(h, 16, name="head"), labels)
    b.output(b.graph.loss)
    stage = sim.compile(b.graph, "ipu-mk2", training=True).stages[0]
    recomputed = {op.name for op in stage.recomputed}
    assert not any(n.startswith("a/") for n in recomputed)
    assert any(n.startswith("b/") and "matmul" in n for n in recomputed)
