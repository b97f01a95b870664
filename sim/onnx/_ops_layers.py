"""Rules for ONNX's layers: MatMul and Gemm; convolutions (a 2-D one as ``conv2d``, 1-D ones as a
``conv2d`` of height one, 3-D and irregular ones as poplin's expandDims, ConvTranspose, PopART's
MultiConv); the normalisations (BatchNormalization, LayerNormalization, InstanceNormalization,
GroupNormalization, LRN) and Softmax; pooling; the recurrent LSTM and GRU. :data:`RULES` holds
them by op type (``ai.graphcore::MultiConv`` for PopART's own op)."""

from __future__ import annotations

import math

from ..errors import GraphError
from ..graph.ir import RNN_GATES, conv_attrs, spatial_attr, transposed_conv_attrs
from ._context import OpContext
from ._values import _axis, _broadcast


def _conv_out(size, k, stride, pad_total, dilation=1, ceil=False) -> int:
    span = size + pad_total - dilation * (k - 1) - 1
    return (math.ceil(span / stride) if ceil else span // stride) + 1


def _pads_2d(ctx: OpContext, h: int, w: int, kernel: tuple[int, int], stride: tuple[int, int]) -> tuple[int, int]:
    """(rows, columns) of symmetric padding from ``pads``/``auto_pad``: the same before and after
    along each axis (or an error naming the pads)."""
    auto = ctx.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto == "VALID":
        return 0, 0
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        totals = [max((math.ceil(n / s) - 1) * s + k - n, 0) for n, k, s in zip((h, w), kernel, stride)]
        if any(t % 2 for t in totals):
            ctx.unsupported(f"auto_pad={auto} pads {totals[0]} rows and {totals[1]} columns in total here, "
                            "an odd number on one axis (the simulator's conv2d and pools pad each axis the same "
                            "on both sides)")
        return totals[0] // 2, totals[1] // 2
    pads = [int(p) for p in ctx.attr("pads", [0, 0, 0, 0])] or [0, 0, 0, 0]
    if pads[0] != pads[2] or pads[1] != pads[3]:
        ctx.unsupported(f"pads={pads} differ before and after an axis (the simulator's conv2d and pools pad "
                        "each axis the same on both sides)")
    return pads[0], pads[1]


def _recurrent(ctx: OpContext):
    """ONNX LSTM / GRU as PopART runs them (one popnn layer, ``GraphBuilder.recurrent``): forward
    (a GRU also ``reverse``: PopART reverses the input), the default activations, no clip, no
    peepholes or sequence lengths (PopART refuses peepholes; lstm.cpp); the LSTM's two biases added
    (lstmx.cpp growBias: a copy and an in-place ADD), the GRU's too unless ``linear_before_reset`` (popnn's
    resetAfter), which keeps them apart."""
    cell = ctx.op_type.lower()
    direction = ctx.attr("direction", "forward")
    if direction not in ("forward", "reverse") or (cell == "lstm" and direction != "forward"):
        ctx.unsupported(f"direction={direction!r} (PopART runs a forward LSTM, a forward or reverse GRU)")
    defaults = {"lstm": ["Sigmoid", "Tanh", "Tanh"], "gru": ["Sigmoid", "Tanh"]}[cell]
    if [a.decode() if isinstance(a, bytes) else a for a in ctx.attr("activations", defaults)] != defaults:
        ctx.unsupported(f"activations={ctx.attr('activations')!r} (popnn's cells run {defaults} only here)")
    for name in ("clip", "input_forget"):
        if ctx.attr(name):
            ctx.unsupported(f"{name}={ctx.attr(name)!r} (not modelled: no clip, no coupled input and forget gates)")
    if int(ctx.attr("layout", 0)):
        ctx.unsupported("layout=1 (batch-major); the simulator takes ONNX's default time-major layout")
    if ctx.has_input(4):
        ctx.unsupported("sequence_lens: variable sequence lengths are not modelled (every step of every sequence runs)")
    if cell == "lstm" and ctx.has_input(7):
        ctx.unsupported("peephole weights P (PopART: 'Popart does not support peephole connections')")
    T, B, I = ctx.shape(0)
    H = int(ctx.attr("hidden_size", ctx.shape(2)[-1]))
    G = RNN_GATES[cell] * H
    reset_after = cell == "gru" and bool(int(ctx.attr("linear_before_reset", 0)))
    x = ctx.input(0)  # reversed, a GRU's input is a view (GruOpx feeds popnn input.reverse(0))
    w_in = ctx._imp.operand(ctx, 1, (I, G), perm=(0, 2, 1))
    w_rec = ctx._imp.operand(ctx, 2, (H, G), perm=(0, 2, 1))
    dt = ctx.dtype(0)
    if not ctx.has_input(3):
        bias = ctx.builder.constant(f"{ctx.name}/bias", (2 * G if reset_after else G,), dt)
    elif reset_after:
        bias = ctx._imp.operand(ctx, 3, (2 * G,))
    else:  # the input and recurrent biases added, as PopART's LSTMOpx / GRUOpx growBias: a copy of the first
        # half and popops' in-place ADD of the second (one add of the two halves, views of the input; as
        # sim.poptorch adds torch's b_ih and b_hh), not a reduction
        flat = ctx._imp.operand(ctx, 3, (2 * G,))
        halves = [ctx.op("slice", [flat], {"axis": 0, "start": k * G, "stop": (k + 1) * G}, shapes=[(G,)],
                         result=False, suffix=f"bias_{label}") for k, label in enumerate(("input", "recurrent"))]
        bias = ctx.op("add", halves, shapes=[(G,)], result=False, suffix="bias")
    states = []
    for i, label in ((5, "h0"), (6, "c0"))[:2 if cell == "lstm" else 1]:
        states.append(ctx._imp.operand(ctx, i, (B, H)) if ctx.has_input(i)
                      else ctx.builder.constant(f"{ctx.name}/{label}", (B, H), dt))
    outs = ctx.builder.recurrent(cell, x, w_in, w_rec, bias, *states, reset_after=reset_after, name=ctx.name)
    # Y (T, 1, B, H), Y_h and Y_c (1, B, H): views of the layer's outputs
    results = [ctx.op("reshape", [outs[0]], shapes=[(T, 1, B, H)], outputs=[0])]
    for k, t in enumerate(outs[1:], start=1):
        if k < len(ctx.node.output) and ctx.node.output[k]:
            results.append(ctx.op("reshape", [t], shapes=[(1, B, H)], outputs=[k]))
        else:
            results.append(None)
    return results


#: ONNX RNN activations PopART's RNNOp takes (op/lstmutil.cpp fromString) -> the sim kind of popnn's nonlinearity
_RNN_ACTIVATIONS = {"Tanh": "tanh", "Relu": "relu", "Sigmoid": "sigmoid", "Gelu": "gelu", "Swish": "swish"}


def _rnn(ctx: OpContext):
    """ONNX RNN (a plain recurrent layer) as PopART's RNNOpx runs it (popx/op/rnnx.cpp): the two biases added
    once (getBias), the initial state copied (cloneNcopy; a missing one is a zeros tensor copied first,
    getInitialH), then a poplar Repeat of one step per time step:
    the step's input dynamically sliced from the sequence, one matmul of [x_t, h] (B, I + H) by the weights
    [W, R] (I + H, H) (poplar::concat views, the layer creating W and R in that layout), the bias added,
    the nonlinearity in place, the new state copied to the previous one, the step's output dynamically
    updated into the sequence and the step index incremented; the last state copied out. Forward only, one
    activation, no clip (PopART's RNNOp refuses the rest; sequence_lens it ignores, and so does this rule)."""
    direction = ctx.attr("direction", "forward")
    if direction != "forward":
        ctx.unsupported(f"direction={direction!r} (PopART's RNNOp runs the forward direction only: op/rnn.cpp)")
    acts = [a.decode() if isinstance(a, bytes) else a for a in ctx.attr("activations", ["Tanh"])]
    if len(acts) != 1 or acts[0] not in _RNN_ACTIVATIONS:
        ctx.unsupported(f"activations={acts} (PopART's RNNOp takes one of {', '.join(_RNN_ACTIVATIONS)})")
    for name in ("activation_alpha", "activation_beta", "clip"):
        if ctx.attr(name) is not None:
            ctx.unsupported(f"attribute {name} (PopART's RNNOp refuses it)")
    if int(ctx.attr("layout", 0)):
        ctx.unsupported("layout=1 (batch-major); the simulator takes ONNX's default time-major layout")
    T, B, I = ctx.shape(0)
    H = int(ctx.attr("hidden_size", ctx.shape(2)[-1]))
    dt, b = ctx.dtype(0), ctx.builder
    w_in = ctx._imp.operand(ctx, 1, (I, H), perm=(0, 2, 1))
    w_rec = ctx._imp.operand(ctx, 2, (H, H), perm=(0, 2, 1))
    weights = ctx.op("concat", [w_in, w_rec], {"axis": 0}, shapes=[(I + H, H)], dtypes=[dt], result=False,
                     suffix="weights")
    bias = None
    if ctx.has_input(3):
        flat = ctx._imp.operand(ctx, 3, (2 * H,))
        halves = [ctx.op("slice", [flat], {"axis": 0, "start": k * H, "stop": (k + 1) * H}, shapes=[(H,)],
                         dtypes=[dt], result=False, suffix=f"bias_{label}")
                  for k, label in enumerate(("input", "recurrent"))]
        bias = ctx.op("add", halves, shapes=[(H,)], dtypes=[dt], result=False, suffix="bias")
    if ctx.has_input(5):
        h0 = ctx._imp.operand(ctx, 5, (B, H))
    else:  # getInitialH: a clone of a zeros tensor, copied (cloneNcopy), before H_prev's own copy
        h0 = ctx.op("copy", [b.constant(f"{ctx.name}/zero_initial_h", (B, H), dt)], shapes=[(B, H)], dtypes=[dt],
                    result=False, suffix="initial_h")
    h = ctx.op("copy", [h0], shapes=[(B, H)], dtypes=[dt], result=False, suffix="h_prev")
    index, one = b.constant(f"{ctx.name}/index", (1,), "int32"), b.constant(f"{ctx.name}/one", (1,), "int32")
    x, kind, steps = ctx.input(0), _RNN_ACTIVATIONS[acts[0]], []
    for t in range(T):
        xt = ctx.op("copy", [x], {"dynamic_slice": True, "axis": 0}, shapes=[(B, I)], dtypes=[dt], result=False,
                    suffix=f"{t}/x")
        xh = ctx.op("concat", [xt, h], {"axis": 1}, shapes=[(B, I + H)], dtypes=[dt], result=False, suffix=f"{t}/xh")
        y = ctx.op("matmul", [xh, weights], shapes=[(B, H)], dtypes=[dt], result=False, suffix=f"{t}/matmul")
        if bias is not None:
            y = ctx.op("add", [y, bias], shapes=[(B, H)], dtypes=[dt], result=False, suffix=f"{t}/bias")
        y = ctx.op(kind, [y], shapes=[(B, H)], dtypes=[dt], result=False, suffix=f"{t}/{kind}")
        h = ctx.op("copy", [y], shapes=[(B, H)], dtypes=[dt], result=False, suffix=f"{t}/h_prev")
        update = ctx.op("copy", [y], {"dynamic_update": True}, shapes=[(B, H)], dtypes=[dt], result=False,
                        suffix=f"{t}/y")
        steps.append(ctx.op("reshape", [update], shapes=[(1, 1, B, H)], dtypes=[dt], result=False,
                            suffix=f"{t}/y_view"))
        index = ctx.op("add", [index, one], {"loop_control": "iterator"}, shapes=[()], dtypes=["int32"],
                       result=False, suffix=f"{t}/index")
    results = [ctx.op("concat", steps, {"axis": 0}, shapes=[(T, 1, B, H)], dtypes=[dt], outputs=[0])]
    if len(ctx.node.output) > 1 and ctx.node.output[1]:  # Y_h: the last step's output copied out
        results.append(ctx.op("copy", [steps[-1]], shapes=[(1, B, H)], dtypes=[dt], outputs=[1]))
    return results


def _matmul_shapes(sa, sb):
    if len(sa) < 2 or len(sb) < 2 or sa[-1] != sb[-2]:
        raise GraphError(f"inner dimensions do not match: {sa} @ {sb}")
    return _broadcast(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])


def _matmul(ctx: OpContext):
    sa, sb = ctx.shape(0), ctx.shape(1)
    a, b = ctx.input(0), ctx._imp.operand(ctx, 1, sb if len(sb) > 1 else sb + (1,))
    if len(sa) == 1:
        a = ctx.op("reshape", [a], shapes=[(1,) + sa], result=False, suffix="as_row")
    ea, eb = (sa if len(sa) > 1 else (1,) + sa), (sb if len(sb) > 1 else sb + (1,))
    try:
        shape = _matmul_shapes(ea, eb)
    except GraphError as e:
        raise GraphError(f"{ctx.desc}: {e}") from None
    final = shape
    if len(sa) == 1:
        final = final[:-2] + final[-1:]
    if len(sb) == 1:
        final = final[:-1]
    if final == shape:
        return ctx.op("matmul", [a, b], shapes=[shape])
    y = ctx.op("matmul", [a, b], shapes=[shape], result=False)
    return ctx.op("reshape", [y], shapes=[final])


def _gemm(ctx: OpContext):
    sa, sb = ctx.shape(0), ctx.shape(1)
    ta, tb = int(ctx.attr("transA", 0)), int(ctx.attr("transB", 0))
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    m, k = (sa[1], sa[0]) if ta else sa
    k2, n = (sb[1], sb[0]) if tb else sb
    if k != k2:
        raise GraphError(f"{ctx.desc}: inner dimensions do not match: {sa} (transA={ta}) @ {sb} "
                         f"(transB={tb})")
    # a weight operand stored transposed is laid out (in, out) on the IPU, as the zoo's linear
    a = ctx._imp.operand(ctx, 0, (m, k), perm=(1, 0) if ta else None)
    b = ctx._imp.operand(ctx, 1, (k, n), perm=(1, 0) if tb else None)
    has_c = ctx.has_input(2) and beta != 0.0
    steps = 1 + (alpha != 1.0) + has_c
    y = ctx.op("matmul", [a, b], shapes=[(m, n)], result=steps == 1)
    if alpha != 1.0:
        y = ctx.op("scale", [y], {"factor": alpha}, shapes=[(m, n)], result=not has_c, suffix="alpha")
    if has_c:
        c = ctx.input(2)
        if beta != 1.0:
            c = ctx.op("scale", [c], {"factor": beta}, shapes=[ctx.shape(2)], result=False, suffix="beta")
        y = ctx.op("add", [y, c], shapes=[_broadcast((m, n), ctx.shape(2))])
    return y


def _one_stride(ctx: OpContext, dims: int, dilated: bool = False) -> int:
    """The stride of a convolution node with ``dims`` field dimensions: the same along each (the
    simulator's convolutions take one), else a clear refusal; a dilation too unless ``dilated``
    (the rule prices a dilated kernel: :func:`_dilations`)."""
    strides = [int(v) for v in ctx.attr("strides", [1] * dims)]
    if len(set(strides)) > 1:
        ctx.unsupported(f"strides={strides} differ (the simulator's conv2d takes one stride)")
    if not dilated and any(d != 1 for d in ctx.attr("dilations", [1] * dims)):
        ctx.unsupported(f"dilations={list(ctx.attr('dilations'))} (the simulator's transposed convolution has no "
                        "dilation)")
    return strides[0]


def _dilations(ctx: OpContext, dims: int) -> list[int]:
    """The node's kernel dilation per field dimension (1s when it has none)."""
    dilations = [int(v) for v in ctx.attr("dilations", [1] * dims)] or [1] * dims
    if any(d < 1 for d in dilations):
        raise GraphError(f"{ctx.desc}: dilations={dilations}: each must be a whole number >= 1")
    return dilations


def _add_bias(ctx: OpContext, y: str, out, **kw) -> str:
    """``y`` plus the node's bias (input 2: (C,) viewed as (1, C, 1, 1), as the zoo's bias)."""
    return ctx.op("add", [y, ctx._imp.operand(ctx, 2, (1, out[1], 1, 1))], shapes=[out], **kw)


def _conv_field(ctx: OpContext, field, kernel, strides, dilations) -> tuple[int, ...]:
    """A convolution's output field from ONNX's ``auto_pad`` / ``pads`` (each side its own)."""
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        return tuple(math.ceil(n / s) for n, s in zip(field, strides))
    pads = [int(p) for p in ctx.attr("pads", [])] if auto != "VALID" else []
    pads = pads or [0] * (2 * len(field))
    return tuple((n + pads[i] + pads[i + len(field)] - d * (k - 1) - 1) // s + 1
                 for i, (n, k, s, d) in enumerate(zip(field, kernel, strides, dilations)))


def _regular_conv(ctx: OpContext, dims: int) -> bool:
    """Can ``conv2d``'s attributes hold this convolution of ``dims`` field dimensions: one stride,
    the same padding before and after each axis?"""
    if len({int(v) for v in ctx.attr("strides", [1] * dims)}) > 1:
        return False
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        field, kernel = ctx.shape(0)[2:], ctx.shape(1)[2:]
        s = int(ctx.attr("strides", [1])[0])
        return all(max((math.ceil(n / s) - 1) * s + k - n, 0) % 2 == 0 for n, k in zip(field, kernel))
    pads = [int(p) for p in ctx.attr("pads", [])] if auto != "VALID" else []
    return not pads or pads[:dims] == pads[dims:]


def _conv_expand_dims(ctx: OpContext):
    """A convolution ``conv2d`` cannot hold (3-D; strides that differ between axes; padding that differs
    before and after an axis) as poplin's expandDims runs it, as sim.poptorch prices such a layer: the
    kernel's positions folded into the input channels (a rearranging ``copy``), then a 1 x 1
    convolution over the output's positions with the layer's multiply-adds."""
    xs, ws = ctx.shape(0), ctx.shape(1)
    (n, c), (co, cig), kernel = xs[:2], ws[:2], tuple(ws[2:])
    dims = len(kernel)
    group = int(ctx.attr("group", 1))
    if cig * group != c:
        raise GraphError(f"{ctx.desc}: weight {ws} with group={group} does not match {c} input channels")
    strides = [int(v) for v in ctx.attr("strides", [1] * dims)]
    out = (n, co) + _conv_field(ctx, xs[2:], kernel, strides, _dilations(ctx, dims))
    positions = math.prod(out[2:])
    expanded = ctx.op("copy", [ctx.input(0)], {"op": "expand_dims", "kernel_shape": list(kernel)},
                      shapes=[(n, c * math.prod(kernel), 1, positions)], result=False, suffix="expand_dims")
    attrs = {"kernel": 1, "stride": 1, "padding": 0, "groups": group, "kernel_shape": list(kernel)}
    y = ctx.op("conv2d", [expanded, ctx._imp.operand(ctx, 1, ws)], attrs, shapes=[(n, co, 1, positions)],
               result=False, suffix="conv")
    if ctx.has_input(2):
        y = _add_bias(ctx, y, (n, co, 1, positions), result=False, suffix="bias")
    return ctx.op("reshape", [y], shapes=[out])


def _conv(ctx: OpContext):
    xs, ws = ctx.shape(0), ctx.shape(1)
    if len(xs) != len(ws) or len(xs) not in (3, 4, 5):
        ctx.unsupported(f"only 1-D, 2-D and 3-D convolutions (NCL / NCHW / NCDHW input, a weight of the same rank) "
                        f"have a rule; input {xs}, weight {ws}")
    if len(xs) == 5 or not _regular_conv(ctx, len(xs) - 2):
        return _conv_expand_dims(ctx)
    if len(xs) == 3:
        return _conv1d(ctx)
    n, c, h, w = xs
    co, cig, kh, kw = ws
    stride, (dh, dw) = _one_stride(ctx, 2, dilated=True), _dilations(ctx, 2)
    group = int(ctx.attr("group", 1))
    if cig * group != c:
        raise GraphError(f"{ctx.desc}: weight {ws} with group={group} does not match {c} input channels")
    ph, pw = _pads_2d(ctx, h, w, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), (stride, stride))
    out = (n, co, _conv_out(h, kh, stride, 2 * ph, dh), _conv_out(w, kw, stride, 2 * pw, dw))
    attrs = conv_attrs((kh, kw), stride, (ph, pw), group, (dh, dw))
    wt = ctx._imp.operand(ctx, 1, ws)
    if not ctx.has_input(2):
        return ctx.op("conv2d", [ctx.input(0), wt], attrs, shapes=[out])
    return _add_bias(ctx, ctx.op("conv2d", [ctx.input(0), wt], attrs, shapes=[out], result=False), out)


def _multiconv(ctx: OpContext):
    """PopART's MultiConv (``ai.graphcore``, ``builder.aiGraphcore.multiconv``): ``numConvs`` 2-D
    convolutions in one poplin multi-convolution (:mod:`sim.cost.multiconv`). As the builder writes
    the node (willow/src/builder.cpp ``AiGraphcoreOpset1::multiconv``): inputs (data, weights, bias
    or "") per convolution; ``strides``, ``pads`` and ``dilations`` flattened, one set per
    convolution; ``availableMemoryProportions`` and ``partialsTypes`` one entry per convolution;
    ``planType``, ``perConvReservedTiles`` and ``cycleBackOff`` for the planner; a dilated kernel
    as :func:`_conv` prices one."""
    n = int(ctx.attr("numConvs", len(ctx.node.output)))
    if n < 1 or len(ctx.node.input) != 3 * n or len(ctx.node.output) != n:
        raise GraphError(f"{ctx.desc}: numConvs {n} needs 3 x {n} inputs (data, weights, bias or \"\" each) and "
                         f"{n} outputs; the node has {len(ctx.node.input)} and {len(ctx.node.output)}")

    def per_conv(name: str, width: int, default: int) -> list[list[int]]:
        flat = [int(v) for v in ctx.attr(name, [])]
        if not flat:
            return [[default] * width for _ in range(n)]
        if len(flat) != n * width:
            raise GraphError(f"{ctx.desc}: {name} has {len(flat)} values, not {width} for each of {n} convolutions")
        return [flat[i * width:(i + 1) * width] for i in range(n)]
    strides, pads, dilations = per_conv("strides", 2, 1), per_conv("pads", 4, 0), per_conv("dilations", 2, 1)
    in_dilations, out_pads = per_conv("inDilations", 2, 1), per_conv("outPads", 4, 0)
    settings = {}
    for attr, key, cast in (("availableMemoryProportions", "available_memory_proportion", float),
                            ("partialsTypes", "partials_type", lambda v: (v.decode() if isinstance(v, bytes)
                                                                         else v).lower())):
        values = [cast(v) for v in ctx.attr(attr, [])]
        if values and len(values) != n:
            raise GraphError(f"{ctx.desc}: {attr} has {len(values)} values for {n} convolutions")
        settings[key] = values
    group = {"multiconv": ctx.name, "multiconv_plan": str(ctx.attr("planType", "parallel")).lower()}
    if ctx.attr("perConvReservedTiles") is not None:
        group["multiconv_reserved_tiles"] = int(ctx.attr("perConvReservedTiles"))
    if ctx.attr("cycleBackOff") is not None:
        group["multiconv_cycle_back_off"] = float(ctx.attr("cycleBackOff"))
    outs = []
    for i in range(n):
        where = f"{ctx.desc}, convolution {i}"
        if len(set(strides[i])) > 1 or min(dilations[i]) < 1 or set(in_dilations[i]) != {1} \
                or set(out_pads[i]) != {0} or pads[i][0] != pads[i][2] or pads[i][1] != pads[i][3]:
            ctx.unsupported(f"{where}: strides {strides[i]}, pads {pads[i]}, dilations {dilations[i]}, inDilations "
                            f"{in_dilations[i]}, outPads {out_pads[i]} (the simulator's conv2d takes one stride, "
                            "the same padding before and after each axis, no input dilation and no output padding)")
        (batch, c, h, w), (co, cig, kh, kw) = ctx.shape(3 * i), ctx.shape(3 * i + 1)
        if c % cig:
            raise GraphError(f"{where}: weight ({co}, {cig}, {kh}, {kw}) does not match {c} input channels")
        stride, (ph, pw), (dh, dw) = strides[i][0], pads[i][:2], dilations[i]
        out = (batch, co, _conv_out(h, kh, stride, 2 * ph, dh), _conv_out(w, kw, stride, 2 * pw, dw))
        attrs = {**conv_attrs((kh, kw), stride, (ph, pw), c // cig, (dh, dw)), **group}
        attrs.update({key: values[i] for key, values in settings.items() if values})
        x, wt = ctx.input(3 * i), ctx._imp.operand(ctx, 3 * i + 1, (co, cig, kh, kw))
        if not ctx.has_input(3 * i + 2):
            outs.append(ctx.op("conv2d", [x, wt], attrs, shapes=[out], outputs=[i]))
            continue
        y = ctx.op("conv2d", [x, wt], attrs, shapes=[out], result=False, suffix=f"conv{i}")
        bias = ctx._imp.operand(ctx, 3 * i + 2, (1, co, 1, 1))
        outs.append(ctx.op("add", [y, bias], shapes=[out], outputs=[i]))
    return outs


def _conv1d(ctx: OpContext):
    """A 1-D Conv as poplin plans it: over its one field dimension, a ``conv2d`` of height 1 with a
    ``1 x k`` kernel here (its planner weighs expandDims, as for any convolution)."""
    (n, c, length), (co, cig, k) = ctx.shape(0), ctx.shape(1)
    stride, (d,) = _one_stride(ctx, 1, dilated=True), _dilations(ctx, 1)
    group = int(ctx.attr("group", 1))
    if cig * group != c:
        raise GraphError(f"{ctx.desc}: weight {(co, cig, k)} with group={group} does not match {c} input channels")
    if ctx.attr("pads", None) is None:  # auto_pad, as a 2-D one of height 1
        _, pad = _pads_2d(ctx, 1, length, (1, d * (k - 1) + 1), (1, stride))
    else:
        pads = [int(p) for p in ctx.attr("pads")]
        if pads[0] != pads[1]:
            ctx.unsupported(f"pads={pads} differ before and after the axis (the simulator's convolutions pad "
                            "each axis the same on both sides)")
        pad = pads[0]
    lout = _conv_out(length, k, stride, 2 * pad, d)
    attrs = conv_attrs((1, k), stride, (0, pad), group, (1, d))
    x = ctx._imp.operand(ctx, 0, (n, c, 1, length))
    wt = ctx._imp.operand(ctx, 1, (co, cig, 1, k))
    y = ctx.op("conv2d", [x, wt], attrs, shapes=[(n, co, 1, lout)], result=False, suffix="conv")
    if ctx.has_input(2):
        y = _add_bias(ctx, y, (n, co, 1, lout), result=False, suffix="bias")
    return ctx.op("reshape", [y], shapes=[(n, co, lout)])


def _conv_transpose_expand_dims(ctx: OpContext):
    """A transposed convolution ``conv2d_grad_input`` cannot hold (1-D or 3-D, strides that differ
    between axes) as sim.poptorch prices one: poplin's expandDims over the positions of its output
    (computed over the upsampled input), the kernel folded into the input channels."""
    xs, ws = ctx.shape(0), ctx.shape(1)
    (n, c), (ci, cog), kernel = xs[:2], ws[:2], tuple(ws[2:])
    dims, group = len(kernel), int(ctx.attr("group", 1))
    if ci != c:
        raise GraphError(f"{ctx.desc}: weight {ws} does not match {c} input channels")
    if ctx.output_shapes[0]:
        out = tuple(ctx.output_shapes[0])
    else:  # ONNX's ConvTranspose output size, each side's padding its own
        strides = [int(v) for v in ctx.attr("strides", [1] * dims)]
        extra = [int(v) for v in ctx.attr("output_padding", [0] * dims)]
        pads = [int(p) for p in ctx.attr("pads", [])] or [0] * (2 * dims)
        field = [s * (i - 1) + e + k - pads[j] - pads[j + dims]
                 for j, (i, s, e, k) in enumerate(zip(xs[2:], strides, extra, kernel))]
        out = (n, cog * group) + tuple(field)
    positions = math.prod(out[2:])
    expanded = ctx.op("copy", [ctx.input(0)], {"op": "expand_dims", "kernel_shape": list(kernel)},
                      shapes=[(n, c * math.prod(kernel), 1, positions)], result=False, suffix="expand_dims")
    attrs = {"kernel": 1, "stride": 1, "padding": 0, "groups": group, "kernel_shape": list(kernel), "transposed": True}
    y = ctx.op("conv2d", [expanded, ctx._imp.operand(ctx, 1, ws)], attrs, shapes=[(n, out[1], 1, positions)],
               result=False, suffix="conv")
    if ctx.has_input(2):
        y = _add_bias(ctx, y, (n, out[1], 1, positions), result=False, suffix="bias")
    return ctx.op("reshape", [y], shapes=[out])


def _conv_transpose(ctx: OpContext):
    """ConvTranspose (2-D): the input gradient of the convolution mapping its output back to its
    input, as poplin runs it (:meth:`sim.GraphBuilder.conv_transpose2d`); 1-D and 3-D ones and strides
    that differ between axes by :func:`_conv_transpose_expand_dims`; a dilated kernel refused, as
    PopART's ConvTransposeOp refuses it."""
    xs, ws = ctx.shape(0), ctx.shape(1)
    if len(xs) != len(ws) or len(xs) not in (3, 4, 5):
        ctx.unsupported(f"only 1-D, 2-D and 3-D transposed convolutions (a weight of the input's rank) have a rule; "
                        f"input {xs}, weight {ws}")
    if any(d != 1 for d in _dilations(ctx, len(xs) - 2)):
        ctx.unsupported(f"dilations={_dilations(ctx, len(xs) - 2)}: PopART's ConvTransposeOp refuses a dilated kernel "
                        "(\"Non default value for dilations is not supported.\", willow/src/op/convtranspose.cpp), so "
                        "the model would not compile there")
    if len(xs) != 4 or len({int(v) for v in ctx.attr("strides", [1, 1])}) > 1:
        return _conv_transpose_expand_dims(ctx)
    n, c, h, w = xs
    ci, cog, kh, kw = ws
    group = int(ctx.attr("group", 1))
    if ci != c:
        raise GraphError(f"{ctx.desc}: weight {ws} does not match {c} input channels")
    s, co = _one_stride(ctx, 2), cog * group
    extra = [int(v) for v in ctx.attr("output_padding", [0, 0])]
    full = [(size - 1) * s + k + e for size, k, e in zip((h, w), (kh, kw), extra)]  # the output before cropping
    auto = ctx.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if ctx.attr("output_shape", None) is not None:
        crops = [f - int(o) for f, o in zip(full, list(ctx.attr("output_shape"))[-2:])]
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        crops = [f - size * s for f, size in zip(full, (h, w))]
    elif auto == "VALID":
        crops = [0, 0]
    else:
        p4 = [int(v) for v in ctx.attr("pads", [0, 0, 0, 0])] or [0, 0, 0, 0]
        crops = [p4[0] + p4[2], p4[1] + p4[3]]
    # an odd crop is the next even one less an output padding of one: the same convolution
    pads = tuple((t + 1) // 2 for t in crops)
    if any(t < 0 or e + t % 2 >= s for t, e in zip(crops, extra)):
        ctx.unsupported(f"an output of {[f - t for f, t in zip(full, crops)]} from {full} leaves an output "
                        f"padding of stride {s} or more, which a transposed convolution does not have")
    out = (n, co, full[0] - crops[0], full[1] - crops[1])
    attrs = transposed_conv_attrs(n, c, co, (h, w), (kh, kw), s, pads, group)
    wt = ctx._imp.operand(ctx, 1, ws)
    if not ctx.has_input(2):
        return ctx.op("conv2d_grad_input", [ctx.input(0), wt], attrs, shapes=[out])
    return _add_bias(ctx, ctx.op("conv2d_grad_input", [ctx.input(0), wt], attrs, shapes=[out], result=False), out)


def _batchnorm(ctx: OpContext):
    for i in (3, 4):  # running mean and variance: always-live constants, not trained
        ctx.input(i, role="constant")
    y = ctx.op("batchnorm", [ctx.input(0), ctx.input(1), ctx.input(2)],
               {"eps": float(ctx.attr("epsilon", 1e-5))}, shapes=[ctx.shape(0)])
    return [y] + [None] * (len(ctx.node.output) - 1)


def _instancenorm(ctx: OpContext):
    """InstanceNormalization (PopART's InstanceNormOpx: popnn::in, a group norm of one channel a
    group): a norm over each sample's and channel's field, with a scale and bias a channel."""
    xs = ctx.shape(0)
    if len(xs) < 3:
        ctx.unsupported(f"InstanceNormalization of a rank-{len(xs)} input {xs}: expected (N, C, ...)")
    return ctx.op("groupnorm", [ctx.input(0), ctx.input(1), ctx.input(2)],
                  {"groups": int(xs[1]), "eps": float(ctx.attr("epsilon", 1e-5))}, shapes=[xs])


def _layernorm(ctx: OpContext):
    ins = [ctx.input(0), ctx.input(1)] + ([ctx.input(2)] if ctx.has_input(2) else [])
    attrs = {"eps": float(ctx.attr("epsilon", 1e-5))}
    axis = _axis(ctx.attr("axis", -1), len(ctx.shape(0)))
    if axis != len(ctx.shape(0)) - 1:
        attrs["axis"] = axis  # priced over the last dim's rows, the same elements
    y = ctx.op("layernorm", ins, attrs, shapes=[ctx.shape(0)])
    return [y] + [None] * (len(ctx.node.output) - 1)


def _groupnorm(ctx: OpContext):
    """GroupNormalization (opset 18; PopART's GroupNormOpx, popnn's group norm): a norm over each sample's
    group of channels, with a scale and bias (per group in opset 18, per channel from 21). PopART's own
    (``ai.graphcore``) takes an (N, C) input too (Graphcore's PopART BERT normalises its rows so, one group) and
    has the groups' mean and inverse standard deviation as outputs 1 and 2, which are not modelled."""
    xs = ctx.shape(0)
    if len(xs) < 2:
        ctx.unsupported(f"GroupNormalization of a rank-{len(xs)} input {xs}: expected (N, C, ...)")
    y = ctx.op("groupnorm", [ctx.input(0), ctx.input(1), ctx.input(2)],
               {"groups": int(ctx.attr("num_groups")), "eps": float(ctx.attr("epsilon", 1e-5))}, shapes=[xs])
    return [y] + [None] * (len(ctx.node.output) - 1)


def _lrn(ctx: OpContext):
    """LRN as PopART's LRNOpx runs it: x squared, a copy of the squares, then for each of the window's
    other ``size - 1`` channel offsets an in-place add of the squares shifted along the channels, one map
    of ``bias + alpha / size * sum`` and one of ``x * scale ^ -beta``."""
    x, xs, dt = ctx.input(0), ctx.shape(0), ctx.dtype(0)
    size, channels = int(ctx.attr("size")), xs[1]
    left = (size - 1) // 2
    square = ctx.op("square", [x], shapes=[xs], dtypes=[dt], result=False, suffix="square")
    total = ctx.op("copy", [square], shapes=[xs], dtypes=[dt], result=False, suffix="sum")
    for i in range(-left, size - left):
        width = channels - abs(i)
        if i == 0 or width <= 0:
            continue
        shifted = (xs[0], width) + tuple(xs[2:])
        total = ctx.op("add", [total, square], shapes=[shifted], dtypes=[dt], result=False, suffix=f"add{i + left}")
    scale = ctx.op("map", [total], {"steps": ["mul", "add"], "grad": [["mul"]]}, shapes=[xs], dtypes=[dt],
                   result=False, suffix="scale")
    return ctx.op("map", [x, scale], {"steps": ["pow", "mul"], "grad": [["pow", "mul"], ["pow", "mul", "mul"]],
                                      "onnx_op": "LRN"}, shapes=[xs], dtypes=[dt])


def _softmax(ctx: OpContext):
    """Softmax and LogSoftmax over ``axis``; before opset 13 ONNX coerces the input to 2-D at the axis
    (rows of every dimension from ``axis`` on), as PopART's SoftmaxOpx does (``coerceTo2D``): a view to
    that 2-D shape, the softmax over its rows and a view back."""
    default = -1 if ctx.opset >= 13 else 1
    shape = ctx.shape(0)
    axis = int(ctx.attr("axis", default))
    _axis(axis, len(shape))  # in range, as ONNX requires
    axis %= len(shape)
    attrs = {"axis": -1}
    if ctx.op_type == "LogSoftmax":
        attrs["log"] = True  # priced as softmax, as sim.poptorch does
    if ctx.opset >= 13 or axis == len(shape) - 1:
        return ctx.op("softmax", [ctx.input(0)], {**attrs, "axis": axis}, shapes=[shape])
    flat = (math.prod(shape[:axis]), math.prod(shape[axis:]))
    rows = ctx.op("reshape", [ctx.input(0)], shapes=[flat], result=False, suffix="coerced_2d")
    out = ctx.op("softmax", [rows], attrs, shapes=[flat], result=False, suffix="softmax_2d")
    return ctx.op("reshape", [out], shapes=[shape])


def _nchw(ctx: OpContext) -> tuple[int, int, int, int]:
    """The NCHW input shape of a 2-D pooling node (an error for any other rank)."""
    xs = ctx.shape(0)
    if len(xs) != 4:
        ctx.unsupported(f"only 2-D pooling (NCHW input) has a rule; input {xs}")
    return tuple(xs)


def _pool_nd(ctx: OpContext, kind: str, kernel, strides, out):
    """A 1-D or 3-D pool as sim.poptorch prices MaxPool1d/3d and AvgPool1d/3d: the op with the window's
    and the stride's own volumes (``window``, ``stride_volume``) and the real output shape."""
    window, step = math.prod(kernel), math.prod(strides)
    attrs = {"kernel": max(1, round(math.sqrt(window))), "stride": max(1, round(math.sqrt(step))), "padding": 0,
             "window": int(window), "stride_volume": int(step)}
    return ctx.op(kind, [ctx.input(0)], attrs, shapes=[tuple(out)])


def _pool(kind: str):
    def rule(ctx: OpContext):
        if len(ctx.shape(0)) in (3, 5):
            kernel = [int(k) for k in ctx.attr("kernel_shape")]
            strides = [int(v) for v in ctx.attr("strides", [1] * len(kernel))]
            out = ctx.output_shapes[0] or ctx.shape(0)[:2] + _conv_field(ctx, ctx.shape(0)[2:], kernel, strides,
                                                                         [1] * len(kernel))
            y = _pool_nd(ctx, kind, kernel, strides, out)
            return [y] + [None] * (len(ctx.node.output) - 1)
        n, c, h, w = _nchw(ctx)
        kh, kw = (int(k) for k in ctx.attr("kernel_shape"))
        sh, sw = (int(s) for s in ctx.attr("strides", [1, 1]))
        if any(d != 1 for d in ctx.attr("dilations", [1, 1])):
            ctx.unsupported("dilated pooling has no rule")
        ph, pw = _pads_2d(ctx, h, w, (kh, kw), (sh, sw))
        ceil = bool(ctx.attr("ceil_mode", 0))
        out = ctx.output_shapes[0] if ceil and ctx.output_shapes[0] else \
            (n, c, _conv_out(h, kh, sh, 2 * ph, ceil=ceil), _conv_out(w, kw, sw, 2 * pw, ceil=ceil))
        attrs = {"kernel": spatial_attr((kh, kw)), "stride": spatial_attr((sh, sw)), "padding": spatial_attr((ph, pw))}
        y = ctx.op(kind, [ctx.input(0)], attrs, shapes=[out])
        return [y] + [None] * (len(ctx.node.output) - 1)
    return rule


def _global_pool(kind: str):
    def rule(ctx: OpContext):
        if len(ctx.shape(0)) in (3, 5):
            field = ctx.shape(0)[2:]
            return _pool_nd(ctx, kind, field, field, ctx.shape(0)[:2] + (1,) * len(field))
        n, c, h, w = _nchw(ctx)
        window = spatial_attr((h, w))  # the whole field, read once per output
        return ctx.op(kind, [ctx.input(0)], {"kernel": window, "stride": window, "padding": 0, "global": True},
                      shapes=[(n, c, 1, 1)])
    return rule


def _roi_align(ctx: OpContext):
    """RoiAlign as PopART's RoiAlignOp reads it (willow/src/op/roialign.cpp, RoiAlign-10) and runs it (popnn's
    experimental ROIAlign: ``roi_align``, sim/cost/roialign.py): ``output_height`` / ``output_width`` 7 and
    ``sampling_ratio`` 1 when absent (PopART's defaults, not ONNX's 1, 1, 0), the average of each bin's samples.
    Refused: ``mode="max"`` (PopART ignores the mode and averages) and a sampling ratio of 0 (ONNX's adaptive grid:
    popnn throws "samplingRatio must be greater than 0")."""
    if ctx.attr("mode", "avg") != "avg":
        ctx.unsupported(f"mode={ctx.attr('mode')!r}: PopART's RoiAlignOp reads no mode and always averages each "
                        "bin (popxl.ops.roi_align: \"Max pooling is not supported\"), so the model would compute "
                        "something else there")
    sampling = int(ctx.attr("sampling_ratio", 1))
    if sampling <= 0:
        ctx.unsupported(f"sampling_ratio={sampling}: ONNX's adaptive grid (a ratio of 0) is not PopART's; popnn's "
                        "roiAlignFwd throws \"samplingRatio must be greater than 0\"; give the ratio the model was "
                        "trained with")
    data, boxes = ctx.shape(0), ctx.shape(1)
    if len(data) != 4 or len(boxes) != 2 or boxes[1] != 4 or ctx.shape(2) != boxes[:1]:
        raise GraphError(f"{ctx.desc}: the data {data}, boxes {boxes} and batch indices {ctx.shape(2)} must be "
                         "(N, C, H, W), (R, 4) and (R,)")
    c = data[1]
    missing = [a for a in ("output_height", "output_width") if ctx.attr(a) is None]
    if missing:
        ctx.unsupported(f"no {' or '.join(missing)}: ONNX's default is 1, which the file's shapes follow, and "
                        "PopART's RoiAlignOp reads 7, so PopART would make another shape; give both in the node")
    out = (boxes[0], c, int(ctx.attr("output_height")), int(ctx.attr("output_width")))
    return ctx.op("roi_align", [ctx.input(0), ctx.input(1), ctx.input(2)],
                  {"sampling_ratio": sampling, "spatial_scale": float(ctx.attr("spatial_scale", 1.0))},
                  shapes=[out], dtypes=[ctx.dtype(0)])


RULES: dict = {
    "LSTM": _recurrent, "GRU": _recurrent, "RNN": _rnn, "RoiAlign": _roi_align,
    # dense algebra
    "MatMul": _matmul, "Gemm": _gemm, "Conv": _conv, "ConvTranspose": _conv_transpose,
    "ai.graphcore::MultiConv": _multiconv,
    # normalisations, softmax, pooling
    "BatchNormalization": _batchnorm, "LayerNormalization": _layernorm, "InstanceNormalization": _instancenorm,
    "Softmax": _softmax, "LogSoftmax": _softmax,
    "MaxPool": _pool("maxpool"), "AveragePool": _pool("avgpool"),
    "GlobalAveragePool": _global_pool("avgpool"), "GlobalMaxPool": _global_pool("maxpool"),
    "GroupNormalization": _groupnorm, "LRN": _lrn,
}
