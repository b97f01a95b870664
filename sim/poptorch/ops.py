"""PopTorch's on-device control flow, dynamic slicing and custom ops: ``cond``, ``dynamic_slice``,
``dynamic_update``, ``custom_op``.

On the CPU (and in the simulator's CPU numbers) they compute what the IPU computes. In the
captured graph:

* ``dynamic_slice`` is a copy of the slice (popops' dynamicSlice copies ``size`` elements per
  row from an index it receives at run time);
* ``dynamic_update`` is an out-of-place copy of the updated tensor;
* ``cond`` puts both branches in the graph followed by an element-wise select of the outputs:
  the IPU runs only the branch the condition picks, so this prices an upper bound (the run's
  notes say so);
* ``custom_op`` (a PopART op written in C++) is priced by the rule given to
  ``register_op("domain::name", fn)`` (or ``register_op("name", fn)``), whose ``ctx.inputs`` are
  the op's inputs and ``ctx.output`` its outputs, shaped as ``example_outputs``. Graphcore's
  ``ai.graphcore::RemapCE`` (the layout remap of its GPT-2 and BERT examples) has a built-in rule: a
  ``remap`` of each input. The simulator cannot run C++, so on the CPU a custom op gives PopTorch's
  placeholders (zeros shaped as ``example_outputs``; RemapCE its inputs' values), and the run's
  notes say so.

Their cost rules are added to the mapper's table (:data:`sim.poptorch._mapping.RULES`) when
this module is imported.
"""

from __future__ import annotations

import copy
import json
import math

import torch

from ..cost import ctc_beam
from . import _mapping, _state
from ._errors import error
from .annotations import _traceable

_TENSOR = (torch.Tensor, torch.fx.Proxy)


def _index(start, size: int, step: int = 1):
    """The indices ``start, start + step, …`` (``size`` of them) as an int64 tensor."""
    first = start.reshape(-1)[:1].long()
    return first + torch.arange(size, device=first.device) * step


@torch.library.custom_op("ipusim::dynamic_slice", mutates_args=())
def _dynamic_slice(tensor: torch.Tensor, dim: int, start: torch.Tensor, size: int, step: int) -> torch.Tensor:
    """One node under torch.fx and torch.export alike (the capture prices it with its own rule)."""
    return torch.index_select(tensor, dim, _index(start, size, step))


@_dynamic_slice.register_fake
def _(tensor, dim, start, size, step):
    dim %= tensor.dim()
    return tensor.new_empty(tensor.shape[:dim] + (size,) + tensor.shape[dim + 1:])


def _keep_slice_args(ctx, inputs, output):
    tensor, dim, start, size, step = inputs
    ctx.save_for_backward(_index(start, size, step))
    ctx.dim, ctx.shape = dim, tensor.shape


def _dynamic_slice_backward(ctx, grad):
    """The slice's gradient added into zeros of the tensor's shape (the CPU steps of a training model)."""
    index, = ctx.saved_tensors
    return grad.new_zeros(ctx.shape).index_add(ctx.dim, index, grad), None, None, None, None


_dynamic_slice.register_autograd(_dynamic_slice_backward, setup_context=_keep_slice_args)


def dynamic_slice(tensor: torch.Tensor, dim: int, start: torch.Tensor, size: int,
                  step: int) -> torch.Tensor:
    """``size`` elements of ``tensor`` along ``dim`` from ``start`` (a tensor: known only at run
    time) every ``step``."""
    if not isinstance(tensor, _TENSOR):
        raise error(f"dynamic_slice must take a torch.tensor input. {type(tensor)} is not supported.")
    if not isinstance(dim, int):
        raise error("Dimension must be an integer.")
    if not isinstance(start, _TENSOR):
        raise error("Slice start argument to dynamic_slice must be a torch.tensor. "
                    f"{type(start)} is not supported.")
    if not isinstance(size, int):
        raise error("Size must be an integer.")
    if not isinstance(step, int):
        raise error("Step must be an integer.")
    return _dynamic_slice(tensor, dim, start, size, step)


@torch.library.custom_op("ipusim::dynamic_update", mutates_args=())
def _dynamic_update(input: torch.Tensor, src: torch.Tensor, dim: int, start: torch.Tensor,
                    size: int) -> torch.Tensor:
    """One node under torch.fx and torch.export alike (under torch.export its CPU ops, an index_copy that
    PopTorch has no handler for, would otherwise be priced one by one)."""
    return input.index_copy(dim, _index(start, size), src.narrow(dim, 0, size))


@_dynamic_update.register_fake
def _(input, src, dim, start, size):
    return torch.empty_like(input)


def _keep_update_args(ctx, inputs, output):
    input, src, dim, start, size = inputs
    ctx.save_for_backward(_index(start, size))
    ctx.dim, ctx.size, ctx.src_shape = dim, size, src.shape


def _dynamic_update_backward(ctx, grad):
    """The tensor's gradient with the slice zeroed, and the update's the slice of it (PopART's
    DynamicUpdateUpdaterGradOp and DynamicUpdateToUpdateGradOp; the CPU steps of a training model)."""
    index, = ctx.saved_tensors
    to_src = grad.new_zeros(ctx.src_shape)
    to_src.narrow(ctx.dim, 0, ctx.size).copy_(grad.index_select(ctx.dim, index))
    return grad.index_fill(ctx.dim, index, 0), to_src, None, None, None


_dynamic_update.register_autograd(_dynamic_update_backward, setup_context=_keep_update_args)


def dynamic_update(input: torch.Tensor, src: torch.Tensor, dim: int, start: torch.Tensor,
                   size: int) -> torch.Tensor:
    """``input`` with ``size`` elements along ``dim`` from ``start`` replaced by ``src``."""
    if not isinstance(input, _TENSOR):
        raise error(f"dynamic_update must take a torch.tensor input. {type(input)} is not supported.")
    if not isinstance(dim, int):
        raise error("Dimension must be an integer.")
    if not isinstance(start, _TENSOR):
        raise error("Slice start argument to dynamic_update must be a torch.tensor. "
                    f"{type(start)} is not supported.")
    if not isinstance(src, _TENSOR):
        raise error(f"Src argument to dynamic_update must be a torch.tensor. {type(src)} is not supported.")
    if not isinstance(size, int):
        raise error("Size must be an integer.")
    if isinstance(input, torch.Tensor) and isinstance(src, torch.Tensor):
        if input.dim() != src.dim():
            raise error("input and src tensors must have same dimensionality. "
                        f"({input.dim()}) vs ({src.dim()})")
        if input.dtype != src.dtype:
            raise error(f"input and src tensor must have same dtype. ({input.dtype} vs {src.dtype})")
    return _dynamic_update(input, src, dim, start, size)


@_traceable("cond_select")
def _select(condition, then_value, else_value):
    return torch.where(condition.reshape(()) if condition.numel() == 1 else condition,
                       then_value, else_value)


def _as_list(value) -> list:
    return [value] if isinstance(value, _TENSOR) else list(value)


def cond(condition: torch.Tensor, then_body, then_inps: list, else_body, else_inps: list) -> list:
    """``then_body(*then_inps)`` if ``condition`` else ``else_body(*else_inps)``, decided on the
    device; both bodies return the same number of tensors (inference only, as in PopTorch)."""
    if not isinstance(then_inps, list) or not isinstance(else_inps, list):
        raise ValueError("poptorch.cond expects then_inps and else_inps tensors to be a list of "
                         "tensors. (Object is not list)")
    if _state.active() is None:  # on the CPU: one branch runs
        return _as_list(then_body(*then_inps) if condition else else_body(*else_inps))
    then_out = _as_list(then_body(*then_inps))
    else_out = _as_list(else_body(*else_inps))
    if len(then_out) != len(else_out):
        raise error(f"poptorch.cond: then_body returns {len(then_out)} outputs and else_body "
                    f"{len(else_out)}; both must return the same number")
    return [_select(condition, t, e) for t, e in zip(then_out, else_out)]


#: custom ops whose outputs hold their inputs' values (a layout change): the CPU numbers keep them
_LAYOUT_ONLY = {("ai.graphcore", "RemapCE")}


@_traceable("custom_op")
def _custom_operation(inputs, name, domain, domain_version, example_outputs, attributes):
    if (domain, name) in _LAYOUT_ONLY:
        return [x.clone() for x in inputs]
    return [torch.zeros_like(o) for o in example_outputs]  # PopTorch's placeholders


@torch.library.custom_op("ipusim::custom_op", mutates_args=())
def _exported_custom_op(inputs: list[torch.Tensor], name: str, domain: str, domain_version: int,
                        outputs: str, attributes: str) -> list[torch.Tensor]:
    """A custom op as one node of an exported graph, which torch.export keeps whole (it would
    otherwise trace the CPU stand-in's ops); ``outputs`` is the JSON of the example outputs' shapes
    and dtypes, ``attributes`` of the op's attributes. The capture prices it as under torch.fx."""
    if (domain, name) in _LAYOUT_ONLY:
        return [x.clone() for x in inputs]
    return [torch.zeros(shape, dtype=getattr(torch, dtype)) for shape, dtype in json.loads(outputs)]


@_exported_custom_op.register_fake
def _(inputs, name, domain, domain_version, outputs, attributes):
    if (domain, name) in _LAYOUT_ONLY:
        return [torch.empty_like(x) for x in inputs]
    return [torch.empty(shape, dtype=getattr(torch, dtype)) for shape, dtype in json.loads(outputs)]


def custom_op(inputs, name: str, domain: str, domain_version: int, example_outputs,
              attributes: dict | None = None) -> list:
    """A PopART custom op ``domain::name`` applied to ``inputs``; its outputs are shaped and typed
    as ``example_outputs``. Priced by the rule given to ``register_op`` (see the module's docstring)."""
    for key, value in (attributes or {}).items():  # PopTorch's checks (python/ops.py custom_op)
        if not isinstance(key, str):
            raise ValueError("All attribute keys must be strings.")
        if not isinstance(value, (float, int, str, list, tuple)):
            raise ValueError("Attribute values must be floats, ints, strings or a list/tuple of float, "
                             "ints of strings.")
        if isinstance(value, (list, tuple)) and any(not isinstance(e, type(value[0])) for e in value):
            raise ValueError("The types in a list/tuple attribute must all be the same.")
    example_outputs = list(example_outputs)
    st = _state.active()
    if st is not None and st.mode == "export":
        shapes = json.dumps([[list(o.shape), str(o.dtype).removeprefix("torch.")] for o in example_outputs])
        outputs = _exported_custom_op(list(inputs), name, domain, domain_version, shapes,
                                      json.dumps(dict(attributes or {})))
    else:
        outputs = _custom_operation(list(inputs), name, domain, domain_version, example_outputs,
                                    dict(attributes or {}))
    return [outputs[i] for i in range(len(example_outputs))]  # a traced result is one proxy: index it


def _log_add(a: float, b: float) -> float:
    """log(e^a + e^b), exact where either is -inf (a probability of zero)."""
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    top = max(a, b)
    return top + math.log1p(math.exp(min(a, b) - top))


def _beam_search(x, length: int, blank: int, width: int, top_paths: int) -> list[tuple[tuple, float]]:
    """The ``top_paths`` best (labels, log-probability) of one sequence's log-probabilities ``x`` ``(T, C)`` (a
    float64 array) over its first ``length`` steps, as popnn's decoder finds them (its reference model,
    poplibs_test/CTCInference.cpp): a beam's prefix keeps the probabilities of ending in a blank and in a
    non-blank; each step makes from every beam a copy candidate (a blank, or its last symbol again) and an
    extension by every other class, merges candidates with the same prefix, keeps the ``width`` most probable
    (ties to the earlier candidate: the copies first, then the extensions class by class)."""
    classes = x.shape[1]
    beams = [((), -math.inf, 0.0)]  # (prefix, blank, non-blank): the empty prefix is certain
    for t in range(length):
        row = x[t]
        candidates: dict[tuple, list[float]] = {}
        extensions = []
        for prefix, pb, pnb in beams:
            total = _log_add(pb, pnb)
            entry = candidates.setdefault(prefix, [-math.inf, -math.inf])
            entry[0] = _log_add(entry[0], total + row[blank])
            if prefix:
                entry[1] = _log_add(entry[1], pnb + row[prefix[-1]])
            for c in range(classes):
                if c != blank:
                    extensions.append((c, prefix, pb if prefix and prefix[-1] == c else total))
        for c, prefix, p in sorted(extensions, key=lambda e: e[0]):
            entry = candidates.setdefault(prefix + (c,), [-math.inf, -math.inf])
            entry[1] = _log_add(entry[1], p + row[c])
        ranked = sorted(candidates.items(), key=lambda kv: -_log_add(*kv[1]))[:width]
        beams = [(prefix, pb, pnb) for prefix, (pb, pnb) in ranked]
    found = [(prefix, _log_add(pb, pnb)) for prefix, pb, pnb in beams[:top_paths]]
    return found + [((), -math.inf)] * (top_paths - len(found))


def _check_decoder(probs: torch.Tensor, lengths: torch.Tensor, blank: int, beam_width: int, top_paths: int) -> None:
    """The decoder's arguments as PopART's CtcBeamSearchDecoderOp takes them, checked where their shapes are known
    (the CPU run and the capture's tensors without values; torch.fx's proxies have none)."""
    # (lengths of any dtype: PopTorch's handler casts them to UINT32)
    problem = ctc_beam.argument_problem(tuple(probs.shape), tuple(lengths.shape), blank, beam_width, top_paths)
    if problem:
        raise error(f"ctc_beam_search_decoder: {problem}")


@torch.library.custom_op("ipusim::ctc_beam_search_decoder", mutates_args=())
def _ctc_beam_search(probs: torch.Tensor, lengths: torch.Tensor, blank: int, beam_width: int,
                     top_paths: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The decoder's outputs on the CPU: each path's log-probability ``(B, top_paths)`` in the input's dtype, its
    length and its labels ``(B, top_paths, T)`` (int32: PopART's UINT32; past the length, zeros)."""
    _check_decoder(probs, lengths, blank, beam_width, top_paths)
    T, B, _ = probs.shape
    x = probs.detach().double().cpu().numpy()
    out_p = torch.full((B, top_paths), -math.inf, dtype=torch.float64)
    out_len = torch.zeros((B, top_paths), dtype=torch.int32)
    out_labels = torch.zeros((B, top_paths, T), dtype=torch.int32)
    for b in range(B):
        length = min(max(int(lengths[b]), 0), T)
        for k, (labels, logp) in enumerate(_beam_search(x[:, b, :], length, blank, beam_width, top_paths)):
            out_p[b, k], out_len[b, k] = logp, len(labels)
            out_labels[b, k, :len(labels)] = torch.tensor(labels, dtype=torch.int32)
    return out_p.to(probs.dtype), out_len, out_labels


@_ctc_beam_search.register_fake
def _(probs, lengths, blank, beam_width, top_paths):
    _check_decoder(probs, lengths, blank, beam_width, top_paths)
    T, B, _ = probs.shape
    return (probs.new_empty((B, top_paths)), probs.new_empty((B, top_paths), dtype=torch.int32),
            probs.new_empty((B, top_paths, T), dtype=torch.int32))


def ctc_beam_search_decoder(probs: torch.Tensor, lengths: torch.Tensor, blank: int = 0, beam_width: int = 100,
                            top_paths: int = 1) -> list[torch.Tensor]:
    """popnn's CTC beam search over log-probabilities ``probs`` ``(T, B, C)`` of sequences ``lengths`` ``(B,)``
    long: each sequence's ``top_paths`` most probable labellings, as ``[probabilities (B, top_paths), lengths
    (B, top_paths), labels (B, top_paths, T)]`` (PopART's CtcBeamSearchDecoder; priced by ``sim/cost/ctc_beam.py``)."""
    if not isinstance(probs, _TENSOR):
        raise error("ctc_beam_search_decoder: probs must be a torch.tensor argument. "
                    f"{type(probs)} is not supported.")
    if not isinstance(lengths, _TENSOR):
        raise error("ctc_beam_search_decoder: lengths must be a torch.tensor argument. "
                    f"{type(lengths)} is not supported.")
    outputs = _ctc_beam_search(probs, lengths, int(blank), int(beam_width), int(top_paths))
    return [outputs[i] for i in range(3)]  # a traced result is one proxy: index it


# --- cost rules ---------------------------------------------------------------------------------
def _slice_rule(ctx):
    """A copy of the slice (the tensor is read, the start index is broadcast to the tiles)."""
    return ctx.op("copy", [ctx.sarg(0), ctx.sarg(2)], {"dynamic_slice": True}, name="dynamic_slice")


def _update_rule(ctx):
    """An out-of-place copy of the updated tensor."""
    return ctx.op("copy", [ctx.sarg(0), ctx.sarg(1), ctx.sarg(3)], {"dynamic_update": True},
                  name="dynamic_update")


def _note(ctx, text: str) -> None:
    """Add ``text`` to the run's notes once."""
    if text not in ctx.cap.notes:
        ctx.cap.notes.append(text)


_COND_NOTE = ("poptorch.cond: both branches are priced, then a select (the IPU runs only the "
              "branch the condition picks, so this is an upper bound)")


def _select_rule(ctx):
    _note(ctx, _COND_NOTE)
    return ctx.op("add", ctx.inputs, {"select": True}, name="cond_select")


def _custom_op_rule(ctx):
    """The rule registered for the custom op, seeing its inputs as its arguments and its attributes
    as its keyword arguments (``ctx.kwargs``: YOLOv4's Nms sizes its cost by ``numDetections``);
    RemapCE built in."""
    inputs, name, domain, attributes = ctx.arg(0), ctx.arg(1), ctx.arg(2), ctx.arg(5, default={})
    if isinstance(attributes, str):  # the exported node carries them as JSON (ipusim::custom_op)
        attributes = json.loads(attributes)
    op = copy.copy(ctx)
    op.args, op.sym_args = tuple(inputs), tuple(ctx.sarg(0))
    op.kwargs, op.sym_kwargs = dict(attributes or {}), dict(attributes or {})
    op.desc = f"custom op {domain}::{name}"
    rule = _mapping.custom_op_rule(domain, name)
    placeholder = (domain, name) not in _LAYOUT_ONLY
    if rule is None and placeholder:
        raise _mapping.unsupported(op.desc, ctx.node, "a PopART op written in C++", repr(f"{domain}::{name}"))
    note = (f"{op.desc}: priced by its register_op rule" if rule is not None else f"{op.desc}: a remap of each "
            "input (a copy into the layout its consumer wants)")
    if placeholder:
        note += "; its CPU outputs are PopTorch's zero placeholders (the simulator cannot run C++)"
    _note(ctx, note)
    if rule is not None:
        return rule(op)
    return tuple(op.op("remap", [x], output=out) for x, out in zip(op.sym_args, ctx.output))


def _ctc_beam_search_rule(ctx):
    """popnn's decoder (:func:`ctc_beam_search_decoder`), the lengths cast to UINT32 first as PopTorch's
    ctcbeamsearchdecoderHandler casts them (LossOps.cpp)."""
    lengths = ctx.op("cast", [ctx.sarg(1)], output=ctx.args[1].to(torch.int32), name="lengths")
    return ctx.op("ctc_beam_search", [ctx.sarg(0), lengths],
                  {"blank": int(ctx.arg(2)), "beam_width": int(ctx.arg(3)), "top_paths": int(ctx.arg(4))})


_mapping.RULES.update({"dynamic_slice": _slice_rule, "dynamic_update": _update_rule,
                       "cond_select": _select_rule, "custom_op": _custom_op_rule,
                       "ctc_beam_search_decoder": _ctc_beam_search_rule})

__all__ = ["cond", "ctc_beam_search_decoder", "custom_op", "dynamic_slice", "dynamic_update"]
