"""Data-parallel training with replicas and PopDist (after Graphcore's examples, which start
each instance with PopRun and build their options with ``popdist.poptorch.Options``).

Run alone it is one instance; launched with PopRun's environment (tests set
``POPDIST_NUM_TOTAL_REPLICAS=4``, ``POPDIST_NUM_LOCAL_REPLICAS=2``, instance 1 of 2) it reads
its half of the dataset and trains its two replicas, with the gradient all-reduce simulated
over all four. Only the imports differ from a hardware script.

The last section checks against plain PyTorch: each replica's loss for the call, and the
weights after the update, from the same data and weights.
"""
import copy

import torch
import torch.nn as nn

import sim.popdist as popdist  # on IPU hardware: import popdist
import sim.popdist.poptorch  # noqa: F401 - on IPU hardware: import popdist.poptorch
import sim.poptorch as poptorch  # on IPU hardware: import poptorch

popdist.init()
torch.manual_seed(5)
batch_size, device_iterations = 2, 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, y):
        logits = self.fc2(torch.relu(self.fc1(x)))
        return logits, self.loss(logits, y)


if popdist.isPopdistEnvSet():
    opts = popdist.poptorch.Options()
else:
    opts = poptorch.Options().replicationFactor(2)
opts.deviceIterations(device_iterations)
opts.randomSeed(42)  # every instance shuffles the dataset the same way
instances, replicas = opts.Distributed.numProcesses, opts.replication_factor

features, labels = torch.randn(64, 16), torch.randint(0, 4, (64,))
dataset = torch.utils.data.TensorDataset(features, labels)
loader = poptorch.DataLoader(opts, dataset, batch_size=batch_size, shuffle=True)

net = Net()
initial = copy.deepcopy(net.state_dict())
model = poptorch.trainingModel(net, opts, poptorch.optim.SGD(net.parameters(), lr=0.1))
x, y = next(iter(loader))
_, losses = model(x, y)  # OutputMode.Final: the last device iteration's loss of each replica

print(f"instance {opts.Distributed.processId} of {instances}: {replicas} replicas, "
      f"losses {[round(v, 4) for v in losses.tolist()]}, system {model.executable.system.name}")
model.destroy()

# --- checked against plain PyTorch -------------------------------------------------------------
if instances > 1:  # every instance shuffles the whole dataset with the seed, reads its part
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(42))
    first = opts.Distributed.processId * (len(dataset) // instances)
    assert torch.equal(x, features[order[first:first + loader.combinedBatchSize]])
assert all((features == row).all(dim=1).any() for row in x)  # dataset samples, shuffled
reference = Net()
reference.load_state_dict(initial)
ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
# the call's samples are laid out [device iteration, replica, micro-batch]
micro = x.reshape(device_iterations, replicas, batch_size, 16)
targets = y.reshape(device_iterations, replicas, batch_size)
for step in range(device_iterations):
    ref_optimizer.zero_grad()
    step_losses = []
    for r in range(replicas):
        _, loss = reference(micro[step, r], targets[step, r])
        (loss / replicas).backward()  # the gradient mean over the replicas
        step_losses.append(loss.detach())
    ref_optimizer.step()
torch.testing.assert_close(losses, torch.stack(step_losses), rtol=1e-6, atol=1e-6)
for (name, got), want in zip(net.state_dict().items(), reference.state_dict().values()):
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=name)
print("matches plain PyTorch")
