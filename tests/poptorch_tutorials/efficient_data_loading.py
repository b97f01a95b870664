"""Efficient data loading (after Graphcore's tutorials/pytorch/efficient_data_loading): a
``poptorch.DataLoader`` feeding deviceIterations x replicas micro-batches per call, in
``DataLoaderMode.Async`` and through an ``AsynchronousDataAccessor``, with and without
synthetic data. Throughput comes from the simulated time of a call (what the IPU would take),
not from the host's wall clock.

The last section checks that every sample reaches the model once, in PopTorch's order, and
that the outputs are plain PyTorch's.
"""
import torch
import torch.nn as nn

import sim.poptorch as poptorch  # on IPU hardware: import poptorch

torch.manual_seed(3)
device_iterations = 4
batch_size = 4
replicas = 2


class ClassificationModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.pool = nn.MaxPool2d(2, 2)
        self.fc = nn.Linear(4 * 7 * 7, 10)
        self.log_softmax = nn.LogSoftmax(dim=1)
        self.loss = nn.NLLLoss()

    def forward(self, x, labels=None):
        x = self.pool(torch.relu(self.conv(x)))
        x = self.log_softmax(self.fc(torch.flatten(x, start_dim=1)))
        if self.training:
            return x, self.loss(x, labels)
        return x


features = torch.randn([64, 1, 16, 16])
labels = torch.empty([64], dtype=torch.long).random_(10)
dataset = torch.utils.data.TensorDataset(features, labels)

opts = poptorch.Options().deviceIterations(device_iterations).replicationFactor(replicas)
model = ClassificationModel().eval()
inference_model = poptorch.inferenceModel(model, opts)

loader = poptorch.DataLoader(opts, dataset=dataset, batch_size=batch_size, shuffle=False,
                             drop_last=True, num_workers=0, mode=poptorch.DataLoaderMode.Async,
                             async_options={"early_preload": True, "buffer_size": 2})
assert loader.combinedBatchSize == batch_size * device_iterations * replicas
outputs = []
for data, _ in loader:
    outputs.append(inference_model(data))
loader.terminate()
seconds = inference_model.simulation.seconds  # the simulated time of the latest call
items_per_second = loader.combinedBatchSize / seconds
print(f"{len(loader)} calls of {loader.combinedBatchSize} items: {items_per_second:,.0f} items/s (simulated)")

# synthetic data: no host transfers, so no host timestamps (the latency is not measured)
synthetic_opts = poptorch.Options().deviceIterations(device_iterations).replicationFactor(replicas)
synthetic_opts.enableSyntheticData(True)
synthetic_model = poptorch.inferenceModel(model, synthetic_opts)
first_batch, _ = next(iter(poptorch.DataLoader(synthetic_opts, dataset, batch_size=batch_size)))
synthetic_model.compile(first_batch)
synthetic_model(first_batch)
assert synthetic_model.getLatency() == (0.0, 0.0, 0.0)
compute_seconds = synthetic_model.simulation.seconds
print(f"synthetic data: {loader.combinedBatchSize / compute_seconds:,.0f} items/s (compute only)")

# an AsynchronousDataAccessor around a plain loader, re-batched to whole calls
plain = poptorch.DataLoader(poptorch.Options(), dataset, batch_size=batch_size)
accessor = poptorch.AsynchronousDataAccessor(plain, rebatched_size=loader.combinedBatchSize)
rebatched = [data for data, _ in accessor]
accessor.terminate()

# --- checked against plain PyTorch -------------------------------------------------------------
assert len(outputs) == 64 // loader.combinedBatchSize == len(rebatched)
assert [b.shape[0] for b in rebatched] == [loader.combinedBatchSize] * 2
assert torch.equal(torch.cat(rebatched), features)
with torch.no_grad():
    # each call holds [deviceIterations, replicas, micro-batch] samples; replica outputs come
    # back in that order, so the outputs follow the dataset
    reference = torch.cat([model(x) for x in features.split(batch_size)])
assert torch.equal(torch.cat(outputs), reference)
assert compute_seconds < seconds  # without host transfers the call is shorter
print("matches plain PyTorch")
