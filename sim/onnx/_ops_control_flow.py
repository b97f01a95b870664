"""ONNX control flow as PopART runs it: Loop, Scan and If, their bodies unrolled into the graph.

PopART compiles a Loop's body once and runs it in a poplar loop (popx/op/loopx.cpp,
``LoopOpx::grow``): each iteration updates the exit flag (one popops map: exit |= !cond | i >= M),
calls the body, copies the body's outputs to its loop-carried inputs and increments the iterator.
The maximum trip count must be known when compiling (op/loop.cpp, ``LoopOp::connectInTensor``
reads it from the graph). A Loop's scan outputs become loop-carried tensors written one slice an
iteration (``LoopScanOutPattern``); a Scan becomes such a Loop that also slices each scan input an
iteration (``ScanToLoopPattern``). An If (popx/op/ifx.cpp) runs the branch its condition picks.

The simulator unrolls a loop: the body's ops once per iteration, named ``<node>/<i>/<op>`` and
marked ``onnx_loop`` (the iterations are alike, so each kind of op prices once), beside the loop's
own ops: the exit-flag map and the iterator's add (``loop_control``), the copies of each loop-carried
tensor (``loop_carried``, grouped by iteration: ``loop_group``; sim.compiler.loops prices a group as
LoopOpx's two merged copies), and a copy of each scan slice (``dynamic_slice`` / ``dynamic_update``:
popops' dynamic slice and update of one slice); a scan output is its slices side by side (a view).
The iteration number is the iterator's tensor, a run-time value as on the IPU (a Gather by it is a
gather, not a constant slice). A termination condition the device computes is priced at the
maximum trip count, an upper bound the run notes. PopART has no gradient for a Loop
(``LoopOp`` has no grad ops), so training through one is refused (sim.graph.training). An If whose
condition is known at import time is its branch; one the device decides prices both branches and
a select of their outputs (an upper bound), as sim.poptorch prices ``poptorch.cond``.
"""

from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ._context import OpContext
from ._values import _Value

#: most body ops one ONNX loop may unroll into the graph (iterations x the body's nodes), as
#: sim.popxl caps what one ``ops.repeat`` copies into its caller
MAX_UNROLLED_OPS = 20000


def _scalar_flag(value) -> bool:
    return bool(np.asarray(value).reshape(-1)[0])


def subgraphs(graph):
    """``graph`` and the graphs its nodes call (Loop and Scan bodies, If branches), depth first."""
    yield graph
    for node in graph.node:
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from subgraphs(sub)


def _check_unroll(ctx: OpContext, trips: int, body) -> None:
    nodes = sum(len(g.node) for g in subgraphs(body))
    if trips * nodes > MAX_UNROLLED_OPS:
        raise GraphError(f"{ctx.desc}: {trips} iterations of a {nodes}-node body make {trips * nodes} ops, more "
                         f"than the {MAX_UNROLLED_OPS} the simulator unrolls from one loop; simulate a shorter "
                         "sequence (fewer iterations), or price the loop with sim.onnx.register_op")


class _Iterations:
    """The loop's own work each iteration (LoopOpx): the exit-flag map before the body, then a copy
    of each loop-carried output back to the body's input, one dynamic update per scan output and
    the iterator's increment after it."""

    def __init__(self, ctx: OpContext):
        self.ctx = ctx
        self.tags = {"onnx_loop": ctx.name}
        b = ctx.builder
        self.iterator = b.constant(f"{ctx.name}/iterator", (1,), "int32")
        self.one = b.constant(f"{ctx.name}/one", (1,), "int32")
        self.exit = b.constant(f"{ctx.name}/exit", (1,), "bool")
        self.data_dependent = False
        self.slices: list[list[str]] = []  # each scan output's slices, an iteration each
        self.scan_values: list[_Value] = []  # the last iteration's scan outputs

    def iteration_number(self) -> _Value:
        return _Value((), "int32", sim=self.iterator, name=f"{self.ctx.name}/iterator")

    def begin(self, i: int) -> None:
        attrs = {"loop_control": "exit_update", "data_dependent": self.data_dependent, **self.tags}
        self.exit = self.ctx.op("logical", [self.exit, self.iterator], attrs, shapes=[()], dtypes=["bool"],
                                result=False, suffix=f"{i}/exit_update")

    def carry(self, i: int, values: list[_Value]) -> list[_Value]:
        imp = self.ctx._imp
        out = []
        for j, v in enumerate(values):
            t = self.ctx.op("copy", [imp.materialise(v)], {"loop_carried": True, "loop_group": f"{self.ctx.name}/{i}",
                                                          **self.tags},
                            shapes=[v.shape], dtypes=[v.dtype], result=False, suffix=f"{i}/carry{j}")
            out.append(_Value(tuple(v.shape), v.dtype, sim=t, name=t))
        return out

    def slice_in(self, i: int, j: int, sequence: str, axis: int, shape, dtype) -> _Value:
        """Scan input ``j``'s slice along ``axis`` at the iterator (or from the end, reversed: the
        same copy)."""
        t = self.ctx.op("copy", [sequence, self.iterator], {"dynamic_slice": True, "axis": axis, **self.tags},
                        shapes=[shape], dtypes=[dtype], result=False, suffix=f"{i}/slice{j}")
        return _Value(tuple(shape), dtype, sim=t, name=t)

    def slice_out(self, i: int, k: int, v: _Value) -> str:
        return self.ctx.op("copy", [self.ctx._imp.materialise(v), self.iterator], {"dynamic_update": True, **self.tags},
                           shapes=[v.shape], dtypes=[v.dtype], result=False, suffix=f"{i}/scan{k}")

    def end(self, i: int) -> None:
        self.iterator = self.ctx.op("add", [self.iterator, self.one], {"loop_control": "iterator", **self.tags},
                                    shapes=[()], dtypes=["int32"], result=False, suffix=f"{i}/iterator")

    def body(self, i: int, graph, bindings: dict, first_carried: int, n_carried: int) -> tuple[list, list]:
        """Iteration ``i``'s body, then its loop-carried outputs (``n_carried`` from output
        ``first_carried``) copied back, each scan output (the outputs after them) written and the
        iterator incremented; (the body's outputs, the loop-carried values for the next iteration)."""
        outs = self.ctx._imp.run_subgraph(graph, bindings, f"{self.ctx.name}/{i}/", self.tags)
        carried = self.carry(i, outs[first_carried:first_carried + n_carried])
        self.scan_values = outs[first_carried + n_carried:]
        if not self.slices:
            self.slices = [[] for _ in self.scan_values]
        for k, v in enumerate(self.scan_values):
            self.slices[k].append(self.slice_out(i, k, v))
        self.end(i)
        return outs, carried

    def stack(self, k: int, slices: list[str], shape, dtype, axis: int, output: int) -> str:
        """A scan output: its slices side by side along ``axis`` (a view of the updated slices)."""
        ctx = self.ctx
        one = tuple(shape[:axis]) + (1,) + tuple(shape[axis:])
        parts = [ctx.op("reshape", [s], self.tags, shapes=[one], dtypes=[dtype], result=False,
                        suffix=f"{n}/scan{k}_view") for n, s in enumerate(slices)]
        full = tuple(shape[:axis]) + (len(slices),) + tuple(shape[axis:])
        return ctx.op("concat", parts, {"axis": axis, **self.tags}, shapes=[full], dtypes=[dtype], outputs=[output])


def _loop(ctx: OpContext):
    """ONNX Loop (inputs M, cond, loop-carried values; body inputs: iteration number, condition,
    loop-carried values; body outputs: condition, loop-carried values, scan outputs)."""
    imp, body = ctx._imp, ctx.attr("body")
    if not ctx.has_input(0):
        raise GraphError(f"{ctx.desc}: it has no maximum trip count (input M); PopART's LoopOp needs one known "
                         "when compiling (op/loop.cpp): give the Loop a constant M")
    m = ctx.value(0)
    if m is None:
        raise GraphError(f"{ctx.desc}: its maximum trip count is computed at run time; PopART's LoopOp reads it "
                         "from the graph when compiling (op/loop.cpp), so it must be a constant")
    trips = int(np.asarray(m).reshape(-1)[0])
    n_carried = ctx.num_inputs - 2
    n_scan = len(body.output) - 1 - n_carried
    if len(body.input) != n_carried + 2 or n_scan < 0:
        raise GraphError(f"{ctx.desc}: its body has {len(body.input)} inputs and {len(body.output)} outputs; a Loop "
                         f"with {n_carried} loop-carried value(s) needs {n_carried + 2} inputs and at least "
                         f"{n_carried + 1} outputs")
    if trips < 1:
        raise GraphError(f"{ctx.desc}: its maximum trip count is {trips}: the loop never runs its body")
    _check_unroll(ctx, trips, body)
    cond = ctx.value(1) if ctx.has_input(1) else np.array(True)
    if cond is not None and not _scalar_flag(cond):
        raise GraphError(f"{ctx.desc}: its condition is false before the first iteration: the loop never runs "
                         "its body")
    loop = _Iterations(ctx)
    loop.data_dependent = cond is None
    condition = ctx._in(1) if cond is None else _Value((), "bool", const=np.array(True), name=f"{ctx.name}/cond")
    carried = [ctx._in(2 + j) for j in range(n_carried)]
    ran = 0
    for i in range(trips):
        loop.begin(i)
        bindings = {body.input[0].name: loop.iteration_number(), body.input[1].name: condition,
                    **{body.input[2 + j].name: v for j, v in enumerate(carried)}}
        outs, carried = loop.body(i, body, bindings, 1, n_carried)
        ran += 1
        if outs[0].known:
            if not _scalar_flag(imp.const_of(outs[0])):
                break
        else:
            loop.data_dependent = True
            condition = outs[0]
    if ran < trips and n_scan:
        raise GraphError(f"{ctx.desc}: its condition is false after {ran} of {trips} iterations while it has scan "
                         "outputs: the rows of the iterations that do not run are undefined")
    results = [v.sim for v in carried]
    for k, v in enumerate(loop.scan_values):
        results.append(loop.stack(k, loop.slices[k], v.shape, v.dtype, 0, n_carried + k))
    return results


def _scan(ctx: OpContext):
    """ONNX Scan (opset 9 on: state values, then ``num_scan_inputs`` sequences sliced along
    ``scan_input_axes``; body outputs: the new states, then the scan outputs)."""
    body = ctx.attr("body")
    if ctx.opset < 9:
        ctx.unsupported("Scan before opset 9 (with its batch axis and sequence_lens) has no rule; re-export at "
                        "opset 9 or later")
    n_in = int(ctx.attr("num_scan_inputs"))
    n_state = ctx.num_inputs - n_in
    n_out = len(body.output) - n_state
    if n_state < 0 or n_out < 0 or len(body.input) != n_state + n_in:
        raise GraphError(f"{ctx.desc}: its body has {len(body.input)} inputs and {len(body.output)} outputs for "
                         f"{n_state} state value(s) and {n_in} scan input(s)")
    in_axes = [int(a) for a in ctx.attr("scan_input_axes", [0] * n_in)]
    out_axes = [int(a) for a in ctx.attr("scan_output_axes", [0] * n_out)]
    out_dirs = [int(d) for d in ctx.attr("scan_output_directions", [0] * n_out)]
    shapes = [ctx.shape(n_state + j) for j in range(n_in)]
    in_axes = [a + len(s) if a < 0 else a for a, s in zip(in_axes, shapes)]
    lengths = {s[a] for s, a in zip(shapes, in_axes)}
    if len(lengths) != 1:
        raise GraphError(f"{ctx.desc}: its scan inputs have different lengths along their scan axes "
                         f"({sorted(lengths)})")
    trips = lengths.pop()
    _check_unroll(ctx, trips, body)
    loop = _Iterations(ctx)
    states = [ctx._in(j) for j in range(n_state)]
    for i in range(trips):
        loop.begin(i)
        xs = []
        for j, (shape, axis) in enumerate(zip(shapes, in_axes)):
            xs.append(loop.slice_in(i, j, ctx.input(n_state + j), axis, shape[:axis] + shape[axis + 1:],
                                    ctx.dtype(n_state + j)))
        bindings = {**{body.input[j].name: v for j, v in enumerate(states)},
                    **{body.input[n_state + j].name: v for j, v in enumerate(xs)}}
        _, states = loop.body(i, body, bindings, 0, n_state)
    results = [v.sim for v in states]
    for k, v in enumerate(loop.scan_values):
        axis = out_axes[k] + len(v.shape) + 1 if out_axes[k] < 0 else out_axes[k]
        order = loop.slices[k][::-1] if out_dirs[k] else loop.slices[k]
        results.append(loop.stack(k, order, v.shape, v.dtype, axis, n_state + k))
    return results


def _if(ctx: OpContext):
    """ONNX If: the branch a condition known at import time picks; for a condition the device
    computes, both branches and a select of their outputs (an upper bound)."""
    imp = ctx._imp
    then, other = ctx.attr("then_branch"), ctx.attr("else_branch")
    cond = ctx.value(0)
    if cond is not None:  # the branch taken, its values known at import time kept known (a shape it computes)
        outs = imp.run_subgraph(then if _scalar_flag(cond) else other, {}, f"{ctx.name}/", {})
        return [v if v.known else imp.materialise(v) for v in outs]
    tags = {"onnx_if": ctx.name}
    then_outs = imp.run_subgraph(then, {}, f"{ctx.name}/then/", tags)
    else_outs = imp.run_subgraph(other, {}, f"{ctx.name}/else/", tags)
    if len(then_outs) != len(else_outs):
        raise GraphError(f"{ctx.desc}: its then branch has {len(then_outs)} outputs and its else branch "
                         f"{len(else_outs)}; both must have the node's {len(ctx.node.output)}")
    results = []
    for k, (t, e) in enumerate(zip(then_outs, else_outs)):
        if tuple(t.shape) != tuple(e.shape):
            raise GraphError(f"{ctx.desc}: output {k} is {tuple(t.shape)} in the then branch and {tuple(e.shape)} "
                             "in the else branch; PopART's IfOp needs both branches to give one shape")
        results.append(ctx.op("select", [ctx.input(0), imp.materialise(t), imp.materialise(e)], tags,
                              shapes=[tuple(t.shape)], dtypes=[t.dtype], outputs=[k]))
    return results


def _call(ctx: OpContext):
    """PopART's ``ai.graphcore::Call`` (``builder.aiGraphcore.call``): its ``callee`` graph run on the node's inputs,
    its ops inlined where the call stands (named under it). PopART's CallOp runs the callee as one Poplar function,
    copying its inputs in and its outputs out; the simulator's PopART outlining (``sim/compiler/outlining.py``)
    makes such calls of repeated op sequences, the callee's among them."""
    callee = ctx.attr("callee")
    if len(callee.input) != ctx.num_inputs or len(callee.output) != len(ctx.node.output):
        raise GraphError(f"{ctx.desc}: its callee {callee.name!r} takes {len(callee.input)} inputs and gives "
                         f"{len(callee.output)} outputs; the node has {ctx.num_inputs} and {len(ctx.node.output)}")
    bindings = {arg.name: ctx._in(k) for k, arg in enumerate(callee.input)}
    return [v if v.known else ctx._imp.materialise(v)
            for v in ctx._imp.run_subgraph(callee, bindings, f"{ctx.name}/", {"onnx_call": callee.name})]


RULES = {"Loop": _loop, "Scan": _scan, "If": _if, "ai.graphcore::Call": _call}
