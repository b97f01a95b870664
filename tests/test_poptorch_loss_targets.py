"""Class indices given to a loss as int32, as PopTorch takes them: on the IPU every int64 tensor is int32
(its dispatcher's ``downCastIfNeeded``), and its type inference reads the target of
``aten::nll_loss_forward`` back as Long (TypeInferenceHandler.cpp ``indexArgToUpcast``), so
``F.cross_entropy(logits, labels.int())`` traces; torch on the CPU alone refuses it ("expected target
dtype to be Long")."""

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import sim.poptorch as poptorch  # noqa: E402


class _Classifier(torch.nn.Module):
    """Logits and a loss of them; ``loss(out, y)`` as the model computes it."""

    def __init__(self, loss):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
        self.loss = loss

    def forward(self, x, y):
        out = self.fc(x)
        return out, self.loss(out, y)


#: the loss with int32 class indices -> the same loss with int64 ones (torch's on the CPU)
LOSSES = {
    "F.cross_entropy(out, y.int())": (lambda out, y: F.cross_entropy(out, y.int()), F.cross_entropy),
    "F.cross_entropy(out, target=y.int())": (lambda out, y: F.cross_entropy(out, target=y.int()), F.cross_entropy),
    "F.nll_loss(log_softmax, y.int())": (lambda out, y: F.nll_loss(F.log_softmax(out, -1), y.int()),
                                         lambda out, y: F.nll_loss(F.log_softmax(out, -1), y)),
    "nn.CrossEntropyLoss(label_smoothing), int32 labels given": (torch.nn.CrossEntropyLoss(label_smoothing=0.1),
                                                                 torch.nn.CrossEntropyLoss(label_smoothing=0.1)),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("training", [True, False])
def test_int32_class_indices(name, training):
    torch.manual_seed(0)
    x, labels = torch.randn(4, 8), torch.randint(0, 4, (4,))
    int32_loss, int64_loss = LOSSES[name]
    model = _Classifier(int32_loss)
    reference = _Classifier(int64_loss)
    reference.load_state_dict(model.state_dict())
    # the module loss is given int32 labels by the caller; the functional ones cast them in the model
    y = labels.int() if isinstance(int32_loss, torch.nn.Module) else labels
    wrapped = poptorch.trainingModel(model) if training else poptorch.inferenceModel(model)
    _, loss = wrapped(x, y)
    with torch.no_grad():
        _, expected = reference(x, labels)
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    kinds = [op.kind for op in wrapped.executable.graph.ops]
    assert kinds.count("softmax_cross_entropy") == 1  # the loss, as with int64 labels
