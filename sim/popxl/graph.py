"""PopXL graphs, recorded into the simulator's :class:`~sim.graph.Graph`.

Every PopXL graph (the main graph, and each subgraph made by ``ir.create_graph``) writes its ops
into a sim graph through a :class:`~sim.graph.GraphBuilder` as they are created, so shapes are
inferred, checked and named there. A subgraph is a template: ``ops.call`` and ``ops.repeat``
copy its ops into the calling graph (:meth:`Graph._splice`), with its inputs connected to the
caller's tensors, its constants carried over (one copy in the caller, however often it is called)
and its host streams, and its ops keeping their IPU.
The main graph's sim graph is what :class:`~sim.popxl.Session` compiles and simulates.
"""

from __future__ import annotations

import contextlib
import numbers
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Self

import numpy as np

from ..cost.rules import CODE_OF
from ..graph.ir import GraphBuilder, Op
from . import dtypes
from .context import get_current_context
from .errors import ForeignTensorError, GraphInputError, NotModelledError, PopXLError
from .streams import DeviceToHostStream, HostToDeviceStream
from .tensor import Constant, GradTensor, Tensor, Variable

if TYPE_CHECKING:  # pragma: no cover
    from .ir import Ir

#: most ops one ``ops.repeat`` may copy into its caller (iterations x ops of the body): Graphcore's GPT-3
#: 2.7B pre-training repeats its 32 backward phases of 64 micro-batches, about 500,000 ops, which the
#: simulator builds and runs in about a minute and 3.5 GB
MAX_INLINED_OPS = 1_000_000


class Graph:
    """A PopXL graph: ``with graph:`` adds the ops made inside it to this graph."""

    def __init__(self, ir: Ir, name: str, main: bool = False):
        self.ir = ir
        self.name = name
        self._main = main
        self._b = GraphBuilder(f"popxl_{name}" if main else name, dtype="float32")
        self._inputs: list[Tensor] = []
        self._outputs: list[Tensor] = []
        self._loads: dict[HostToDeviceStream, list[str]] = {}  # stream -> sim tensors it is loaded into, in order
        self._stores: dict[DeviceToHostStream, list[str]] = {}  # stream -> sim tensors stored to it, in order
        self._io_count: Counter = Counter()  # stream -> its loads or stores in this graph
        self._io_repeats: list[tuple[str, int]] = []  # (graph, count) of repeats with host IO
        self._repeat_count = 1  # the main graph run this many times a run (popxl-addons' repeat_graph)
        self._io_ops = 0  # ops copied from the bodies of those repeats
        self._grad_info = None  # set on the graph of an autodiff GradGraphInfo
        self._made: list[Tensor] = []  # the variables and constants made in this graph, in order
        self._held_copies: dict[tuple[str, str], str] = {}  # (graph, its constant or weight) -> the copy here
        self._last_mapping: dict[str, str] = {}  # the last call's: sim tensor of the called graph -> this graph's
        self._called: list[Graph] = []  # the graphs this one calls or repeats, in the order first called
        #: each call spliced in: (the called graph, its tensors -> this graph's, the names of the ops it made here)
        self._call_sites: list[tuple[Graph, dict[str, str], frozenset[str]]] = []
        ir._graphs.append(self)

    # --- PopXL's surface ---------------------------------------------------------------------
    def __enter__(self) -> Self:
        ctx = get_current_context()
        if ctx.graphs and ctx.graphs[0].ir is not self.ir:
            raise PopXLError(f"Trying to a create a context manager nested in another context, when the "
                             f"previous context's Ir is different. {ctx.graphs[0].ir} != {self.ir}")
        ctx.graphs.append(self)
        return self

    def __exit__(self, *exc) -> None:
        get_current_context().graphs.pop()

    @property
    def id(self) -> str:
        return self.name

    @property
    def main_graph(self) -> Graph:
        return self.ir.main_graph

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return tuple(self._inputs)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return tuple(self._outputs)

    @property
    def inputs_by_name(self) -> dict[str, Tensor]:
        """The graph's inputs by name (PopXL's ``Graph.inputs_by_name``)."""
        return {t.name: t for t in self._inputs}

    @property
    def _ir(self) -> Ir:
        """The Ir (PopXL's private attribute, which Graphcore's GPT-J code reads)."""
        return self.ir

    @property
    def called_graphs(self) -> tuple[Graph, ...]:
        """The graphs this graph calls or repeats (PopXL's ``Graph.called_graphs``), first call first."""
        return tuple(self._called)

    @property
    def variables(self) -> tuple[Tensor, ...]:
        """The variables made in this graph (PopXL's ``Graph.variables``)."""
        return tuple(t for t in self._made if isinstance(t, Variable))

    @property
    def constants(self) -> tuple[Tensor, ...]:
        """The constants made in this graph (PopXL's ``Graph.constants``)."""
        return tuple(t for t in self._made if isinstance(t, Constant))

    @property
    def _pb_graph(self):
        """PopART's C++ graph behind a PopXL graph, which custom ops (popxl-addons' cppimport ops)
        and PopART-internal transforms use: the simulator has none."""
        raise NotModelledError(
            f"Graph._pb_graph ({self.name!r}): PopART's C++ graph (popart._internal.ir) is not modelled; custom "
            "ops built on it (such as popxl-addons' cppimport ops) and PopART-internal transforms cannot run")

    @property
    def sim_graph(self):
        """The simulator's graph this PopXL graph records into."""
        return self._b.graph

    def __repr__(self) -> str:
        return f"Graph[{self.name}: {len(self.sim_graph.ops)} ops]"

    # --- recording ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.ir._session is not None:
            raise PopXLError(f"{self.ir} belongs to a Session already and cannot be changed (in PopXL "
                             "the session takes ownership of the Ir): build the program before "
                             "creating the Session, or build a new Ir")

    def _own(self, t, where: str) -> Tensor:
        """Check that ``t`` is a tensor of this graph (and not an autodiff gradient)."""
        if isinstance(t, GradTensor):
            raise NotModelledError(
                f"{where}: {t.id} is a gradient from an autodiff grad graph called from the main graph; the "
                "simulator models that backward pass and weight update with its own training expansion, so "
                "such gradients can only go to ops.var_updates.* / ops.scaled_add_ (which become the optimizer "
                "update); a grad graph called inside another graph (ir.create_graph) runs as written instead")
        if not isinstance(t, Tensor):
            raise TypeError(f"{where}: expected a popxl Tensor, got {type(t).__name__} {t!r}")
        if t._sim is None and hasattr(t, "remote_buffer"):
            raise PopXLError(
                f"{where}: {t.id!r} is a variable held in {t.remote_buffer!r} (slot {t.offset}), in streaming "
                f"memory, not on the tiles; load it with ops.remote_load(buffer, {t.offset}) and use the loaded "
                "tensor (ops.remote_store writes it back)")
        if t._graph is not self and t._graph.ir is not self.ir:
            raise ForeignTensorError(f"{where}: tensor {t.id!r} belongs to another Ir ({t._graph.ir}) than the graph "
                                     f"{self.name!r} of {self.ir} where the op is being added; make it in this Ir")
        if t._graph is not self:
            raise ForeignTensorError(
                f"{where}: tensor {t.id!r} belongs to graph {t._graph.name!r}, not to {self.name!r} "
                "where the op is being added; pass it to the subgraph as an input (an argument of "
                "ir.create_graph or popxl.graph_input) and connect it at ops.call / ops.repeat")
        return t

    def _scoped(self, base: str) -> str:
        return "/".join(get_current_context().scopes + [base])

    def _new_tensor(self, name: str, shape, dtype: dtypes.dtype, role: str) -> str:
        g = self.sim_graph
        return g.add_tensor(g.unique_tensor_name(self._scoped(name)), shape, dtype.sim_name, role).name

    @contextlib.contextmanager
    def _building(self, io_tiles_modelled: bool = False) -> Iterator[GraphBuilder]:
        """The builder, with the context's IPU set, for adding one op (noting the contexts the op
        is made in that the simulator does not model; ``io_tiles_modelled``: the op runs on the IO
        tiles when made in ``popxl.io_tiles()``, as remote copies do)."""
        self._check_open()
        context = get_current_context()
        if context.io_tiles and not io_tiles_modelled:
            self.ir._note("popxl.io_tiles(): only remote buffer copies run on the IO tiles; other ops made in it "
                          "are simulated on the compute tiles")
        if context.execution_context is not None:
            self.ir._note(f"popxl.context._execution_context({context.execution_context!r}): accepted, no modelled "
                          "effect (its ops are simulated in the main program, once per host transfer)")
        if context.in_sequence is False:
            self.ir._note("popxl.in_sequence(False): ops run in the order they are created (the simulator does "
                          "not reorder them as PopXL's scheduler may)")
        with self._b.ipu(context.ipu):
            yield self._b

    def _wrap(self, sim_name: str, dtype: dtypes.dtype | None = None) -> Tensor:
        t = self.sim_graph.tensor(sim_name)
        return Tensor(self, sim_name, t.shape, dtype or dtypes.from_sim(t.dtype), get_current_context().ipu)

    def _add_op(self, kind: str, inputs: Sequence[str], outputs: Sequence[str], attrs: dict | None = None,
                name: str | None = None) -> Op:
        """An op writing existing tensors (in-place updates)."""
        self._check_open()
        g = self.sim_graph
        op = Op(g.unique_op_name(self._scoped(name or kind)), kind, list(inputs), list(outputs),
                dict(attrs or {}), ipu=get_current_context().ipu)
        return g.add_op(op)

    # --- host IO -----------------------------------------------------------------------------
    def _host_load(self, stream: HostToDeviceStream, name: str | None = None) -> str:
        """A load of ``stream``: one host transfer's data. A graph may load a stream several times (a
        loop written out, one load a micro-batch): each is the next transfer, and the Session checks
        that the main graph loads and stores every stream as many times."""
        self._check_open()
        if self._main:
            sim_name = self._b.input(self.sim_graph.unique_tensor_name(name or stream.name),
                                     stream.shape, stream.dtype.sim_name)
        else:
            sim_name = self._new_tensor(name or stream.name, stream.shape, stream.dtype, "input")
        self._loads.setdefault(stream, []).append(sim_name)
        self._io_count[stream] += 1
        return sim_name

    def _host_store(self, stream: DeviceToHostStream, sim_name: str) -> None:
        """A store to ``stream`` (as :meth:`_host_load`: once a transfer of a loop written out)."""
        self._check_open()
        if self._main:
            if sim_name in self.sim_graph.outputs:  # the same tensor again: a copy of it is sent
                with self._building() as b:
                    sim_name = b.op("identity", [sim_name], [self.sim_graph.tensors[sim_name].shape],
                                    name=self._scoped(f"{stream.name}/store"))[0]
            self._b.output(sim_name)
            if sim_name != stream.name:
                self.sim_graph.stream_names[sim_name] = stream.name
        self._stores.setdefault(stream, []).append(sim_name)
        self._io_count[stream] += 1

    def _transfers_per_pass(self) -> int:
        """Host transfers one pass of the main graph makes: the most times it loads or stores a stream
        (PopXL's ``num_host_transfers`` counts a pass's transfers of the streams used most; a stream
        loaded fewer times, a learning rate once a step, makes only its own transfers)."""
        return max(self._io_count.values(), default=1)

    def _fewer_transfers(self) -> dict[str, int]:
        """The streams a pass loads or stores fewer times than :meth:`_transfers_per_pass`, by name."""
        most = self._transfers_per_pass()
        return {s.name: n for s, n in self._io_count.items() if n < most}

    @property
    def _has_host_io(self) -> bool:
        return bool(self._loads or self._stores)

    # --- calling subgraphs -------------------------------------------------------------------
    def _connect(self, sub: Graph, inputs: Sequence, inputs_dict: dict | None, where: str) -> dict[str, str]:
        """Map each input of ``sub`` to a tensor of this graph (positional, then ``inputs_dict``).
        As PopXL's ``ops.call``: lists and tuples of inputs are flattened, and a Python or numpy
        number becomes a constant of the input's dtype."""
        flat = [x for item in inputs for x in (item if isinstance(item, (list, tuple)) else (item,))]
        if len(flat) > len(sub._inputs):
            raise GraphInputError(f"{where}: {len(flat)} inputs given but graph {sub.name!r} has "
                                  f"{len(sub._inputs)}")
        given: dict[Tensor, object] = dict(zip(sub._inputs, flat))
        for k, v in (inputs_dict or {}).items():
            if k not in sub._inputs:
                raise GraphInputError(f"{where}: inputs_dict key {getattr(k, 'id', k)!r} is not an input of "
                                      f"graph {sub.name!r} (its inputs: {[t.id for t in sub._inputs]})")
            if k in given:
                raise GraphInputError(f"{where}: input {k.id!r} of graph {sub.name!r} is given twice")
            given[k] = v
        mapping = {}
        for t in sub._inputs:
            if t not in given:
                raise GraphInputError(f"{where}: input {t.id!r} of graph {sub.name!r} was given no tensor: "
                                      "pass it positionally or in inputs_dict")
            value = given[t]
            if not isinstance(value, Tensor) and isinstance(value, (numbers.Number, np.generic, np.ndarray)):
                shape = np.shape(value)
                value = Tensor(self, self._new_tensor("constant", shape, t.dtype, "constant"), shape, t.dtype,
                               get_current_context().ipu)
            parent = self._own(value, where)
            if parent.shape != t.shape:
                raise GraphInputError(f"{where}: input {t.id!r} of graph {sub.name!r} has shape {t.shape} but "
                                      f"is given {parent.id!r} of shape {parent.shape}")
            if parent.dtype != t.dtype:
                raise GraphInputError(f"{where}: input {t.id!r} of graph {sub.name!r} is {t.dtype.name} but is "
                                      f"given {parent.id!r} of dtype {parent.dtype.name}: cast it with ops.cast")
            mapping[t._sim] = parent._sim
        return mapping

    def _splice(self, sub: Graph, mapping: dict[str, str], prefix: str) -> list[Tensor]:
        """Copy the ops of ``sub`` into this graph; ``mapping`` connects its inputs. Returns the
        tensors of this graph that ``sub``'s outputs became."""
        self._check_open()
        if sub not in self._called:
            self._called.append(sub)
        src, dst = sub.sim_graph, self.sim_graph
        mapping = dict(mapping)
        for stream, names in sub._loads.items():
            for name in names:
                mapping[name] = self._host_load(stream)
        for t in src.tensors.values():
            if t.name not in mapping and t.role in ("constant", "weight"):  # one copy however often it is called
                key = (sub.name, t.name)
                if key not in self._held_copies:
                    self._held_copies[key] = dst.add_tensor(dst.unique_tensor_name(f"{prefix}/{t.name}"), t.shape,
                                                            t.dtype, t.role).name
                mapping[t.name] = self._held_copies[key]
        first = len(dst.ops)
        for op in src.ops:
            name = dst.unique_op_name(f"{prefix}/{op.name}")
            outs = []
            for o in op.outputs:
                if o not in mapping:  # in-place writes keep writing the mapped tensor
                    t = src.tensors[o]
                    mapping[o] = dst.add_tensor(dst.unique_tensor_name(f"{prefix}/{o}"), t.shape, t.dtype,
                                                t.role, producer=name).name
                outs.append(mapping[o])
            forward_of = op.forward_of and f"{prefix}/{op.forward_of}"  # a gradient op of an explicit grad graph
            attrs = dict(op.attrs)
            attrs.setdefault(CODE_OF, (sub.name, op.name))  # one program however often the graph is called
            dst.add_op(Op(name, op.kind, [mapping[i] for i in op.inputs], outs, attrs,
                          op.pass_, op.ipu, op.stage, op.phase, op.block, op.recompute, forward_of))
        for stream, names in sub._stores.items():
            for name in names:
                self._host_store(stream, mapping[name])
        if src.loss is not None:
            dst.loss = mapping[src.loss]
        self._io_repeats += sub._io_repeats
        self._io_ops += sub._io_ops
        self._last_mapping = mapping  # for the CallSiteInfo: any tensor of ``sub`` -> what it became here
        self._call_sites.append((sub, mapping, frozenset(op.name for op in dst.ops[first:])))
        outs = []
        for t in sub._outputs:
            w = self._wrap(mapping[t._sim], t.dtype)
            w._ipu = t._ipu
            outs.append(w)
        return outs

    def _call(self, sub: Graph, inputs: Sequence, inputs_dict: dict | None, where: str) -> list[Tensor]:
        if sub.ir is not self.ir:
            raise PopXLError(f"{where}: graph {sub.name!r} belongs to another Ir")
        if sub._main:
            raise PopXLError(f"{where}: the main graph cannot be called")
        mapping = self._connect(sub, inputs, inputs_dict, where)
        return self._splice(sub, mapping, sub.name)

    def _repeat(self, sub: Graph, count: int, inputs: Sequence, inputs_dict: dict | None) -> list[Tensor]:
        where = f"ops.repeat({sub.name!r}, {count})"
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"{where}: repeat_count must be a whole number >= 0")
        if sub._main:
            raise PopXLError(f"{where}: the main graph cannot be repeated")
        if len(sub._inputs) < len(sub._outputs):  # PopXL's check (ops/repeat.py)
            raise GraphInputError(f"{where}: to repeat graph {sub.name!r} the number of inputs must be greater than "
                                  f"or equal to the number of outputs ({len(sub._inputs)} < {len(sub._outputs)})")
        mapping = self._connect(sub, inputs, inputs_dict, where)
        n_out = len(sub._outputs)
        for i, (o, t) in enumerate(zip(sub._outputs, sub._inputs)):
            if o.shape != t.shape:
                raise PopXLError(f"{where}: output {i} ({o.id!r}, shape {o.shape}) is carried into input {i} "
                                 f"({t.id!r}, shape {t.shape}) of the next iteration: shapes must match")
        if count == 0:
            self.ir._zero_repeats.append(sub.name)
            self.ir._note(f"ops.repeat({sub.name}, 0): its body runs no times, so it adds no ops; its outputs are "
                          "the carried inputs it was given")
            return [self._wrap(mapping[t._sim], t.dtype) for t in sub._inputs[:n_out]]
        if sub._has_host_io and self._main:
            # the body is one host transfer's step; Session runs it num_host_transfers times
            self._io_repeats.append((sub.name, count))
            self.ir._note(f"ops.repeat({sub.name}, {count}) with host IO: its body is taken as the step of "
                          "one host transfer, run ir.num_host_transfers times")
            before = len(self.sim_graph.ops)
            outs = self._splice(sub, mapping, sub.name)
            self._io_ops += len(self.sim_graph.ops) - before
            return outs
        if count * max(1, len(sub.sim_graph.ops)) > MAX_INLINED_OPS:
            raise NotModelledError(
                f"{where}: {count} iterations x {len(sub.sim_graph.ops)} ops is more than the "
                f"{MAX_INLINED_OPS} ops the simulator copies out of a repeat; repeat fewer times, or "
                "put the host IO inside the repeat so it is the per-transfer step")
        outs: list[Tensor] = []
        for i in range(count):
            outs = self._splice(sub, mapping, f"{sub.name}[{i}]")
            for t, o in zip(sub._inputs, outs):  # loop-carried: output k feeds input k
                mapping[t._sim] = o._sim
        return outs
