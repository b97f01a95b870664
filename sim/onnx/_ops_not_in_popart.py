"""ONNX ops PopART has no op for (Einsum, GatherND, NonZero, Celu, Mish, ..., and the sequence ops): each
refused by a rule that says so (and folded, like any op, when its inputs are constants). :data:`RULES` holds
the refusals by op type."""

from __future__ import annotations

from ._context import OpContext


#: ONNX's fused ops of opset 23 that torch.onnx.export (dynamo) writes from opset 23 on for torch's
#: scaled_dot_product_attention and nn.RMSNorm, and at its default opset (20) as the MatMul, Softmax, ReduceMean, ...
#: that PopART runs (torch.onnx.ops.attention / rotary_embedding, called directly, export at opset 23 only)
_FUSED_FROM_OPSET_23 = {"Attention": "scaled_dot_product_attention", "RMSNormalization": "nn.RMSNorm"}

#: ONNX ops PopART has no op for (none in willow/src/op, no ONNX pass rewrites them)
#: (GatherElements: only its builder entry; PopART's ONNX backend tests exclude test_gather_elements). The second
#: line: the rest of opsets 6-11 (those PopART's builder knows, willow/src/opsets.gen.hpp) that no op, opx or ONNX
#: pass of PopART's creates; ONNX's logical Xor among them (PopART has ai.graphcore's BitwiseXor only, and its ONNX
#: backend tests exclude test_xor)
_NOT_IN_POPART = ("Einsum", "GatherElements", "GatherND", "ScatterND", "NonZero", "Compress", "Unique", "Celu", "Mish",
                  "Hardmax", "MeanVarianceNormalization", "EyeLike", "Det", "ReverseSequence", "Trilu", "Range",
                  "Xor", "BitShift", "LpPool", "GlobalLpPool", "LpNormalization", "MaxUnpool", "MaxRoiPool",
                  "NonMaxSuppression", "Multinomial", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                  "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "TfIdfVectorizer",
                  # op types ONNX added from opset 18 on that PopART has no op for either
                  "CenterCropPad", "Col2Im", "DeformConv", "AffineGrid", "ImageDecoder", "RegexFullMatch",
                  "StringConcat", "StringSplit", "TensorScatter", "BitCast", "CumProd", "CausalConvWithState",
                  "LinearAttention", "SwiGLU", "RotaryEmbedding", *_FUSED_FROM_OPSET_23)


def _not_in_popart(ctx: OpContext):
    ctx.unsupported(f"PopART has no {ctx.op_type} op (no op of that type in PopART's willow/src/op, nor an ONNX "
                    "pass that rewrites it), so the model would not compile there"
                    + ("; an output shape that depends on the values cannot be planned either"
                       if ctx.op_type in ("NonZero", "Compress", "Unique", "NonMaxSuppression") else "")
                    + ("; PopART runs none of ONNX's int8 quantisation ops (its 8-bit arithmetic is its own FP8 casts)"
                       if "Quantize" in ctx.op_type or ctx.op_type.startswith("QLinear")
                       or ctx.op_type.endswith("Integer") else "")
                    + ("; folded when its inputs are constants" if ctx.op_type in ("Trilu", "Range", "EyeLike") else "")
                    + (f"; torch.onnx.export writes it for {_FUSED_FROM_OPSET_23[ctx.op_type]} from opset 23 on: "
                       "export with opset_version=20 (torch's default) or lower, which writes the ops it stands for"
                       if ctx.op_type in _FUSED_FROM_OPSET_23 else ""))


#: ONNX's sequence and optional ops: PopART has none (its tensors are tensors), nor does the simulator
_SEQUENCE_OPS = ("SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceAt",
                 "SequenceLength", "SplitToSequence", "ConcatFromSequence", "SequenceMap", "Optional",
                 "OptionalHasElement", "OptionalGetElement")


def _sequence_op(ctx: OpContext):
    ctx.unsupported(f"PopART has no {ctx.op_type} op: it has no ONNX sequences (nor optionals), and neither does "
                    "the simulator, so the model would not compile there. torch.onnx.export writes them for "
                    "torch.split / chunk / unbind when dynamo=True runs with optimize=False; export with the default "
                    "optimize=True (which rewrites them as Split) or with dynamo=False")


RULES: dict = {**{k: _not_in_popart for k in _NOT_IN_POPART}, **{k: _sequence_op for k in _SEQUENCE_OPS}}

#: the rules that only refuse (an error that names what else in the model is refused lists their ops too)
REFUSALS = frozenset({_not_in_popart, _sequence_op})
