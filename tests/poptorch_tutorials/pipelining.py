"""Pipelining a model over 4 IPUs (after Graphcore's tutorials/pytorch/pipelining): blocks
placed with ``poptorch.Block`` and ``poptorch.BeginBlock``, a ``PipelinedExecution`` of four
stages, gradient accumulation and device iterations, then inference with the same stages.

Synthetic MNIST-sized images (no download). The last section checks the numbers against plain
PyTorch: every micro-batch's loss (``OutputMode.All``), the weights after the accumulated
AdamW updates, and the inference outputs.
"""
import copy

import torch
import torch.nn as nn

import sim.poptorch as poptorch  # on IPU hardware: import poptorch

torch.manual_seed(1)
learning_rate = 0.001
batch_size = 2
training_iterations = 1
gradient_accumulation = 8  # a 4-stage training pipeline needs at least 2 x 4 - 1
inference_iterations = 4


class ConvLayer(nn.Module):
    def __init__(self, in_channels, num_filters, kernel_size, pool_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, num_filters, kernel_size=kernel_size)
        self.pool = nn.MaxPool2d(kernel_size=pool_size)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.pool(self.conv(x)))


class Network(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = ConvLayer(1, 10, 5, 2)
        self.layer2 = ConvLayer(10, 20, 5, 2)
        self.layer3 = nn.Linear(320, 64)
        self.layer3_act = nn.ReLU()
        self.layer4 = nn.Linear(64, 10)

    def forward(self, x):
        with poptorch.Block("B1"):
            x = self.layer1(x)
        with poptorch.Block("B2"):
            x = self.layer2(x)
        with poptorch.Block("B3"):
            x = x.view(-1, 320)
            x = self.layer3_act(self.layer3(x))
        with poptorch.Block("B4"):
            x = self.layer4(x)
        return x


class TrainingModelWithLoss(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, args, labels=None):
        output = self.model(args)
        if labels is None:
            return output
        with poptorch.Block("B4"):
            loss = self.loss(output, labels)
        return output, loss


samples = batch_size * training_iterations * gradient_accumulation
images = torch.randn(samples, 1, 28, 28)
labels = torch.randint(0, 10, (samples,))

model = Network()
initial_weights = copy.deepcopy(model.state_dict())

train_opts = poptorch.Options()
train_opts.setExecutionStrategy(poptorch.PipelinedExecution(
    poptorch.Stage("B1").ipu(0), poptorch.Stage("B2").ipu(1),
    poptorch.Stage("B3").ipu(2), poptorch.Stage("B4").ipu(3)))
train_opts.deviceIterations(training_iterations)
train_opts.Training.gradientAccumulation(gradient_accumulation)
train_opts.outputMode(poptorch.OutputMode.All)  # every micro-batch's output and loss
train_opts.logCycleCount(True)

training_data = poptorch.DataLoader(train_opts, torch.utils.data.TensorDataset(images, labels),
                                    batch_size=batch_size, mode=poptorch.DataLoaderMode.Async)
training_model = poptorch.trainingModel(
    TrainingModelWithLoss(model), train_opts,
    optimizer=poptorch.optim.AdamW(model.parameters(), lr=learning_rate))
for data, target in training_data:
    preds, losses = training_model(data, target)
training_data.terminate()
print(f"{losses.shape[0]} micro-batch losses, mean {losses.mean().item():.4f}; "
      f"{training_model.cycleCount():,} cycles on {training_model.executable.system.name}")

inf_options = train_opts.clone()
inf_options.Training.gradientAccumulation(1)
inf_options.deviceIterations(inference_iterations)
inference_model = poptorch.inferenceModel(model, inf_options)
test_images = images[:batch_size * inference_iterations]
inference_out = inference_model(test_images)

# BeginBlock: the same four stages, annotated on the layers instead of in forward()
annotated = Network()
annotated.load_state_dict(model.state_dict())
annotated.layer2 = poptorch.BeginBlock(annotated.layer2, "B2", ipu_id=1)
print(poptorch.inferenceModel(annotated, inf_options))  # the repr shows the BeginBlock
assert "BeginBlock(user_id=B2, ipu_id=1)" in repr(poptorch.inferenceModel(annotated, inf_options))

# --- checked against plain PyTorch -------------------------------------------------------------
reference = Network()
reference.load_state_dict(initial_weights)
ref_optimizer = torch.optim.AdamW(reference.parameters(), lr=learning_rate)
loss_fn = nn.CrossEntropyLoss()
ref_losses = []
micro = iter(range(0, samples, batch_size))
for step in range(training_iterations):
    ref_optimizer.zero_grad()
    for acc in range(gradient_accumulation):
        i = next(micro)
        loss = loss_fn(reference(images[i:i + batch_size]), labels[i:i + batch_size])
        (loss / gradient_accumulation).backward()  # ReductionType.Mean over accumulation
        ref_losses.append(loss.detach())
    ref_optimizer.step()
torch.testing.assert_close(losses, torch.stack(ref_losses[-losses.shape[0]:]), rtol=1e-5, atol=1e-6)
for (name, got), want in zip(model.state_dict().items(), reference.state_dict().values()):
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=name)
with torch.no_grad():
    # the IPU runs one micro-batch at a time: so does the reference (bit-identical outputs)
    assert torch.equal(inference_out, torch.cat([reference(x) for x in test_images.split(batch_size)]))
print("matches plain PyTorch")
