"""Which ATen ops PopTorch can lower, for the errors of ops sim.poptorch has no rule for.

PopTorch's compiler lowers an ATen op only through a handler of its own: a ``registerHandler(c10::aten::<name>, ...)``
in ``poptorch/source/popart_canonicalization/*.cpp``, or an op its dispatcher intercepts itself (``m.impl`` in
``poptorch/source/dispatch_tracer/RegisterAtenOverloads.cpp``: copy_, detach, item, empty, ...). Any other ATen op
left in the graph stops the compile with "Unsupported ops found in compiled model" (``ErrorOnUnsupportedAten.cpp``).
In-place ``<name>_`` ops are lowered as ``<name>`` (``InplaceOps.cpp``). The list is read from graphcore/poptorch at
c2a8b17762f1d7106f7bf048ff011ab4fee7685e (2023-09-29, SDK 3.4)."""

from __future__ import annotations

import torch

#: ATen op names PopTorch has a handler for (module docstring)
HANDLED = frozenset("""
    Int __and__ __or__ __xor__ _cdist_forward _convolution _embedding_bag _local_scalar_dense _log_softmax
    _prelu_kernel _reshape_alias _softmax _unsafe_view _weight_norm _weight_norm_interface abs acos acosh
    adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d add addcdiv addcmul addmm addmv all amax amin
    any arange argmax argmin argsort as_strided asin asinh atan atan2 atanh avg_pool1d avg_pool2d avg_pool3d
    baddbmm batch_norm bernoulli bilinear binary_cross_entropy binary_cross_entropy_with_logits bincount
    bitwise_and bitwise_not bitwise_or bitwise_xor bmm broadcast_to bucketize cartesian_prod cat cdist ceil celu
    chunk clamp clamp_max clamp_min clone col2im constant_pad_nd contiguous conv2d convolution
    convolution_overrideable copy_ cos cosh cosine_embedding_loss cosine_similarity count_nonzero cross
    cross_entropy_loss ctc_loss cumprod cumsum detach div dot dropout einsum elu embedding embedding_bag empty
    empty_strided eq erf erfc exp expand expand_as expm1 exponential_ feature_dropout flatten flip floor
    floor_divide fmod frac frobenius_norm full full_like gather ge gelu glu group_norm gru gt hardshrink
    hardsigmoid hardswish hardtanh hinge_embedding_loss im2col index index_fill index_put index_reduce
    index_select instance_norm is_complex isnan item kl_div l1_loss layer_norm le leaky_relu linalg_cross
    linalg_matrix_norm linalg_vector_norm linear log log10 log1p log2 log_sigmoid log_sigmoid_forward
    log_softmax logical_and logical_not logical_or logsumexp lstm lt margin_ranking_loss masked_fill matmul max
    max_pool1d max_pool1d_with_indices max_pool2d max_pool2d_with_indices max_pool3d max_pool3d_with_indices
    maximum mean median meshgrid min minimum mish mkldnn_convolution mm mse_loss mul multilabel_soft_margin_loss
    mv nansum narrow native_batch_norm native_group_norm native_layer_norm ne neg new_full new_ones new_zeros
    nll_loss2d nll_loss2d_forward nll_loss_forward nll_loss_nd norm normal normal_ numpy_T one_hot ones
    ones_like pairwise_distance permute pixel_shuffle poisson_nll_loss pow prelu prod rand randint randn random_
    randperm reciprocal reflection_pad1d reflection_pad2d relu remainder repeat replication_pad1d
    replication_pad2d replication_pad3d reshape rnn_relu rnn_tanh roll round rrelu rrelu_with_noise rsqrt rsub
    scatter scatter_add scatter_reduce select selu sigmoid sign silu sin sinh size slice smooth_l1_loss
    soft_margin_loss softmax softplus softshrink sort split split_with_sizes sqrt square squeeze stack std
    std_mean sub sum t take_along_dim tan tanh tensordot threshold to topk transpose transpose_
    triplet_margin_loss triu true_divide trunc type_as unbind unfold uniform_ unsafe_chunk unsqueeze
    upsample_bicubic2d upsample_bilinear2d upsample_linear1d upsample_nearest1d upsample_nearest2d
    upsample_nearest3d upsample_trilinear3d var var_mean view where zeros zeros_like
""".split())

#: ops whose output's shape depends on the input's values, which PopTorch's meta kernel for aten::nonzero refuses
#: ("the output shape is determined by the tensor values. The IPU cannot support dynamic output shapes",
#: RegisterMetaOps.cpp.inc)
VALUE_SHAPED = ("nonzero", "argwhere", "unique", "_unique2", "unique_consecutive", "unique_dim", "masked_select")

#: ATen ops whose composite kernel makes an ``as_strided`` view, which PopTorch's handler for it refuses
#: ("InternalError: aten::as_strided should have been intercepted earlier", popart_canonicalization/ReshapeOps.cpp)
AS_STRIDED = ("diagonal", "diagonal_copy", "diag_embed", "diagonal_scatter", "as_strided_copy")

#: ATen kernels PopTorch has no handler for: what the error adds after the op's name, and what to write instead
INSTEAD = {
    "fmax": ("", "use torch.maximum (the same but where an operand is NaN)"),
    "fmin": ("", "use torch.minimum (the same but where an operand is NaN)"),
    "logical_xor": ("", "use a != b on booleans, or torch.bitwise_xor"),
    "index_copy": (" (Hugging Face's StaticCache writes its keys and values with it)",
                   "write the slices with an index_put, `t[:, :, pos] = src` (PopTorch's indexPutHandler), or "
                   "poptorch.dynamic_update"),
    "huber_loss": (" (its tests list HuberLoss as to do, T42770)", "smooth_l1_loss(x, y, beta=delta) * delta is "
                   "the same"),
    "diagonal": ("", "for a square x of n rows, (x * torch.eye(n)).sum(-1) is its main diagonal"),
    "trace": ("", "(x * torch.eye(*x.shape)).sum() is the same"),
}


def handled(name: str) -> bool:
    """Whether PopTorch lowers ATen op ``name`` (an in-place ``name_`` as ``name``)."""
    return name in HANDLED or (name.endswith("_") and name.rstrip("_") in HANDLED)


def _composite_implicit(name: str) -> bool:
    """Whether ATen op ``name`` is a composite the dispatcher splits into other ops wherever it runs."""
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "CompositeImplicitAutograd")
    except RuntimeError:  # no overload of that name
        return False


def is_aten(name: str) -> bool:
    """Whether ``name`` is an ATen op's name (rather than a Python function's or a module's)."""
    return bool(name) and hasattr(torch.ops.aten, name)


def reason(name: str, reads_values: bool = False) -> str:
    """What an error for ATen op ``name`` without a rule says of PopTorch (empty when ``name`` is not an ATen
    op's, or a composite it cannot tell of): whether PopTorch can lower it at all, and if not, why and what to
    write instead; ``reads_values``: the op's composite was recorded up to a read of a tensor's value."""
    base = name if name.startswith("_") else name.rstrip("_")
    if base in VALUE_SHAPED:
        return ("its output's shape depends on the tensor's values, which PopTorch refuses: \"The IPU cannot support "
                "dynamic output shapes\" (its meta kernel for aten::nonzero); give the output a fixed size, as a "
                "mask or torch.topk does")
    if not is_aten(base):
        return ""
    if handled(name):
        return f"PopTorch lowers aten::{base} with a handler of its own, which sim.poptorch does not price yet"
    if reads_values:
        return (f"ATen's composite for aten::{base} reads the tensor's values on the host (a check or a branch on "
                "them), which neither this capture nor PopTorch's dispatcher, tracing without values, can follow")
    if _composite_implicit(base):
        return ""
    where, instead = INSTEAD.get(base, ("", ""))
    if base in AS_STRIDED:
        why = (f"ATen's kernel for aten::{base} makes an as_strided view, which PopTorch's handler refuses "
               "(\"InternalError: aten::as_strided should have been intercepted earlier\")")
    else:
        why = (f"PopTorch has no handler for aten::{base}{where}, so its compiler stops with \"Unsupported ops "
               "found in compiled model\"")
    return f"{why}; {instead}" if instead else why
