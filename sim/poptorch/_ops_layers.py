"""Op rules: layers beyond the core set (convolutions and pooling in 1-D and 3-D, transposed
convolutions, group / instance / weight normalisation, recurrent layers, bilinear, embedding
bags, upsampling, and the loss functions PopTorch builds from element-wise ops).

A 1-D convolution is a ``conv2d`` of height 1 (its planner weighs the kernel on the tile against
poplin's expandDims, as for any convolution). A 1-D or 2-D transposed convolution is the input
gradient of the convolution mapping its output back to its input (``conv2d_grad_input``), as poplin
runs it. A 3-D convolution, or one with a dilated kernel or unequal strides, is priced as poplin's
expandDims transform lays it out: its kernel positions folded into the input channels (an on-tile
rearranging copy), then a ``conv2d`` of a 1x1 kernel over its output positions, with exactly the
layer's multiply-adds (over the upsampled input for a transposed one; a note in the run says so).
Stride, padding and dilation shape the output, which is all that price reads of them.
An LSTM is one popnn layer op (PopTorch's dispatcher intercepts ``lstm.input`` whole). A GRU or a
plain RNN is the ops ATen's composite builds it from, as PopTorch 3's dispatcher receives them (it
registers no whole-layer kernel for ``gru`` / ``rnn_tanh`` / ``rnn_relu``, so RNNOps.cpp's PopART GRU
and RNN ops are never built): per step exactly the ops of the matching cell op, on the step's input as
it is (an IPU tensor is not on the CPU, so ATen does not project the whole sequence first): for a GRU,
GRUCell's input and state linears (each a matmul of (B, in) by (in, 3H) and a bias add), its reset and
input gates (add, sigmoid), its new gate (mul, add, tanh) and ``(h - n) * z + n``; for a plain RNN, the
state's and the input's linears, their add and the nonlinearity; the states stacked.
A recurrent cell (GRUCell, LSTMCell, RNNCell) is the linears and element-wise ops ATen builds it from.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn

from ._emit import (adaptive_window, average_pool, batch_of_one, channel_bias, const, embedding_flags_refused, emit,
                    emit_chain, emit_map, is_tensor, tensor_args, tuple_result)
from ._values import Lazy, sim_dtype
from ..graph.ir import RNN_GATES, transposed_conv_attrs


# --- convolutions ------------------------------------------------------------------------------
def _tuple(v, n):
    if isinstance(v, (list, tuple)):
        return tuple(int(x) for x in v) if len(v) == n else tuple(int(v[0]) for _ in range(n))
    return (int(v),) * n


#: PopART's ConvTransposeOp::setup (willow/src/op/convtranspose.cpp) throws for a dilated kernel, as PopTorch's
#: supported-ops page says ("Conv transpose operations do not yet support dilations")
TRANSPOSED_DILATION_REFUSED = ("a transposed convolution with a dilated kernel, which PopART refuses (ConvTransposeOp: "
                               "\"Non default value for dilations is not supported.\"): dilate the kernel's weights "
                               "with zeros yourself, or leave dilation 1")


def conv_any(ctx):
    """A 1-D, 3-D or transposed convolution: Conv1d, Conv3d, ConvTranspose1d/2d/3d, their
    functional and ATen forms (2-D ones are ``sim.poptorch._mapping._conv``'s); a transposed one with a
    dilated kernel is refused, as PopART refuses it."""
    m = ctx.module
    if m is not None:
        x = ctx.sarg(0)
        w, b = ctx.param("weight"), ctx.param("bias")
        transposed = isinstance(m, nn.modules.conv._ConvTransposeNd)
        stride, padding, groups, dilation = m.stride, m.padding, m.groups, m.dilation
        if m.padding_mode != "zeros":
            ctx.cap.notes.append(f"{ctx.desc}: padding_mode {m.padding_mode!r} priced as zero padding")
    else:
        x, w, b = ctx.sarg(0, "input"), ctx.sarg(1, "weight"), ctx.sarg(2, "bias")
        key = ctx.key
        if key in ("convolution", "_convolution"):
            stride, padding, dilation = ctx.arg(3), ctx.arg(4), ctx.arg(5)
            transposed, groups = bool(ctx.arg(6)), ctx.arg(8)
        elif key.startswith("conv_transpose"):
            stride, padding, groups, dilation = (ctx.arg(3, "stride", 1), ctx.arg(4, "padding", 0),
                                                 ctx.arg(6, "groups", 1), ctx.arg(7, "dilation", 1))
            transposed = True
        else:
            stride, padding = ctx.arg(3, "stride", 1), ctx.arg(4, "padding", 0)
            dilation, groups = ctx.arg(5, "dilation", 1), ctx.arg(6, "groups", 1)
            transposed = False
    rx = ctx.args[0]
    out = ctx.output
    rw = w.value if isinstance(w, Lazy) else None
    kshape = tuple(rw.shape[2:]) if rw is not None else tuple(ctx.shape(w)[2:])
    if transposed and set(_tuple(dilation, len(kshape))) != {1}:
        ctx.unsupported(TRANSPOSED_DILATION_REFUSED)
    if len(kshape) <= 2 and set(_tuple(dilation, len(kshape))) == {1} and len(set(_tuple(stride, len(kshape)))) == 1:
        if transposed:
            return _transposed_as_grad_input(ctx, x, w, b, kshape, _tuple(stride, len(kshape))[0],
                                             _tuple(padding, len(kshape)), int(groups or 1))
        if len(kshape) == 1 and not isinstance(padding, str):
            return _conv1d_as_2d(ctx, x, w, b, kshape[0], _tuple(stride, 1)[0], _tuple(padding, 1)[0],
                                 int(groups or 1))
    volume = math.prod(kshape)
    n, ci, co = rx.shape[0], rx.shape[1], out.shape[1]
    positions = math.prod(out.shape[2:])
    # poplin's expandDims: the kernel's positions folded into the input channels (an on-tile
    # rearranging copy), then a 1x1 convolution of exactly the layer's multiply-adds
    expanded = emit(ctx, "copy", [x], (n, ci * volume, 1, positions), rx.dtype,
                    {"op": "expand_dims", "kernel_shape": list(kshape)}, "expand_dims")
    attrs = {"kernel": 1, "stride": 1, "padding": 0, "groups": int(groups or 1), "kernel_shape": list(kshape)}
    if transposed:
        attrs["transposed"] = True
    y = emit(ctx, "conv2d", [expanded, ctx.t(w)], (n, co, 1, positions), out.dtype, attrs, "conv")
    y = ctx.op("reshape", [y], name="unview")  # the run's notes name the expandDims convolutions
    if is_tensor(b):
        y = channel_bias(ctx, y, b)
    return y


def _as_2d(ctx, x, w, name: str):
    """Views of a 1-D convolution's input ``(N, C, L)`` and weight ``(A, B, k)`` as 2-D ones of
    height 1: ``(N, C, 1, L)`` and ``(A, B, 1, k)``."""
    rx = ctx.args[0]
    x = emit(ctx, "reshape", [x], (rx.shape[0], rx.shape[1], 1, rx.shape[2]), rx.dtype, name=f"{name}_as_2d")
    wshape = ctx.shape(w)
    w = emit(ctx, "reshape", [w], (wshape[0], wshape[1], 1, wshape[2]), ctx.cap.g.tensors[ctx.t(w)].dtype,
             name="weight_as_2d")
    return x, w


def _conv1d_as_2d(ctx, x, w, b, k, stride, padding, groups):
    """A 1-D convolution as poplin plans it: a convolution over its one field dimension, a 2-D one of
    height 1 with a ``1 x k`` kernel here, for which the planner weighs the kernel on the tile (the
    nx1 and, depthwise, the 1xN SLIC vertices) against folding it into the input channels
    (expandDims), as ``conv2d`` does."""
    x, w = _as_2d(ctx, x, w, "conv")
    out = ctx.output
    attrs = {"kernel": [1, int(k)], "stride": int(stride), "padding": [0, int(padding)], "groups": groups}
    y = emit(ctx, "conv2d", [x, w], (out.shape[0], out.shape[1], 1, out.shape[2]), out.dtype, attrs, "conv")
    y = ctx.op("reshape", [y], name="unview")
    if is_tensor(b):
        y = channel_bias(ctx, y, b)
    return y


def _transposed_as_grad_input(ctx, x, w, b, kshape, stride, padding, groups):
    """A 1-D or 2-D transposed convolution as poplin runs it: the input gradient of the convolution
    that maps its output back to its input (``conv2d_grad_input``, :meth:`sim.GraphBuilder.conv_transpose2d`),
    whose worklists skip the stride's dilation zeros. A 1-D one is a 2-D one of height 1 (views)."""
    rx, out = ctx.args[0], ctx.output
    n, c = rx.shape[0], rx.shape[1]
    field_in, field_out = tuple(rx.shape[2:]), tuple(out.shape[2:])
    if len(kshape) == 1:  # (N, C, L) as (N, C, 1, L)
        kshape, padding = (1,) + tuple(kshape), (0,) + tuple(padding)
        field_in, field_out = (1,) + field_in, (1,) + field_out
        x, w = _as_2d(ctx, x, w, "conv_transpose")
    attrs = transposed_conv_attrs(n, c, out.shape[1], field_in, kshape, stride, padding, groups)
    y = emit(ctx, "conv2d_grad_input", [x, w], (n, out.shape[1]) + field_out, out.dtype, attrs, "conv_transpose")
    if len(out.shape) == 3:
        y = ctx.op("reshape", [y], name="unview")
    if is_tensor(b):
        y = channel_bias(ctx, y, b)
    return y


# --- pooling in any dimension ------------------------------------------------------------------
def _pool_any(kind):
    def rule(ctx):
        m = ctx.module
        rx = ctx.args[0]
        out = ctx.output[0] if isinstance(ctx.output, (tuple, list)) else ctx.output
        spatial = max(1, out.dim() - 2)
        adaptive = "adaptive" in ctx.key.lower() or (m is not None and "Adaptive" in type(m).__name__)
        if adaptive:
            k, s = adaptive_window(ctx, tuple(rx.shape[-spatial:]), tuple(out.shape[-spatial:]))
        elif m is not None:
            k = _tuple(m.kernel_size, spatial)
            s = _tuple(m.stride or m.kernel_size, spatial)
        else:
            k = _tuple(ctx.arg(1, "kernel_size"), spatial)
            st = ctx.arg(2, "stride")
            s = _tuple(st if st not in (None, [], ()) else k, spatial)
        window, step = math.prod(k), math.prod(s)
        attrs = {"kernel": max(1, round(math.sqrt(window))), "stride": max(1, round(math.sqrt(step))),
                 "padding": 0, "window": int(window), "stride_volume": int(step)}
        x = ctx.sarg(0, "input")
        if kind == "avgpool" and not adaptive:  # poolingHandler builds avg_pool1d / 3d as avg_pool2d
            padding = _tuple(m.padding if m is not None else ctx.arg(3, "padding", 0), spatial)
            y = average_pool(ctx, x, out, attrs, padding)
        else:
            y = ctx.op(kind, [x], attrs, output=out, name=kind)
        if isinstance(ctx.output, (tuple, list)):
            return (y,) + (None,) * (len(ctx.output) - 1)
        return y
    return rule


# --- normalisations ----------------------------------------------------------------------------
def _instance_norm(ctx):
    """InstanceNorm as it reaches PopTorch 3's dispatcher: torch's composite (aten/src/ATen/native/Normalization.cpp
    instance_norm; PopTorch intercepts native_group_norm but not instance_norm, CompositeImplicitAutograd), the input
    viewed as one sample of N C channels, a batch norm of it (PopTorch's batchNormHandler: PopART's BatchNormalization,
    in training mode, batch statistics, whenever ``use_input_stats``: training, or no running statistics kept) and
    viewed back; the scale and shift (and running statistics) repeated N times, broadcast views (repeatHandler), whose
    gradients sum the copies. A 2-D input (no batch) is one sample."""
    m = ctx.module
    rx = ctx.args[0]
    out = ctx.output[0] if isinstance(ctx.output, (tuple, list)) else ctx.output
    if m is not None:
        gamma, beta = (ctx.param("weight"), ctx.param("bias")) if m.affine else (None, None)
        stats = (ctx.param("running_mean"), ctx.param("running_var")) if m.track_running_stats else (None, None)
        batch_statistics = m.training or not m.track_running_stats
    else:  # instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)
        gamma, beta = ctx.sarg(3, "weight"), ctx.sarg(4, "bias")
        stats = (ctx.sarg(1, "running_mean"), ctx.sarg(2, "running_var"))
        batch_statistics = bool(ctx.arg(5, "use_input_stats", True))
    shape = tuple(rx.shape) if rx.dim() > 2 else (1,) + tuple(rx.shape)
    n, c = shape[0], shape[1]
    dt = sim_dtype(out.dtype)
    g, b = ctx.norm_params((c,), gamma, beta, dt)
    repeated = [emit(ctx, "reshape", [t], (n * c,), dt, name=f"{label}_repeated")
                for t, label in ((g, "weight"), (b, "bias"))]
    for t in stats:
        if is_tensor(t) and not batch_statistics:
            ctx.t(t)  # the running statistics live on the device, read once per channel and sample
    x = emit(ctx, "reshape", [ctx.sarg(0, "input")], (1, n * c) + shape[2:], dt, name="samples_as_channels")
    y = emit(ctx, "batchnorm", [x] + repeated, (1, n * c) + shape[2:], dt,
             {"batch_statistics": True} if batch_statistics else None, "batchnorm")
    return tuple_result(ctx, ctx.op("reshape", [y], output=out, name="instance_norm"))


def _group_norm(ctx):
    """GroupNorm: popnn's group norm (PopTorch intercepts native_group_norm), statistics over each sample's group of
    channels, then the per-channel scale and shift."""
    m = ctx.module
    rx = ctx.args[0]
    out = ctx.output[0] if isinstance(ctx.output, (tuple, list)) else ctx.output
    c = rx.shape[1] if rx.dim() > 1 else 1
    if m is not None:
        groups = m.num_groups
        gamma, beta = ctx.param("weight"), ctx.param("bias")
        eps = m.eps
    elif ctx.key == "group_norm":
        groups, gamma, beta = ctx.arg(1, "num_groups"), ctx.sarg(2, "weight"), ctx.sarg(3, "bias")
        eps = ctx.arg(4, "eps", 1e-5)
    else:  # native_group_norm
        groups, gamma, beta, eps = ctx.arg(6), ctx.sarg(1), ctx.sarg(2), ctx.arg(7)
    g, b = ctx.norm_params((c,), gamma, beta, sim_dtype(out.dtype))
    y = ctx.op("groupnorm", [ctx.sarg(0, "input"), g, b], {"groups": int(groups), "eps": float(eps)},
               output=out, name="groupnorm")
    if isinstance(ctx.output, (tuple, list)):
        return (y,) + (None,) * (len(ctx.output) - 1)
    return y


def weight_norm(ctx, transposed: bool):
    """The weight of a layer under ``weight_norm`` (``g * v / ||v||``, the norm over every dim
    but the first) as graph ops, so ``g`` and ``v`` are the trained weights; None otherwise."""
    m = ctx.module
    g = v = None
    if hasattr(m, "weight_g") and hasattr(m, "weight_v"):  # torch.nn.utils.weight_norm
        g, v = m.weight_g, m.weight_v
    else:
        params = getattr(getattr(m, "parametrizations", None), "weight", None)
        if params is not None and hasattr(params, "original0") and hasattr(params, "original1"):
            g, v = params.original0, params.original1
    if g is None:
        return None
    lg, lv = ctx.cap._lazy(g, f"{ctx.node.target}.weight_g"), ctx.cap._lazy(v, f"{ctx.node.target}.weight_v")
    return _weight_norm_ops(ctx, lv, lg, v, 0, "weight_norm/weight", transposed)


def _weight_norm_ops(ctx, v, g, rv, dim: int, name: str, transposed: bool = False):
    """``g * v / ||v||``, the norm over every dim of ``v`` but ``dim``: graph ops."""
    shape, dt = tuple(rv.shape), rv.dtype
    dim %= len(shape)
    norm_shape = tuple(s if i == dim else 1 for i, s in enumerate(shape))
    sq = emit(ctx, "mul", [v, v], shape, dt, name="weight_norm/square")
    s = emit(ctx, "reduce_sum", [sq], norm_shape, dt,
             {"axes": [i for i in range(len(shape)) if i != dim], "keepdims": True}, "weight_norm/sum")
    n = emit(ctx, "sqrt", [s], norm_shape, dt, name="weight_norm/norm")
    d = emit(ctx, "div", [v, n], shape, dt, name="weight_norm/direction")
    if not transposed and name == "weight_norm":  # an ATen op: its result is the op's output
        return ctx.op("mul", [d, g], name=name)
    w = emit(ctx, "mul", [d, g], shape, dt, name=name)
    if transposed:
        perm = list(range(len(shape)))
        perm[-2], perm[-1] = perm[-1], perm[-2]
        w = emit(ctx, "transpose", [w], tuple(shape[p] for p in perm), dt, {"perm": perm}, "weight_norm/weight_t")
    return w


# --- recurrent layers ---------------------------------------------------------------------------
def _recurrent(ctx):
    """RNN / GRU / LSTM (one layer, one direction, no dropout: PopTorch's documented limits); the module
    kept whole under torch.fx, or ATen's lstm / gru / rnn_tanh / rnn_relu. An LSTM is one popnn layer op
    (:func:`_popnn_lstm`); a GRU or a plain RNN is the ops ATen builds it from (:func:`_full_layer`)."""
    m = ctx.module
    if m is not None:
        cell = "lstm" if isinstance(m, nn.LSTM) else "gru" if isinstance(m, nn.GRU) else f"rnn_{m.nonlinearity}"
        layers, bidirectional, dropout, batch_first = m.num_layers, m.bidirectional, m.dropout, m.batch_first
        if getattr(m, "proj_size", 0):
            ctx.unsupported("LSTM proj_size has no rule")
        hx = ctx.sarg(1) if len(ctx.sym_args) > 1 else None
        H = m.hidden_size
        w_ih, w_hh = ctx.param("weight_ih_l0", transposed=True), ctx.param("weight_hh_l0", transposed=True)
        b_ih, b_hh = ctx.param("bias_ih_l0"), ctx.param("bias_hh_l0")
    else:  # aten.<cell>.input(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        cell = ctx.key
        layers, dropout, bidirectional, batch_first = ctx.arg(4), ctx.arg(5), ctx.arg(7), ctx.arg(8)
        hx = ctx.sarg(1)
        real_h = ctx.arg(1)[0] if isinstance(ctx.arg(1), (list, tuple)) else ctx.arg(1)
        H = real_h.shape[-1]
        params = list(ctx.sarg(2)) + [None, None]
        w_ih, w_hh, b_ih, b_hh = params[0], params[1], (params[2] if ctx.arg(3) else None), \
            (params[3] if ctx.arg(3) else None)
    if layers != 1 or bidirectional or dropout:
        ctx.unsupported("PopTorch supports recurrent layers with num_layers=1, bidirectional=False and "
                        "dropout=0 only")
    # RNNOps.cpp's lstmHandler refuses an LSTM without biases; PopTorch 3 intercepts lstm.input only, so a GRU or a
    # plain RNN reaches it as ATen's ops, with biases or without
    if b_ih is None and cell == "lstm":
        ctx.unsupported("LSTM without biases is not supported by PopTorch (popart_canonicalization/RNNOps.cpp "
                        "lstmHandler); keep bias=True")
    w_ih, w_hh = (_transposed_weight(ctx, w) for w in (w_ih, w_hh))
    x, rx = ctx.sarg(0), ctx.args[0]
    batched = rx.dim() == 3
    dt = rx.dtype
    if batch_first and batched:
        B, T, I = rx.shape
        x = emit(ctx, "transpose", [x], (T, B, I), dt, {"perm": [1, 0, 2]}, "time_major")
    elif batched:
        T, B, I = rx.shape
    else:
        (T, I), B = rx.shape, 1
    if cell == "lstm":
        return _popnn_lstm(ctx, m, x, (T, B, I), H, dt, hx, w_ih, w_hh, b_ih, b_hh, batch_first and batched)
    return _full_layer(ctx, cell, x, (T, B, I), H, dt, hx, (w_ih, w_hh, b_ih, b_hh), batch_first and batched)


def _full_layer(ctx, cell, x, tbi, H, dt, hx, params, batch_first):
    """A GRU or a plain RNN (``gru`` / ``rnn_tanh`` / ``rnn_relu``) as PopTorch 3 receives it: ATen's
    composite, not one op.

    ``aten::gru.input`` / ``rnn_tanh.input`` / ``rnn_relu.input`` are CompositeImplicitAutograd and
    PopTorch's dispatcher registers only ``lstm.input`` of the recurrent layers on the IPU key
    (poptorch/source/dispatch_tracer/RegisterOptionalAtenOps.cpp.inc), so the layer reaches PopART as the
    ops of ATen's RNN.cpp (``ONE_HIDDEN_RNN``: ``_rnn_impl_with_concat`` over ``FullLayer``), and
    RNNOps.cpp's ``gruHandler`` / ``rnnHandler`` (PopART's GRU / RNN op), written for the removed
    torch.jit.trace front end, never see it. On a device other than the CPU (the IPU's tensors)
    ``FullLayer`` does not project the whole sequence first: each step's input, a view (``unbind``), goes
    to the cell as it is, and the step is exactly the cell op's (:func:`_cell_ops`, as
    :func:`_recurrent_cell` builds ``gru_cell`` / ``rnn_tanh_cell`` / ``rnn_relu_cell``): for a GRU,
    ``linear_ih(x_t)``, ``linear_hh(h)``, their gates, ``(h - n) * z + n``; for a plain RNN,
    ``linear_hh(h)``, ``linear_ih(x_t)``, their add and the nonlinearity. The steps' states are stacked
    (a ``concat``) as the output and the last one stacked as ``h_n``. A missing state is torch's zeros (a
    constant). ``x``: the time-major input (T, B, I) elements; ``params``: the (in, out) weights and the
    biases."""
    T, B, I = tbi
    x = emit(ctx, "reshape", [x], (T, B, I), dt, name="sequence_in")
    h = emit(ctx, "reshape", [hx], (B, H), dt, name="h0") if is_tensor(hx) else const(ctx, (B, H), dt, "h0")
    hs = []
    for t in range(T):
        xt = emit(ctx, "slice", [x], (B, I), dt, {"index": str(t), "axis": 0, "start": t, "stop": t + 1},
                  f"step{t}/x")
        h, = _cell_ops(ctx, cell, xt, (h,), params, (B, H), dt, f"step{t}/")
        hs.append(h)
    seq = emit(ctx, "concat", hs, (T, B, H), dt, {"axis": 0}, "sequence")
    if batch_first:
        seq = emit(ctx, "transpose", [seq], (B, T, H), dt, {"perm": [1, 0, 2]}, "batch_first")
    out = ctx.op("reshape", [seq], output=ctx.output[0], name="output")
    last = emit(ctx, "concat", [h], (1, B, H), dt, {"axis": 0}, "h_n_stacked")
    return out, ctx.op("reshape", [last], output=ctx.output[1], name="h_n")


def _popnn_lstm(ctx, m, x, tbi, H, dt, hx, w_ih, w_hh, b_ih, b_hh, batch_first):
    """An LSTM as PopTorch lowers it: ``lstm.input`` is the one recurrent layer its dispatcher intercepts
    whole, and RNNOps.cpp's ``lstmHandler`` makes it one PopART LSTM op (``GraphBuilder.recurrent``,
    popnn's cell loop), the two biases summed. ``x``: the time-major input (T, B, I)."""
    T, B, I = tbi
    gates = RNN_GATES["lstm"] * H
    x = emit(ctx, "reshape", [x], (T, B, I), dt, name="sequence_in")
    biases = [b for b in (b_ih, b_hh) if is_tensor(b)]
    bias = emit(ctx, "add", biases, (gates,), dt, name="bias") if len(biases) == 2 else const(ctx, (gates,), dt, "bias")
    h0, c0 = hx if isinstance(hx, (tuple, list)) else (hx, None)

    def state(s, label):
        return emit(ctx, "reshape", [s], (B, H), dt, name=label) if is_tensor(s) else const(ctx, (B, H), dt, label)

    seq, *last = ctx.builder.recurrent("lstm", ctx.t(x), ctx.t(w_ih), ctx.t(w_hh), ctx.t(bias),
                                       ctx.t(state(h0, "h0")), ctx.t(state(c0, "c0")), name=ctx.key)
    if batch_first:
        seq = emit(ctx, "transpose", [seq], (B, T, H), dt, {"perm": [1, 0, 2]}, "batch_first")
    out = ctx.op("reshape", [seq], output=ctx.output[0], name="output")
    # the final states torch returns: ATen's (output, h_n, c_n), the module's (output, (h_n, c_n))
    wanted = ctx.output[1:] if m is None else ctx.output[1]
    finals = tuple(ctx.op("reshape", [t], output=o, name=n) for t, o, n in zip(last, wanted, ("h_n", "c_n")))
    return (out, finals) if m is not None else (out,) + finals


#: ATen's cell ops -> (cell, gates): the nonlinearity of a plain RNN cell is in the name
_CELL_OPS = {"gru_cell": ("gru", 3), "lstm_cell": ("lstm", 4), "rnn_tanh_cell": ("rnn_tanh", 1),
             "rnn_relu_cell": ("rnn_relu", 1)}


def _recurrent_cell(ctx):
    """One step of a recurrent cell: ``nn.GRUCell``, ``nn.LSTMCell``, ``nn.RNNCell`` (kept whole under
    torch.fx) or ATen's ``gru_cell`` / ``lstm_cell`` / ``rnn_tanh_cell`` / ``rnn_relu_cell``.

    PopTorch has no handler for these: ATen registers them CompositeImplicitAutograd and PopTorch's
    dispatcher intercepts only ``lstm.input`` of the recurrent ops
    (poptorch/source/dispatch_tracer/RegisterOptionalAtenOps.cpp.inc), so a cell reaches PopART as the
    ops ATen's RNN.cpp builds it from (:func:`_cell_ops`)."""
    m = ctx.module
    if m is not None:
        cell = ("gru" if isinstance(m, nn.GRUCell) else "lstm" if isinstance(m, nn.LSTMCell)
                else f"rnn_{m.nonlinearity}")
        H = m.hidden_size
        hx = ctx.sarg(1, "hx")
        w_ih, w_hh = ctx.param("weight_ih", transposed=True), ctx.param("weight_hh", transposed=True)
        b_ih, b_hh = ctx.param("bias_ih"), ctx.param("bias_hh")
    else:  # aten.<cell>(input, hx, w_ih, w_hh, b_ih=None, b_hh=None); lstm_cell's hx is [h, c]
        cell, _ = _CELL_OPS[ctx.key]
        hx = ctx.sarg(1, "hx")
        w_ih, w_hh = ctx.sarg(2, "w_ih"), ctx.sarg(3, "w_hh")
        b_ih, b_hh = ctx.sarg(4, "b_ih"), ctx.sarg(5, "b_hh")
        H = ctx.args[3].shape[-1]
        w_ih, w_hh = (_transposed_weight(ctx, w) for w in (w_ih, w_hh))
    rx = ctx.args[0]
    dt = rx.dtype
    unbatched = rx.dim() == 1
    B = 1 if unbatched else rx.shape[0]
    x = emit(ctx, "reshape", [ctx.sarg(0)], (1, rx.shape[0]), dt, name="as_batch") if unbatched else ctx.sarg(0)
    if cell == "lstm":
        h, c = (hx if isinstance(hx, (tuple, list)) else (None, None))
    else:
        h, c = hx, None

    def state(s, label):
        if not is_tensor(s):  # the module's zeros when no state is given: a constant
            return const(ctx, (B, H), dt, label)
        return emit(ctx, "reshape", [s], (B, H), dt, name=label) if unbatched else s

    states = (state(h, "h"), state(c, "c")) if cell == "lstm" else (state(h, "h"),)
    results = _cell_ops(ctx, cell, x, states, (w_ih, w_hh, b_ih, b_hh), (B, H), dt)
    outs = list(ctx.output) if isinstance(ctx.output, (tuple, list)) else [ctx.output]
    made = tuple(ctx.op("reshape", [r], output=o, name="unbatched") if unbatched else r
                 for r, o in zip(results, outs))
    return made if isinstance(ctx.output, (tuple, list)) else made[0]


def _cell_ops(ctx, cell, x, states, params, bh, dt, prefix: str = "") -> list:
    """One step of ATen's recurrent cell, op by op, in RNN.cpp's order: a cell op (``gru_cell``, ...) and
    each step of a GRU / plain RNN layer (:func:`_full_layer`) are these same ops.

    The cells' non-fused path: the fused ``_thnn_fused_gru_cell`` / ``_thnn_fused_lstm_cell`` are taken
    only for CUDA (and, in later torch, XPU / PrivateUse1) tensors, and an IPU tensor's device is
    ``DeviceType::IPU``. Each linear is ``at::linear`` (PopTorch's ``linearHandler`` / Gemm: a matmul by
    the transposed weight, plus the bias), its gates ``unsafe_chunk`` slices of it. ``GRUCell``:
    ``linear_ih(x)``, ``linear_hh(h)``, r = sigmoid(h_r + i_r), z = sigmoid(h_z + i_z),
    n = tanh(i_n + h_n * r), then ``(h - n) * z + n``. ``LSTMCell``: ``linear_hh(h) + linear_ih(x)``, the
    four gates' nonlinearities, cy = f c + i g, hy = o tanh(cy). ``SimpleCell``: ``linear_hh(h) +
    linear_ih(x)`` and the nonlinearity. ``x``: the step's input (B, I); ``states``: (h,) or, for an LSTM,
    (h, c), each (B, H); ``params``: the (in, out) weights and the biases (None when absent); ``bh``: (B, H);
    ``prefix``: the ops' name prefix. Returns [hy] or [hy, cy], each (B, H). Shapes in elements."""
    B, H = bh
    w_ih, w_hh, b_ih, b_hh = params
    G = RNN_GATES.get(cell, 1) * H
    h = states[0]

    def linear(v, w, b, label):
        y = emit(ctx, "matmul", [v, w], (B, G), dt, name=f"{prefix}{label}/matmul")
        return emit(ctx, "add", [y, b], (B, G), dt, name=f"{prefix}{label}/bias") if is_tensor(b) else y

    def gate(src, i, label):
        return emit(ctx, "slice", [src], (B, H), dt, {"axis": 1, "start": i * H, "stop": (i + 1) * H},
                    prefix + label)

    def op(kind, inputs, label):
        return emit(ctx, kind, inputs, (B, H), dt, name=prefix + label)

    if cell == "gru":
        gi, gh = linear(x, w_ih, b_ih, "linear_ih"), linear(h, w_hh, b_hh, "linear_hh")
        r = op("sigmoid", [op("add", [gate(gh, 0, "h_r"), gate(gi, 0, "i_r")], "reset/add")], "reset_gate")
        z = op("sigmoid", [op("add", [gate(gh, 1, "h_z"), gate(gi, 1, "i_z")], "input/add")], "input_gate")
        hn = op("mul", [gate(gh, 2, "h_n"), r], "new/reset")
        n = op("tanh", [op("add", [gate(gi, 2, "i_n"), hn], "new/add")], "new_gate")
        return [op("add", [op("mul", [op("sub", [h, n], "blend/sub"), z], "blend/mul"), n], "hy")]
    if cell == "lstm":
        c = states[1]
        gsum = emit(ctx, "add", [linear(h, w_hh, b_hh, "linear_hh"), linear(x, w_ih, b_ih, "linear_ih")],
                    (B, G), dt, name=f"{prefix}gates")
        i = op("sigmoid", [gate(gsum, 0, "g_i")], "in_gate")
        f = op("sigmoid", [gate(gsum, 1, "g_f")], "forget_gate")
        g = op("tanh", [gate(gsum, 2, "g_c")], "cell_gate")
        o = op("sigmoid", [gate(gsum, 3, "g_o")], "out_gate")
        cy = op("add", [op("mul", [f, c], "cy/forget"), op("mul", [i, g], "cy/in")], "cy")
        return [op("mul", [o, op("tanh", [cy], "cy/tanh")], "hy"), cy]
    pre = emit(ctx, "add", [linear(h, w_hh, b_hh, "linear_hh"), linear(x, w_ih, b_ih, "linear_ih")],
               (B, G), dt, name=f"{prefix}pre")
    return [op("relu" if cell == "rnn_relu" else "tanh", [pre], "hy")]


def _transposed_weight(ctx, w):
    """A linear weight ``(out, in)`` in the ``(in, out)`` layout a matmul reads."""
    if isinstance(w, Lazy):
        return ctx.cap.weight(w, transposed=True)
    shape = ctx.shape(w)
    return emit(ctx, "transpose", [w], (shape[1], shape[0]), ctx.cap.g.tensors[ctx.t(w)].dtype,
                {"perm": [1, 0]}, "weight_t")


# --- bilinear, embedding bags, upsampling ------------------------------------------------------
def _bilinear(ctx):
    """y = x1 A x2 + b as PopTorch's bilinearHandler (BilinearOps.cpp) builds it: x1 viewed (rows, 1, 1, I1) times
    the weight A (O, I1, I2), broadcast, a batched matmul of rows x O products (1, I1) x (I1, I2); that times x2
    viewed (rows, 1, I2, 1), rows x O products (1, I2) x (I2, 1); the result viewed (..., O), the bias added."""
    if ctx.module is not None:
        x1, x2 = ctx.sarg(0), ctx.sarg(1)
        w, b = ctx.param("weight"), ctx.param("bias")
    else:
        x1, x2, w, b = ctx.sarg(0, "input1"), ctx.sarg(1, "input2"), ctx.sarg(2, "weight"), ctx.sarg(3, "bias")
    r1, r2 = ctx.args[0], ctx.args[1]
    O = ctx.output.shape[-1]
    I1, I2 = r1.shape[-1], r2.shape[-1]
    rows = r1.numel() // I1
    dt = ctx.output.dtype
    f1 = emit(ctx, "reshape", [x1], (rows, 1, 1, I1), dt, name="x1_rows")
    t = emit(ctx, "matmul", [f1, w], (rows, O, 1, I2), dt, name="x1_weight")
    f2 = emit(ctx, "reshape", [x2], (rows, 1, I2, 1), dt, name="x2_rows")
    y = emit(ctx, "matmul", [t, f2], (rows, O, 1, 1), dt, name="times_x2")
    y = ctx.op("reshape", [y], name="bilinear")
    if is_tensor(b):
        y = channel_bias(ctx, y, b)
    return y


def _adaptive_max_pool(ctx):
    """PopTorch cannot run adaptive max pooling: its canonicalisation registers adaptive average
    pooling only (popart_canonicalization/PoolingOps.cpp), its tests mark AdaptiveMaxPool T30564."""
    ctx.unsupported("PopTorch has no handler for adaptive max pooling (PoolingOps.cpp registers "
                    "adaptive_avg_pool only); use MaxPool with the kernel and stride it works out to, or "
                    "AdaptiveAvgPool")


def _embedding_bag(ctx):
    """EmbeddingBag as PopTorch lowers it (EmbeddingOps.cpp embeddingBagHandler, which refuses a padding_idx):
    the offsets must be constant, and each bag is its own slice of the indices, gather (times its per-sample weights),
    and reduction (sum, mean or max), the bags' rows then concatenated. In training each bag's
    gather has its own table-sized gradient, summed."""
    m = ctx.module
    psw = None
    if m is not None:
        embedding_flags_refused(ctx, m.sparse, m.scale_grad_by_freq, m.max_norm)
        padding_idx = m.padding_idx
    elif ctx.aten:
        embedding_flags_refused(ctx, ctx.arg(5, default=False), ctx.arg(3, default=False))
        padding_idx = ctx.arg(8, default=None)
    else:
        embedding_flags_refused(ctx, ctx.arg(7, "sparse", False), ctx.arg(5, "scale_grad_by_freq", False),
                                ctx.arg(3, "max_norm", None))
        padding_idx = ctx.arg(10, "padding_idx", None)
    if padding_idx is not None and int(padding_idx) >= 0:
        ctx.unsupported("Unsupported aten::embedding_bag operation: padding_idx parameter is unsupported "
                        "(PopTorch's embeddingBagHandler, EmbeddingOps.cpp; Embedding takes it): leave it None")
    if m is not None:  # EmbeddingBag.forward(input, offsets=None, per_sample_weights=None)
        ids, table, mode, last = ctx.sarg(0), ctx.param("weight"), m.mode, m.include_last_offset
        offsets, real_offsets = ctx.sarg(1, "offsets"), ctx.arg(1, "offsets")
        psw = ctx.sarg(2, "per_sample_weights")
        rids = ctx.args[0]
    elif ctx.aten:  # aten._embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
        # per_sample_weights, include_last_offset, padding_idx)
        table, ids, offsets, real_offsets = ctx.sarg(0), ctx.sarg(1), ctx.sarg(2), ctx.arg(2)
        mode = ("sum", "mean", "max")[int(ctx.arg(4, default=1))]
        psw, last, rids = ctx.sarg(6), bool(ctx.arg(7, default=False)), ctx.args[1]
    else:  # F.embedding_bag(input, weight, offsets, max_norm, norm_type, scale_grad_by_freq, mode,
        # sparse, per_sample_weights, include_last_offset)
        ids, table = ctx.sarg(0, "input"), ctx.sarg(1, "weight")
        offsets, real_offsets, mode = ctx.sarg(2, "offsets"), ctx.arg(2, "offsets"), ctx.arg(6, "mode", "mean")
        psw, last, rids = ctx.sarg(8, "per_sample_weights"), bool(ctx.arg(9, "include_last_offset", False)), ctx.args[0]
    out = ctx.output[0] if isinstance(ctx.output, (tuple, list)) else ctx.output
    D, dt = out.shape[-1], out.dtype
    if rids.dim() == 2:  # torch cuts a (bags, L) input into bags of L (constant offsets)
        bags, L = rids.shape
        bounds = [(b * L, (b + 1) * L) for b in range(bags)]
        ids = emit(ctx, "reshape", [ids], (bags * L,), rids.dtype, name="indices")
        if is_tensor(psw):
            psw = emit(ctx, "reshape", [psw], (bags * L,), dt, name="per_sample_weights")
    else:
        if is_tensor(offsets) and ctx.cap.g.tensors[ctx.t(offsets)].role == "input":
            ctx.unsupported("offsets tensor must be a constant (PopTorch's embeddingBagHandler slices the "
                            "indices at each offset when it builds the graph)")
        starts = [int(v) for v in torch.as_tensor(real_offsets).reshape(-1)]
        ends = starts[1:] + ([] if last else [rids.shape[0]])
        bounds = list(zip(starts, ends))
    kind = {"sum": "reduce_sum", "mean": "reduce_mean", "max": "reduce_max"}[mode]
    rows = []
    for b, (start, stop) in enumerate(bounds):
        n = stop - start
        if n <= 0:  # an empty bag: a row of zeros
            rows.append(const(ctx, (1, D), dt, f"bag{b}/empty"))
            continue
        bag = emit(ctx, "slice", [ids], (n,), rids.dtype, {"axis": 0, "start": start, "stop": stop}, f"bag{b}/indices")
        got = emit(ctx, "gather", [bag, table], (n, D), dt, name=f"bag{b}/gather")
        if is_tensor(psw):
            w = emit(ctx, "slice", [psw], (n,), dt, {"axis": 0, "start": start, "stop": stop}, f"bag{b}/weights")
            w = emit(ctx, "reshape", [w], (n, 1), dt, name=f"bag{b}/weights_col")
            got = emit(ctx, "mul", [got, w], (n, D), dt, name=f"bag{b}/weighted")
        rows.append(emit(ctx, kind, [got], (1, D), dt, {"axes": [0], "keepdims": True}, f"bag{b}/{kind}"))
    y = ctx.op("concat", rows, {"axis": 0}, output=out, name="bags")
    if isinstance(ctx.output, (tuple, list)):
        return (y,) + (None,) * (len(ctx.output) - 1)
    return y


def _interpolate(ctx):
    """Upsample / interpolate: nearest as PopART's ResizeOpx runs it (resizex.cpp resizeNearest: a copy of the input,
    the output a view repeating its elements, which the consumer lays out as it needs); bilinear
    PopTorch's custom op (:func:`_upsample_bilinear`); bicubic sixteen multiply-adds per output, without
    align_corners (PopTorch supports these three modes)."""
    mode = ctx.arg(3, "mode", "nearest")
    if ctx.key.startswith("upsample_nearest"):
        mode = "nearest"
    elif ctx.key.startswith("upsample_bicubic"):
        mode = "bicubic"
    elif ctx.key.startswith("upsample_"):
        mode = ctx.key[len("upsample_"):].rstrip("0123456789d")
    x = ctx.sarg(0, "input")
    if mode in ("nearest", "nearest-exact"):  # PopART's ResizeOpx: a copy of the input, the output a view of it
        rx = ctx.args[0]
        copied = emit(ctx, "copy", [x], tuple(rx.shape), rx.dtype, {"op": "upsample_input"}, "upsample_copy")
        return ctx.op("reshape", [copied], {"op": "upsample_nearest"})
    if mode == "bicubic":
        if ctx.arg(2 if ctx.key.startswith("upsample_") else 4, "align_corners", False):
            ctx.unsupported("bicubic with align_corners=True: PopTorch's upsampleHandler (ReshapeOps.cpp) refuses it "
                            "(\"Only support align_corners=False.\")")
        return emit_map(ctx, ["mul", "add"], [x], [["mul", "add"]], repeat=16)
    if mode == "bilinear":
        return _upsample_bilinear(ctx, x)
    ctx.unsupported(f"mode {mode!r}: PopTorch supports the nearest, bilinear (4-D) and bicubic modes of Upsample")


def _upsample_bilinear(ctx, x):
    """Bilinear upsampling of a 4-D input: PopTorch's UpsampleBilinear2d custom op
    (``upsampleBilinear2dHandler``), priced by :mod:`sim.cost.bilinear`. PopTorch takes an output
    size as it is, and refuses a scale factor that differs between height and width or is not a whole
    number."""
    rx, out = ctx.args[0], ctx.output
    if rx.dim() != 4:
        ctx.unsupported(f"a {rx.dim()}-D input: PopTorch's UpsampleBilinear2d takes (N, C, H, W) only")
    scale = None if ctx.key.startswith("upsample_") else ctx.arg(2, "scale_factor")
    if scale is not None:
        sh, sw = (scale, scale) if isinstance(scale, (int, float)) else tuple(scale)
        if sh != sw:
            ctx.unsupported(f"scale factors {sh} x {sw}: PopTorch supports uniform bilinear upsampling only "
                            "(\"Non-uniform bilinear upsampling not supported\"); give size= instead")
        if sh != math.floor(sh):
            ctx.unsupported(f"scale factor {sh}: PopTorch supports whole-number bilinear scale factors only; "
                            "give size= instead")
        if ctx.arg(6, "antialias", False):
            ctx.unsupported("antialias=True: PopTorch has no handler for anti-aliased bilinear upsampling")
    align = bool(ctx.arg(2 if ctx.key.startswith("upsample_") else 4, "align_corners", False) or False)
    scale = out.shape[-2] / rx.shape[-2]
    made = poptorch_bilinear_shape(tuple(rx.shape), scale)
    if made != tuple(out.shape):
        ctx.unsupported(f"an output of {tuple(out.shape[-2:])} from {tuple(rx.shape[-2:])}: PopTorch's "
                        "UpsampleBilinear2d custom op takes one scale factor, the height's, written with six "
                        f"decimals ({scale:f}), and scales both axes by it, which gives {made[-2:]}, not torch's "
                        "shape; give a size whose height and width are the input's times the same whole number")
    return ctx.op("upsample_bilinear", [x], {"align_corners": align, "scale": scale})


def poptorch_bilinear_shape(in_shape: tuple, scale: float) -> tuple:
    """The (N, C, H, W) output PopTorch's UpsampleBilinear2d custom op makes of ``in_shape``: the handler
    (ReshapeOps.cpp upsampleBilinear2dHandler) passes the height's scale alone as the ``scaling_factor``
    attribute, text from ``std::to_string`` (six decimals) read back as a float, and ``bilinearMap`` gives each
    of the height and the width ``floor(size x scaling_factor)`` in float arithmetic."""
    factor = np.float32(f"{scale:f}")
    return tuple(in_shape[:-2]) + tuple(int(np.floor(np.float32(n) * factor)) for n in in_shape[-2:])


# --- losses made of element-wise ops ------------------------------------------------------------
def _loss_ops(ctx) -> list:
    """The PopART ops PopTorch's handler builds for an element-wise loss before its IdentityLoss reduces them
    (AtenHandlers.gen.cpp, LossOps.cpp), one popops call each: ``(kind, operand, ...[, attrs])``, an operand
    ``"x"`` / ``"y"`` (the prediction and the target; ``"x2"`` margin_ranking_loss's second input), ``"w"`` /
    ``"pos_w"`` (the weights), an earlier op's index or a one-element constant's label."""
    key, neg = ctx.key, {"factor": -1.0}

    def given(name):
        return isinstance(ctx.arg(99, name), torch.Tensor)
    if key == "binary_cross_entropy":  # -w (y log(x) + (1 - y) log(1 - x))
        ops = [("log", "x"), ("mul", "y", 0), ("sub", "one", "x"), ("sub", "one", "y"), ("log", 2), ("mul", 3, 4),
               ("add", 1, 5)]
        ops += [("mul", 6, "w")] if given("weight") else []
        return ops + [("scale", len(ops) - 1, neg)]
    if key == "binary_cross_entropy_with_logits":  # (1 - y) x + l_p (m + log(exp(-m) + exp(-x - m))), m = max(-x, 0)
        ops = [("scale", "x", neg), ("maximum", 0, "zero"), ("sub", 0, 1), ("exp", 2), ("scale", 1, neg), ("exp", 4),
               ("add", 5, 3), ("log", 6), ("add", 1, 7)]
        if given("pos_weight"):
            ops += [("sub", "pos_w", "one"), ("mul", 9, "y"), ("add", 10, "one"), ("mul", 11, 8)]
        ops += [("sub", "one", "y"), ("mul", len(ops), "x"), ("add", len(ops) + 1, len(ops) - 1)]
        return ops + ([("mul", "w", len(ops) - 1)] if given("weight") else [])
    if key == "kl_div":  # where(y > 0, y (log(y) - x), 0), log(y) given with log_target (then y = exp of it)
        target, log_target = (0, "y") if ctx.arg(99, "log_target", False) else ("y", 0)
        first = ("exp", "y") if ctx.arg(99, "log_target", False) else ("log", "y")
        return [first, ("sub", log_target, "x"), ("mul", target, 1), ("compare", target, "zero", {"op": "gt"}),
                ("select", 3, 2, "zero")]
    if key == "poisson_nll_loss":  # exp(x) - y x with log_input, else x - y log(x + eps); full: Stirling's term
        ops = [("exp", "x"), ("mul", "y", "x"), ("sub", 0, 1)] if ctx.arg(99, "log_input", True) else \
            [("add", "x", "eps"), ("log", 0), ("mul", "y", 1), ("sub", "x", 2)]
        if ctx.arg(99, "full", False):
            at = len(ops)
            ops += [("log", "y"), ("mul", "y", at), ("sub", at + 1, "y"), ("mul", "two_pi", "y"), ("log", at + 3),
                    ("mul", "half", at + 4), ("add", at + 2, at + 5), ("compare", "y", "one", {"op": "gt"}),
                    ("select", at + 7, at + 6, "zero"), ("add", at - 1, at + 8)]
        return ops
    if key == "hinge_embedding_loss":  # where(y == -1, max(0, margin - x), where(y == 1, x, 0))
        return [("compare", "y", "minus_one", {"op": "eq"}), ("sub", "margin", "x"), ("maximum", "zero", 1),
                ("compare", "y", "one", {"op": "eq"}), ("select", 3, "x", "zero"), ("select", 0, 2, 4)]
    if key == "smooth_l1_loss":  # where(beta > |x - y|, 0.5 |x - y|² / beta, |x - y| - 0.5 beta)
        return [("sub", "x", "y"), ("abs", 0), ("compare", "beta", 1, {"op": "gt"}), ("mul", "half", 1), ("mul", 3, 1),
                ("div", 4, "beta"), ("sub", 1, "half_beta"), ("select", 2, 5, 6)]
    if key == "soft_margin_loss":  # log1p(exp(-y x))
        return [("scale", "y", neg), ("mul", 0, "x"), ("exp", 1), ("log1p", 2)]
    # margin_ranking_loss: max(-y (x1 - x2) + margin, 0)
    return [("scale", "y", neg), ("sub", "x", "x2"), ("mul", 0, 1), ("add", 2, "margin"), ("maximum", 3, "zero")]


_LOSSES = ("binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "poisson_nll_loss",
           "hinge_embedding_loss", "smooth_l1_loss", "soft_margin_loss", "margin_ranking_loss")
_REDUCTION_ARG = {"ctc_loss": 5, "binary_cross_entropy": 3, "binary_cross_entropy_with_logits": 4, "kl_div": 4,
                  "poisson_nll_loss": 6, "hinge_embedding_loss": 3, "smooth_l1_loss": 4,
                  "soft_margin_loss": 4, "margin_ranking_loss": 5, "cosine_embedding_loss": 5,
                  "triplet_margin_loss": 8}


def _reduction(ctx) -> str:
    if ctx.module is not None:
        return getattr(ctx.module, "reduction", "mean")
    r = ctx.kwargs.get("reduction")
    if r is None:
        i = _REDUCTION_ARG.get(ctx.key)
        r = ctx.args[i] if i is not None and i < len(ctx.args) and isinstance(ctx.args[i], str) else "mean"
    return r


def _finish_loss(ctx, terms: str, shape, dtype):
    """Reduce the per-element terms as the loss's reduction says, and mark the loss."""
    r = _reduction(ctx)
    if r == "none":
        return ctx.op("reshape", [terms], name="loss")
    kind = "reduce_sum" if r == "sum" else "reduce_mean"
    y = ctx.op(kind, [terms], {"axes": list(range(len(shape))), "keepdims": False, "reduction": r}, name="loss")
    ctx.cap.losses.append(y)
    return y


def _elementwise_loss(ctx):
    """An element-wise loss as the PopART ops PopTorch's handler builds (:func:`_loss_ops`), then reduced."""
    reals = [a for a in list(ctx.args) + list(ctx.kwargs.values()) if isinstance(a, torch.Tensor)]
    shape = tuple(torch.broadcast_shapes(*[r.shape for r in reals])) or (1,)
    dt = reals[0].dtype
    positional = ("x", "x2", "y") if ctx.key == "margin_ranking_loss" else ("x", "y")
    named = {n: ctx.sarg(i) for i, n in enumerate(positional)}
    named |= {"w": ctx.sarg(99, "weight"), "pos_w": ctx.sarg(99, "pos_weight")}
    return _finish_loss(ctx, emit_chain(ctx, _loss_ops(ctx), named, shape, dt), shape, dt)


def _per_row(r) -> tuple[tuple, dict]:
    """The rows of a per-row loss over ``r``'s last dimension (``(1,)`` for a vector) and the
    attributes of a reduction over that dimension."""
    return tuple(r.shape[:-1]) or (1,), {"axes": [r.dim() - 1], "keepdims": False}


def _cosine_embedding_loss(ctx):
    """1 - cos(x1, x2) for y = 1, max(0, cos - margin) for y = -1; cos from per-row dot
    products and norms."""
    x1, x2, y = ctx.sarg(0, "input1"), ctx.sarg(1, "input2"), ctx.sarg(2, "target")
    r1 = ctx.args[0]
    dt = r1.dtype
    rows, ax = _per_row(r1)

    def dot(a, b, label):
        p = emit(ctx, "mul", [a, b], r1.shape, dt, name=f"{label}/mul")
        return emit(ctx, "reduce_sum", [p], rows, dt, ax, f"{label}/sum")
    d, n1, n2 = dot(x1, x2, "dot"), dot(x1, x1, "norm1"), dot(x2, x2, "norm2")
    ins = [d, n1, n2] + ([ctx.t(y)] if is_tensor(y) else [])
    g = ["mul", "rsqrt", "mul", "compare", "select"]
    terms = emit_map(ctx, ["mul", "rsqrt", "mul", "scale", "add", "maximum", "compare", "select"], ins,
                     [g, g, g, None], shape=rows, dtype=dt, name="terms")
    return _finish_loss(ctx, terms, rows, dt)


def _triplet_margin_loss(ctx):
    """max(d(a, p) - d(a, n) + margin, 0), d the p-norm of the difference per row."""
    a, p, n = ctx.sarg(0, "anchor"), ctx.sarg(1, "positive"), ctx.sarg(2, "negative")
    ra = ctx.args[0]
    dt = ra.dtype
    rows, ax = _per_row(ra)

    def dist(u, v, label):
        diff = emit_map(ctx, ["sub", "add"], [u, v], [["copy"], ["scale"]], shape=ra.shape, dtype=dt,
                        name=f"{label}/difference")
        sq = emit(ctx, "mul", [diff, diff], ra.shape, dt, name=f"{label}/square")
        s = emit(ctx, "reduce_sum", [sq], rows, dt, ax, f"{label}/sum")
        return emit(ctx, "sqrt", [s], rows, dt, name=f"{label}/norm")
    dp, dn = dist(a, p, "positive"), dist(a, n, "negative")
    terms = emit_map(ctx, ["sub", "add", "maximum"], [dp, dn], [["compare", "select"], ["compare", "select", "scale"]],
                     shape=rows, dtype=dt, name="terms")
    return _finish_loss(ctx, terms, rows, dt)


def _ctc_loss(ctx):
    """PopTorch's CTCLoss: PopART's CtcOp, popnn's CTC loss computed with its gradient
    (:meth:`sim.GraphBuilder.ctc_loss`, ``sim/cost/ctc.py``). Targets padded to (batch, max length)."""
    log_probs, targets = ctx.args[0], ctx.args[1]
    if not isinstance(targets, torch.Tensor) or targets.dim() != 2:
        ctx.unsupported("targets must be padded to (batch, max target length), as PopTorch's CTCLoss takes "
                        "them; concatenated 1-D targets are not")
    reduction = _reduction(ctx)
    if ctx.module is None and len(ctx.args) > 5 and isinstance(ctx.args[5], int):  # ATen's: 0 none, 1 mean, 2 sum
        reduction = ("none", "mean", "sum")[ctx.args[5]]
    if reduction == "none":  # LossOps.cpp ctcLossHandler
        ctx.unsupported('CTCLoss with reduction="none" is currently not supported by PopTorch; use "mean" or "sum"')
    loss, _ = ctx.op("ctc_loss", tensor_args(ctx)[:4], {"reduction": reduction, "reduced_classes": False},
                     output=(ctx.output, torch.empty_like(log_probs)), name="loss")
    ctx.cap.losses.append(loss)
    return loss


def _local_response_norm(ctx):
    """local_response_norm(x, size, alpha, beta, k): torch's composite as PopTorch's dispatcher sees it:
    x * x, padded along the channels, averaged over windows of ``size`` channels (an average pool of a
    (N, 1, C, rest) view), then (alpha * that + k) ** beta dividing x."""
    m, rx = ctx.module, ctx.args[0]
    size = int(m.size if m is not None else ctx.arg(1, "size"))  # alpha, beta and k: constants of the map
    x, dt = ctx.sarg(0, "input"), rx.dtype
    n, c = rx.shape[0], rx.shape[1]
    rest = math.prod(rx.shape[2:])
    square = emit(ctx, "mul", [x, x], rx.shape, dt, name="square")
    view = emit(ctx, "reshape", [square], (n, 1, c, rest), dt, name="channels")
    padded = emit(ctx, "pad", [view], (n, 1, c + size - 1, rest), dt, {"mode": "constant"}, "pad")
    pooled = emit(ctx, "avgpool", [padded], (n, 1, c, rest), dt,
                  {"kernel": max(1, round(math.sqrt(size))), "stride": 1, "padding": 0, "window": size,
                   "stride_volume": 1}, "window_mean")
    back = emit(ctx, "reshape", [pooled], rx.shape, dt, name="back")
    scale = emit_map(ctx, ["scale", "add", "pow"], [back], [["pow", "mul", "scale"]], shape=rx.shape, dtype=dt,
                     name="denominator")
    return ctx.op("div", [x, scale])


RULES = {
    "local_response_norm": _local_response_norm,
    "ctc_loss": _ctc_loss,
    "conv1d": batch_of_one(conv_any), "conv3d": batch_of_one(conv_any),
    "conv_transpose1d": batch_of_one(conv_any), "conv_transpose2d": batch_of_one(conv_any),
    "conv_transpose3d": batch_of_one(conv_any),
    "max_pool1d": _pool_any("maxpool"), "max_pool3d": _pool_any("maxpool"),
    "max_pool1d_with_indices": _pool_any("maxpool"), "max_pool3d_with_indices": _pool_any("maxpool"),
    "avg_pool1d": _pool_any("avgpool"), "avg_pool3d": _pool_any("avgpool"),
    "adaptive_avg_pool1d": _pool_any("avgpool"), "adaptive_avg_pool3d": _pool_any("avgpool"),
    "_adaptive_avg_pool3d": _pool_any("avgpool"),
    **{f"adaptive_max_pool{d}d": _adaptive_max_pool for d in (1, 2, 3)},
    "group_norm": _group_norm, "native_group_norm": _group_norm, "instance_norm": _instance_norm,
    "lstm": _recurrent, "gru": _recurrent, "rnn_tanh": _recurrent, "rnn_relu": _recurrent,
    **{name: _recurrent_cell for name in _CELL_OPS},
    "_weight_norm": lambda ctx: _weight_norm_ops(ctx, ctx.sarg(0, "v"), ctx.sarg(1, "g"), ctx.args[0],
                                                 int(ctx.arg(2, "dim", 0)), name="weight_norm"),
    "bilinear": _bilinear, "embedding_bag": _embedding_bag, "_embedding_bag": _embedding_bag,
    "interpolate": _interpolate, "upsample": _interpolate, "upsample_nearest1d": _interpolate,
    "upsample_nearest2d": _interpolate, "upsample_nearest3d": _interpolate, "upsample_bicubic2d": _interpolate,
    "upsample_bilinear2d": _interpolate, "upsample_linear1d": _interpolate, "upsample_trilinear3d": _interpolate,
    **{name: _elementwise_loss for name in _LOSSES},
    "cosine_embedding_loss": _cosine_embedding_loss, "triplet_margin_loss": _triplet_margin_loss,
}

MODULE_RULES = {
    nn.LocalResponseNorm: _local_response_norm,
    nn.Conv1d: batch_of_one(conv_any), nn.Conv3d: batch_of_one(conv_any),
    nn.ConvTranspose1d: batch_of_one(conv_any), nn.ConvTranspose2d: batch_of_one(conv_any),
    nn.ConvTranspose3d: batch_of_one(conv_any),
    nn.MaxPool1d: _pool_any("maxpool"), nn.MaxPool3d: _pool_any("maxpool"), nn.AvgPool1d: _pool_any("avgpool"),
    nn.AvgPool3d: _pool_any("avgpool"), nn.AdaptiveAvgPool1d: _pool_any("avgpool"),
    nn.AdaptiveAvgPool3d: _pool_any("avgpool"),
    nn.AdaptiveMaxPool1d: _adaptive_max_pool, nn.AdaptiveMaxPool2d: _adaptive_max_pool,
    nn.AdaptiveMaxPool3d: _adaptive_max_pool,
    nn.GroupNorm: _group_norm, nn.InstanceNorm1d: _instance_norm, nn.InstanceNorm2d: _instance_norm,
    nn.InstanceNorm3d: _instance_norm,
    nn.RNN: _recurrent, nn.GRU: _recurrent, nn.LSTM: _recurrent,
    nn.RNNCell: _recurrent_cell, nn.GRUCell: _recurrent_cell, nn.LSTMCell: _recurrent_cell,
    nn.Bilinear: _bilinear, nn.EmbeddingBag: _embedding_bag,
}

