"""Phased execution (after the PopTorch user guide's phased-execution examples): the model's
blocks run phase after phase, each phase's stages in parallel on their IPUs, with weights
streamed in from streaming memory as each phase starts.

The last section checks the outputs against plain PyTorch, and the training losses against
torch's for the same weights.
"""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import sim.poptorch as poptorch  # on IPU hardware: import poptorch

torch.manual_seed(2)
N = 3
size = 16


class Chain(nn.Module):
    """Two chains of matmuls that swap inputs each step (the user guide's layout)."""

    def __init__(self):
        super().__init__()
        self.weights = nn.ParameterList([nn.Parameter(torch.rand(size, size) / size)
                                         for _ in range(N * 6)])

    def forward(self, in0):
        phase = 0
        weight = iter(self.weights)
        with poptorch.Block("phase0_ipu0"):
            ins = torch.split(in0, size)
        for n in range(N * 3):
            out = []
            for ipu in range(2):
                x = ins[ipu]
                with poptorch.Block(f"phase{phase}_ipu{ipu}"):
                    x = torch.matmul(next(weight), x)
                    out.append(F.relu(x))
            ins = out[1], out[0]
            if n % 3 != 1:  # two matmuls in the same phase
                phase += 1
        with poptorch.Block(f"phase{N * 2 - 1}_ipu1"):
            return ins[0] + ins[1]


chain = Chain()
phases = []
for n in range(N):  # alternate between IPUs 0 and 2 and IPUs 1 and 3
    phases.append([poptorch.Stage(f"phase{2 * n}_ipu0").ipu(0), poptorch.Stage(f"phase{2 * n}_ipu1").ipu(2)])
    phases.append([poptorch.Stage(f"phase{2 * n + 1}_ipu0").ipu(1),
                   poptorch.Stage(f"phase{2 * n + 1}_ipu1").ipu(3)])
opts = poptorch.Options()
opts.setExecutionStrategy(poptorch.ParallelPhasedExecution(*phases))
chain_model = poptorch.inferenceModel(chain, opts)
x = torch.rand(size * 2, 4)
chain_out = chain_model(x)
print(f"parallel phased: {len(phases)} phases, simulated {chain_model.getLatency()[2] * 1e6:.1f} us")


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 10)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, labels):
        with poptorch.Block("A"):
            x = F.relu(self.fc1(x))
        with poptorch.Block("B"):
            x = F.relu(self.fc2(x))
        with poptorch.Block("C"):
            x = self.fc3(x)
            return x, self.loss(x, labels)


classifier = Classifier()
initial_weights = copy.deepcopy(classifier.state_dict())
strategy = poptorch.SerialPhasedExecution(
    poptorch.Phase(poptorch.Stage("A")), poptorch.Phase(poptorch.Stage("B")),
    poptorch.Phase(poptorch.Stage("C")))
strategy.phase(0).ipus(0)
strategy.phase(1).ipus(0)
strategy.phase(2).ipus(0)
train_opts = poptorch.Options().deviceIterations(2)
train_opts.setExecutionStrategy(strategy)
training_model = poptorch.trainingModel(classifier, train_opts,
                                        poptorch.optim.SGD(classifier.parameters(), lr=0.05))
features, labels = torch.randn(8, 32), torch.randint(0, 10, (8,))
losses = [training_model(features, labels)[1] for _ in range(2)]
print(f"serial phased training: losses {[round(v.item(), 4) for v in losses]}")

# --- checked against plain PyTorch -------------------------------------------------------------
with torch.no_grad():
    assert torch.equal(chain_out, chain(x))
reference = Classifier()
reference.load_state_dict(initial_weights)
ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
ref_losses = []
for _ in range(2):
    for i in range(0, 8, 4):  # two device iterations of 4 samples, one update each
        ref_optimizer.zero_grad()
        _, loss = reference(features[i:i + 4], labels[i:i + 4])
        loss.backward()
        ref_optimizer.step()
    ref_losses.append(loss.detach())
for got, want in zip(losses, ref_losses):
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
print("matches plain PyTorch")
