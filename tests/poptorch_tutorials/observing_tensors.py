"""Observing tensors (after Graphcore's tutorials/pytorch/observing_tensors): anchor the
gradients and updated weights of a training model with ``Options.anchorTensor``, list the
graph's tensor names, and read the anchors back with ``getAnchoredTensor`` for a gradient
histogram.

The last section checks the anchored gradients and weights against plain PyTorch's.
"""
import copy

import torch
import torch.nn as nn

import sim.poptorch as poptorch  # on IPU hardware: import poptorch

torch.manual_seed(6)


class BasicLinearModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 16)
        self.fc3 = nn.Linear(16, 10)
        self.log_softmax = nn.LogSoftmax(dim=1)
        self.loss = nn.NLLLoss()
        self.relu = nn.ReLU()

    def forward(self, x, labels=None):
        x = torch.flatten(x, start_dim=1)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        x = self.log_softmax(self.fc3(x))
        if self.training:
            return x, self.loss(x, labels)
        return x


tensors = ["Gradient___fc1.weight", "Gradient___fc3.weight", "Gradient___fc2.bias"]
opts = poptorch.Options()
for t in tensors:
    opts.anchorTensor(t, t)
opts.anchorTensor("updated_fc3", "UpdatedVar___fc3.weight")

images, labels = torch.randn(16, 1, 8, 8), torch.randint(0, 10, (16,))
train_loader = poptorch.DataLoader(opts, torch.utils.data.TensorDataset(images, labels), batch_size=8)

model = BasicLinearModel()
model.train()
initial = copy.deepcopy(model.state_dict())
poptorch_model = poptorch.trainingModel(model, options=opts,
                                        optimizer=poptorch.optim.SGD(model.parameters(), lr=0.01))
poptorch_model.compile(torch.zeros(8, 1, 8, 8), torch.zeros(8).long())
names = poptorch_model.getTensorNames()
print("gradient tensors:", [n for n in names if n.startswith("Gradient___")])

total_loss = 0.0
for data, target in train_loader:
    output, loss = poptorch_model(data, target)
    total_loss += loss
print(f"Loss: {total_loss.item():.4f}")

gradient = torch.cat([poptorch_model.getAnchoredTensor(t).flatten() for t in tensors]).abs()
nonzero = gradient != 0
histogram = torch.histc(torch.log2(gradient[nonzero]), bins=10)
print("log2 |gradient| histogram:", histogram.int().tolist())

# --- checked against plain PyTorch -------------------------------------------------------------
assert set(tensors) <= set(names)
reference = BasicLinearModel()
reference.load_state_dict(initial)
ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.01)
for i in (0, 8):  # the anchors hold the last call's values
    ref_optimizer.zero_grad()
    _, ref_loss = reference(images[i:i + 8], labels[i:i + 8])
    ref_loss.backward()
    grads = {n: p.grad.clone() for n, p in reference.named_parameters()}
    ref_optimizer.step()
for t in tensors:
    torch.testing.assert_close(poptorch_model.getAnchoredTensor(t), grads[t[len("Gradient___"):]],
                               rtol=1e-6, atol=1e-7)
torch.testing.assert_close(poptorch_model.getAnchoredTensor("updated_fc3"), reference.fc3.weight.detach(),
                           rtol=1e-6, atol=1e-7)
print("matches plain PyTorch")
