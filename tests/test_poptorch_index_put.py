"""sim.poptorch prices index_put and scatter_add as PopTorch vectorises them.

PopTorch's ``indexPutHandler`` (popart_canonicalization/IndexOps.cpp, ``canVectorizeInDim``) lowers an
index_put with one 1-D integer index on one dimension to PopART's ScatterReduce with index broadcast,
which ``multiUpdate``s whole slices (popx/op/scatterreduceutilx.cpp); its
``removeScatterAddIndexExpansion`` (GNNOptimizations.cpp) does the same for a scatter_add whose index
is an expanded vector (torch_scatter's ``scatter_sum``). Other indices stay ONNX ScatterElements,
element by element. TGN writes its memory tables of 9228 rows 80 rows at a time so.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import sim  # noqa: E402
import sim.poptorch as poptorch  # noqa: E402
from sim.cost import rules  # noqa: E402


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch):
    for var in ("IPUSIM_SYSTEM", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


def _scatters(model):
    g = model.executable.graph
    return [op for op in g.ops if op.kind == "scatter_elements"]


class RowWrite(nn.Module):
    """TGN's memory write: whole rows of a table, by one index vector."""

    def forward(self, table, idx, v):
        return table.index_put((idx,), v)


class ElementWrite(nn.Module):
    """The same elements written by two index tensors: PopTorch cannot vectorise it."""

    def forward(self, table, idx, v):
        cols = torch.arange(table.shape[1])
        return table.index_put((idx[:, None], cols[None, :]), v)


def _run(net, rows=80, entries=9228, width=100):
    table = torch.zeros(entries, width).half()
    idx = torch.randperm(entries)[:rows]  # distinct rows: the write is deterministic
    v = torch.randn(rows, width).half()
    opts = poptorch.Options()
    opts.simulatedSystem("bow-ipu")
    model = poptorch.inferenceModel(net, opts)
    got = model(table, idx, v)
    torch.testing.assert_close(got, table.index_put((idx,), v))
    return model


def test_a_row_write_is_a_multi_update_of_whole_rows():
    model = _run(RowWrite())
    (op,) = _scatters(model)
    g, ex = model.executable.graph, model.executable
    assert op.attrs["slices"] and op.attrs["axis"] == 0 and g.tensors[op.inputs[0]].shape == (80,)
    # priced as popops' row-wise update of 80 rows of 100 (sim/cost/embedding.py), not 8,000 single elements
    rows = rules._gather("embedding_grad", (((80,), "int32", "activation"),), (((9228, 100), "float16"),),
                         ex.system.ipu, ex.tiles)
    assert ex.costs[op.name].cycles == rows.cycles
    elements = _run(ElementWrite())
    (eop,) = _scatters(elements)
    assert not eop.attrs.get("slices") and elements.executable.graph.tensors[eop.inputs[0]].shape == (8000,)
    # both first zero the 9,228 x 100 table (configs/_vector-ops.toml table_zero); the rows' update beside
    # that is a fraction of the elements'
    assert ex.costs[op.name].cycles * 5 < elements.executable.costs[eop.name].cycles


def test_index_put_writes_slices_only_where_poptorch_vectorises():
    """One index vector on any one dimension writes slices; two index tensors, a one-element index
    and a 2-D index write elements; a mask is a select; the outputs are torch's."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x, idx):
            y = self.fc(x).clone()
            y[idx] = 0.5  # 3 rows
            y[:, idx[:2]] += 1.0  # 2 columns (read, add, written back)
            y[idx, idx] = 2.0  # two index tensors: 3 elements
            y[idx[:1]] = 3.0  # a one-element index: one row of 8, element by element
            y[idx[:2].reshape(1, 2)] = 4.0  # a 2-D index: 2 rows of 8, element by element
            w = y.clone()
            w[w > 0.3] = 0.0
            return w

    m = M()
    x, idx = torch.randn(6, 8), torch.tensor([0, 2, 4])
    model = poptorch.inferenceModel(m)
    torch.testing.assert_close(model(x, idx), m(x, idx))
    g = model.executable.graph
    got = [(g.tensors[op.inputs[0]].shape, op.attrs.get("slices", False), op.attrs["axis"]) for op in _scatters(model)]
    assert got == [((3,), True, 0), ((2,), True, 1), ((3,), False, 0), ((8,), False, 0), ((16,), False, 0)]
    assert [op.kind for op in g.ops][-1] == "map"  # the mask's select


class Aggregate(nn.Module):
    """torch_scatter's scatter_sum (TGN's message aggregation): the index expanded to the messages'
    shape, then scatter_add_; and TGN's softmax, whose index is stacked (a copy, not an expand)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, msg, index):
        msg = self.fc(msg)
        out = torch.zeros(10, msg.shape[1], dtype=msg.dtype)
        summed = out.scatter_add_(0, index.unsqueeze(-1).expand(msg.size()), msg)
        stacked = torch.stack([index] * 6, 1)
        soft = torch.zeros(10, msg.shape[1]).scatter_add(0, stacked, msg.exp())
        return poptorch.identity_loss(summed.sum() + soft.sum(), reduction="sum")


@pytest.mark.parametrize("training", [False, True])
def test_scatter_add_of_an_expanded_index_updates_rows(training):
    msg, index = torch.randn(12, 6), torch.randint(0, 10, (12,))
    torch.manual_seed(0)
    net = Aggregate()
    with torch.no_grad():
        expected = net(msg, index)
    if training:
        model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    else:
        model = poptorch.inferenceModel(net)
    torch.testing.assert_close(model(msg, index), expected)
    g = model.executable.graph
    forward = [op for op in _scatters(model) if op.pass_ == "forward"]
    got = [(g.tensors[op.inputs[0]].shape, op.attrs.get("slices", False)) for op in forward]
    assert got == [((12,), True), ((12, 6), False)]
    ex = model.executable
    rows = rules._gather("embedding_grad", (((12,), "int32", "activation"),), (((10, 6), "float32"),),
                         ex.system.ipu, ex.tiles)
    assert ex.costs[forward[0].name].cycles == rows.cycles
    if training:  # the messages' gradient reads the rows back: a lookup of 12 rows of 6
        grads = [op for op in g.ops if op.kind == "gather_elements" and op.pass_ == "backward"]
        assert sorted(op.attrs.get("slices", False) for op in grads) == [False, True]


def test_the_values_gradient_of_a_row_write_is_a_lookup_of_rows():
    """In training the written values' gradient reads the rows back (PopART's NoneReductionStrategy
    calcGradient: a multiSlice of the rows)."""
    class Write(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)

        def forward(self, table, idx, x):
            out = table.index_put((idx,), self.fc(x))
            return poptorch.identity_loss(out.sum(), reduction="sum")

    net = Write()
    model = poptorch.trainingModel(net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
    model(torch.zeros(500, 16), torch.randperm(500)[:40], torch.randn(40, 16))
    ex = model.executable
    (grad,) = [op for op in ex.graph.ops if op.kind == "gather_elements" and op.pass_ == "backward"]
    assert grad.attrs["slices"]
    rows = rules._gather("gather", (((40,), "int32", "activation"), ((500, 16), "float32", "activation")),
                         (((40, 16), "float32"),), ex.system.ipu, ex.tiles)
    assert ex.costs[grad.name].cycles == rows.cycles


def test_index_copy_is_refused_saying_to_write_an_index_put():
    """PopTorch has no index_copy handler (Hugging Face's StaticCache writes its cache with index_copy_): the error
    says so and what to write instead; the same write as an index_put runs."""
    class Cache(nn.Module):
        def __init__(self, index_put: bool):
            super().__init__()
            self.index_put = index_put
            self.register_buffer("cache", torch.zeros(2, 4, 32, 16))

        def forward(self, kv, pos):
            if self.index_put:
                self.cache[:, :, pos] = kv
            else:
                self.cache.index_copy_(2, pos, kv)
            return self.cache.sum(-1)

    kv, pos = torch.randn(2, 4, 1, 16), torch.tensor([3])
    with pytest.raises(sim.UnsupportedOpError, match=r"no handler for aten::index_copy .*StaticCache.*write the slices "
                                                     r"with an index_put, `t\[:, :, pos\] = src`"):
        poptorch.inferenceModel(Cache(index_put=False))(kv, pos)
    assert poptorch.inferenceModel(Cache(index_put=True))(kv, pos).shape == (2, 4, 32)
