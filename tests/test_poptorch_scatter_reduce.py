"""sim.poptorch lowers scatter_reduce and index_reduce as PopTorch does and prices their max and min
as PopART runs them.

PopTorch's ``scatterReduce`` (popart_canonicalization/OtherOps.cpp) writes the reduction's initial
value where the index points when ``include_self`` is False (a ScatterReduce with reduction none)
and lowers ``mean`` to a count and a sum and a divide (``meanScatterReduceHandler``); its
``removeScatterAddIndexExpansion`` (GNNOptimizations.cpp) vectorises every reduction of an expanded
index, and ``indexReduceHandler`` always does. PopART runs a max as popops' multiUpdateMax and a min
as multiUpdateMax of the negated values into the negated target (popx/op/scatterreduceutilx.cpp);
its gradient reads the gradient and the forward output back at the index (two multiSlices) and masks
the values that are not the output. NBFNet's PNA aggregation takes sum, mean, max and min so.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import sim.poptorch as poptorch  # noqa: E402
from sim.cost import rules  # noqa: E402


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    for var in ("IPUSIM_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


class Aggregate(nn.Module):
    """One scatter_reduce of messages by an expanded destination index (PyG's ``scatter``)."""

    def __init__(self, reduce, include_self=False, nodes=50):
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self.reduce, self.include_self, self.nodes = reduce, include_self, nodes

    def forward(self, x, index):
        m = self.fc(x)
        out = m.new_zeros(self.nodes, m.shape[1])
        out = out.scatter_reduce_(0, index.unsqueeze(-1).expand_as(m), m, reduce=self.reduce,
                                  include_self=self.include_self)
        return poptorch.identity_loss(out.sum(), reduction="sum")


def _model(reduce, include_self=False, training=False, dtype=torch.float32):
    torch.manual_seed(0)
    net = Aggregate(reduce, include_self).to(dtype)
    x, index = torch.randn(400, 32, dtype=dtype), torch.randint(0, 50, (400,))
    with torch.no_grad():
        expected = net(x, index)
    if training:
        model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.0))
    else:
        model = poptorch.inferenceModel(net)
    torch.testing.assert_close(model(x, index), expected)
    return model


def _forward(model, kind="scatter_elements"):
    return [op for op in model.executable.graph.ops if op.kind == kind and op.pass_ == "forward"]


@pytest.mark.parametrize("reduce, include_self, steps", [
    ("amax", True, ["amax"]),
    ("amax", False, ["none", "amax"]),  # -inf written where the index points, then the max
    ("amin", False, ["none", "amin"]),
    ("sum", False, ["none", "sum"]),
    ("mean", True, ["sum", "sum"]),  # the count, the sum
    ("mean", False, ["none", "sum", "none", "sum"]),  # the count's mask and count, the input masked, the sum
])
def test_scatter_reduce_is_lowered_as_poptorch_lowers_it(reduce, include_self, steps):
    model = _model(reduce, include_self)
    scatters = _forward(model)
    assert [op.attrs["reduce"] for op in scatters] == steps
    assert all(op.attrs.get("slices") for op in scatters)  # every step vectorised on the index vector
    assert len(_forward(model, "div")) == (reduce == "mean")


def test_max_and_min_are_multi_update_max():
    """A max is popops' multiUpdateMax on the update's plan (fp16 partials, no casts); a min adds
    the negations of the target (twice) and of the values."""
    models = {r: _model(r, include_self=True, dtype=torch.float16) for r in ("sum", "amax", "amin")}
    cost = {r: m.executable.costs[_forward(m)[0].name] for r, m in models.items()}
    e = models["amax"].executable
    ids = (((400,), "int32", "activation"),)
    maximum = rules._gather("embedding_grad", ids, (((50, 32), "float16"),), e.system.ipu, e.tiles,
                            {"operation": "max"})
    add = rules._gather("embedding_grad", ids, (((50, 32), "float16"),), e.system.ipu, e.tiles)
    assert maximum.cycles != add.cycles  # several lookup groups: fp32 partials and casts for the add only
    assert cost["sum"].cycles == add.cycles
    assert cost["amax"].cycles == maximum.cycles
    negate = rules._elementwise("scale", [((50, 32), "float16", "activation")], [((50, 32), "float16")],
                                e.system.ipu, e.tiles).cycles
    assert cost["amin"].cycles >= maximum.cycles + 2 * negate


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_the_gradient_of_a_max_reads_the_gradient_and_the_output_back(reduce):
    """PopART's ScatterReduceGradOp for max and min: two multiSlices of rows (the gradient, the
    forward output) and a map of the values' shape masking the values that are not the output."""
    model = _model(reduce, include_self=True, training=True)
    ex = model.executable
    g = ex.graph
    back = [op for op in g.ops if op.pass_ == "backward" and op.forward_of == _forward(model)[-1].name]
    gathers = [op for op in back if op.kind == "gather_elements"]
    assert len(gathers) == 2 and all(op.attrs.get("slices") for op in gathers)
    rows = rules._gather("gather", (((400,), "int32", "activation"), ((50, 32), "float32", "activation")),
                         (((400, 32), "float32"),), ex.system.ipu, ex.tiles)
    assert all(ex.costs[op.name].cycles == rows.cycles for op in gathers)
    (mask,) = [op for op in back if op.kind == "map" and op.name.endswith("grad_updates_mask")]
    assert mask.attrs["steps"] == ["compare", "mul"] and g.tensors[mask.outputs[0]].shape == (400, 32)


def test_the_gradient_of_a_sum_is_one_row_gather():
    model = _model("sum", include_self=True, training=True)
    g = model.executable.graph
    back = [op for op in g.ops if op.pass_ == "backward" and op.forward_of == _forward(model)[-1].name]
    assert [op.kind for op in back if op.kind in ("gather_elements", "map")] == ["gather_elements"]


class IndexReduce(nn.Module):
    def forward(self, x, index):
        return x.new_zeros(10, 6).index_reduce_(0, index, x, "amax", include_self=True)


@pytest.mark.filterwarnings("ignore:index_reduce\\(\\) is in beta")  # torch's own warning, not the simulator's
def test_index_reduce_updates_rows():
    """PopTorch's indexReduceHandler always enables index broadcast: whole rows by the index vector."""
    x, index = torch.randn(12, 6), torch.randint(0, 10, (12,))
    model = poptorch.inferenceModel(IndexReduce())
    torch.testing.assert_close(model(x, index), IndexReduce()(x, index))
    (op,) = _forward(model)
    assert op.attrs.get("slices") and model.executable.graph.tensors[op.inputs[0]].shape == (12,)
