"""PopART's outlining: what the copies into and out of its called subgraphs cost (cycles).

With ``enableOutlining`` (on by default in PopART, so in PopTorch) PopART replaces op sequences
that repeat on an IPU by calls of one subgraph (``transforms/subgraphoutline.cpp``), and each call
copies every tensor it reads into the subgraph's own tensors and every tensor it makes (or updates in
place: a weight, an accumulator, optimizer state) out to the caller's: ``popx/op/callx.cpp``
(``CallOpx::copyInput``, ``copyOutput``, ``copyModified``) adds a Poplar ``Copy`` for each unless
``AliasZeroCopy`` finds it not needed, and that transform runs
only with ``aliasZeroCopy`` (off by default; ``aliaszerocopy.cpp`` ``nodeRequired``). The callee's
tensors are cloned from a call site's (tile mapping included), so each copy stays on its tiles: a
popops copy of the tensor (``sim.cost.rules``, kind ``copy``: 8 bytes a cycle a tile). A call's copies
in follow one another, as do its copies out, and Poplar merges copies scheduled one after another
(up to the engine option ``opt.maxCopyMergeSize``, unlimited by default: graphcore/tensorflow
``driver/ops/custom_ops/send_to_host.cc`` relies on it for stream copies; taken to hold for these
copies too), so each group pays one launch and one sync: :func:`merged_copy`. With
``subgraphCopyingStrategy`` JustInTime (sessionoptions.hpp: inputs copied "just before they are
consumed", outputs "as soon as they are produced") the copies in are grouped by the op that first reads
each tensor and the copies out by the op that makes it, each group its own merged copy next to that op.

Which sequences are calls, from PopART's outliner (``subgraph/algo1.cpp``, ``prunematches.hpp``,
``iosubgraphcostmodel.cpp``), as the simulator's graph lets it say:

* a sequence is a candidate when it occurs at least twice on an IPU (same ops, shapes and
  attributes: :func:`_equivalence`). The simulator's sequences are the runs of a
  block (the user's layer: ``Op.block``) in one pass, the windows where ops without a block repeat
  (:func:`_periodic`), and single ops;
* it is kept when its value, the ops' ``getSubgraphValue`` (1000 for matmuls, convolutions, norms,
  gradient accumulation, the Adam updater, histograms and recurrent layers; 0.1 for the rest) times
  the square root of their input bytes, less the square root of the bytes of each tensor copied,
  exceeds ``outlineThreshold`` (1.0 by default): any repeated sequence with a matmul passes;
* a match inside an accepted larger one is a call of its own (a nested call) only if it occurs at
  least twice as often (algo1.cpp): a matmul once in each of a BERT layer's four repetitions is
  part of the layer's call, the three like-shaped Q, K, V projections of each layer are calls
  within it.

What is not modelled: where PopART's matches start and end when they are not a block's runs or such
windows, outlining across blocks, and the callee's copies' tile memory (the clones live while the
call runs; not added to the op's temporaries).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import numpy as np

from ..cost import OpCost, TileProfile, op_cost
from ..cost.rules import CODE_OF, Signatures, op_signature
from ..graph.ir import Graph, Op
from ..hardware.system import IPU

#: the simulator's op kinds whose PopART ops return ``getHighSubgraphValue()`` (1000; popart op.hpp:
#: matmul.hpp, convbase.hpp, groupnorm.hpp (PopTorch's layer norm), batchnorm.hpp, accumulate.hpp,
#: adamupdater.hpp, histogram.hpp, lstm.hpp, rnnbase.hpp); every other op is worth 0.1
HIGH_VALUE_KINDS = frozenset({
    "matmul", "conv2d", "conv2d_grad_input", "conv2d_grad_weight", "layernorm", "layernorm_grad", "groupnorm",
    "groupnorm_grad", "batchnorm", "batchnorm_grad", "accumulate", "adam_updater", "histogram", "lstm", "lstm_grad",
    "gru", "gru_grad"})
HIGH_VALUE, LOW_VALUE = 1000.0, 0.1


def _equivalence(op: Op, g: Graph, signatures: Signatures | None = None) -> tuple:
    """What PopART compares to match ops (``Op::getSubgraphEquivId``: the type, attributes and tensor
    infos): :func:`~sim.cost.rules.op_signature` without the inputs' roles, without the attributes
    that name a tensor (an accumulation's or an update's weight: which tensor, not what is done) and
    without a recomputation checkpoint's mark (``Op::appendOutlineAttributes`` tells a recomputed op
    apart only: ``Checkpoint`` outlines as an unmarked op; a recomputed op is an op of its own here)."""
    kind, ins, outs, attrs = signatures(op) if signatures else op_signature(op, g)
    attrs = tuple((k, v) for k, v in attrs
                  if k != "recomputation_checkpoint" and not (isinstance(v, str) and v in g.tensors))
    return kind, tuple((shape, dtype) for shape, dtype, _role in ins), outs, attrs


def _value(ops: list[Op], copied: list[str], nbytes: dict[str, int]) -> float:
    """PopART's IoSubgraphCostModel value of outlining ``ops`` (in schedule order) when the call copies
    the tensors ``copied``: each op's subgraph value x sqrt(its input bytes), less sqrt(bytes) a copy
    (``nbytes``: each tensor's bytes, :class:`_TensorBytes`)."""
    worth = sum((HIGH_VALUE if op.kind in HIGH_VALUE_KINDS else LOW_VALUE)
                * math.sqrt(sum(nbytes[t] for t in op.inputs)) for op in ops)
    return worth - sum(math.sqrt(nbytes[t]) for t in copied)


class _TensorBytes(dict):
    """The bytes of a graph's tensors by name, each looked up in the graph once."""

    def __init__(self, g: Graph):
        super().__init__()
        self.g = g

    def __missing__(self, name: str) -> int:
        self[name] = size = self.g.tensors[name].nbytes
        return size


#: roles of the tensors an op may update in place that outlive the call: a call copies them back
#: (``CallOpx::copyModified``), read later or not
PERSISTENT_ROLES = ("weight", "accumulator", "state")


def _crossing(ops: list[Op], readers: dict[str, set[str]], g: Graph) -> tuple[list[str], list[str]]:
    """The tensors a call of ``ops`` copies in (read before any of them makes it: an op updating a
    tensor in place reads it first) and out (made by them and read after, returned, or a weight,
    accumulator or optimizer state updated in place), each once, in order."""
    names = {op.name for op in ops}
    made: set[str] = set()
    ins = []
    for op in ops:
        ins += [t for t in op.inputs if t not in made]
        made.update(op.outputs)
    kept = set(g.outputs) | ({g.loss} if g.loss else set())
    outs = [t for op in ops for t in op.outputs
            if readers.get(t, set()) - names or t in kept or g.tensors[t].role in PERSISTENT_ROLES]
    return list(dict.fromkeys(ins)), list(dict.fromkeys(outs))


def _runs(ops: list[Op], signature: dict[str, tuple]) -> list[list[Op]]:
    """``ops`` cut into runs of one block in one pass; ops without a block are cut as :func:`_periodic`
    finds their repeats."""
    runs: list[list[Op]] = []
    for op in ops:
        if runs and (op.block, op.pass_) == (runs[-1][0].block, runs[-1][0].pass_):
            runs[-1].append(op)
        else:
            runs.append([op])
    return [piece for run in runs
            for piece in (_periodic(run, [signature[op.name] for op in run]) if run[0].block is None else [run])]


def _periodic(ops: list[Op], sigs: list[tuple]) -> list[list[Op]]:
    """``ops`` (their equivalences ``sigs``) cut where they repeat: a window of ``P`` ops and the like
    windows that follow it, ``P`` the distance between successive runs of one matmul, convolution or
    norm (as PopART's outliner tries the distances between a match's starts, algo1.cpp); the longest
    such repeat first, then the ops before and after it alike; an op in no repeat is a run of its own."""
    last: dict[tuple, int] = {}
    starts: dict[int, int] = {}  # period -> the first index a window of it starts at
    seen = Counter()  # period -> how often it separates two runs of an op
    for i, (op, sig) in enumerate(zip(ops, sigs)):
        if op.kind in HIGH_VALUE_KINDS:
            if sig in last:
                starts.setdefault(i - last[sig], last[sig])
                seen[i - last[sig]] += 1
            last[sig] = i
    best = (0, 0, 0)  # (ops covered, start, period)
    for period, _ in seen.most_common(8):  # the commonest distances: a layer's length among them
        start = starts[period]
        windows = 1
        while sigs[start + windows * period:start + (windows + 1) * period] == sigs[start:start + period]:
            windows += 1
        if windows >= 2 and windows * period > best[0]:
            best = (windows * period, start, period)
    covered, start, period = best
    if not covered:
        return [[op] for op in ops]
    return (_periodic(ops[:start], sigs[:start])
            + [ops[i:i + period] for i in range(start, start + covered, period)]
            + _periodic(ops[start + covered:], sigs[start + covered:]))


#: merged copies priced so far, by what their cost depends on: each tensor's (shape, dtype, priced role),
#: the IPU and the tiles (a repeated layer's calls copy like tensors)
_MERGED_COPIES: dict[tuple, OpCost] = {}


def merged_copy(tensors: list[str], g: Graph, ipu: IPU, tiles: int) -> OpCost:
    """One Poplar ``Copy`` of each of ``tensors`` to its clone, the copies one after another merged into
    one program (see the module docstring): each tensor's popops copy on its tiles (``sim.cost.rules``,
    kind ``copy``), one launch and one sync for them all."""
    key = (_copy_key(tensors, g), ipu, tiles)
    if key not in _MERGED_COPIES:
        if len(_MERGED_COPIES) >= 4096:
            _MERGED_COPIES.clear()
        _MERGED_COPIES[key] = _merged_copy(tensors, g, ipu, tiles)
    return _MERGED_COPIES[key]


def _copy_key(tensors: list[str], g: Graph) -> tuple:
    """What a merged copy of ``tensors`` costs depends on but the IPU: each one's shape, dtype and
    priced role."""
    return tuple((t.shape, t.dtype, t.priced_role) for t in (g.tensors[name] for name in tensors))


def _merged_copy(tensors: list[str], g: Graph, ipu: IPU, tiles: int) -> OpCost:
    copies = [op_cost(Op(f"{name}/call_copy", "copy", [name], [name]), g, ipu, tiles) for name in tensors]
    launch = max(c.launch_cycles for c in copies)
    work = np.zeros(tiles)
    for c in copies:
        on = c.profile.compute > 0
        work += c.profile.compute - c.launch_cycles * on
    work += launch * (work > 0)
    what = f"{len(tensors)} tensor{'s' if len(tensors) != 1 else ''} copied"
    return OpCost(int(work.max()), 0, max(c.sync_cycles for c in copies), 1, 0.0, 0, int((work > 0).sum()), 0,
                  what, TileProfile(work, np.zeros(tiles), np.zeros(tiles)), launch_cycles=launch)


def with_copy(cost: OpCost, copy: OpCost, nbytes: int, where: str, what: str = "outlined call") -> OpCost:
    """``cost`` and the merged ``copy`` one after the other: cycles, compute sets and tile vectors add up
    (the copy's compute sets counted as ``copy_sets``: they run Poplar's copy code, not the op's codelets,
    :func:`sim.compiler.program_memory.op_codelets`); the plan says ``what`` copied them and ``where``
    (in or out)."""
    def total(field: str) -> int:
        return getattr(cost, field) + getattr(copy, field)

    profile = cost.profile
    if profile is not None:
        copies = copy.profile.compute + (0 if profile.copies is None else profile.copies)
        profile = replace(profile, compute=profile.compute + copy.profile.compute, copies=copies)
    plan = f"{cost.plan}; " if cost.plan else ""
    extent = cost.program_extent and (cost.program_extent[0] + copy.supersteps, cost.program_extent[1])
    return replace(cost, compute_cycles=total("compute_cycles"), sync_cycles=total("sync_cycles"),
                   supersteps=total("supersteps"), launch_cycles=total("launch_cycles"),
                   copy_sets=cost.copy_sets + copy.supersteps, program_extent=extent,
                   plan=f"{plan}{what}: {copy.plan} {where} ({nbytes:,} B)", profile=profile)


def add_call_copies(g: Graph, costs: dict[str, OpCost], ipu: IPU, tiles: int, threshold: float = 1.0,
                    just_in_time: bool = False, signatures: Signatures | None = None
                    ) -> tuple[dict[str, OpCost], dict[int, tuple[int, int, int]]]:
    """``costs`` with each outlined call's copies added to its first op (the copies in) and its last
    (the copies out), as the module docstring says which ops are calls, or with ``just_in_time``
    (PopART's SubgraphCopyingStrategy JustInTime) each copy in to the op that first reads the tensor and
    each copy out to the op that makes it, merged only with the copies next to the same op; and, per
    IPU, the calls, the tensors they copy and the copies' cycles when each op of the graph runs once
    (``{ipu: (calls, copies, cycles)}``)."""
    readers: dict[str, set[str]] = {}
    on_ipu: dict[int, list[Op]] = {}
    for op in g.ops:
        for t in op.inputs:
            readers.setdefault(t, set()).add(op.name)
        if op.ipu is not None:
            on_ipu.setdefault(op.ipu, []).append(op)
    costs = dict(costs)
    nbytes = _TensorBytes(g)
    counts: dict[int, tuple[int, int, int]] = {}
    joined: dict[tuple, tuple[OpCost, OpCost, OpCost]] = {}  # (its parts, kept so their ids stay theirs; the sum)
    copies: dict[tuple, OpCost] = {}  # merged_copy's, by _copy_key: the IPU and the tiles are the same throughout
    for i in sorted(on_ipu):
        # the ops a front end writes out from a called subgraph (CODE_OF: PopXL's calls and repeats) or
        # an ONNX Loop's body (sim.onnx marks each iteration's ops onnx_loop) run in that call or loop,
        # whose copies the front end prices: they repeat without being PopART's outlined calls (an
        # IPU's copies change only its own ops' costs)
        ops = [op for op in on_ipu[i] if op.name in costs and costs[op.name].cycles > 0
               and CODE_OF not in op.attrs and "onnx_loop" not in op.attrs]
        signature = {op.name: _equivalence(op, g, signatures) for op in ops}
        runs = _runs(ops, signature)
        run_count = Counter(tuple(signature[op.name] for op in run) for run in runs)
        op_count = Counter(signature.values())
        calls: list[tuple[list[Op], list[str], list[str]]] = []  # (ops, copied in, copied out)

        def outline(call: list[Op]) -> bool:
            """Keep ``call`` if outlining it is worth its copies (PopART's pruning)."""
            ins, outs = _crossing(call, readers, g)
            if _value(call, ins + outs, nbytes) <= threshold:
                return False
            calls.append((call, ins, outs))
            return True

        for run in runs:
            n = run_count[tuple(signature[op.name] for op in run)]
            if n >= 2 and outline(run):  # the block's run is a call; its ops are calls inside it if twice as frequent
                for op in run:
                    if len(run) > 1 and op_count[signature[op.name]] >= 2 * n:
                        outline([op])
            else:
                for op in run:
                    if op_count[signature[op.name]] >= 2:
                        outline([op])
        copied = cycles = 0
        for call, ins, outs in calls:
            copied += len(ins) + len(outs)
            for op, tensors, where in _copy_groups(call, ins, outs, just_in_time):
                like = _copy_key(tensors, g)
                if like not in copies:
                    copies[like] = merged_copy(tensors, g, ipu, tiles)
                copy = copies[like]
                size = sum(nbytes[t] for t in tensors)
                # like ops share one cost object, and like calls one copy: each pair is added once
                key = (id(costs[op.name]), id(copy), size, where)
                if key not in joined:
                    joined[key] = (costs[op.name], copy, with_copy(costs[op.name], copy, size, where))
                costs[op.name] = joined[key][2]
                cycles += copy.cycles
        counts[i] = (len(calls), copied, cycles)
    return costs, counts


def _copy_groups(call: list[Op], ins: list[str], outs: list[str],
                 just_in_time: bool) -> list[tuple[Op, list[str], str]]:
    """(op, tensors, "in" or "out") of each merged copy of a call: every copy in at the first op and every
    copy out at the last (OnEnterAndExit), or ``just_in_time`` the copies in of the tensors each op is
    the first to read and the copies out of those it makes."""
    if not just_in_time:
        return [(op, tensors, where) for op, tensors, where in ((call[0], ins, "in"), (call[-1], outs, "out"))
                if tensors]
    first: dict[str, int] = {}  # tensor -> position in the call of the first op reading or making it
    made: dict[str, int] = {}  # tensor -> position of the first op making it
    for i, op in enumerate(call):
        for t in op.inputs:
            first.setdefault(t, i)
        for t in op.outputs:
            first.setdefault(t, i)
            made.setdefault(t, i)
    copies_in: dict[int, list[str]] = {}  # position -> the tensors copied in next to it, in the order of ins
    for t in ins:
        copies_in.setdefault(first[t], []).append(t)
    copies_out: dict[int, list[str]] = {}  # position -> the tensors copied out next to it: where made, else last
    for t in outs:
        copies_out.setdefault(made.get(t, len(call) - 1), []).append(t)
    groups = []
    for i, op in enumerate(call):
        for tensors, where in ((copies_in.get(i), "in"), (copies_out.get(i), "out")):
            if tensors:
                groups.append((op, tensors, where))
    return groups


def per_ipu(counts: dict[int, tuple[int, int, int]]) -> str:
    """``{ipu: (calls, copies, cycles)}`` as a note's words, IPUs without calls left out ("" if none has one)."""
    return ", ".join(f"IPU {i}: {calls} calls, {copies} tensors copied in {cycles:,} cycles"
                     for i, (calls, copies, cycles) in sorted(counts.items()) if calls)


def notes(outlined: dict[int, tuple[int, int, int]], just_in_time: bool = False) -> list[str]:
    """What a run's report says of its outlined calls (``add_call_copies``'s counts)."""
    each = per_ipu(outlined)
    if not each:
        return []
    where = ("each next to the op that first reads it or makes it (subgraphCopyingStrategy JustInTime)" if just_in_time
             else "the copies in one program and the copies out another")
    return [f"PopART outlining: repeated op sequences are calls of one subgraph, each copying the tensors it "
            f"reads in and those it makes out (on their tiles, {where}; "
            f"_Popart aliasZeroCopy elides them): {each}, each of the "
            f"graph's ops run once (a micro-batch's passes and the weight update; recomputation runs them again)"]
