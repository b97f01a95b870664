"""A multi-layer perceptron classifier (MNIST-sized by default).

Inputs, in order: ``x`` ((B, in_features), model dtype) and ``labels`` (int32, (B,)).
Outputs: the logits and the loss. Hidden layers are linear + ReLU; ``hidden`` is a list of
widths, or one width repeated ``num_layers`` times. Default dtype float32, as PopTorch's
MNIST examples.
"""

from __future__ import annotations

from sim.graph import Graph, GraphBuilder

from ._common import MAX_LAYERS, WHY_MAX_LAYERS, Params

MODELS = {
    "mlp": dict(micro_batch=16, in_features=784, hidden=[256, 256], num_layers=None,
                out_features=10, dtype="float32"),
}


def build(name: str, p: Params) -> Graph:
    num_layers = p.layers("num_layers", minimum=0, optional=True)
    if isinstance(p["hidden"], (list, tuple)):
        hidden = p.ints("hidden")
        if len(hidden) > MAX_LAYERS:
            p.fail("hidden", f"{len(hidden)} widths; the simulator takes at most {MAX_LAYERS} layers: "
                   f"{WHY_MAX_LAYERS}")
        if num_layers is not None and num_layers != len(hidden):
            p.fail("num_layers", f"does not match the {len(hidden)} widths in hidden={hidden}; give one width a "
                   f"layer (--param hidden=[...]) or leave num_layers out")
    else:
        hidden = [p.int("hidden")] * (1 if num_layers is None else num_layers)
        if not hidden:
            p.unused("hidden", "with num_layers=0 (no hidden layer)")

    b = GraphBuilder(name, p.dtype())
    x = b.input("x", (p.int("micro_batch"), p.int("in_features")))
    labels = b.input("labels", (p["micro_batch"],), "int32")
    for i, width in enumerate(hidden):
        x = b.relu(b.linear(x, width, name=f"fc{i}"))
    logits = b.linear(x, p.int("out_features"), name="classifier")
    loss = b.softmax_cross_entropy(logits, labels)
    b.output(logits, loss)
    return b.graph
