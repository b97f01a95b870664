"""Losses priced as the PopART ops each front end lowers them to (sim.cost.row_ops.loss_steps): PopART's own
cross-entropy a SoftmaxOp and NllOp, PopTorch's a LogSoftmaxOp and NllOp of log-probabilities, an NLL alone
where the input is already (log-)probabilities, PopTorch's mse_loss its sub, mul and IdentityLoss."""

from __future__ import annotations

import numpy as np
import pytest

import models
import sim
from sim.cost.rules import op_cost
from sim.cost.row_ops import MSE_GRAD_STEPS, MSE_STEPS, _expanded, loss_steps
from sim.graph.ir import GraphBuilder
from sim.hardware.system import load_system

MK2 = load_system("ipu-mk2").ipu
TILES = 1472


def _cost(kind, shape=(64, 1000), dtype="float16", **attrs):
    b = GraphBuilder("loss", dtype)
    x = b.input("x", shape)
    if kind.startswith("softmax"):
        ins = [x] if kind == "softmax" else [x, b.input("labels", shape[:-1], "int32")]
    else:
        ins = [x, b.input("t", shape)]
    b.op(kind, ins, [(1,)] if kind in ("softmax_cross_entropy", "mse_loss") else [shape], attrs)
    return op_cost(b.graph.ops[-1], b.graph, MK2, TILES)


def test_popart_cross_entropy_is_its_softmax_then_its_nll_exactly():
    """PopART runs a cross-entropy as a SoftmaxOp (popnn's stable softmax, the steps a softmax op costs) then
    NllOp on its probabilities (the ``probabilities`` loss PopXL's nll_loss_with_softmax_grad makes): the loss
    costs the two added, cycle for cycle, compute set for compute set."""
    for shape in ((16, 10), (2048, 30400)):
        whole, softmax, nll = (_cost("softmax_cross_entropy", shape), _cost("softmax", shape),
                               _cost("softmax_cross_entropy", shape, probabilities=True))
        assert whole.cycles == softmax.cycles + nll.cycles
        assert whole.supersteps == softmax.supersteps + nll.supersteps


def test_small_losses_pay_for_their_compute_sets():
    """A 16 x 10 loss runs about 17 compute sets (softmax 9, encodeOneHot 3, multiply, row sum, log, the sum to
    the loss); the composed codelet it replaced priced 7 at 1,895 cycles, a quarter of the softmax alone."""
    c = _cost("softmax_cross_entropy", (16, 10), "float32")
    assert c.supersteps >= 15
    assert c.cycles > _cost("softmax", (16, 10), "float32").cycles


def test_nll_of_log_probabilities_has_no_log_and_ignored_labels_add_masks():
    """NllOpx takes the log of the picked probabilities only when they are not log-probabilities already; an
    ignored index adds applyMaskInPlaceForIgnoredIndex twice (3 sets each) and the mean over the labels kept
    (its sum, a maximum and a division on one element, the multiply)."""
    plain = loss_steps("softmax_cross_entropy", {"probabilities": True})
    logp = loss_steps("softmax_cross_entropy", {"log_probabilities": True})
    masked = loss_steps("softmax_cross_entropy", {"log_probabilities": True, "ignore_index": -100})
    assert ("stats", ("maximum", "log"), None) in plain and ("stats", ("maximum", "log"), None) not in logp
    assert len(plain) - len(logp) == 1
    assert len(masked) - len(logp) == 3 + 3 + 3 + 1
    assert _cost("softmax_cross_entropy", log_probabilities=True, ignore_index=-100).cycles > \
        _cost("softmax_cross_entropy", log_probabilities=True).cycles


def test_reductions_change_the_steps_as_nllopx_does():
    total = ("total", ("add",), 4)
    assert loss_steps("softmax_cross_entropy", {})[-1] == total
    assert loss_steps("softmax_cross_entropy", {"reduction": "none"})[-1] == ("stats", ("neg",), None)
    mean = loss_steps("softmax_cross_entropy_grad", {})
    summed = loss_steps("softmax_cross_entropy_grad", {"reduction": "sum"})
    assert mean == (("map", ("sub",)), ("scalar", ("div",)), ("map", ("mul",)))
    assert summed == (("map", ("sub",)), ("map", ("mul",)))


def test_poptorch_cross_entropy_gradient_recomputes_the_softmax():
    """PopTorch's cross-entropy gradient is NllGradOpx then LogSoftmaxGradOpx, which clones the logits and runs
    the softmax again (no PopART pattern joins them): dearer than PopART's NlllWithSoftmaxGradDirect, and its
    softmax follows enableNonStableSoftmax while the forward log-softmax stays stable."""
    poptorch_grad = _cost("softmax_cross_entropy_grad", log_softmax=True, ignore_index=-100)
    popart_grad = _cost("softmax_cross_entropy_grad")
    assert poptorch_grad.cycles > popart_grad.cycles + _cost("softmax").cycles
    steps = _expanded(loss_steps("softmax_cross_entropy_grad", {"log_softmax": True}))
    assert sum(s == ("reduce", ("max",), None) for s in steps) == 1
    nonstable = loss_steps("softmax_cross_entropy_grad", {"log_softmax": True, "non_stable": True})
    assert ("reduce", ("max",), None) not in nonstable
    assert loss_steps("softmax_cross_entropy", {"log_softmax": True, "non_stable": True}) == \
        loss_steps("softmax_cross_entropy", {"log_softmax": True})


def test_mse_loss_is_a_difference_a_square_and_a_sum_not_a_softmax():
    assert loss_steps("mse_loss", {}) == MSE_STEPS and loss_steps("mse_loss_grad", {}) == MSE_GRAD_STEPS
    codelets = {c for step in MSE_STEPS + MSE_GRAD_STEPS for c in (step[1] if len(step) > 1 else ())}
    assert not codelets & {"exp", "log", "encode_one_hot"}
    assert _cost("mse_loss", (2048, 30400)).cycles < _cost("softmax", (2048, 30400)).cycles


def test_non_stable_softmax_marks_every_popnn_softmax_of_a_training_graph():
    """enableNonStableSoftmax reaches PopART's cross-entropy SoftmaxOp (the zoo's loss) and makes it cheaper."""
    graph = models.get("mlp", micro_batch=16)
    runs = [sim.compile(graph, "ipu-mk2", sim.Options()._Popart.set("enableNonStableSoftmax", flag), training=True)
            for flag in (False, True)]
    losses = [next(op for op in ex.graph.ops if op.kind == "softmax_cross_entropy") for ex in runs]
    assert not losses[0].attrs.get("non_stable") and losses[1].attrs.get("non_stable")
    assert runs[1].costs[losses[1].name].cycles < runs[0].costs[losses[0].name].cycles


def _classifier(spelling: str):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(32, 100)

        def forward(self, x, y):
            z = self.fc(x)
            if spelling == "cross_entropy":
                return z, F.cross_entropy(z, y)
            return z, F.nll_loss(F.log_softmax(z, dim=1), y)
    return torch, Classifier()


def _loss_cycles(spelling: str) -> tuple[int, int, dict]:
    """(forward, backward) cycles of the loss ops and the log-softmax, and the loss op's attributes."""
    import sim.poptorch as poptorch
    torch, net = _classifier(spelling)
    model = poptorch.trainingModel(net, poptorch.Options(), poptorch.optim.SGD(net.parameters(), lr=0.01))
    model(torch.randn(8, 32), torch.randint(0, 100, (8,)))
    ex = model.executable
    kinds = ("softmax_cross_entropy", "softmax", "softmax_cross_entropy_grad", "softmax_grad")
    ops = [op for op in ex.graph.ops if op.kind in kinds]
    fwd = sum(ex.costs[op.name].cycles for op in ops if not op.kind.endswith("_grad"))
    bwd = sum(ex.costs[op.name].cycles for op in ops if op.kind.endswith("_grad"))
    attrs = next(op.attrs for op in ops if op.kind == "softmax_cross_entropy")
    model.destroy()
    return fwd, bwd, attrs


def test_poptorch_cross_entropy_costs_its_log_softmax_plus_nll_loss():
    """PopTorch lowers F.cross_entropy to exactly a log_softmax and an nll_loss (crossEntropyLossHandler), so
    the two spellings cost the same, forward and backward; both carry PopTorch's ignored index (-100)."""
    ce_fwd, ce_bwd, ce_attrs = _loss_cycles("cross_entropy")
    nll_fwd, nll_bwd, nll_attrs = _loss_cycles("nll")
    assert (ce_fwd, ce_bwd) == (nll_fwd, nll_bwd)
    assert ce_attrs["log_softmax"] and ce_attrs["ignore_index"] == -100 and ce_attrs["reduction"] == "mean"
    assert nll_attrs["log_probabilities"] and nll_attrs["ignore_index"] == -100


def test_onnx_negative_log_likelihood_reads_log_probabilities():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh
    import sim.onnx
    nodes = [h.make_node("MatMul", ["x", "w"], ["z"]), h.make_node("LogSoftmax", ["z"], ["lp"], axis=1),
             h.make_node("NegativeLogLikelihoodLoss", ["lp", "labels"], ["loss"], ignore_index=7)]
    graph = h.make_graph(nodes, "nll", [h.make_tensor_value_info("x", T.FLOAT, [4, 16]),
                                         h.make_tensor_value_info("labels", T.INT64, [4])],
                         [h.make_tensor_value_info("loss", T.FLOAT, [])],
                         [nh.from_array(np.zeros((16, 10), np.float32), "w")])
    g = sim.onnx.load(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), loss="loss")
    loss = next(op for op in g.ops if op.kind == "softmax_cross_entropy")
    assert loss.attrs["log_probabilities"] and loss.attrs["ignore_index"] == 7
    assert onnx is not None
