"""Training expansion: backward ops, gradient accumulation and the optimizer update.

Autodiff at the level of op kinds: a matmul's backward is two matmuls, a conv's is a
conv-backward-input and a conv-backward-weight, an activation's is one element-wise op, and so
on. The expanded graph holds three passes, in this order:

``forward``   the user's ops
``backward``  gradient ops in reverse order; weight gradients go into accumulators when
              gradient accumulation is on, each accumulate op right after the op making its
              gradient (PopART's ``scheduleNonWeightUpdateGradientConsumersEarly``, set by
              Graphcore's BERT), so a weight gradient is freed as soon as it is made
``update``    one optimizer update per weight (runs once per weight update, not per micro-batch);
              LARS adds, before each update it scales, the two norm reductions it reads; LAMB
              runs as PopART decomposes it (:data:`LAMB_OPS`): the Adam updater, the two norm
              reductions, then the trust-ratio update; with a clip norm, the gradients are
              first clipped by their global norm (:func:`_clip_by_global_norm`)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import GraphError, OptionsError
from .ir import RNN_GATES, RNN_SAVED, Graph, Op, canonical_dtype

#: optimizer name -> number of state tensors per weight, update op kind
OPTIMIZERS = {
    "sgd": (0, "sgd_update"),
    "sgd_momentum": (1, "sgd_update"),
    "adam": (2, "adam_update"),
    "adamw": (2, "adam_update"),
    "rmsprop": (1, "adam_update"),
    "rmsprop_momentum": (2, "adam_update"),
    "rmsprop_centered": (2, "adam_update"),
    "rmsprop_centered_momentum": (3, "adam_update"),
    "lamb": (2, "lamb_update"),
    "lars": (1, "lars_update"),
}

#: LARS (Layer-wise Adaptive Rate Scaling, You, Gitman and Ginsburg 2017) as Graphcore's MLPerf
#: ResNet-50 runs it (training_results_v1.1 / v2.0, Graphcore/benchmarks/resnet/implementations/
#: tensorflow/lars_optimizer.py): a weight whose name contains one of these strings is skipped
#: (train.py's default ``--lars-skip-list``: batch-norm gammas and betas, biases) and gets plain
#: momentum SGD (``sgd_update``); every other weight gets ``||w||`` and ``||g||`` (two reductions
#: over the whole tensor, ops of their own) and a ``lars_update``: the trust ratio, then
#: momentum SGD of ``lr * ratio * (g + weight_decay * w)``. One momentum state either way.
LARS_SKIP = ("beta", "gamma", "bias")

#: LAMB as PopART runs it (popart willow/src/patterns/adamdecompose.cpp, AdamDecompose::apply, mode
#: Lamb): per weight, phase 1 ``adam_updater`` (AdamUpdaterOp, after the first and second moments'
#: Accumulate ops: the gradient's unscaling, the two moments, the accumulator's zeroing and the
#: updater ``r = m/(sqrt(v)+eps) + wd*w``, a weight-sized tensor); then two LambSquareOps, each a
#: popops::reduce of the flattened tensor with SQUARE_ADD to one fp32 value (popx/op/lambx.cpp),
#: of the weight (``||w||^2``) and of ``r`` (``||r||^2``); then phase 2 ``lamb_update``
#: (AdamVarUpdateOp, popx/op/adamvarupdatex.cpp: the trust ratio ``min(sqrt(r1sq), mwn) /
#: sqrt(r2sq)`` as a scalar popops::map, then ``scaledAddTo(w, r, -lr*ratio)``). With replicated
#: tensor sharding each LambSquare reduces a shard and is followed by a ReplicatedAllReduceInplace
#: of its one value (op/lamb.cpp, configureForReplicatedTensorSharding). PopART drops the norms
#: of a weight whose max weight norm is the constant 0 (Graphcore's PyTorch BERT sets that for
#: biases, nlp/bert/pytorch/optimization.py): such a weight, named in ``Optimizer.no_trust_ratio``,
#: is one ``adam_update``. MLPerf BERT (PopART, bert_optimizer.py) keeps a non-zero default for every
#: weight, so every weight gets the norms.
LAMB_OPS = ("adam_updater", "reduce_sum", "reduce_sum", "lamb_update")


#: optimizer name -> what each state tensor holds, in order, and the PopTorch argument that sets
#: its dtype (``poptorch.optim``; None: always float32): SGD's velocity, Adam's and LAMB's first and
#: second moments, RMSprop's mean square (PopART's Accl1, which PopTorch types with
#: ``first_order_momentum_accum_type``: popart_compiler CompilerImpl.cpp builds popart::Adaptive with
#: it) and, with momentum, its momentum (Accl3, float32: adaptivedecompose.cpp adds it when the
#: momentum is not the constant 0); centered RMSprop also the mean gradient (Accl2, typed with
#: ``second_order_momentum_accum_type``: PopTorch's popart::Adaptive takes it as accl2Type, and
#: adaptivedecompose.cpp adds it for CenteredRMSProp); LARS (not a PopTorch optimizer) its momentum
STATES = {
    "sgd": (),
    "sgd_momentum": (("velocity", "velocity_accum_type"),),
    "adam": (("first moment", "first_order_momentum_accum_type"),
             ("second moment", "second_order_momentum_accum_type")),
    "rmsprop": (("mean square", "first_order_momentum_accum_type"),),
    "rmsprop_momentum": (("mean square", "first_order_momentum_accum_type"), ("momentum", None)),
    "rmsprop_centered": (("mean square", "first_order_momentum_accum_type"),
                         ("mean gradient", "second_order_momentum_accum_type")),
    "rmsprop_centered_momentum": (("mean square", "first_order_momentum_accum_type"),
                                  ("mean gradient", "second_order_momentum_accum_type"), ("momentum", None)),
    "lars": (("velocity", None),),
}
STATES["adamw"] = STATES["lamb"] = STATES["adam"]
#: optimizers whose weight decay PopART prices per weight (AdamUpdaterOpx's ``wd * w`` term)
DECAY_PER_WEIGHT = ("adam", "adamw", "lamb")
STATE_DTYPES = ("float16", "float32")


def _float_dtype(value) -> str | None:
    """``value`` as one of :data:`STATE_DTYPES` ("half" -> "float16", ...), or None if it is not one."""
    try:
        dtype = canonical_dtype(value)
    except GraphError:
        return None
    return dtype if dtype in STATE_DTYPES else None


@dataclass(frozen=True)
class Optimizer:
    """Which optimizer updates the weights, and the dtype of its state tensors.

    ``state_dtype`` is one dtype for every state tensor (``"float32"``, the default, or
    ``"float16"``), or one per state in the order of :data:`STATES` (Adam, AdamW, LAMB: first
    moment, second moment), e.g. ``Optimizer("adamw", ("float16", "float32"))`` as Graphcore's
    SQuAD config keeps them (``first_order_momentum_accum_type=float16``,
    ``second_order_momentum_accum_type=float32``). Each state's dtype sets its bytes (tile memory,
    streaming-memory and RTS traffic) and the update op's cycles; :attr:`state_dtypes` lists them.

    ``accum_dtype`` is the dtype of the gradient accumulators of a run with gradient accumulation
    (PopART's ``accumType``, PopTorch's ``accum_type``: float32 unless the optimizer is given
    ``accum_type=torch.float16``, poptorch python/optim.py); None keeps each weight's dtype. It sets
    the accumulators' bytes and the cycles of the add into them every micro-batch.

    ``clip_norm`` clips every gradient by the global norm of all of them before the update, to at
    most this norm (PopART's ``ClipNormSettings.clipAllWeights(maxNorm)``, PopTorch's
    ``max_grad_norm``); None (or infinity, PopTorch's default) clips nothing. The weight update
    then runs :func:`_clip_by_global_norm`'s ops, a barrier across the replica's IPUs.

    Per-weight settings, as PopART compiles a constant optimizer value of 0 (PopTorch: a
    parameter group's value, constant when the attribute is, ``_optimizer_attributes.py``):

    * ``no_weight_decay`` (Adam, AdamW, LAMB): the weights whose weight decay is the constant 0.
      Their updater map has no ``wd * w`` term (popx/op/adamupdaterx.cpp).
    * ``no_trust_ratio`` (LAMB): the weights whose max weight norm is the constant 0. PopART drops
      their two LambSquare norms (adamdecompose.cpp ``use_lamb``), so they are updated as Adam is
      (``adam_update``, no trust ratio). Graphcore's PyTorch BERT does this for biases
      (nlp/bert/pytorch/optimization.py).

    Both are weight names of the graph; any other name is refused when the graph is expanded.

    ``combined_accum`` (momentum SGD): the velocity is the gradient accumulator, PopTorch's
    ``SGD(use_combined_accum=True)`` (PopART's SGD1): with gradient accumulation each micro-batch's
    gradient is added into the velocity and no separate accumulator is kept (its bytes, and the
    velocity's ScaledAdd with the gradient at the update, are saved). Graphcore's PyTorch CNNs run
    so (``--optimizer sgd_combined``, vision/cnns/pytorch/train/train.py).
    """

    name: str = "sgd"
    state_dtype: str | tuple[str, ...] = "float32"
    accum_dtype: str | None = None
    clip_norm: float | None = None
    no_weight_decay: tuple[str, ...] = ()
    no_trust_ratio: tuple[str, ...] = ()
    combined_accum: bool = False

    def __post_init__(self):
        if self.name not in OPTIMIZERS:
            raise OptionsError(f"unknown optimizer {self.name!r}; known: {', '.join(OPTIMIZERS)}")
        given = self.state_dtype
        many = isinstance(given, (list, tuple))
        values = list(given) if many else [given]
        values = [_float_dtype(v) for v in values]
        if not values or None in values:
            raise OptionsError(f"optimizer {self.name!r}: state dtype {given!r}: expected float16 or float32, "
                               "or one of them per state")
        if many and len(values) != self.num_states:
            held = ", ".join(s for s, _ in STATES.get(self.name, ())) or "no state"
            raise OptionsError(f"optimizer {self.name!r}: {len(values)} state dtypes {tuple(given)!r} for "
                               f"{self.num_states} state tensor(s) ({held}); give one dtype per state, or one "
                               "for all")
        object.__setattr__(self, "state_dtype", tuple(values) if many else values[0])
        if self.accum_dtype is not None:
            accum = _float_dtype(self.accum_dtype)
            if accum is None:
                raise OptionsError(f"optimizer {self.name!r}: accumulator dtype {self.accum_dtype!r}: expected "
                                   "float16 or float32 (or None: the weights' dtype)")
            object.__setattr__(self, "accum_dtype", accum)
        if self.clip_norm is not None:
            try:
                clip = float(self.clip_norm)
            except (TypeError, ValueError):
                clip = math.nan
            if math.isnan(clip) or clip <= 0:
                raise OptionsError(f"optimizer {self.name!r}: clip norm {self.clip_norm!r}: expected a number > 0 (the "
                                   "largest global norm of the gradients; None or infinity: no clipping)")
            object.__setattr__(self, "clip_norm", None if math.isinf(clip) else clip)
        for field, kinds in (("no_weight_decay", DECAY_PER_WEIGHT), ("no_trust_ratio", ("lamb",))):
            object.__setattr__(self, field, self._weight_names(field, kinds))
        if self.combined_accum not in (True, False):
            raise OptionsError(f"optimizer {self.name!r}: combined_accum {self.combined_accum!r}: expected True or False")
        if self.combined_accum and self.name != "sgd_momentum":
            raise OptionsError(f"optimizer {self.name!r}: combined_accum combines momentum SGD's velocity with its "
                               "gradient accumulator; it is a setting of sgd_momentum only")

    def _weight_names(self, field: str, optimizers: tuple[str, ...]) -> tuple[str, ...]:
        """``field``'s weight names as a sorted tuple; refused unless strings, or if this optimizer
        is not one of ``optimizers``."""
        given = getattr(self, field)
        try:
            names = [given] if isinstance(given, str) else list(given or ())
        except TypeError:  # not a collection of names (a number, say)
            names = [given]
        if any(not isinstance(n, str) or not n for n in names):
            raise OptionsError(f"optimizer {self.name!r}: {field} {given!r}: expected weight names (strings)")
        if names and self.name not in optimizers:
            raise OptionsError(f"optimizer {self.name!r}: {field} is a setting of {', '.join(optimizers)} only "
                               f"(PopART has no such per-weight value for {self.name})")
        return tuple(sorted(set(names)))

    @property
    def state_dtypes(self) -> tuple[str, ...]:
        """The dtype of each state tensor, in the order of :data:`STATES` (empty without state)."""
        if isinstance(self.state_dtype, tuple):
            return self.state_dtype
        return (self.state_dtype,) * self.num_states

    def state_bytes(self, elements: int) -> int:
        """Bytes of this optimizer's state for a weight of ``elements`` elements."""
        return sum(elements * (2 if d == "float16" else 4) for d in self.state_dtypes)

    def describe(self) -> str:
        """``adamw``, ``adamw (state float16)`` or ``adamw (state: first moment float16, second
        moment float32)``: the name, and the state's dtypes unless all are float32; then the
        accumulators' dtype where given (``lamb (accumulators float32)``), the clip norm
        (``lamb (gradients clipped to global norm 1)``) and the per-weight settings
        (``lamb (no weight decay on 4 weights; no trust ratio on 2 weights)``)."""
        dtypes = self.state_dtypes
        extras = []
        if len(set(dtypes)) == 1 and dtypes[0] != "float32":
            extras.append(f"state {dtypes[0]}")
        elif len(set(dtypes)) > 1:
            names = [what for what, _ in STATES.get(self.name, ())] or [f"state {k}" for k in range(len(dtypes))]
            extras.append("state: " + ", ".join(f"{what} {d}" for what, d in zip(names, dtypes)))
        if self.combined_accum:
            extras.append("the velocity as the gradient accumulator")
        if self.accum_dtype:
            extras.append(f"accumulators {self.accum_dtype}")
        if self.clip_norm is not None:
            extras.append(f"gradients clipped to global norm {self.clip_norm:g}")
        for what, names in (("weight decay", self.no_weight_decay), ("trust ratio", self.no_trust_ratio)):
            if names:
                extras.append(f"no {what} on {len(names)} weight{'s' * (len(names) > 1)}")
        return f"{self.name} ({'; '.join(extras)})" if extras else self.name

    @property
    def num_states(self) -> int:
        return OPTIMIZERS[self.name][0]

    @property
    def update_kind(self) -> str:
        return OPTIMIZERS[self.name][1]

    def update_kind_of(self, weight: str) -> str:
        """The update op kind of weight ``weight``: LARS skips the weights named in
        :data:`LARS_SKIP` (momentum SGD, ``sgd_update``); LAMB updates the weights of
        :attr:`no_trust_ratio` as Adam (``adam_update``)."""
        if self.name == "lars" and any(s in weight for s in LARS_SKIP):
            return "sgd_update"
        if weight in self.no_trust_ratio:
            return "adam_update"
        return self.update_kind


_ACTIVATION_GRADS = {"relu", "gelu", "gelu_erf", "tanh", "sigmoid", "swish"}
#: activations whose PopART grad op reads the forward output (ReluGradOp, TanhGradOp, SigmoidGradOp:
#: ``GradOpInType::Out``, op/relu.cpp, op/tanh.cpp, op/sigmoid.cpp); GeluGradOp and SwishGradOp read the input
_GRADS_OF_OUTPUT = {"relu", "tanh", "sigmoid"}
_PASS_THROUGH = {"identity", "detach"}


class _Gradients:
    """Each tensor's gradient, from the contributions its consumers give it (:meth:`_Backward.give`), summed
    when it is first read: PopART's autodiff grows one SumOp per tensor once all its edge gradients are in
    (``transforms/autodiff/gradgrowersumop.cpp``), which its SumToAdd pattern makes an Add of two and
    ``SumOpx`` runs as one ``popops::map`` of three or more (``popx/op/sumx.cpp``: a tree of adds). The sum
    is placed with the last op to give a part (the consumer first in the forward order): the SumOp inherits
    the placement of its inputs' producers (``opattributehelper.cpp``), so a tensor crossing a pipeline
    stage gets its gradient sent back summed, once."""

    def __init__(self, bw: "_Backward"):
        self.bw = bw
        self.parts: dict[str, list[str]] = {}  # tensor -> the gradient tensors given it so far
        self.givers: dict[str, Op] = {}  # tensor -> the forward op whose backward gave it the last part

    def __contains__(self, tensor: str) -> bool:
        return tensor in self.parts

    def __setitem__(self, tensor: str, grad: str) -> None:
        self.parts[tensor] = [grad]
        self._mark(tensor, grad)

    def _mark(self, tensor: str, grad: str) -> None:
        """Record on ``grad`` (made for this gradient, not a constant seed) which tensor it is the gradient of."""
        t = self.bw.g.tensors[grad]
        if t.role == "gradient" and t.grad_of is None:
            t.grad_of = tensor

    def __getitem__(self, tensor: str) -> str:
        parts = self.parts[tensor]
        if len(parts) > 1:
            t, bw = self.bw.g.tensors[tensor], self.bw
            reading, bw.current = bw.current, self.givers[tensor]
            if len(parts) == 2:
                summed = bw.new("add", parts, t.shape, t.dtype, suffix="sum")
            else:
                summed = bw.new("map", parts, t.shape, t.dtype, {"steps": ["add"] * (len(parts) - 1)}, "sum")
            bw.current = reading
            self.parts[tensor] = [summed]
            self._mark(tensor, summed)
        return self.parts[tensor][0]

    def add(self, tensor: str, grad: str) -> None:
        """One more part of ``tensor``'s gradient, given by the current op's backward."""
        self.parts.setdefault(tensor, []).append(grad)
        self.givers[tensor] = self.bw.current
        self._mark(tensor, grad)

    def get(self, tensor: str, default=None):
        return self[tensor] if tensor in self.parts else default

    def setdefault(self, tensor: str, grad: str) -> str:
        if tensor not in self.parts:
            self[tensor] = grad
        return self[tensor]


class _Backward:
    def __init__(self, graph: Graph):
        self.g = graph
        self.grads = _Gradients(self)  # tensor -> its gradient tensor
        self.current: Op | None = None
        self.pads: dict[str, Op] = {}  # a gradient made by padding slices' gradients -> its pad op

    def new(self, kind: str, inputs: list[str], shape, dtype: str, attrs=None, suffix="grad") -> str:
        return self.new_many(kind, inputs, [(shape, dtype)], attrs, suffix)[0]

    def new_many(self, kind: str, inputs: list[str], outputs: list[tuple], attrs=None, suffix="grad") -> list[str]:
        """A backward op of the current forward op with one output per ``(shape, dtype)``."""
        fwd = self.current
        name = self.g.unique_op_name(f"{fwd.name}/{suffix}")
        outs = [self.g.add_tensor(self.g.unique_tensor_name(name if len(outputs) == 1 else f"{name}:{i}"), shape,
                                  dtype, "gradient", name).name for i, (shape, dtype) in enumerate(outputs)]
        self.g.add_op(Op(name, kind, inputs, outs, dict(attrs or {}), pass_="backward", ipu=fwd.ipu,
                         stage=fwd.stage, phase=fwd.phase, block=fwd.block, recompute=False,
                         forward_of=fwd.name))
        return outs

    def give(self, tensor: str, grad: str) -> None:
        """Add ``grad`` to the gradient of ``tensor`` (summed when read, :class:`_Gradients`)."""
        t = self.g.tensors[tensor]
        gt = self.g.tensors[grad]
        if gt.shape != t.shape:  # undo broadcasting: sum over the broadcast axes
            grad = self.new("reduce_sum", [grad], t.shape, gt.dtype,
                            {"axes": "broadcast"}, suffix=f"reduce_{t.name.split('/')[-1]}")
        self.grads.add(tensor, grad)

    def give_slice(self, tensor: str, dy: str, axis: int | None, start: int | None, stop: int | None) -> None:
        """Add the gradient ``dy`` of ``tensor[start:stop]`` along ``axis``. PopART's SliceGradOp pads
        it with zeros to the tensor's shape, a ``popops::pad`` (a view of ``dy`` and constants), and
        its PadSum pattern (on by default, willow/src/patterns/padsum.cpp) turns a sum of such pads
        on one axis whose regions do not overlap into one concatenation, a view too: BERT's fused
        QKV gets its gradient from its three slices so. The pad op gathers every such slice of the
        tensor; another gradient of it, or that of a slice whose region is not known (``axis``,
        ``start`` or ``stop`` None: a front end's index or split), is added as usual."""
        op = next((self.pads[p] for p in self.grads.parts.get(tensor, ()) if p in self.pads), None)
        known = None not in (axis, start, stop)
        if (known and op is not None and op.attrs["axis"] == axis
                and all(stop <= a or b <= start for a, b in op.attrs["regions"])):
            op.inputs.append(dy)
            op.attrs["regions"].append((start, stop))
            ops = self.g.ops  # moved after the op making dy (found by identity: ops compare by value, slowly)
            del ops[next(i for i in range(len(ops) - 1, -1, -1) if ops[i] is op)]
            ops.append(op)
            return
        t = self.g.tensors[tensor]
        pad = self.new("pad", [dy], t.shape, t.dtype, {"axis": axis, "regions": [(start, stop)]}, suffix="pad")
        if known:
            self.pads[pad] = self.g.ops[-1]
        self.give(tensor, pad)


def mark_fully_connected_passes(g: Graph, training: bool) -> None:
    """Give each weight's forward matmul (``X @ W``, W a weight) poplin's ``fullyConnectedPass``:
    TRAINING_FWD in training (``_differentiate`` gives its gradients TRAINING_BWD (dX) and
    TRAINING_WU (dW)), INFERENCE_FWD at inference.

    The frameworks set this option on every matmul: PopART (and PopTorch through it) when the
    session option ``enableFullyConnectedPass`` is on, its default (popart willow/src/popx/op/
    matmulx.cpp ``appendPoplarOptionsForOp``: the op's phase in a training IR, INFERENCE_FWD
    otherwise; sessionoptions.hpp), and graphcore/tensorflow from each dot's classification
    (``GetMatMulOptionsForInst``, unless ``clear_matmul_pass_type``; the compiler clears the marks
    when ``enableFullyConnectedPass`` is off). poplin then plans a
    training layer's three passes jointly or separately (sim/cost/amp.py ``plan_fc_training``) and
    an inference layer with its operands swapped when its planner prefers (sim/cost/matmul_swap.py).
    At inference a tied projection (``X @ Wᵀ``, its right operand a transpose of a weight: the
    ``transpose`` op prices the table's move to its new layout) is marked too (and ``tied``), as PopART
    marks every matmul of an inference IR. Matmuls between two activations (attention), a training graph's tied
    projection and those given a pass explicitly are left as they are (an activation is not laid out for
    the swapped plan, and that rearrangement is not priced); a view of weights (``GraphBuilder.linear``'s
    pieces) is a weight."""
    fc_pass = "TRAINING_FWD" if training else "INFERENCE_FWD"
    tied = set() if training else {op.outputs[0] for op in g.ops if op.kind == "transpose"
                                   and g.tensors[op.inputs[0]].priced_role == "weight"
                                   and len(g.tensors[op.inputs[0]].shape) == 2}
    for op in g.ops:
        right = g.tensors[op.inputs[1]] if op.kind == "matmul" else None
        if (right is not None and "fully_connected_pass" not in op.attrs and not op.attrs.get("transpose_a")
                and not op.attrs.get("transpose_b") and (right.priced_role == "weight" or right.name in tied)):
            op.attrs = dict(op.attrs, fully_connected_pass=fc_pass) | ({"tied": True} if right.name in tied else {})


def mark_norm_statistics(g: Graph) -> None:
    """Give each batch norm the per-channel statistics it saves for its gradient in training (2, C): the mean
    and inverse standard deviation, outputs of PopART's BatchNormOp that its BatchNormGradOp reads
    (op/batchnorm.cpp, popx/op/batchnormx.cpp), as poplin's ``batchNormGradients`` takes them. The gradient
    reads them, not the normalised output, so a recomputed batch norm is rerun for them even when its
    output is needed by no backward op (a ReLU's gradient reads the ReLU's output)."""
    for op in g.ops:
        if op.kind == "batchnorm" and len(op.outputs) == 1:
            x = g.tensors[op.inputs[0]]
            name = g.unique_tensor_name(f"{op.name}/statistics")
            g.add_tensor(name, (2, x.shape[1]), x.dtype, "activation", op.name)
            op.outputs = op.outputs + [name]


def mark_recurrent_saves(g: Graph) -> None:
    """Give each LSTM / GRU layer the output popnn fills for its backward pass in training: the
    intermediates of every step (``intermediatesSeq``, (T, saved, B, H); ``RNN_SAVED``), which its
    gradient op reads, and the ``training`` attribute (the cell copies them out at each step)."""
    for op in g.ops:
        if op.kind in RNN_GATES and not op.attrs.get("training"):
            T, B, H = g.tensors[op.outputs[0]].shape
            name = g.unique_tensor_name(f"{op.name}/intermediates")
            g.add_tensor(name, (T, RNN_SAVED[op.kind], B, H), g.tensors[op.outputs[0]].dtype, "activation", op.name)
            op.outputs = op.outputs + [name]
            op.attrs = dict(op.attrs, training=True)


def _norm_param_grads(bw: _Backward, dy: str, params: list, channel_axis: int | None = None) -> None:
    """The gradients of a norm's scale and shift (``params``, those wanted): reductions of dy (times
    the normalised x, which the norm's gradient op multiplies) over all but the channels: dy's
    ``channel_axis`` (a batch or group norm's axis 1; None: a layer norm's trailing dimensions,
    the params' shape). poplin's normParamGradients reduces both in one popops reduce of their
    concatenation (Norms.cpp: one ``normReduce`` of ``concat({gradsIn * actsWhitened, gradsIn}, 1)``),
    which PopART's batch and group norm gradients call (popx/op/batchnormx.cpp, groupnormx.cpp): so the
    pair is one ``reduce_sum`` with two outputs, priced as that one reduce (``sim.cost.rules``)."""
    if not params:
        return
    rank = len(bw.g.tensors[dy].shape)
    kept = {channel_axis} if channel_axis is not None else set(range(rank - len(params[0].shape), rank))
    attrs = {"axes": [a for a in range(rank) if a not in kept]}
    if channel_axis is not None:  # poplin lays a norm's activations out channels innermost
        attrs["channel_axis"] = channel_axis
    suffix = "grad_params" if len(params) > 1 else f"grad_{params[0].name.split('/')[-1]}"
    for p, grad in zip(params, bw.new_many("reduce_sum", [dy], [(p.shape, p.dtype) for p in params], attrs, suffix)):
        bw.give(p.name, grad)


def _recurrent_grads(bw: _Backward, op: Op, need: set[str]) -> None:
    """The gradients of a recurrent layer (``GraphBuilder.recurrent``), from whichever of its
    outputs (the sequence, the last ``h``, the last ``c``) have one: one ``<cell>_grad`` op, popnn's
    backward pass with its weight update (``lstmBwdWithWU`` / ``gruBwdWithWU``), whose outputs are
    the gradients of the input sequence, both weights, the bias and the initial states."""
    g = bw.g
    ins = [g.tensors[i] for i in op.inputs]
    states = len(op.outputs) - 2  # the sequence, the states, the intermediates
    grads = {i: bw.grads[o] for i, o in enumerate(op.outputs[:1 + states]) if o in bw.grads}
    outs = bw.new_many(f"{op.kind}_grad", list(op.inputs) + [op.outputs[0], op.outputs[-1]] + list(grads.values()),
                       [(t.shape, t.dtype) for t in ins], dict(op.attrs, output_grads=sorted(grads)))
    for t, grad in zip(ins, outs):
        if t.name in need:
            bw.give(t.name, grad)


#: losses the graph builders and front ends make; their gradient ops take the loss's inputs
LOSS_KINDS = ("softmax_cross_entropy", "mse_loss")
#: a loss op's attributes that its gradient op carries too: which ops PopART lowers them to
#: (:func:`sim.cost.row_ops.loss_steps`)
LOSS_LOWERING = ("loss", "probabilities", "log_softmax", "log_probabilities", "ignore_index", "reduction",
                 "classes_strided")
#: loss ops whose gradient starts the backward pass without a seed tensor (``<kind>_grad``)
_SEEDED_LOSS_KINDS = LOSS_KINDS + ("reduce_mean", "reduce_sum")


def _requires_grad(graph: Graph) -> set[str]:
    """The tensors a weight's gradient flows back through: every op's outputs from a weight on,
    but a ``detach`` (torch's ``.detach()``, PopART's Detach) and an op computed without gradients
    (``no_grad``: in the model's ``with torch.no_grad():``), whose outputs take none."""
    need = {t.name for t in graph.tensors.values() if t.role == "weight"}
    for op in graph.ops:
        if op.kind != "detach" and not op.attrs.get("no_grad") and any(i in need for i in op.inputs):
            need.update(op.outputs)
    return need


def graph_to_price(graph: Graph, training: bool, optimizer: Optimizer | str | None = "sgd",
                   accumulate: bool = False) -> Graph:
    """The copy of ``graph`` the compiler prices: expanded for training (:func:`expand_training`),
    or at inference with its weights' matmuls marked INFERENCE_FWD (:func:`mark_fully_connected_passes`)."""
    if training:
        return expand_training(graph, optimizer, accumulate)
    g = graph.copy()
    mark_fully_connected_passes(g, training=False)
    return g


def expand_training(graph: Graph, optimizer: Optimizer | str = "sgd", accumulate: bool = False) -> Graph:
    """A copy of ``graph`` with backward and update passes added.

    ``accumulate`` adds gradient-accumulation buffers (role ``accumulator``), summed into on
    every micro-batch and read by the optimizer update.
    """
    if graph.training:
        raise GraphError(f"graph {graph.name!r} is already a training graph")
    if graph.loss is None:
        raise GraphError(
            f"graph {graph.name!r} has no loss: build one with a GraphBuilder's softmax_cross_entropy or "
            "mse_loss, name an ONNX model's loss tensor with sim.onnx.load(..., loss=NAME) (command line: "
            "--loss NAME), or pass training=False")
    made = {t for op in graph.ops for t in op.outputs}
    if graph.loss not in made:
        what = "an input or a weight, which no op makes" if graph.loss in graph.tensors else "not a tensor of it"
        raise GraphError(f"graph {graph.name!r}: its loss {graph.loss!r} is {what}, so there is nothing to "
                         "differentiate; set graph.loss to the output of the op that computes the loss "
                         "(softmax_cross_entropy, mse_loss, ...), or pass training=False")
    opt = optimizer if isinstance(optimizer, Optimizer) else Optimizer(optimizer)
    weights = {w.name for w in graph.weights()}
    for field in ("no_weight_decay", "no_trust_ratio"):
        unknown = [n for n in getattr(opt, field) if n not in weights]
        if unknown:
            raise OptionsError(f"optimizer {opt.name!r}: {field} names {', '.join(map(repr, unknown[:5]))}, "
                               f"not weights of graph {graph.name!r}; use its weight names "
                               f"(e.g. {', '.join(sorted(weights)[:3]) or 'none: the graph has no weights'})")
    g = graph.copy()
    g.training = True
    mark_fully_connected_passes(g, training=True)
    mark_recurrent_saves(g)
    mark_norm_statistics(g)
    need = _requires_grad(g)
    forward = list(g.ops)
    bw = _backward_passes(g, forward, need)

    # weight gradients: accumulate, then update
    first_user = {}
    for op in forward:
        for i in op.inputs:
            first_user.setdefault(i, op)
    accumulates = []
    factor = _clip_factor_tensor(g, bw, opt)
    for w in g.weights():
        if w.name not in bw.grads:
            continue
        user = first_user[w.name]
        grad = bw.grads[w.name]
        annotations = dict(ipu=user.ipu, stage=user.stage, phase=user.phase, block=user.block)
        states = [g.add_tensor(g.unique_tensor_name(f"{w.name}/{opt.name}_state{k}"), w.shape,
                               dtype, "state").name for k, dtype in enumerate(opt.state_dtypes)]
        combined = accumulate and opt.combined_accum
        if accumulate:  # into an accumulator, or with combined_accum into the velocity itself
            acc = states[0] if combined else g.add_tensor(g.unique_tensor_name(f"{w.name}/accum"), w.shape,
                                                          opt.accum_dtype or w.dtype, "accumulator").name
            name = g.unique_op_name(f"{w.name}/accumulate")
            accumulates.append(g.add_op(Op(name, "accumulate", [acc, grad], [acc], {"weight": w.name},
                                           pass_="backward", **annotations)))
            grad = acc
        if factor is not None:
            _clip_gradient(g, w.name, grad, factor, annotations)
        kind = opt.update_kind_of(w.name)
        attrs = {"optimizer": opt.name, "weight": w.name}
        if w.name in opt.no_weight_decay:
            attrs["weight_decay"] = False  # the updater has no wd * w term (AdamUpdaterOpx)
        if kind == "lamb_update":
            _lamb(g, w.name, grad, states, attrs, annotations)
            continue
        norms = [_norm(g, x, w.name, of, attrs, annotations) for of, x in (("weight", w.name), ("gradient", grad))] \
            if kind == "lars_update" else []
        name = g.unique_op_name(f"{w.name}/{kind}")
        g.add_op(Op(name, kind, ([w.name] if combined else [w.name, grad]) + states + norms, [w.name] + states,
                    dict(attrs), pass_="update", **annotations))
    _accumulate_early(g, accumulates)
    if factor is not None:
        _clip_by_global_norm(g, factor, opt.clip_norm)
    return g


def _backward_from(bw: _Backward, forward: list[Op], loss: str, need: set[str]) -> None:
    """The backward pass of the ops ``forward`` from their ``loss``, into ``bw``."""
    g = bw.g
    loss_op = next(op for op in forward if loss in op.outputs)
    bw.current = loss_op
    if loss_op.kind in LOSS_KINDS:  # its gradient and the loss's seed in one op
        _loss_grads(bw, loss_op, need)
    elif loss_op.kind in _SEEDED_LOSS_KINDS:
        x = g.tensors[loss_op.inputs[0]]
        bw.grads[x.name] = bw.new(f"{loss_op.kind}_grad", list(loss_op.inputs), x.shape, x.dtype)
    else:  # a loss built from other ops (identity_loss of a sum, a scaled loss): seeded with a constant 1
        t = g.tensors[loss]
        bw.grads[loss] = g.add_tensor(g.unique_tensor_name(f"{loss}/grad_seed"), t.shape, t.dtype, "constant").name
    for op in reversed(forward):
        if (op is loss_op and op.kind in _SEEDED_LOSS_KINDS) or not any(o in bw.grads for o in op.outputs):
            continue
        bw.current = op
        _differentiate(bw, op, need)


def _backward_passes(g: Graph, forward: list[Op], need: set[str]) -> _Backward:
    """The backward pass from the graph's loss; a graph whose micro-batches are written out one after
    another (``Graph.micro_batch_losses``, a PopXL loop) gets each micro-batch's backward pass right
    after its loss, as the program runs it, and each weight's gradients summed over them. Returns
    the pass whose ``grads`` hold each weight's (summed) gradient."""
    if len(g.micro_batch_losses) <= 1:
        bw = _Backward(g)
        _backward_from(bw, forward, g.loss, need)
        return bw
    total, order, start = _Backward(g), [], 0
    for loss in g.micro_batch_losses:
        end = next(i for i, op in enumerate(forward) if loss in op.outputs)
        segment, start = forward[start:end + 1], end + 1
        made = len(g.ops)
        bw = _Backward(g)
        _backward_from(bw, segment, loss, need)
        for w in g.weights():  # this micro-batch's weight gradients added to the earlier ones'
            if w.name in bw.grads:
                total.current = next(op for op in segment if w.name in op.inputs)
                total.give(w.name, bw.grads[w.name])
                total.grads[w.name]  # a running sum, added in this micro-batch's ops
        order += segment + g.ops[made:]
        del g.ops[made:]
    g.ops = order + forward[start:]
    return total


def _clip_factor_tensor(g: Graph, bw: _Backward, opt: Optimizer) -> str | None:
    """The clip factor's scalar tensor when ``opt`` clips gradients (None otherwise), in the
    first weight gradient's dtype (PopART's norms and factor take the gradients' type). The
    clipping ops carry a ``clip`` attribute: each weight's ``norm`` and ``scale``, and the
    ``global`` ops on one IPU between them."""
    grads = [bw.grads[w.name] for w in g.weights() if w.name in bw.grads]
    if opt.clip_norm is None or not grads:
        return None
    dtype = g.tensors[grads[0]].dtype
    return g.add_tensor(g.unique_tensor_name("gradient_clipping/factor"), (1,), dtype, "activation").name


def _clip_gradient(g: Graph, weight: str, grad: str, factor: str, annotations: dict) -> None:
    """A weight's share of the clipping, as PopART's ClipWeightGradientsByNorm transform adds it
    (willow/src/transforms/clipweightgradientsbynorm.cpp): a ReduceSumSquareOp of the gradient
    to one value (the ``norm``, a popops reduce with ``SQUARE_ADD``; with RTS of a shard, then
    all-reduced, ReduceSumSquareOp::configureForReplicatedTensorSharding) and a MulOp of the
    gradient by the clip factor (the ``scale``, in place) before the update reads it."""
    t = g.tensors[grad]
    attrs = {"weight": weight, "optimizer": "clip"}
    name = g.unique_op_name(f"{weight}/clip_norm")
    norm = g.add_tensor(g.unique_tensor_name(name), (1,), t.dtype, "activation", name).name
    g.add_op(Op(name, "reduce_sum", [grad], [norm],
                {**attrs, "clip": "norm", "axes": list(range(len(t.shape))), "keepdims": False,
                 "operation": "square_add"}, pass_="update", **annotations))
    g.add_op(Op(g.unique_op_name(f"{weight}/clip_scale"), "mul", [grad, factor], [grad],
                {**attrs, "clip": "scale"}, pass_="update", **annotations))


def _clip_by_global_norm(g: Graph, factor: str, clip_norm: float) -> None:
    """The global part of the clipping, on one IPU (placed by :func:`place_global_norm`):
    ``factor = clip / max(clip, sqrt(sum of the norms))`` as PopART builds it, four ops: a SumOp
    of every norm (one popops::map adding them, SumOpx), SqrtOp, MaxOp with the clip norm (a
    constant) and DivOp. The update ops are reordered so that every norm precedes these and
    every scale follows them."""
    updates = [op for op in g.ops if op.pass_ == "update"]
    norms = [op for op in updates if op.attrs.get("clip") == "norm"]
    dtype = g.tensors[factor].dtype
    clip = g.add_tensor(g.unique_tensor_name("gradient_clipping/clip_norm"), (1,), dtype, "constant").name
    attrs = {"optimizer": "clip", "clip": "global", "clip_norm": clip_norm}

    def scalar_op(kind: str, what: str, inputs: list[str], out: str | None = None, **more) -> str:
        name = g.unique_op_name(f"gradient_clipping/{what}")
        out = out or g.add_tensor(g.unique_tensor_name(name), (1,), dtype, "activation", name).name
        g.tensors[out].producer = name
        g.add_op(Op(name, kind, inputs, [out], {**attrs, **more}, pass_="update"))
        return out

    total = scalar_op("map", "sum", [op.outputs[0] for op in norms], steps=["add"] * max(len(norms) - 1, 1))
    largest = scalar_op("maximum", "max", [scalar_op("sqrt", "sqrt", [total]), clip])
    scalar_op("div", "factor", [clip, largest], out=factor)
    made = [op for op in g.ops if op.attrs.get("clip") == "global"]
    g.ops = ([op for op in g.ops if op.pass_ != "update"] + norms + made
             + [op for op in updates if op.attrs.get("clip") != "norm"])


def place_global_norm(g: Graph) -> None:
    """Put the clipping's global ops on the IPU holding the most gradient norms, the first such
    in program order (PopART's chooseGlobalNormVgid), with that IPU's stage and phase; runs after
    placement. The other IPUs copy their norms there and receive the factor back."""
    norms = [op for op in g.ops if op.attrs.get("clip") == "norm"]
    if not norms:
        return
    counts: dict[int, int] = {}
    best, chosen = 0, norms[0]
    for op in norms:
        counts[op.ipu] = counts.get(op.ipu, 0) + 1
        if counts[op.ipu] > best:
            best, chosen = counts[op.ipu], op
    for op in g.ops:
        if op.attrs.get("clip") == "global":
            op.ipu, op.stage, op.phase, op.block = chosen.ipu, chosen.stage, chosen.phase, chosen.block


def _lamb(g: Graph, weight: str, grad: str, states: list[str], attrs: dict, annotations: dict) -> None:
    """LAMB's update of ``weight`` as the four ops of :data:`LAMB_OPS`: phase 1 updates the
    moments in place and makes the updater ``<weight>/lamb_updater`` (the weight's shape and
    dtype, an activation of the update pass), the two norms read the weight and the updater, and
    phase 2 updates the weight from the updater and the two norms."""
    w = g.tensors[weight]
    name = g.unique_op_name(f"{weight}/adam_updater")
    r = g.add_tensor(g.unique_tensor_name(f"{weight}/lamb_updater"), w.shape, w.dtype, "activation", name).name
    g.add_op(Op(name, "adam_updater", [weight, grad] + states, states + [r], dict(attrs),
                pass_="update", **annotations))
    rest = {k: v for k, v in attrs.items() if k != "weight_decay"}  # the updater's term only
    norms = [_norm(g, x, weight, of, rest, annotations, "float32") for of, x in (("weight", weight), ("update", r))]
    name = g.unique_op_name(f"{weight}/lamb_update")
    g.add_op(Op(name, "lamb_update", [weight, r] + norms, [weight], rest, pass_="update", **annotations))


def _norm(g: Graph, x: str, weight: str, of: str, attrs: dict, annotations: dict, dtype: str | None = None) -> str:
    """``||x||`` as an update-pass op: a sum of squares over the whole tensor to one value in
    ``dtype`` (default: ``x``'s; popops reduce with ``SQUARE_ADD``; the square root is part of the
    trust ratio), named ``<weight>/<optimizer>_norm_<of>``; it carries the weight's name, so it
    is placed with its update."""
    t = g.tensors[x]
    name = g.unique_op_name(f"{weight}/{attrs['optimizer']}_norm_{of}")
    out = g.add_tensor(g.unique_tensor_name(name), (1,), dtype or t.dtype, "activation", name).name
    g.add_op(Op(name, "reduce_sum", [x], [out],
                {**attrs, "axes": list(range(len(t.shape))), "keepdims": False, "operation": "square_add",
                 "norm_of": of}, pass_="update", **annotations))
    return out


def merge_norms(g: Graph, per_block: bool = False) -> None:
    """Merge the LARS norm reductions of each IPU, stage and phase into one ``reduce_many`` op
    (LAMB's norms stay apart: PopART grows each LambSquareOp as its own popops::reduce).

    Graphcore's MLPerf ResNet-50 (TF1) sets ``maximum_reduce_many_buffer_size`` to 216 bytes
    (configs.yml): TensorFlow's IPU backend gathers independent reductions whose outputs total at
    most that many bytes into one popops ReduceMany call, and ResNet-50's 54 LARS weights have
    108 fp16 norms, 216 bytes. Runs after placement (each op's ``ipu``, ``stage`` and ``phase`` set),
    in place; the merged op takes the place of the group's first norm, so it runs before every
    update that reads it. Graphs without LARS are left as they are. ``per_block`` merges each
    block's norms apart (the capacity planner, which moves blocks between IPUs afterwards).
    """
    groups: dict[tuple, list[Op]] = {}
    for op in g.ops:
        if op.pass_ == "update" and "norm_of" in op.attrs and op.attrs.get("optimizer") == "lars":
            groups.setdefault((op.ipu, op.stage, op.phase) + ((op.block,) if per_block else ()), []).append(op)
    drop = set()
    for ops in groups.values():
        if len(ops) < 2:
            continue
        first = ops[0]
        merged = Op(g.unique_op_name(f"{first.attrs['optimizer']}_norms"), "reduce_many",
                    [t for op in ops for t in op.inputs], [t for op in ops for t in op.outputs],
                    {"optimizer": first.attrs["optimizer"], "weight": first.attrs["weight"],
                     "operation": "square_add", "reductions": len(ops)},
                    pass_="update", ipu=first.ipu, stage=first.stage, phase=first.phase, block=first.block)
        for op in ops:
            for t in op.outputs:
                g.tensors[t].producer = merged.name
        g._op_names.add(merged.name)
        g.ops[g.ops.index(first)] = merged
        drop.update(id(op) for op in ops[1:])
    if drop:
        g.ops = [op for op in g.ops if id(op) not in drop]


def sparse_accumulate_tied_gathers(g: Graph) -> list[str]:
    """PopART's TiedGather and TiedGatherAccumulate patterns on a training graph with gradient accumulation
    (willow/src/patterns/tiedgatherpattern.cpp): a weight both gathered and read by a matmul (a tied
    embedding) gets no zeroed dense gradient table added to the matmul's gradient; the matmul's gradient is
    accumulated densely and SparseAccumulate adds the gathered rows' gradients straight into the accumulator
    (popops multiUpdateAdd, after the dense accumulation). Rewrites each such weight's ops in place; returns
    the weights rewritten."""
    done = []
    by_name = {op.name: op for op in g.ops}  # the last op of a name, as Graph.producer_op finds it
    for acc_op in [op for op in g.ops if op.kind == "accumulate" and "weight" in op.attrs]:
        acc, grad = acc_op.inputs
        total = by_name.get(g.tensors[grad].producer)
        if total is None or total.kind != "add" or len(total.inputs) != 2:
            continue
        producers = [by_name.get(g.tensors[t].producer) for t in total.inputs]
        sparse = [p for p in producers if p is not None and p.kind == "embedding_grad" and len(p.inputs) == 2]
        if len(sparse) != 1:
            continue
        embedding_grad, weight = sparse[0], acc_op.attrs["weight"]
        gather = by_name.get(embedding_grad.forward_of)
        if gather is None or gather.kind != "gather" or gather.inputs[1] != weight or not _read_by_matmul(g, weight):
            continue
        readers = [op for op in g.ops if total.outputs[0] in op.inputs or embedding_grad.outputs[0] in op.inputs]
        if readers != [total, acc_op] and readers != [acc_op, total]:
            continue
        acc_op.inputs = [acc, next(t for t, p in zip(total.inputs, producers) if p is not embedding_grad)]
        for op in (total, embedding_grad):
            g.ops.remove(op)
            del g.tensors[op.outputs[0]]
        embedding_grad.inputs = embedding_grad.inputs + [acc]
        embedding_grad.outputs = [acc]
        embedding_grad.attrs = {**embedding_grad.attrs, "into_table": True}
        g.ops.insert(g.ops.index(acc_op) + 1, embedding_grad)
        done.append(weight)
    return done


def _read_by_matmul(g: Graph, tensor: str) -> bool:
    """Whether a forward matmul reads ``tensor``, directly or through views of it (a transpose, slices:
    a tied projection, serialised or not)."""
    seen, todo = set(), [tensor]
    while todo:
        name = todo.pop()
        for op in g.ops:
            if op.pass_ == "forward" and name in op.inputs:
                if op.kind == "matmul":
                    return True
                if op.kind in ("transpose", "slice", "reshape") and op.outputs[0] not in seen:
                    seen.add(op.outputs[0])
                    todo.append(op.outputs[0])
    return False


def _accumulate_early(g: Graph, accumulates: list[Op]) -> None:
    """Move each accumulate op to just after the op that makes the gradient it adds."""
    after: dict[str, list[Op]] = {}
    for op in accumulates:
        after.setdefault(g.tensors[op.inputs[1]].producer, []).append(op)
    moved = {id(op) for op in accumulates}
    ops = []
    for op in g.ops:
        if id(op) not in moved:
            ops += [op] + after.get(op.name, [])
    g.ops = ops


def _differentiate(bw: _Backward, op: Op, need: set[str]) -> None:
    if "onnx_loop" in op.attrs and any(i in need for i in op.inputs):
        raise GraphError(f"op {op.name!r} runs in ONNX Loop {op.attrs['onnx_loop']!r} and the loss's gradient must "
                         "pass through it, but PopART has no gradient for a Loop (its LoopOp has no grad ops); "
                         "train a model whose loops need no gradient, or run inference (training=False)")
    if op.kind in RNN_GATES:
        _recurrent_grads(bw, op, need)
        return
    if "reduced" in op.attrs:
        _reduction_composite_grad(bw, op, need)
        return
    g = bw.g
    dy = bw.grads[op.outputs[0]]
    ins = [g.tensors[i] for i in op.inputs]
    k = op.kind

    def wants(i: int) -> bool:
        return ins[i].name in need

    if k == "matmul":
        a, b = ins
        fc = op.attrs.get("fully_connected_pass") == "TRAINING_FWD"  # mark_fully_connected_passes
        batch = g.tensors[op.outputs[0]].shape[:-2]  # the operands' batch dimensions, broadcast
        # PopART's MatMulBaseGradOp takes the forward op's availableMemoryProportion and partials type (matmul.cpp)
        own = {key: op.attrs[key] for key in ("available_memory_proportion", "partials_type") if key in op.attrs}
        if wants(0):
            attrs = own | {"transpose_b": True} | ({"fully_connected_pass": "TRAINING_BWD"} if fc else {})
            grad = bw.new("matmul", [dy, b.name], batch + a.shape[-2:], a.dtype, attrs, "grad_a")
            bw.give(a.name, _summed_to(bw, grad, a))
        if wants(1):
            attrs = own | {"transpose_a": True} | ({"fully_connected_pass": "TRAINING_WU"} if fc else {})
            if len(b.shape) == 2 and len(a.shape) > 2:  # shared weight: fold the batch into rows
                rows = math.prod(a.shape[:-1])
                a2 = bw.new("reshape", [a.name], (rows, a.shape[-1]), a.dtype, suffix="flat_a")
                d2 = bw.new("reshape", [dy], (rows, g.tensors[dy].shape[-1]), a.dtype, suffix="flat_dy")
                bw.give(b.name, bw.new("matmul", [a2, d2], b.shape, b.dtype, attrs, "grad_b"))
            else:  # PopART's MatMulRhsGradOp: the batched product, then summed over b's broadcast axes
                grad = bw.new("matmul", [a.name, dy], batch + b.shape[-2:], b.dtype, attrs, "grad_b")
                bw.give(b.name, _summed_to(bw, grad, b))
    elif k == "conv2d":
        x, w = ins
        n, co, ho, wo = g.tensors[op.outputs[0]].shape
        attrs = dict(op.attrs, n=n, ci=x.shape[1], co=co, ho=ho, wo=wo)
        if wants(0):
            bw.give(x.name, bw.new("conv2d_grad_input", [dy, w.name], x.shape, x.dtype, attrs, "grad_input"))
        if wants(1):
            bw.give(w.name, bw.new("conv2d_grad_weight", [x.name, dy], w.shape, w.dtype, attrs, "grad_weight"))
    elif k == "conv2d_grad_input":  # a transposed convolution: the input gradient of a convolution C
        z, w = ins
        attrs = {a: op.attrs[a] for a in ("kernel", "stride", "padding", "groups") if a in op.attrs}
        if wants(0):  # C itself, applied to the output's gradient
            bw.give(z.name, bw.new("conv2d", [dy, w.name], z.shape, z.dtype, attrs, "grad_input"))
        if wants(1):  # C's weight gradient, the output's gradient in the place of C's input
            grad_attrs = dict(attrs, n=z.shape[0], ci=op.attrs["ci"], co=op.attrs["co"], ho=z.shape[2], wo=z.shape[3])
            bw.give(w.name, bw.new("conv2d_grad_weight", [dy, z.name], w.shape, w.dtype, grad_attrs, "grad_weight"))
    elif k in ("add", "sub"):
        for i in range(2):
            if wants(i):
                bw.give(ins[i].name, dy if k == "add" or i == 0 else
                        bw.new("scale", [dy], g.tensors[dy].shape, ins[i].dtype, {"factor": -1}, "neg"))
    elif k == "div" and wants(1):  # PopART's DivArg1GradOp pattern: -(dy a) / b², four ops
        a, b = ins
        if wants(0):
            bw.give(a.name, bw.new("div", [dy, b.name], g.tensors[dy].shape, a.dtype, suffix="grad0"))
        squared = bw.new("mul", [b.name, b.name], b.shape, b.dtype, suffix="grad1_square")
        product = bw.new("mul", [dy, a.name], g.tensors[dy].shape, b.dtype, suffix="grad1_mul")
        ratio = bw.new("div", [product, squared], g.tensors[dy].shape, b.dtype, suffix="grad1_div")
        bw.give(b.name, bw.new("scale", [ratio], g.tensors[dy].shape, b.dtype, {"factor": -1}, "grad1_neg"))
    elif k in ("mul", "div"):
        for i in range(2):
            if wants(i):
                other = ins[1 - i].name
                bw.give(ins[i].name, bw.new(k, [dy, other], g.tensors[dy].shape, ins[i].dtype, suffix=f"grad{i}"))
    elif k in _ACTIVATION_GRADS:
        if wants(0):  # relu, tanh and sigmoid's grad ops read the forward output, gelu and swish's the input
            read = op.outputs[0] if k in _GRADS_OF_OUTPUT else ins[0].name
            bw.give(ins[0].name, bw.new(f"{k}_grad", [dy, read], ins[0].shape, ins[0].dtype))
    elif k == "copy" and op.attrs.get("op") == "resize_linear":
        raise GraphError(f"op {op.name!r}: PopART cannot train through a Resize in linear mode (ResizeGradOpx: "
                         "\"Resize mode 'linear' is not supported when training\"); run inference, or resize "
                         "in nearest mode")
    elif k == "reshape" and op.attrs.get("op") == "upsample_nearest" and _integer_scales(ins[0].shape,
                                                                                          g.tensors[dy].shape):
        if wants(0):
            bw.give(ins[0].name, _nearest_upsample_grad(bw, dy, ins[0]))
    elif k == "copy" and op.attrs.get("op") == "upsample_input":  # inside ResizeOpx: no gradient op of its own
        if wants(0):
            bw.give(ins[0].name, dy)
    elif k in ("copy", "reshape") and g.tensors[dy].numel > ins[0].numel:
        # a repeat (PopART's Tile) or an expand of the input: its gradient sums the copies back
        # (TileGradOp; ExpandGradOp is a ReduceSum over the broadcast axes)
        if wants(0):
            bw.give(ins[0].name, bw.new("reduce_sum", [dy], ins[0].shape, ins[0].dtype, {"axes": "broadcast"},
                                        "sum_copies"))
    elif k == "copy" and op.attrs.get("dynamic_update") and len(ins) >= 3:
        # popops' dynamic update of ins[1] into ins[0] at run-time offsets (the later inputs): PopART's
        # DynamicUpdateUpdaterGradOp zeroes the slice in dy (priced as the same update) and
        # DynamicUpdateToUpdateGradOp slices it out for the update (a dynamic slice of dy)
        if wants(0):
            bw.give(ins[0].name, bw.new("copy", [dy], ins[0].shape, ins[0].dtype, op.attrs, suffix="grad_zeroed"))
        if wants(1):
            bw.give(ins[1].name, bw.new("copy", [dy] + [t.name for t in ins[2:]], ins[1].shape, ins[1].dtype,
                                        {"dynamic_slice": True}, suffix="grad_slice"))
    elif k in ("scale", "dropout", "cast", "copy"):
        # a dropout's gradient is the same dropout applied to dy: PopART's DropoutGradOp reruns
        # poprand::dropout with the forward op's seed (op/dropout.cpp, popx/op/dropoutx.cpp)
        if wants(0):
            attrs = {**op.attrs, "seed_from_forward": True} if k == "dropout" else op.attrs
            bw.give(ins[0].name, bw.new(k, [dy], ins[0].shape, ins[0].dtype, attrs))
    elif k == "exp":  # d exp(x) = exp(x) dx: one multiply by the forward output
        if wants(0):
            bw.give(ins[0].name, bw.new("mul", [dy, op.outputs[0]], ins[0].shape, ins[0].dtype))
    elif k == "softmax":
        if wants(0):
            # a log-softmax's gradient is PopART's LogSoftmaxGradOpx (sim.cost.row_ops.row_op_steps)
            attrs = {k: op.attrs[k] for k in ("axis", "log", "classes_strided") if k in op.attrs}
            bw.give(ins[0].name, bw.new("softmax_grad", [dy, op.outputs[0]], ins[0].shape, ins[0].dtype, attrs))
    elif k in ("layernorm", "batchnorm"):
        x = ins[0]
        if wants(0):  # a distributed batch norm's gradient sums span the same replicas
            span = {key: v for key, v in op.attrs.items() if key == "replica_group_size"}
            saved = op.outputs[1:2] if k == "batchnorm" else []  # mark_norm_statistics
            bw.give(x.name, bw.new(f"{k}_grad", [dy, x.name, ins[1].name] + saved, x.shape, x.dtype, span))
        _norm_param_grads(bw, dy, [p for p in ins[1:] if p.name in need], 1 if k == "batchnorm" else None)
    elif k in ("maxpool", "avgpool"):
        if wants(0):  # a max pool's gradient reads the forward input and output too (popnn poolInputGradient)
            reads = [dy, ins[0].name, op.outputs[0]] if k == "maxpool" else [dy]
            bw.give(ins[0].name, bw.new(f"{k}_grad", reads, ins[0].shape, ins[0].dtype, op.attrs))
    elif k == "gather":
        ids, table = ins
        if wants(1):
            # the lookup's axis and its own availableMemoryProportion, as PopART's GatherGradOp takes them
            kept = {key: op.attrs[key] for key in ("axis", "available_memory_proportion") if op.attrs.get(key)}
            bw.give(table.name, bw.new("embedding_grad", [ids.name, dy], table.shape, table.dtype, kept))
    elif k == "identity" and op.attrs.get("grad") == "replicated_all_reduce":  # popxl-addons' TP all-reduce
        if wants(0):  # of identical inputs: an identity whose gradient is an all-reduce over the group
            bw.give(ins[0].name, bw.new("replicated_all_reduce", [dy], ins[0].shape, ins[0].dtype,
                                        {key: op.attrs[key] for key in ("group_stride", "group_size")}))
    elif k in ("reshape", "transpose", "identity", "detach"):
        if wants(0):
            back = "transpose" if k == "transpose" else "reshape"
            attrs = {"perm": _inverse(op.attrs["perm"])} if k == "transpose" else {}
            bw.give(ins[0].name, bw.new(back, [dy], ins[0].shape, ins[0].dtype, attrs))
    elif k in ("remap", "remap_inplace"):  # the gradient is remapped (RemapCEGradOp): a copy either way
        if wants(0):
            bw.give(ins[0].name, bw.new("remap", [dy], ins[0].shape, ins[0].dtype))
    elif k in ("reduce_sum", "reduce_mean"):
        if wants(0):  # ReduceSumGradOpx / ReduceMeanGradOpx: a copy of dy, broadcast (a view); the mean's
            x = ins[0]  # then divided by the count, one map over the input's shape (reducesumx.cpp, reducemeanx.cpp)
            dy_t = g.tensors[dy]
            spread = bw.new("reshape", [bw.new("copy", [dy], dy_t.shape, dy_t.dtype, suffix="grad_copy")], x.shape,
                            dy_t.dtype, suffix="broadcast")
            if k == "reduce_mean":
                count = g.add_tensor(g.unique_tensor_name(f"{op.name}/grad_count"), (1,), x.dtype, "constant").name
                spread = bw.new("div", [spread, count], x.shape, x.dtype, suffix="grad_mean")
            bw.give(x.name, spread)
    elif k == "concat" and op.attrs.get("op") in ("im2col", "unfold"):
        if wants(0):  # each window's gradient added back where the window came from (col2im)
            x = ins[0]
            n_dy = g.tensors[dy].numel
            idx = bw.g.add_tensor(bw.g.unique_tensor_name(f"{op.name}/grad_positions"), (n_dy,), "int32", "constant")
            zeros = bw.g.add_tensor(bw.g.unique_tensor_name(f"{op.name}/grad_zeros"), (x.numel,), x.dtype, "constant")
            flat = bw.new("reshape", [dy], (n_dy,), x.dtype, suffix="grad_flat")
            summed = bw.new("scatter_elements", [idx.name, zeros.name, flat], (x.numel,), x.dtype,
                            {"axis": 0, "reduce": "sum"}, "grad_windows")
            bw.give(x.name, bw.new("reshape", [summed], x.shape, x.dtype, suffix="grad_unflat"))
    elif k == "concat":
        axis = op.attrs["axis"]
        start = 0
        for t in ins:
            if t.name in need:
                bw.give(t.name, bw.new("slice", [dy], t.shape, t.dtype,
                                       {"axis": axis, "start": start, "stop": start + t.shape[axis]}))
            start += t.shape[axis]
    elif k == "replicated_all_reduce" and op.attrs.get("grad") == "identity":  # popxl-addons' TP all-reduce
        if wants(0):  # of identical gradients: the gradient goes through unreduced
            bw.give(ins[0].name, dy)
    elif k in ("replicated_all_reduce", "replicated_reduce_scatter", "replicated_all_gather",
               "replicated_all_to_all"):
        if wants(0):  # a sum over replicas differentiates to an all-reduce; scatter <-> gather
            back = {"replicated_reduce_scatter": "replicated_all_gather",
                    "replicated_all_gather": "replicated_reduce_scatter"}.get(k, k)
            same_shape = back in ("replicated_all_reduce", "replicated_all_to_all")
            grad = bw.new(back, [dy], ins[0].shape if same_shape else (ins[0].numel,), ins[0].dtype, op.attrs)
            bw.give(ins[0].name, grad if same_shape else
                    bw.new("reshape", [grad], ins[0].shape, ins[0].dtype, suffix="unflatten"))
    elif k == "slice":
        if wants(0):
            bw.give_slice(ins[0].name, dy, *(op.attrs.get(key) for key in ("axis", "start", "stop")))
    elif k in LOSS_KINDS:  # a loss inside a larger one (a sum of losses, a scaled loss)
        _loss_grads(bw, op, need, dy)
    elif k == "ctc_loss":  # popnn computed the gradient with the loss (its second output): scale it
        if wants(0):
            grad = g.tensors[op.outputs[1]]
            d = dy if len(g.tensors[dy].shape) != 1 or g.tensors[dy].shape[0] == 1 else \
                bw.new("reshape", [dy], (1, g.tensors[dy].shape[0], 1), g.tensors[dy].dtype, suffix="per_sequence")
            bw.give(ins[0].name, bw.new("mul", [grad.name, d], grad.shape, ins[0].dtype, suffix="grad"))
    elif _more_backward(bw, op, ins, dy, wants):
        pass
    else:
        raise GraphError(
            f"op {op.name!r}: no backward rule for op kind {k!r}; it cannot be trained "
            "(build the model without it, or run inference)")


#: PopART's reductions with an element-wise step before or after (the ``reduced`` attribute of their last op):
#: which of their ops is the popops reduce (0 the last, 1 the one before it), how many ops the input is back
#: from the reduce, and the gradient, one grad op of [dy, x, y] broadcast to x (reducel1x.cpp ReduceL1GradOpx
#: dy sign(x); reducel2x.cpp ReduceL2GradOpx dy x / y; reducesumsquarex.cpp dy x 2) or, for ReduceLogSum, the
#: output's exp then a divide (reducelogsumx.cpp ReduceLogSumGradOpx)
REDUCTION_COMPOSITES = {"l1": (0, 1, ["sign", "mul"]), "l2": (1, 0, ["mul", "div"]),
                        "sum_square": (0, 0, ["mul", "mul"]), "log_sum": (1, 0, None)}


def _reduction_composite_grad(bw: _Backward, op: Op, need: set[str]) -> None:
    """The gradient of a reduction PopART runs as one op with a map before or after it
    (:data:`REDUCTION_COMPOSITES`): its grad op's, given to the reduction's input; the ops before the last take
    no gradient of their own."""
    g = bw.g
    reduce_back, input_back, steps = REDUCTION_COMPOSITES[op.attrs["reduced"]]
    reduce_op = op
    for _ in range(reduce_back):  # back over a reshape (PopXL's reduction to a scalar) to the reduce
        reduce_op = g.producer_op(reduce_op.inputs[0])
        while reduce_op.kind == "reshape":
            reduce_op = g.producer_op(reduce_op.inputs[0])
    x_op = reduce_op
    for _ in range(input_back):
        x_op = g.producer_op(x_op.inputs[0])
    x = g.tensors[x_op.inputs[0]]
    if x.name not in need:
        return
    axes = set(_reduce_axes_of(x.shape, reduce_op.attrs.get("axes")))
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))

    def spread(t: str, suffix: str) -> str:  # the reduced-shape tensor viewed with the reduced axes kept
        return t if g.tensors[t].shape == kept else bw.new("reshape", [t], kept, g.tensors[t].dtype, suffix=suffix)
    dy, y = spread(bw.grads[op.outputs[0]], "grad_kept"), op.outputs[0]
    if steps is None:  # ReduceLogSumGradOpx: exp of the output (the sum again), then dy divided by it
        total = bw.new("exp", [y], g.tensors[y].shape, g.tensors[y].dtype, suffix="grad_exp")
        grad = bw.new("div", [dy, spread(total, "grad_sum_kept")], x.shape, x.dtype, suffix="grad")
    else:
        reads = [dy, x.name] + ([spread(y, "grad_norm_kept")] if op.attrs["reduced"] == "l2" else [])
        grad = bw.new("map", reads, x.shape, x.dtype, {"steps": list(steps)}, "grad")
    bw.give(x.name, grad)


def _reduce_axes_of(shape: tuple, axes) -> list[int]:
    """A reduction's axes over ``shape`` (all of them when not given), made non-negative."""
    return [a % len(shape) for a in axes] if axes else list(range(len(shape)))


def _summed_to(bw: _Backward, grad: str, t) -> str:
    """``grad`` summed over the axes operand ``t`` was broadcast along (PopART's BinaryGradOpPattern and MatMul
    grads end so), or ``grad`` itself when it has ``t``'s shape."""
    if bw.g.tensors[grad].shape == t.shape:
        return grad
    return bw.new("reduce_sum", [grad], t.shape, t.dtype, {"axes": "broadcast"}, "grad_broadcast_sum")


def _loss_grads(bw: _Backward, op: Op, need: set[str], dy: str | None = None) -> None:
    """The gradients of a loss op (``LOSS_KINDS``): one ``<kind>_grad`` op from its inputs (and
    ``dy`` when the loss feeds a larger one), given to the prediction and, for ``mse_loss``, its
    negation to a target that needs a gradient."""
    x, *rest = [bw.g.tensors[i] for i in op.inputs]
    target_wanted = bool(rest) and rest[0].name in need
    if target_wanted and op.kind != "mse_loss":
        raise GraphError(f"op {op.name!r}: the gradient of {op.kind!r} with respect to its labels "
                         f"({rest[0].name!r}) is not modelled; detach the labels")
    lowering = {k: op.attrs[k] for k in LOSS_LOWERING if k in op.attrs}  # how PopART runs it (loss_steps)
    grad = bw.new(f"{op.kind}_grad", list(op.inputs) + ([dy] if dy else []), x.shape, x.dtype, lowering)
    if x.name in need:
        bw.give(x.name, grad)
    if target_wanted:  # d/dtarget of (x - target)^2 is the negated d/dx
        bw.give(rest[0].name, bw.new("scale", [grad], rest[0].shape, rest[0].dtype, suffix="grad_target"))


def _integer_scales(small, large) -> bool:
    """Is ``large`` ``small`` scaled by a whole factor along each spatial dimension?"""
    return (len(small) == len(large) and tuple(small[:2]) == tuple(large[:2])
            and all(b % a == 0 for a, b in zip(small[2:], large[2:])))


def _nearest_upsample_grad(bw: _Backward, dy: str, x) -> str:
    """The gradient of a nearest upsample as PopART's ResizeGradOpx computes it (resizex.cpp
    ``resizeNearestGrad``): a copy of the output gradient, then for each scaled dimension the
    sum of each input element's copies (there a fill and a ``multiUpdateAdd``; a reduction over
    the scale factor here)."""
    g = bw.g
    t = bw.new("copy", [dy], g.tensors[dy].shape, x.dtype, suffix="grad_copy")
    for axis in range(2, len(x.shape)):
        shape = g.tensors[t].shape
        factor = shape[axis] // x.shape[axis]
        if factor == 1:
            continue
        split = shape[:axis] + (x.shape[axis], factor) + shape[axis + 1:]
        view = bw.new("reshape", [t], split, x.dtype, suffix=f"grad_split{axis}")
        t = bw.new("reduce_sum", [view], split[:axis + 1] + split[axis + 2:], x.dtype,
                   {"axes": [axis + 1], "keepdims": False}, f"grad_sum{axis}")
    return t


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


# --- the rest of PopTorch's supported operations (kinds sim.poptorch emits) -------------------------
#: scatter reductions whose gradient masks the updates by the forward output (PopART's
#: ScatterReduceGradOp reads the source data and the output for these: willow/src/op/scatterreduce.cpp)
_SCATTER_EXTREMES = {"amax": "max", "max": "max", "amin": "min", "min": "min", "prod": "mul", "mul": "mul",
                     "multiply": "mul"}

#: element-wise kinds -> the codelets of their gradient, one fused popops::map of [dy, x, y] (y the forward
#: output), as PopART's *GradOpx compute them (AsinGradOpx: dy / sqrt(1 - x x))
POINTWISE_GRADS = {
    "rsqrt": ["mul", "mul", "mul", "scale"], "reciprocal": ["square", "mul", "scale"], "square": ["mul", "scale"],
    "tan": ["square", "add", "mul"], "asin": ["mul", "sub", "sqrt", "div", "mul"],
}
#: element-wise kinds whose gradient PopART runs as several ops, each its own popops call: its mandatory grad
#: patterns (willow/src/patterns: ElementWiseGradOpPattern for abs and sin, SqrtGradOp, LogGradOp, Log1pGradOp,
#: Expm1GradOp, CosGradOp) and ErfxGradOpx's five calls (popx/op/erfx.cpp). Each op ``(kind, operand, ...
#: [, attrs])``, an operand ``"dy"``, ``"x"`` (the input), ``"y"`` (the output), an earlier op's index, or
#: ``"one"`` (a one-element constant)
POINTWISE_GRAD_OPS = {
    "abs": (("sign", "x"), ("mul", "dy", 0)),
    "sqrt": (("scale", "y", {"factor": 2.0}), ("div", "dy", 0)),
    "log": (("div", "dy", "x"),),
    "log1p": (("add", "x", "one"), ("div", "dy", 0)),
    "expm1": (("add", "y", "one"), ("mul", "dy", 0)),
    "sin": (("cos", "x"), ("mul", "dy", 0)),
    "cos": (("sin", "x"), ("mul", "dy", 0), ("scale", 1, {"factor": -1.0})),
    "erf": (("square", "x"), ("scale", 0, {"factor": -1.0}), ("exp", 1), ("scale", 2, {"factor": 1.1283791671}),
            ("mul", 3, "dy")),
}
#: kinds whose gradient is zero (or that take no gradient): nothing flows back through them
NO_GRADIENT = {"ceil", "floor", "round", "trunc", "sign", "compare", "logical", "bitwise", "isnan",
               "logical_not", "bitwise_not", "random_uniform", "random_normal", "random_bernoulli"}


def _more_backward(bw: _Backward, op: Op, ins: list, dy: str, wants) -> bool:
    """Backward ops of the kinds above; False for a kind without a rule."""
    k, g = op.kind, bw.g
    y = op.outputs[0]

    def grad_map(i: int, steps: list[str], inputs: list[str]) -> None:
        bw.give(ins[i].name, bw.new("map", [dy] + inputs, ins[i].shape, ins[i].dtype,
                                    {"steps": list(steps)}, f"grad{i}"))

    if k in NO_GRADIENT:
        return True
    if k in POINTWISE_GRAD_OPS:
        if wants(0):
            x, made, names = ins[0], [], {"dy": dy, "x": ins[0].name, "y": y}
            for kind, *operands in POINTWISE_GRAD_OPS[k]:
                attrs = operands.pop() if isinstance(operands[-1], dict) else None
                inputs = [made[a] if isinstance(a, int) else names.get(a) or g.add_tensor(
                    g.unique_tensor_name(f"{op.name}/grad_{a}"), (1,), x.dtype, "constant").name for a in operands]
                made.append(bw.new(kind, inputs, x.shape, x.dtype, attrs, f"grad_{kind}{len(made)}"))
            bw.give(x.name, made[-1])
    elif k in POINTWISE_GRADS:
        if wants(0):
            grad_map(0, POINTWISE_GRADS[k], [ins[0].name, y])
    elif k == "map":  # the front end gives each input's gradient codelets (None: no gradient)
        for i, steps in enumerate(op.attrs.get("grad") or []):
            if steps and i < len(ins) and wants(i):
                grad_map(i, steps, [t.name for t in ins] + [y])
    elif k in ("maximum", "minimum", "reduce_max", "reduce_min"):
        # MaxArgGradOpx / MinArgGradOpx (popx/op/maxx.cpp, minx.cpp) and ReduceMaxGradOpx: dy where this input is
        # the extreme, (sign(x - y) + 1) dy in one map; a binary op's then popops::reduce over the broadcast axes,
        # a copy when there are none (poplibs' Reduction.cpp)
        for i in range(1 if k.startswith("reduce") else 2):
            if wants(i):
                grad = bw.new("map", [dy, ins[i].name, y], g.tensors[dy].shape, ins[i].dtype,
                              {"steps": ["sub", "sign", "add", "mul"]}, f"grad{i}")
                if not k.startswith("reduce") and g.tensors[dy].shape == ins[i].shape:
                    grad = bw.new("copy", [grad], ins[i].shape, ins[i].dtype, suffix=f"grad{i}_reduce")
                bw.give(ins[i].name, grad)
    elif k == "upsample_bilinear":  # PopTorch's UpsampleGradOp: the output's gradient summed back
        if wants(0):
            bw.give(ins[0].name, bw.new("upsample_bilinear_grad", [dy], ins[0].shape, ins[0].dtype, op.attrs))
    elif k == "roi_align":  # PopART's RoiAlignGradOp: the data's gradient only (boxes and batch index get none)
        if wants(0):
            bw.give(ins[0].name, bw.new("roi_align_grad", [dy, ins[1].name, ins[2].name, ins[0].name], ins[0].shape,
                                        ins[0].dtype, op.attrs))
    elif k == "reduce_prod":
        if wants(0):
            grad_map(0, ["div", "mul"], [ins[0].name, y])
    elif k == "pow":
        if wants(0):  # PowArg0GradOp pattern: where(e == 0, 0, dy (e x^(e - 1))), e - 1 folded when e is constant
            x, e = ins
            zero = g.add_tensor(g.unique_tensor_name(f"{op.name}/grad_zero"), (1,), x.dtype, "constant").name
            lowered = e.name if e.role == "constant" else bw.new("sub", [e.name, zero], e.shape, e.dtype,
                                                                 suffix="grad0_sub")
            power = bw.new("pow", [x.name, lowered], g.tensors[dy].shape, x.dtype, suffix="grad0_pow")
            scaled = bw.new("mul", [e.name, power], g.tensors[dy].shape, x.dtype, suffix="grad0_mul")
            scaled = bw.new("mul", [dy, scaled], g.tensors[dy].shape, x.dtype, suffix="grad0_mul_dy")
            is_zero = bw.new("compare", [e.name, zero], e.shape, "bool", {"op": "eq"}, "grad0_equal")
            bw.give(x.name, bw.new("select", [is_zero, zero, scaled], g.tensors[dy].shape, x.dtype,
                                   suffix="grad0_where"))
        if len(ins) > 1 and wants(1):  # PowArg1GradOp pattern: dy where(x == 0 and e >= 0, 0, y log(x)), ten ops,
            x, e = ins                  # then BinaryGradOpPattern's ReduceSum over the axes e was broadcast along
            out, zero = g.tensors[dy].shape, g.add_tensor(g.unique_tensor_name(f"{op.name}/grad1_zero"), (1,),
                                                         x.dtype, "constant").name
            logged = bw.new("log", [x.name], x.shape, x.dtype, suffix="grad1_log")
            times_out = bw.new("mul", [y, logged], out, x.dtype, suffix="grad1_mul")
            base_zero = bw.new("compare", [x.name, zero], x.shape, "bool", {"op": "eq"}, "grad1_equal")
            negative = bw.new("compare", [e.name, zero], e.shape, "bool", {"op": "lt"}, "grad1_less")
            nan = bw.new("isnan", [e.name], e.shape, "bool", suffix="grad1_isnan")
            either = bw.new("logical", [negative, nan], e.shape, "bool", {"op": "logical_or"}, "grad1_or")
            at_least_zero = bw.new("logical_not", [either], e.shape, "bool", suffix="grad1_not")
            both = bw.new("logical", [base_zero, at_least_zero], out, "bool", {"op": "logical_and"}, "grad1_and")
            picked = bw.new("select", [both, zero, times_out], out, x.dtype, suffix="grad1_where")
            bw.give(e.name, _summed_to(bw, bw.new("mul", [dy, picked], out, e.dtype, suffix="grad1_mul_dy"), e))
    elif k == "atan2":  # PopART's Atan2Arg0GradOp / Atan2Arg1GradOp: dy x / (x^2 + y^2), -dy y / (x^2 + y^2)
        for i in (0, 1):
            if wants(i):
                grad_map(i, ["square", "square", "add", "div", "mul"] + (["scale"] if i else []),
                         [t.name for t in ins])
    elif k == "remainder":
        if wants(0):
            bw.give(ins[0].name, dy)
        if wants(1):
            grad_map(1, ["div", "floor", "mul", "scale"], [t.name for t in ins])
    elif k == "select":  # select(condition, a, b): dy where chosen, zero elsewhere, as WhereXGradOpx /
        cond = ins[0]   # WhereYGradOpx run it (popx/op/wherex.cpp): the condition (negated for b) cast to dy's
        for i in (1, 2):  # type, times dy, then popops::reduce over the broadcast axes (a copy when none)
            if wants(i):
                dy_t = g.tensors[dy]
                mask = cond.name if i == 1 else bw.new("logical_not", [cond.name], cond.shape, cond.dtype,
                                                      suffix="grad2_not")
                mask = bw.new("cast", [mask], cond.shape, dy_t.dtype, suffix=f"grad{i}_cast")
                grad = bw.new("mul", [dy, mask], dy_t.shape, dy_t.dtype, suffix=f"grad{i}")
                if dy_t.shape == ins[i].shape:
                    grad = bw.new("copy", [grad], dy_t.shape, dy_t.dtype, suffix=f"grad{i}_reduce")
                bw.give(ins[i].name, grad)
    elif k == "clamp":
        if wants(0):
            grad_map(0, ["compare", "compare", "logical", "select"], [t.name for t in ins])
    elif k == "groupnorm":
        x = ins[0]
        if wants(0):
            bw.give(x.name, bw.new("groupnorm_grad", [dy, x.name, ins[1].name], x.shape, x.dtype, op.attrs))
        _norm_param_grads(bw, dy, [p for j, p in enumerate(ins[1:], 1) if wants(j)], 1)
    elif k == "gather_elements":  # ins = [index, data]: scatter dy back into the data's shape
        if wants(1):
            bw.give(ins[1].name, bw.new("scatter_elements", [ins[0].name, dy], ins[1].shape, ins[1].dtype,
                                        op.attrs, "grad_data"))
    elif k == "scatter_elements":  # ins = [index, data, updates]
        extreme = str(op.attrs.get("reduce")) in _SCATTER_EXTREMES
        if wants(1):
            if extreme:  # the initial values' gradient: dy where the output is the initial value
                grad_map(1, ["compare", "mul"], [y, ins[1].name])
            else:
                grad_map(1, ["select"], [ins[0].name])
        if len(ins) > 2 and wants(2):
            picked = bw.new("gather_elements", [ins[0].name, dy], ins[2].shape, ins[2].dtype, op.attrs,
                            "grad_updates")
            if extreme:
                # PopART's ScatterReduceGradOp for max, min and mul (popx/op/scatterreduceutilx.cpp
                # MaxReductionStrategy / MulReductionStrategy::calcGradient): the gradient and the
                # forward output both read back at the index (two multiSlices), then one map: dy
                # where the value is the output (max, min), dy times output over value (mul)
                out = bw.new("gather_elements", [ins[0].name, y], ins[2].shape, ins[2].dtype, op.attrs,
                             "grad_gather_output")
                steps = ["div", "mul"] if _SCATTER_EXTREMES[str(op.attrs.get("reduce"))] == "mul" else ["compare", "mul"]
                picked = bw.new("map", [picked, ins[2].name, out], ins[2].shape, ins[2].dtype,
                                {"steps": steps}, "grad_updates_mask")
            bw.give(ins[2].name, picked)
    elif k == "sort":  # the values' gradient goes back to where each value came from
        if wants(0) and len(op.outputs) > 1:
            bw.give(ins[0].name, bw.new("scatter_elements", [op.outputs[1], dy], ins[0].shape, ins[0].dtype,
                                        op.attrs, "grad_input"))
    elif k == "pad":
        if wants(0):
            bw.give(ins[0].name, bw.new("slice", [dy], ins[0].shape, ins[0].dtype, suffix="unpad"))
    else:
        return False
    return True
