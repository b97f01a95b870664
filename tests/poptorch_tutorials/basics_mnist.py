"""PopTorch basics (after Graphcore's tutorials/pytorch/basics): train a small FashionMNIST-style
classifier, then run it for inference, on synthetic 28x28 images (no download).

Written as a PopTorch user writes it; only the import differs. The last section checks the
numbers against plain PyTorch: the training losses are those torch computes for the same
weights, and the inference outputs are torch's.
"""
import copy

import torch
import torch.nn as nn

import sim.poptorch as poptorch  # on IPU hardware: import poptorch

torch.manual_seed(0)


class ClassificationModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 5, 3)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(5, 12, 5)
        self.norm = nn.GroupNorm(3, 12)
        self.fc1 = nn.Linear(972, 100)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(100, 10)
        self.log_softmax = nn.LogSoftmax(dim=1)
        self.loss = nn.NLLLoss()

    def forward(self, x, labels=None):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.norm(self.relu(self.conv2(x)))
        x = torch.flatten(x, start_dim=1)
        x = self.relu(self.fc1(x))
        x = self.log_softmax(self.fc2(x))
        # the model computes its own loss when training on the IPU
        if self.training:
            return x, self.loss(x, labels)
        return x


images = torch.randn(16, 1, 28, 28)
targets = torch.randint(0, 10, (16,))
train_dataset = torch.utils.data.TensorDataset(images, targets)
test_dataset = torch.utils.data.TensorDataset(images[:8], targets[:8])

model = ClassificationModel()
model.train()
initial_weights = copy.deepcopy(model.state_dict())

opts = poptorch.Options().deviceIterations(2)
train_dataloader = poptorch.DataLoader(opts, train_dataset, batch_size=4, shuffle=False)
optimizer = poptorch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
poptorch_model = poptorch.trainingModel(model, options=opts, optimizer=optimizer)

losses = []
for epoch in range(2):
    for data, labels in train_dataloader:  # 4 samples x 2 device iterations per call
        output, loss = poptorch_model(data, labels)
        losses.append(loss)
print(f"trained: {len(losses)} calls, last loss {losses[-1].item():.4f}, "
      f"compiled in {poptorch_model.compilationTime().total_seconds():.2f} s")
poptorch_model.detachFromDevice()

model = model.eval()
inference_opts = poptorch.Options().deviceIterations(2)
poptorch_model_inf = poptorch.inferenceModel(model, options=inference_opts)
test_dataloader = poptorch.DataLoader(inference_opts, test_dataset, batch_size=4)
predictions, outputs = [], []
for data, label in test_dataloader:
    out = poptorch_model_inf(data)
    outputs.append(out)
    predictions += out.data.max(dim=1).indices
poptorch_model_inf.detachFromDevice()
print(f"{len(predictions)} predictions; simulated latency per call "
      f"{poptorch_model_inf.getLatency()[2] * 1e6:.1f} us")

# --- checked against plain PyTorch -------------------------------------------------------------
reference = ClassificationModel()
reference.load_state_dict(initial_weights)
reference.train()
ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.01, momentum=0.9)
ref_losses = []
for epoch in range(2):
    for start in range(0, 16, 8):
        for micro in range(2):  # a device iteration is one micro-batch and one weight update
            x = images[start + 4 * micro:start + 4 * micro + 4]
            y = targets[start + 4 * micro:start + 4 * micro + 4]
            ref_optimizer.zero_grad()
            _, ref_loss = reference(x, y)
            ref_loss.backward()
            ref_optimizer.step()
        ref_losses.append(ref_loss.detach())  # OutputMode.Final: the call's last micro-batch
assert len(losses) == len(ref_losses) == 4
for got, want in zip(losses, ref_losses):
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
reference.eval()
with torch.no_grad():
    # the IPU runs one micro-batch (4 images) at a time: so does the reference
    assert torch.equal(torch.cat(outputs), torch.cat([reference(x) for x in images[:8].split(4)]))
print("matches plain PyTorch")
