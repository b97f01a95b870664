"""GraphBuilder's checks of its ops' shapes and attributes, and the Run API on a builder's graph.

Each refused op raises a GraphError naming the op and what to give, before it changes the graph,
instead of building a tensor of a wrong shape or failing later inside the compiler."""

import pytest

import sim
from sim.errors import GraphError


def builder():
    b = sim.GraphBuilder("t")
    return b, b.input("x", (4, 8)), b.input("img", (2, 3, 8, 8))


@pytest.mark.parametrize("build, message", [
    (lambda b, x, img: b.transpose(x, [0, 0]), "not a permutation"),
    (lambda b, x, img: b.transpose(x, [1]), "not a permutation"),
    (lambda b, x, img: b.transpose(x, [0, 2]), "perm entry 2 is not a dimension"),
    (lambda b, x, img: b.reduce(x, [5]), "axis 5 is not a dimension"),
    (lambda b, x, img: b.reduce(x, [0, -2]), "twice"),
    (lambda b, x, img: b.concat([x, b.input("y", (5, 9))], 0), "does not match"),
    (lambda b, x, img: b.concat([x, b.input("y", (4,))], 0), "does not match"),
    (lambda b, x, img: b.concat([x, x], 2), "axis 2 is not a dimension"),
    (lambda b, x, img: b.concat([], 0), "no tensors"),
    (lambda b, x, img: b.slice(x, 1, 0, 20), "0 <= start < stop <= 8"),
    (lambda b, x, img: b.slice(x, 1, -2, 8), "0 <= start < stop <= 8"),
    (lambda b, x, img: b.slice(x, 3, 0, 1), "axis 3 is not a dimension"),
    (lambda b, x, img: b.embedding(x, b.weight("table", (100, 16))), "integer ids"),
    (lambda b, x, img: b.conv2d(x, 4, 3), "4-D NCHW"),
    (lambda b, x, img: b.conv2d(img, 4, 3, stride=0), "stride 0"),
    (lambda b, x, img: b.conv2d(img, 4, 3, padding=-1), "padding -1"),
    (lambda b, x, img: b.conv2d(img, 0, 3), "out_channels 0"),
    (lambda b, x, img: b.conv_transpose2d(img, 4, 3, stride=0), "stride 0: give"),
    (lambda b, x, img: b.conv_transpose2d(x, 4, 3), "4-D NCHW"),
    (lambda b, x, img: b.maxpool(img, 2, 0), "stride 0"),
    (lambda b, x, img: b.maxpool(img, 0, 1), "kernel 0"),
    (lambda b, x, img: b.maxpool(img, 10, 1), "too large"),
    (lambda b, x, img: b.maxpool(x, 2, 2), "4-D NCHW"),
    (lambda b, x, img: b.global_avgpool(x), "4-D NCHW"),
    (lambda b, x, img: b.batchnorm(b.input("v", (5,))), r"\(N, C, ...\)"),
    (lambda b, x, img: b.group_norm(b.input("v", (5,)), 1), r"\(N, C, ...\)"),
    (lambda b, x, img: b.linear(b.input("v", (8,)), 4), "at least 2 dimensions"),
    (lambda b, x, img: b.linear(x, 0), "out_features 0"),
    (lambda b, x, img: b.dropout(x, 2.0), "probability"),
    (lambda b, x, img: b.scale(x, "a"), "give a number"),
    (lambda b, x, img: b.mse_loss(x, b.input("target", (3, 3))), "do not broadcast"),
    (lambda b, x, img: b.softmax_cross_entropy(x, b.input("labels", (7,), "int32")), "do not fit logits"),
    (lambda b, x, img: b.replicated_reduce_scatter(x, 0), "shards 0"),
    (lambda b, x, img: b.replicated_all_gather(x, 0), "shards 0"),
    (lambda b, x, img: b.replicated_all_reduce(x, group_stride=0), "group_stride 0"),
])
def test_invalid_ops_are_refused_before_they_change_the_graph(build, message):
    b, x, img = builder()
    with pytest.raises(GraphError, match=message):
        build(b, x, img)
    assert b.graph.ops == []
    assert set(b.graph.tensors) - {"x", "img", "y", "v", "table", "target", "labels"} == set()


def test_valid_ops_keep_their_shapes():
    b, x, img = builder()
    assert b.shape(b.transpose(x, [-1, 0])) == (8, 4)
    assert b.shape(b.reduce(x, [-1], keepdims=True)) == (4, 1)
    assert b.shape(b.concat([x, x], -1)) == (4, 16)
    assert b.shape(b.slice(x, -1, 2, 8)) == (4, 6)
    assert b.shape(b.softmax_cross_entropy(x, b.input("labels", (4,), "int32"))) == (1,)
    assert b.shape(b.softmax_cross_entropy(x, b.input("soft", (4, 8)), name="soft_loss")) == (1,)
    assert b.shape(b.mse_loss(x, b.input("row", (8,)), name="mse")) == (1,)


def test_refused_conv_leaves_its_weight_name_free():
    b, _, img = builder()
    with pytest.raises(GraphError, match="too large"):
        b.conv2d(img, 4, 11)
    assert b.shape(b.conv2d(img, 4, 3)) == (2, 4, 6, 6)


def test_reused_layer_name_says_what_to_do():
    b, x, _ = builder()
    b.linear(x, 4)
    with pytest.raises(GraphError, match="defined twice; give it, or the layer that makes it, another name"):
        b.linear(x, 4)


@pytest.mark.parametrize("kwargs", [{"ipu": -1}, {"ipu": "1"}, {"ipu": 1.0}, {"ipu": 0, "stage": -1},
                                    {"ipu": 0, "phase": True}])
def test_ipu_scope_takes_whole_numbers(kwargs):
    b, _, _ = builder()
    with pytest.raises(GraphError, match="whole number >= 0"):
        with b.ipu(**kwargs):
            pass


@pytest.mark.parametrize("attrs, message", [
    ({"vertex_cycles": 50}, "attrs need vertices"),
    ({"vertices": "many", "vertex_cycles": 50}, "vertices 'many'"),
    ({"vertices": 10, "vertex_cycles": 50, "tiles": 0}, "tiles 0"),
    ({"vertices": 10, "vertex_cycles": -5}, "vertex_cycles -5"),
])
def test_custom_op_needs_a_cost(attrs, message):
    b, x, _ = builder()
    with pytest.raises(GraphError, match=message):
        b.op("custom", [x], [(4, 8)], attrs)


def test_custom_op_runs_at_its_own_cost():
    b, x, _ = builder()
    y = b.op("custom", [x], [(4, 8)], {"vertices": 6000, "vertex_cycles": 50, "tiles": 1000})[0]
    b.output(y)
    run = sim.simulate(b.graph, "ipu-mk2")
    ops = run.op_trace()
    assert ops["kind"].tolist() == ["custom"]
    assert run.breakdown.sum(axis=1).tolist() == [run.cycle_count]


def test_tile_compute_refuses_an_ipu_not_simulated():
    b, x, _ = builder()
    b.output(b.relu(x))
    run = sim.simulate(b.graph, "ipu-mk2")
    assert run.tile_compute(0).sum() > 0
    with pytest.raises(ValueError, match="no IPU 3 simulated"):
        run.tile_compute(3)


@pytest.mark.parametrize("loss, what", [("x", "an input or a weight"), ("nothing", "not a tensor of it")])
def test_a_loss_no_op_makes_is_named(loss, what):
    b = sim.GraphBuilder("g")
    x = b.input("x", (4, 8))
    b.linear(x, 2, name="fc")
    b.graph.loss = loss
    with pytest.raises(sim.GraphError, match=f"its loss '{loss}' is {what}"):
        sim.compile(b.graph, "ipu-mk2", training=True)
