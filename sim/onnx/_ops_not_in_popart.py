"""ONNX ops PopART has no op for (Einsum, GatherND, NonZero, Celu, Mish, ...): each refused by a
rule that says so (and folded, like any op, when its inputs are constants). :data:`RULES` holds
the refusals by op type."""

from __future__ import annotations

from ._context import OpContext


#: ONNX ops PopART has no op for (none in willow/src/op, no ONNX pass rewrites them)
_NOT_IN_POPART = ("Einsum", "GatherND", "ScatterND", "NonZero", "Compress", "Unique", "Celu", "Mish", "Hardmax",
                  "MeanVarianceNormalization", "EyeLike", "Det", "ReverseSequence", "Trilu", "Range")


def _not_in_popart(ctx: OpContext):
    ctx.unsupported(f"PopART has no {ctx.op_type} op (no op of that type in PopART's willow/src/op, nor an ONNX "
                    "pass that rewrites it), so the model would not compile there"
                    + ("; an output shape that depends on the values cannot be planned either"
                       if ctx.op_type in ("NonZero", "Compress", "Unique") else "")
                    + ("; folded when its inputs are constants" if ctx.op_type in ("Trilu", "Range", "EyeLike") else ""))


RULES: dict = {k: _not_in_popart for k in _NOT_IN_POPART}
