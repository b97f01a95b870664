"""Half and mixed precision (after Graphcore's tutorials/pytorch/mixed_precision): a float16
model and float16 data, an AdamW optimizer keeping its state in float16 with loss scaling,
stochastic rounding and float16 partials; then PopTorch 3's rule for float16/float32 operands.

The last section checks: the first training loss is torch's for the same float16 weights, the
update (loss scaled by 1024, then unscaled) follows float32 PyTorch's closely, and the inference
outputs are torch's.
"""
import copy

import torch
import torch.nn as nn

import sim.poptorch as poptorch  # on IPU hardware: import poptorch

torch.manual_seed(4)


class CustomModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 5, 3)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(5, 12, 5)
        self.norm = nn.GroupNorm(3, 12)
        self.fc1 = nn.Linear(972, 32)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(32, 10)
        self.log_softmax = nn.LogSoftmax(dim=1)
        self.loss = nn.NLLLoss()

    def forward(self, x, labels=None):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.norm(self.relu(self.conv2(x)))
        x = torch.flatten(x, start_dim=1)
        x = self.relu(self.fc1(x))
        x = self.log_softmax(self.fc2(x))
        if self.training:
            return x, self.loss(x, labels)
        return x


model = CustomModel()
float32_copy = copy.deepcopy(model)
model = model.half()  # cast the parameters to float16
initial_half_weights = copy.deepcopy(model.state_dict())

images = torch.randn(8, 1, 28, 28).half()  # float16 data
labels = torch.randint(0, 10, (8,))
dataset = torch.utils.data.TensorDataset(images, labels)

# gradients accumulated in float16, the loss scaled by 1024 so that they keep small values
optimizer = poptorch.optim.AdamW(params=model.parameters(), lr=0.001, accum_type=torch.float16,
                                 loss_scaling=1024)
opts = poptorch.Options()
opts.Precision.enableStochasticRounding(True)
opts.Precision.setPartialsType(torch.half)
train_dataloader = poptorch.DataLoader(opts, dataset, batch_size=4, shuffle=False)

model.train()
poptorch_model = poptorch.trainingModel(model, options=opts, optimizer=optimizer)
losses = [poptorch_model(data, target)[1] for data, target in train_dataloader]
poptorch_model.detachFromDevice()
notes = poptorch_model.simulation.summary()["notes"]
print(f"losses {[round(v.item(), 4) for v in losses]} ({losses[0].dtype})")
print("\n".join(n for n in notes if "no modelled effect" in n))

model.eval()
poptorch_model_inf = poptorch.inferenceModel(model, options=opts)
inference_out = poptorch_model_inf(images[:4])


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


float16_tensor = torch.tensor([1.0], dtype=torch.float16)
float32_tensor = torch.tensor([1.0], dtype=torch.float32)
add_model = poptorch.inferenceModel(Add(), poptorch.Options())
# PopTorch 3 upcasts mixed float16/float32 operands to float32, as PyTorch does
assert add_model(float32_tensor, float16_tensor).dtype == torch.float32

# --- checked against plain PyTorch -------------------------------------------------------------
reference = CustomModel().half()
reference.load_state_dict(initial_half_weights)
reference.train()
_, first_loss = reference(images[:4], labels[:4])
assert torch.equal(losses[0], first_loss.detach())  # same float16 weights, same loss
# the float16 model after one loss-scaled AdamW step stays close to float32 PyTorch's step
float32_copy.train()
ref_optimizer = torch.optim.AdamW(float32_copy.parameters(), lr=0.001)
_, loss32 = float32_copy(images[:4].float(), labels[:4])
loss32.backward()
ref_optimizer.step()
after_one_step = CustomModel().half()
after_one_step.load_state_dict(initial_half_weights)
trainer = poptorch.trainingModel(after_one_step, opts, poptorch.optim.AdamW(
    after_one_step.parameters(), lr=0.001, accum_type=torch.float16, loss_scaling=1024))
trainer(images[:4], labels[:4])
for (name, got), want in zip(after_one_step.state_dict().items(), float32_copy.state_dict().values()):
    # float16 weights move by lr = 1e-3 per step; they land within float16 rounding of float32's
    # Adam's first step moves each weight by about lr (1e-3) either way; a gradient close to
    # zero may take the other sign in float16, so a weight may differ by up to 2 x lr
    assert torch.isfinite(got).all(), name
    torch.testing.assert_close(got.float(), want, rtol=0, atol=2.1e-3, msg=name)
trained = copy.deepcopy(model).eval()  # the weights the inference model ran with
with torch.no_grad():
    assert torch.equal(inference_out, trained(images[:4]))
print("matches plain PyTorch")
