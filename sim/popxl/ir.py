"""``popxl.Ir``: the program (a main graph and subgraphs) and how it is run.

``replication_factor`` and ``num_host_transfers`` become the simulator's
``replicationFactor`` and ``deviceIterations``; ``replica_grouping(stride, group_size)`` groups
replicas for collectives exactly as PopXL does (:func:`sim.schedule.collectives.replica_grouping`);
``ir.options`` records PopART session options (those the simulator models are applied, the
others are listed in the run's notes).
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable
from typing import Any

from ..errors import OptionsError
from ..schedule.collectives import groups_of
from ..schedule.collectives import replica_grouping as _assignment
from .errors import NotModelledError, PopXLError
from .graph import Graph
from .tensor import Tensor, TensorSpec, graph_input, graph_output

_ir_ids = itertools.count()


class ReplicaGrouping:
    """Replicas grouped ``group_size`` at a time, ``stride`` apart (PopXL ``ReplicaGrouping``).

    Made by :meth:`Ir.replica_grouping`. :attr:`assignment` gives each replica's group.
    """

    def __init__(self, ir: Ir, stride: int = 1, group_size: int | None = None):
        self._ir = ir
        self._stride = stride
        self._group_size = ir.replication_factor // stride if group_size is None and isinstance(
            stride, int) and stride > 0 else group_size
        _assignment(ir.replication_factor, self._stride, self._group_size)  # fail now, as PopXL does
        if self._group_size == 1:  # groups of one: the stride says nothing (PopXL normalises it to 1)
            self._stride = 1

    @property
    def stride(self) -> int:
        return self._stride

    @property
    def group_size(self) -> int:
        return self._group_size

    @property
    def num_groups(self) -> int:
        return self._ir.replication_factor // self._group_size

    @property
    def is_const(self) -> bool:
        """True: every grouping here has a constant stride and group size (PopXL's ``is_const``)."""
        return True

    @property
    def const_rg(self) -> ReplicaGrouping:
        """The grouping of constant stride this one maps to: itself (every grouping here has a constant
        stride; PopXL's are broken up into one only when made from an assignment)."""
        return self

    @property
    def assignment(self) -> list[int]:
        """The group of each replica: entry ``r`` is replica ``r``'s group."""
        return _assignment(self._ir.replication_factor, self._stride, self._group_size)

    def transpose(self) -> ReplicaGrouping:
        """The grouping whose group ``i`` holds the ``i``-th member of every group of this one."""
        groups = groups_of(self.assignment)
        columns = [sorted(g[i] for g in groups) for i in range(self.group_size)]
        stride = columns[0][1] - columns[0][0] if len(columns[0]) > 1 else 1
        t = ReplicaGrouping.__new__(ReplicaGrouping)
        t._ir, t._stride, t._group_size = self._ir, stride, len(columns[0])
        if groups_of(t.assignment) != columns:
            raise NotModelledError(
                f"ReplicaGrouping.transpose of {self!r}: its groups {columns} have no constant stride, which PopXL "
                "holds as an assignment of replicas (replica_grouping_from_assignments) and the simulator's "
                "groupings (a stride and a group size, as CommGroup) cannot express; not modelled")
        return t

    def __eq__(self, other) -> bool:  # the same groups of replicas, as PopXL compares them
        return (isinstance(other, ReplicaGrouping) and other._ir is self._ir
                and other.assignment == self.assignment)

    def __hash__(self) -> int:
        return hash((self._ir.id, tuple(self.assignment)))

    def __repr__(self) -> str:
        return (f"ReplicaGrouping(num_replicas={self._ir.replication_factor}, stride={self.stride}, "
                f"group_size={self.group_size}, num_groups={self.num_groups})")


class SessionOptions:
    """PopART session options set on an Ir (``ir.options.name = value``), recorded.

    Modelled: ``numIOTiles`` (compute tiles given to IO), ``defaultPrefetchBufferingDepth``
    (host stream buffering), ``partialsTypeMatMuls`` (the matmuls' partials type) and the poplin
    option maps ``convolutionOptions`` / ``matmulOptions`` (their partials type and the options
    :meth:`sim.options.Options.poplin_options` reads). Every other option is accepted and listed in
    the run's notes as having no modelled effect.
    """

    MODELLED = ("numIOTiles", "defaultPrefetchBufferingDepth", "partialsTypeMatMuls", "convolutionOptions",
                "matmulOptions")
    #: PopART's options that are maps, empty until set (``opts.engineOptions["key"] = value``, as
    #: PopXL scripts write them); an entry set is listed in the notes like any option
    MAPS = ("engineOptions", "convolutionOptions", "lstmOptions", "matmulOptions", "reportOptions",
            "gclOptions", "tensorLocationSettingsOverride", "customCodeletCompileFlags")

    def __init__(self):
        object.__setattr__(self, "_values", {})

    def __setattr__(self, name: str, value) -> None:
        self._values[name] = value

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            if name in self.MAPS:
                return self._values.setdefault(name, {})
            raise AttributeError(f"session option {name!r} has not been set on this Ir") from None

    def set(self, name: str, value) -> None:
        self._values[name] = value

    def items(self):
        """The options set (a map option only when it has entries)."""
        return [(k, v) for k, v in self._values.items() if not (k in self.MAPS and v == {})]

    def __repr__(self) -> str:
        return f"SessionOptions({self._values})"


class _PbIr:
    """The corner of PopART's ``_internal.ir.Ir`` that PopXL scripts reach for (options)."""

    def __init__(self, ir: Ir):
        self._ir = ir

    def getSessionOptions(self) -> SessionOptions:
        return self._ir.options

    def getId(self) -> int:
        return self._ir.id

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotModelledError(f"ir._pb_ir.{name}: PopART's C++ Ir (popart._internal.ir) is not modelled; only "
                               "getSessionOptions() and getId() are here")


class Ir:
    """A PopXL program: a main graph, subgraphs, replication and host transfers.

    ``replication`` is the replication factor, or ``"popdist"`` to take it from the PopRun
    environment (``POPDIST_NUM_LOCAL_REPLICAS`` for this instance, ``POPDIST_NUM_TOTAL_REPLICAS``
    over all instances; see :mod:`sim.popdist`).
    """

    def __init__(self, replication: int | str = 1):
        self.id = next(_ir_ids)
        self._session = None
        self._notes: list[str] = []
        self._zero_repeats: list[str] = []  # graphs repeated 0 times (ops.repeat(g, 0)): they add no ops
        self._graph_count: dict[str, int] = {}
        self._training = False
        self._drawn_bytes = 0  # variable data popxl-addons' factories drew for this Ir (variable_factory.py)
        self._explicit_grads = False  # a grad graph was called as ops, inside another graph (transforms.autodiff)
        self._optimizer = "sgd"
        self._gradient_state: set[str] = set()  # variables an update accumulates a gradient into
        #: moment variable -> the ops.var_updates function that accumulates a gradient into it
        self._moment_updates: dict[str, str] = {}
        self._updated: set[str] = set()  # variables an update of the gradient writes (the trained weights)
        #: trained weight -> the collectives the program applied to its gradient
        self._grad_collectives: dict[str, tuple] = {}
        self._state_collectives: dict[str, tuple] = {}  # moment variable -> those of the gradient it accumulates
        self._fully_connected_pass = True  # PopART's enableFullyConnectedPass (popxl-addons' disable_fc_pass)
        self._shard_of: dict[str, tuple] = {}  # a weight's replica shard -> (the weight, group stride, group size)
        self._sharded_updates: dict[str, tuple] = {}  # a weight updated shard by shard -> (group stride, size)
        #: the micro-batches a pass of a pipeline written with popxl-addons' pipelined_execution runs
        #: (None: no pipeline), and whether its grad graphs recompute their forward (recompute_graph)
        self._pipeline_steps: int | None = None
        self._recompute = False
        #: the main graph's ops that grad graphs made by recompute_graph recompute (their forward calls' ops)
        self._recomputed_ops: set[str] = set()
        self._remote_buffers: list = []  # popxl.RemoteBuffer, by id - 1
        self._remote_labels: set[str] = set()  # names of the variables held in remote buffers
        #: sim tensor of a replica_sharded_variable's shard -> the variable
        self._sharded_weights: dict[str, object] = {}
        self._num_host_transfers = 1
        self._use_popdist = replication == "popdist"
        self.options = SessionOptions()
        self._pb_ir = _PbIr(self)
        if self._use_popdist:
            from .. import popdist
            self._total_replicas = popdist.getNumTotalReplicas()
            self._replication = popdist.getNumLocalReplicas()
        else:
            self._replication = self._total_replicas = 1
            self.replication_factor = replication
        self._graphs: list = []  # every Graph of this Ir, the main graph first
        self._main = Graph(self, "main", main=True)

    # --- replication and host transfers ------------------------------------------------------
    @property
    def replication_factor(self) -> int:
        """Replicas over all instances (the global replication factor)."""
        return self._total_replicas

    @replication_factor.setter
    def replication_factor(self, value: int) -> None:
        if self._session is not None:
            raise PopXLError(f"{self} already belongs to a Session: the replication_factor cannot change")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"replication_factor must be a whole number >= 1, got {value!r}")
        if self._use_popdist:
            raise PopXLError("the replication of Ir(replication='popdist') comes from the PopRun environment")
        self._replication = self._total_replicas = value

    @property
    def instance_replication_factor(self) -> int:
        """Replicas of this instance (equal to :attr:`replication_factor` without PopDist)."""
        return self._replication

    @property
    def num_host_transfers(self) -> int:
        """Host transfers of each stream per ``session.run`` (the simulator's deviceIterations)."""
        return self._num_host_transfers

    @num_host_transfers.setter
    def num_host_transfers(self, value: int) -> None:
        if self._session is not None:
            raise PopXLError(f"{self} already belongs to a Session: num_host_transfers cannot change")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"num_host_transfers must be a whole number >= 1, got {value!r}")
        self._num_host_transfers = value

    def replica_grouping(self, stride: int = 1, group_size: int | None = None) -> ReplicaGrouping:
        """Groups of ``group_size`` replicas ``stride`` apart (``group_size`` defaults to
        ``replication_factor // stride``). With 8 replicas, ``replica_grouping(2, 2).assignment``
        is ``[0, 1, 0, 1, 2, 3, 2, 3]``."""
        return ReplicaGrouping(self, stride, group_size)

    def replica_grouping_from_assignments(self, assignment: list[int]) -> ReplicaGrouping:
        """The grouping whose replica ``r`` is in group ``assignment[r]``: one of :meth:`replica_grouping`'s (a
        stride and a group size, as the simulator's collectives and GCL's CommGroup hold them) that gives this
        assignment; one that none gives (groups without a constant stride) is :class:`NotModelledError`."""
        n = self.replication_factor
        if isinstance(assignment, (str, bytes)) or len(list(assignment)) != n or not all(
                isinstance(g, int) and not isinstance(g, bool) for g in assignment):
            raise ValueError(f"replica_grouping_from_assignments: expected a list of {n} group indices, one for each "
                             f"replica, got {assignment!r}")
        assignment = list(assignment)
        for group_size in (d for d in range(1, n + 1) if n % d == 0):
            for stride in (s for s in range(1, n + 1) if n % s == 0):
                try:
                    grouping = ReplicaGrouping(self, stride, group_size)
                except (ValueError, PopXLError, OptionsError):
                    continue
                if grouping.assignment == assignment:
                    return grouping
        raise NotModelledError(
            f"replica_grouping_from_assignments({assignment}): its groups {groups_of(assignment)} are not replicas "
            "a constant stride apart, numbered in order, which is what the simulator's groupings (a stride and a "
            "group size, replica_grouping) and its collectives express; not modelled")

    # --- graphs ------------------------------------------------------------------------------
    @property
    def main_graph(self) -> Graph:
        return self._main

    def _unique_graph_name(self, base: str) -> str:
        base = base.replace(".<locals>", "")
        k = self._graph_count.get(base, 0)
        self._graph_count[base] = k + 1
        return f"{base}_{k}"

    def _remote_label(self, base: str) -> str:
        """A name for a variable held in a remote buffer, unique in the Ir."""
        label, k = base, 0
        while label in self._remote_labels or label in self._main.sim_graph.tensors:
            k += 1
            label = f"{base}_{k}"
        self._remote_labels.add(label)
        return label

    def create_empty_graph(self, name: str | None = None) -> Graph:
        return Graph(self, self._unique_graph_name(name or "graph"))

    def create_graph(self, fn: Callable | Any, *args, **kwargs) -> Graph:
        """A subgraph built by calling ``fn`` (or a ``popxl.Module``'s ``build``).

        Tensor and TensorSpec arguments become the graph's inputs (in the order of ``fn``'s
        signature, then the ``popxl.graph_input`` calls inside it); what ``fn`` returns (None, a
        tensor or an iterable of tensors) becomes its outputs.
        """
        from .module import Module
        if isinstance(fn, Module):
            func, qualname = fn.build, type(fn).__qualname__
        elif callable(fn) and hasattr(fn, "__qualname__"):
            func, qualname = fn, fn.__qualname__
        else:
            raise TypeError("Callable `fn` must be either a function or a class that extends popxl.Module")
        try:
            bound = inspect.signature(func).bind(*args, **kwargs)
        except TypeError as e:
            raise ValueError("The arguments, `args` and `kwargs`, do not match the signature of the "
                             f"function `fn`: {e}") from None
        bound.apply_defaults()
        graph = Graph(self, self._unique_graph_name(qualname))
        with graph:
            for name, arg in list(bound.arguments.items()):
                if isinstance(arg, (Tensor, TensorSpec)):
                    bound.arguments[name] = graph_input(arg.shape, arg.dtype, name, meta_shape=arg.meta_shape)
                elif isinstance(arg, (list, tuple)) and arg and all(isinstance(a, (Tensor, TensorSpec)) for a in arg):
                    bound.arguments[name] = [graph_input(a.shape, a.dtype, f"{name}_{i}", meta_shape=a.meta_shape)
                                             for i, a in enumerate(arg)]
                elif isinstance(arg, dict) and arg and all(isinstance(a, (Tensor, TensorSpec)) for a in arg.values()):
                    bound.arguments[name] = {k: graph_input(a.shape, a.dtype, str(k), meta_shape=a.meta_shape)
                                             for k, a in arg.items()}
            outputs = func(*bound.args, **bound.kwargs)
            if outputs is None:
                outputs = []
            elif isinstance(outputs, Tensor):
                outputs = [outputs]
            else:
                try:
                    outputs = list(outputs)
                except TypeError:
                    outputs = [outputs]
                if not all(isinstance(o, Tensor) for o in outputs):
                    raise ValueError("Output of subgraph must be None, a Tensor or an iterable of Tensors. "
                                     f"Output type: {type(outputs)}. Value {outputs}")
            for o in outputs:
                graph_output(o)
        return graph

    # --- streams -----------------------------------------------------------------------------
    def get_all_h2d_streams(self) -> set:
        """The host-to-device streams the main graph loads from."""
        return set(self._main._loads)

    def get_all_d2h_streams(self) -> set:
        """The device-to-host streams the main graph stores to."""
        return set(self._main._stores)

    # --- notes -------------------------------------------------------------------------------
    def _note(self, text: str) -> None:
        if text not in self._notes:
            self._notes.append(text)

    def dot_checkpoint(self, check: str, save_dir=None) -> None:
        """Accepted: the simulator writes no DOT files (see ``ipusim run --output`` for reports)."""
        self._note("ir.dot_checkpoint: accepted, no DOT files are written")

    def __repr__(self) -> str:
        return f"Ir[id={self.id}]"

    def __hash__(self) -> int:
        return hash(self.id)

    def __eq__(self, other) -> bool:
        return isinstance(other, Ir) and other.id == self.id
