"""ONNX models -> sim Graph: ``sim.onnx.load("model.onnx", batch_size=8)``.

The importer reads an ONNX ``ModelProto`` (a file path, its bytes, or the proto), fixes the
symbolic dimensions of the graph inputs (``batch_size`` for a symbolic leading dimension,
``dims={"seq": 128}`` for any other), runs ONNX shape inference, and walks the nodes in order:

* a node whose inputs are all known at import time (initializers that are not weights,
  ``Constant`` nodes, and ``Shape``/``Size`` of any tensor, whose shape is static here) is
  constant-folded with numpy, as PopART folds it: shape subgraphs (``Shape -> Gather ->
  Unsqueeze -> Concat -> Reshape``) cost nothing and appear in no trace;
* every other node goes through a rule (``RULES``, keyed by op type) that emits sim ops of
  kinds the cost model prices (``sim/cost``), with the real shapes and dtypes;
* a ``Loop`` or ``Scan`` is unrolled (its body's ops once an iteration, with the loop's own
  exit-flag, iterator and loop-carried copies), an ``If`` is the branch a known condition picks;
* an op type without a rule raises :class:`sim.UnsupportedOpError` naming the op type and the
  node, and saying how to give it a cost with :func:`register_op`.

Tensors: graph inputs that are not initializers become host-fed inputs, in order; float
initializers with more than one element become weights (trainable), every other initializer
and every folded value a constant (materialised only when a simulated op uses it); graph
outputs become outputs. dtypes follow the model (int64 is int32 on the IPU, float64 float32,
bfloat16 is priced as float16); ``dtype="float16"`` runs every float tensor in half precision.
Node output tensors keep their ONNX names. PopART's node attributes ``__ipu_number``,
``__pipeline_stage``, ``__execution_phase``, ``__recompute_output_in_backward_pass`` and
``__available_memory`` carry over as the op's placement and options.

Give an op type a cost with :func:`register_op`::

    import sim.onnx

    # price com.microsoft's FastGelu as the simulator's gelu (element-wise on its first input)
    sim.onnx.register_op("FastGelu", lambda ctx: ctx.op("gelu", ctx.inputs[:1]))

    # or as a codelet with its own estimate: vertices, worker cycles per vertex
    sim.onnx.register_op("MyOp", lambda ctx: ctx.custom(vertices=ctx.numel(), vertex_cycles=40))

``python -m sim.onnx model.onnx --system ipu-mk2 --batch-size 8`` simulates one call and prints
what ``ipusim run`` prints (see :func:`main`). Details and limits: docs/onnx.md.

The package, one concept a module: ``_importer`` (:func:`load`, :func:`fixed_batch`, the walk
over the graph), ``_context`` (:class:`OpContext`, what a rule sees), ``_registry`` (``RULES``,
:func:`register_op`: which rule prices a node), the rules by family (``_ops_elementwise``,
``_ops_layers``, ``_ops_reduce``, ``_ops_tensor``, ``_ops_control_flow``: Loop, Scan and If
unrolled, ``_ops_not_in_popart``), ``_folding`` (numpy
constant folding), ``_values`` (dtypes, what is known of a tensor, shape arithmetic) and ``_cli``
(the command line; ``__main__`` runs it).
"""

from __future__ import annotations

try:
    import onnx
except ImportError as _e:  # pragma: no cover - exercised only without the extra
    raise ImportError("sim.onnx needs the onnx package: pip install -e '.[onnx]' (onnx>=1.15)") from _e
del onnx  # checked here, before the modules below import it

from ._cli import build_parser, main  # noqa: E402
from ._context import OpContext  # noqa: E402
from ._importer import batch_dims, fixed_batch, load  # noqa: E402
from ._registry import RULES, register_op, unregister_op  # noqa: E402

__all__ = ["RULES", "OpContext", "batch_dims", "build_parser", "fixed_batch", "load", "main", "register_op",
           "unregister_op"]
