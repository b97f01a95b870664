"""Capacity planning (``ipusim plan``): the fastest ways to run a model for a global batch.

A :class:`Candidate` is one configuration of ``ipusim run``: a system, ``replicas`` R, IPUs per
replica P (the model's layers split over P pipeline stages), micro-batch, gradient
accumulation, availableMemoryProportion, recomputation checkpoints, optimizer-state
placement and partials type (float or half: half partials store fp16 matmul and convolution
partials, which the AMP of Mk2 and later IPUs accumulates faster, in less memory), with global
batch = micro-batch x accumulation x R (device iterations repeat the global batch, they do not
change it). :class:`Planner` enumerates the candidates of a :class:`Space` and evaluates them
through a caller's function (``sim.cli.plan`` simulates each as an ``ipusim run`` command line
on a process pool or a Dask cluster):

1. **Profiles.** The model's ops are priced once per (system's IPU, micro-batch, proportion, partials)
   with the compiler's own pricing (:func:`sim.compiler.executable.price_ops`): cycles per
   micro-batch of each block (layer), forward and backward, and the always-live tensors
   (weights, constants, optimizer state, accumulators) each block's ops touch.
2. **Split points.** P IPUs get contiguous runs of layers chosen to minimise the longest
   stage time (min-max partition; the embeddings and heads stay where the model puts them,
   and in pipelined training a backward stage also recomputes the forward ops that make what
   the gradients read, so a layer weighs forward + backward + those ops, each block's priced
   as PopART's pipelined recomputation walks back to the checkpoints and the block's inputs;
   blocks after the last layer run in the final forward stage, which recomputes nothing of them).
3. **Bound.** An IPU runs its ops one after another, so a weight update takes at least the
   busiest IPU's ``accumulation x`` (forward + backward cycles of its layers per micro-batch)
   plus its optimizer ops (1/R of them with rts) and, with the state off chip, moving that
   state to and from streaming memory; pipeline fill and flush, recomputation, collectives
   and host IO only add to that. Hence ``samples/s <= micro_batch x accumulation x replicas x
   clock / that``, without compiling.
4. **Drops without simulating** (each with its reason): with a latency limit (inference,
   :attr:`Space.max_latency`), a candidate whose step's round trip cannot be within it: one
   micro-batch passes each IPU of a replica in turn, so the round trip takes at least the
   replica's IPUs' op cycles for one micro-batch summed (:meth:`Planner.latency_bound`; a
   candidate simulated over the limit is dropped the same way, and only those within it rank);
   with a target throughput (:attr:`Space.target_throughput`), a candidate whose bound is below
   it (one simulated below it likewise); combinations PopTorch rejects
   (accumulation below the pipeline's stages, device iterations below an inference
   pipeline's stages, more IPUs than the system has); IPUs whose always-live bytes alone,
   spread evenly over the tiles, exceed a tile's SRAM (the fullest tile holds at least the
   average); the same tile-memory layout as a candidate already found not to fit (memory
   does not depend on replicas or on the accumulation count, only on whether there is
   accumulation; with replicated tensor sharding fewer replicas shard less, so they do not
   fit either).
5. **Branch and bound.** The rest are simulated in order of their bound, best first, in
   batches; once a candidate's bound is below the ``top``-th best throughput simulated, it
   and all after it are pruned. With a target throughput configurations rank by the IPUs they
   use, then by throughput (:meth:`Planner.rank_key`): candidates are taken fewest IPUs first,
   and one using more IPUs than the ``top``-th best found is pruned too. The ``top`` best are
   then exactly those of an exhaustive search of the same space (``prune=False`` simulates
   everything).
6. **Relief of a full IPU.** A pipelined candidate that does not fit (simulated, inferred or
   dropped on its always-live bytes) on its relieved IPU alone brings in its *relief* candidates, as Graphcore runs
   BERT-Large as [3, 7, 7, 7] layers with proportions 0.15, 0.25, 0.25, 0.25 because IPU 0 also
   holds the embedding: the IPU whose always-live bytes per tile are the most under the
   balanced split (the *relieved* IPU; ties: the lowest) holds one more layer fewer, up to
   :attr:`Space.relief` layers fewer than balanced, the rest split over the others to balance
   them (:func:`constrained_split`); and the relieved IPU alone takes each of
   :attr:`Space.relief_proportions` below the candidate's proportion. A relief enters only if
   its bound is at most its parent's, so a relief of a pruned candidate could not have made
   the top either; the exhaustive search brings in the reliefs of what it finds short on the
   relieved IPU alone, the same as the pruned one but where the pruned one knew a candidate's
   shortfall only from another's (inferred) or from its always-live bytes, whose reason may
   name fewer IPUs. Each configuration brings in at most
   1 + len(relief_proportions) others, so one balanced configuration grows into at most
   (relief + 1) x (len(relief_proportions) + 1) candidates.

Units: cycles of the system's IPU clock, bytes, samples per second.
"""

from __future__ import annotations

import heapq
import itertools
import math
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterator

import models

from .compiler.executable import price_ops
from .cost.rules import AMP_KINDS
from .errors import GraphError, OptionsError
from .graph.ir import Graph
from .graph.training import Optimizer, graph_to_price, merge_norms, sparse_accumulate_tied_gathers
from .hardware.system import load_system
from .options import Options, TensorLocationSettings
from .schedule.recomputation import kept as checkpoints
from .strategy import assign

OPTIMIZER_STATES = ("on-chip", "off-chip", "rts", "off-chip-rts")
SHARDED = ("rts", "off-chip-rts")  # optimizer-state placements sharded over the replicas
#: model parameters the planner chooses itself (each is an axis of the search)
PLANNED_PARAMS = {"micro_batch": "--micro-batch", "layers_per_ipu": "--pipeline",
                  "split_points": "--pipeline", "recompute_checkpoint_every_layer": "--recompute",
                  "recompute_checkpoints": "--recompute"}
#: what the CSV and :meth:`Planner.run` rows hold for a candidate, then for its result
CANDIDATE_COLUMNS = ("system", "ipus", "replicas", "pipeline", "split", "micro_batch", "gradient_accumulation",
                     "global_batch", "available_memory_proportion", "recompute", "optimizer_state", "partials",
                     "device_iterations")
#: the partials types a plan can search (``Precision.setPartialsType``), in the order equals are preferred
PARTIALS = ("float", "half")
RESULT_COLUMNS = ("status", "samples_per_second", "bound_samples_per_second", "seconds", "latency_avg_s",
                  "cycle_count", "peak_tile_bytes", "stage_balance", "reason")
#: statuses: simulated and fits; does not fit in tile memory; rejected as a combination;
#: its throughput bound is below the top configurations found; its latency (simulated, or its
#: bound) is above the plan's limit (:attr:`Space.max_latency`); its throughput (simulated, or its
#: bound) is below the plan's target (:attr:`Space.target_throughput`)
STATUSES = ("ok", "oom", "invalid", "pruned", "latency", "slow")
_SLACK = 1e-9  # relative: a bound this close to the threshold is still simulated (float rounding)
#: the largest micro-batch the planner tries by default (powers of two up to it, and the divisors of a global
#: batch's share a replica up to it)
MAX_MICRO_BATCH = 64


#: ``ipusim plan``'s default memory margin (``Options.memoryMargin`` of every candidate): the largest, in whole
#: per cent, under which every configuration Graphcore publishes as running still fits in the simulator
#: (:data:`sim.validation.MEMORY_FITS`; the fullest, BERT-Large phase 1's IPU 1 at micro-batch 8, fills 94.4 %
#: of a tile; tests/test_memory.py holds it). Poplar's fullest tile runs 8-15 % above an even spread in
#: poplibs' single-layer benchmarks (:data:`sim.compiler.memory.FULLEST_TILE_EXCESS`), but a margin that large
#: rejects configurations that ran on hardware: a program's fullest tile, the sum of many tensors' placements,
#: does not carry one layer's excess in full. Configurations within that excess of a tile get a note instead
#: (:func:`sim.compiler.memory.near_capacity_notes`).
DEFAULT_MEMORY_MARGIN = 0.05


def short_ipus(reason: str) -> set[int]:
    """The IPUs an out-of-memory reason says are short (``out of memory on IPU 0 ...; also
    short: IPUs 1, 2``); empty for another reason."""
    first = re.match(r"out of memory on IPU (\d+)", reason)
    if not first:
        return set()
    also = re.search(r"also short: IPUs? ([\d, ]+)", reason)
    return {int(first.group(1))} | ({int(n) for n in also.group(1).split(",")} if also else set())


def _ordinal(n: int) -> str:
    """1 -> "1st", 2 -> "2nd", 11 -> "11th", 23 -> "23rd"."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def powers_of_two(limit: int) -> list[int]:
    """1, 2, 4, ... up to ``limit``."""
    return [1 << k for k in range(max(0, int(limit)).bit_length())]


# --- the model: what can be split and recomputed ------------------------------------------------

@dataclass
class Model:
    """A zoo model (``name`` and its ``params``), an ONNX file (``onnx``) or a PyTorch model from a Python file
    (``torch``: ``PATH.py[:FUNCTION]``, :mod:`sim.poptorch.model_file`) to plan for.

    ``family`` says how the planner places it: ``"layers"`` (the zoo's ``layers_per_ipu``: BERT, GPT-2,
    ViT, Swin, the Conformer's encoder blocks), ``"blocks"`` (``split_points``: ResNet-50's and ResNeXt-101's
    bottleneck blocks, EfficientNet's MBConv blocks, UNet's encoder and decoder blocks but its first and its head),
    or ``"whole"`` (one IPU per replica, no recomputation axis: the MLP, ONNX files); a PyTorch model's layers (its
    lists of modules of one type, :mod:`sim.poptorch.model_file`) split as ``"layers"``, checkpointed as
    optimum-graphcore does;
    ``recomputes``: the model has recomputation checkpoints to place (``recompute_checkpoint_every_layer`` or
    ``recompute_checkpoints``; the Conformer has none: a pipeline's stages recompute from their stashed inputs).
    """

    name: str | None = None
    params: dict = field(default_factory=dict)
    onnx: str | None = None
    dims: dict = field(default_factory=dict)  # an ONNX file's other symbolic dimensions by name (--dim)
    loss: str | None = None  # the ONNX tensor to train on (--loss; default: the model's one loss)
    torch: str | None = None  # PATH.py[:FUNCTION] (--torch)
    #: a PyTorch model is captured as it runs in training (dropout on) or in inference (eval mode)
    training: bool = False
    family: str = field(init=False, default="whole")
    recomputes: bool = field(init=False, default=False)

    def __post_init__(self):
        if [self.name, self.onnx, self.torch].count(None) != 2:
            raise GraphError("plan: give a zoo model, an ONNX file or a PyTorch model's file (exactly one)")
        if self.torch is not None:
            if self.params or self.dims or self.loss:
                raise GraphError("plan: a --torch model takes no --param, --dim or --loss (its file builds it for "
                                 "each micro-batch; its loss is what it returns)")
            from .poptorch.model_file import TorchModel
            TorchModel(self.torch).check()
            self.family, self.recomputes = "layers", True
            return
        if (self.dims or self.loss) and self.onnx is None:
            raise GraphError(f"plan: {'--dim' if self.dims else '--loss'} applies to an ONNX model (--onnx PATH); a "
                             "zoo model takes its sizes as --param and has its loss")
        if self.onnx is not None:
            if self.params:
                raise GraphError("plan: an ONNX model takes no --param (its shapes are in the file; "
                                 "the planner sizes its batch dimension)")
            if not Path(self.onnx).is_file():
                raise GraphError(f"plan: --onnx {str(self.onnx)!r}: " + (
                    "a folder; give the .onnx file in it" if Path(self.onnx).is_dir() else "no such file"))
            from . import onnx as sim_onnx
            batch = sorted(set(self.dims) & sim_onnx.batch_dims(self.onnx))
            if batch:
                raise GraphError(f"plan: --dim {batch[0]}={self.dims[batch[0]]} sizes the model's batch (its inputs' "
                                 "leading dimension), which the plan searches: give --micro-batch "
                                 f"{self.dims[batch[0]]} instead")
            return
        defaults = models.describe(self.name)  # unknown names raise GraphError
        for key in self.params:
            if key in PLANNED_PARAMS:
                raise GraphError(f"plan: model parameter {key!r} is an axis of the plan: give "
                                 f"{PLANNED_PARAMS[key]} values instead of --param {key}=...")
        if "micro_batch" not in defaults:
            raise GraphError(f"plan: model {self.name!r} has no micro_batch parameter, so there is no batch "
                             "to plan; plan a model whose inputs are batched (see `ipusim models`)")
        if "layers_per_ipu" in defaults:
            self.family, self.recomputes = "layers", "recompute_checkpoint_every_layer" in defaults
        elif "split_points" in defaults:
            self.family, self.recomputes = "blocks", "recompute_checkpoints" in defaults

    @property
    def label(self) -> str:
        """The model as the user named it (zoo name, ONNX path or PyTorch file)."""
        return self.name or self.onnx or self.torch

    @cached_property
    def fixed_batch(self) -> int | None:
        """The micro-batch an ONNX file fixes in its inputs (None: the planner chooses); the file
        is read once."""
        if self.onnx is None:
            return None
        from . import onnx as sim_onnx
        return sim_onnx.fixed_batch(self.onnx)

    def build(self, micro_batch: int, partials: str = "float", **placement) -> Graph:
        """The model's graph at ``micro_batch`` with the planner's placement parameters; a PyTorch file is
        captured with ``partials`` (they set the precision serializedMatMul keeps), as its run captures it."""
        if self.torch is not None:
            from .poptorch.model_file import TorchModel
            return TorchModel(self.torch).graph(micro_batch, self.training, partials, layers_per_ipu=placement.get(
                "layers_per_ipu"), recompute=placement.get("recompute_checkpoint_every_layer"))
        if self.onnx is not None:
            from . import onnx as sim_onnx
            return sim_onnx.load(self.onnx, batch_size=micro_batch, dims=self.dims or None, loss=self.loss)
        return models.get(self.name, **{**self.params, "micro_batch": micro_batch, **placement})

    def units(self, graph: Graph) -> list[str]:
        """The blocks a split moves between IPUs, in model order (empty: the model does not split)."""
        blocks = list(dict.fromkeys(op.block for op in graph.ops if op.block is not None))
        pattern = {"layers": r"(?:layer|encoder)\d+",
                   "blocks": r"layer\d+/\d+|block\d+[a-z]|encoder_block_[1-9]\d*|decoder_block_\d+(?:/up)?"
                   }.get(self.family)
        return [b for b in blocks if pattern and re.fullmatch(pattern, b)]

    def placement(self, units: list[str], split: tuple[int, ...], recompute: bool | None) -> dict:
        """Model parameters placing ``split[i]`` units on IPU i and setting recomputation."""
        p: dict = {}
        if len(split) > 1:
            starts = [sum(split[:i]) for i in range(len(split))]
            p = ({"layers_per_ipu": list(split)} if self.family == "layers"
                 else {"split_points": [units[s] for s in starts[1:]]})
        if recompute is not None and self.recomputes and units:
            p.update({"recompute_checkpoint_every_layer": recompute} if self.family == "layers"
                     else {"recompute_checkpoints": "blocks" if recompute else None})
        return p


# --- the space and its candidates ---------------------------------------------------------------

@dataclass
class Space:
    """The axes of a plan. ``None`` for an axis means its default (see :class:`Planner`)."""

    systems: list[str]
    global_batch: tuple[int, int]  # (lowest, highest) samples per weight update (inference: per step)
    training: bool = True
    optimizer: str = "sgd"
    pipelines: list[int] | None = None  # IPUs per replica; default powers of two that fit
    replicas: list[int] | None = None  # default powers of two that fit
    #: default powers of two up to 64, and for a global batch of one size the divisors up to 64 of its share a replica
    micro_batches: list[int] | None = None
    gradient_accumulations: list[int] | None = None  # default: what makes the global batch
    proportions: list[float] | None = None  # default 0.2, 0.4, 0.6
    recompute: list[bool] | None = None  # default on and off (training, a model that splits)
    optimizer_states: list[str] | None = None  # default all four (if the optimizer has state)
    optimizer_state_dtype: str | tuple[str, ...] = "float32"  # Optimizer.state_dtype of every candidate
    #: Precision.setPartialsType values searched (float or half; a single name stands for one)
    partials: str | tuple[str, ...] = "float"
    device_iterations: int | None = None  # default 1 in training, 32 in inference
    #: most layers (blocks) a relief moves off the relieved IPU of a pipelined configuration
    #: that does not fit, beyond its balanced split (0: balanced splits only)
    relief: int = 3
    #: availableMemoryProportion values the relieved IPU alone tries, below the configuration's
    #: own (default: the lowest of ``proportions``; empty: the same proportion on every IPU)
    relief_proportions: list[float] | None = None
    #: replicas each host process (PopRun instance) feeds at most, filling their input buffers in turn
    #: (``Options.hostProcesses``): 2, as Graphcore's PopRun scripts run ResNet-50 (8 instances for
    #: 16 replicas); one process for every replica would hide the host, one for all would bind it
    replicas_per_process: int = 2
    #: samples per second each host process's data pipeline delivers (``Options.hostDataRate``,
    #: asynchronous), on every candidate; None: it keeps up
    host_data_rate: float | None = None
    #: every candidate's ``Options.memoryMargin``: it fits only if each fullest tile, raised by this
    #: fraction, fits (the CLI's default: :data:`DEFAULT_MEMORY_MARGIN`)
    memory_margin: float = 0.0
    #: PopART's TiedGather and TiedGatherAccumulate patterns on every candidate (``Options.tied_gather_accumulate``,
    #: as Graphcore's BERT and GPT-2 scripts set them): with accumulation a tied embedding has no dense gradient table
    tied_gather: bool = False
    #: inference only: the longest average round trip a configuration may take, in seconds (``getLatency()``'s
    #: average: from the IPU's request for a step's inputs to its outputs reaching the host); None: no limit
    max_latency: float | None = None
    #: samples per second a configuration must reach; the ones that do rank by the IPUs they use, fewest first,
    #: then by throughput (the smallest system for a throughput); None: rank by throughput alone
    target_throughput: float | None = None

    def __post_init__(self):
        lo, hi = self.global_batch
        if not 1 <= lo <= hi:
            raise OptionsError(f"plan: global batch {lo}-{hi}: expected whole numbers 1 <= low <= high")
        for name in ("pipelines", "replicas", "micro_batches", "gradient_accumulations"):
            values = getattr(self, name)
            if values is not None and (not values or any(not isinstance(v, int) or v < 1 for v in values)):
                raise OptionsError(f"plan: {name.replace('_', ' ')} {values}: expected whole numbers >= 1")
        if self.proportions is not None and (not self.proportions or any(not 0 < p <= 1 for p in self.proportions)):
            raise OptionsError(f"plan: available memory proportions {self.proportions}: expected values in (0, 1]")
        if self.relief_proportions is not None and any(not 0 < p <= 1 for p in self.relief_proportions):
            raise OptionsError(f"plan: relief proportions {self.relief_proportions}: expected values in (0, 1]")
        if not isinstance(self.relief, int) or self.relief < 0:
            raise OptionsError(f"plan: relief {self.relief!r}: expected a whole number >= 0 (layers moved off the "
                               "fullest IPU; 0 for balanced splits only)")
        if self.optimizer_states is not None:
            bad = [s for s in self.optimizer_states if s not in OPTIMIZER_STATES]
            if bad or not self.optimizer_states:
                raise OptionsError(f"plan: optimizer state {bad[0] if bad else ''!r}: expected "
                                   f"{', '.join(OPTIMIZER_STATES)}")
        if not self.training and (self.gradient_accumulations not in (None, [1]) or self.optimizer_states
                                  or self.recompute):
            raise OptionsError("plan: inference has no gradient accumulation, optimizer state or recomputation "
                               "axes; give --training to plan training")
        Optimizer(self.optimizer, self.optimizer_state_dtype)  # unknown names, bad dtypes raise OptionsError
        if self.tied_gather and not self.training:
            raise OptionsError("plan: the TiedGather patterns change only a training graph's embedding gradient; "
                               "plan training or leave them off")
        self.partials = tuple(dict.fromkeys([self.partials] if isinstance(self.partials, str) else self.partials))
        bad = [p for p in self.partials if p not in PARTIALS]
        if bad or not self.partials:
            raise OptionsError(f"plan: partials {bad[0] if bad else ''!r}: expected {' or '.join(PARTIALS)} "
                               "(or both, float,half)")
        if isinstance(self.replicas_per_process, bool) or not isinstance(self.replicas_per_process, int) \
                or self.replicas_per_process < 1:
            raise OptionsError(f"plan: replicas per process {self.replicas_per_process!r}: expected a whole "
                               "number >= 1")
        if not 0 <= self.memory_margin <= 1:
            raise OptionsError(f"plan: memory margin {self.memory_margin!r}: expected a fraction from 0 to 1")
        if self.host_data_rate is not None and not 0 < self.host_data_rate < math.inf:
            raise OptionsError(f"plan: host data rate {self.host_data_rate!r}: expected samples per second above 0")
        if self.target_throughput is not None and (isinstance(self.target_throughput, bool)
                                                   or not 0 < self.target_throughput < math.inf):
            raise OptionsError(f"plan: target throughput {self.target_throughput!r}: expected samples per second "
                               "above 0")
        if self.max_latency is not None:
            if isinstance(self.max_latency, bool) or not 0 < self.max_latency < math.inf:
                raise OptionsError(f"plan: max latency {self.max_latency!r}: expected seconds above 0")
            if self.training:
                raise OptionsError("plan: a latency limit applies to inference (a step's round trip from its "
                                   "inputs to its outputs); plan inference, or leave --max-latency out")

    def host_processes(self, replicas: int) -> int:
        """Host processes (PopRun instances) a candidate of ``replicas`` runs with: the fewest that feed
        at most :attr:`replicas_per_process` replicas each and divide the replicas evenly, as PopRun
        requires (``ceil(replicas / replicas_per_process)`` when that divides them)."""
        return next(p for p in range(-(-replicas // self.replicas_per_process), replicas + 1) if replicas % p == 0)


@dataclass(frozen=True)
class Candidate:
    """One configuration; ``split`` is the number of units (layers, blocks) on each IPU of a
    replica (empty when the model is not split). ``recompute`` None: the model's default
    (inference, or a model without checkpoints); ``optimizer_state`` None: not set.
    ``proportions``: the availableMemoryProportion of each IPU of a replica when they differ
    (a relief's); empty: ``available_memory_proportion`` on every IPU."""

    system: str
    pipeline: int
    replicas: int
    micro_batch: int
    gradient_accumulation: int
    available_memory_proportion: float
    recompute: bool | None
    optimizer_state: str | None
    device_iterations: int
    split: tuple[int, ...] = ()
    proportions: tuple[float, ...] = ()
    partials: str = "float"  # Precision.setPartialsType

    def proportion(self, ipu: int) -> float:
        """The availableMemoryProportion of IPU ``ipu`` of a replica."""
        return self.proportions[ipu] if self.proportions else self.available_memory_proportion

    def proportion_text(self) -> str:
        """``0.4``, or one value per IPU when they differ: ``0.2,0.4,0.4,0.4`` (as ``ipusim run`` takes it)."""
        return ",".join(f"{p:g}" for p in (self.proportions or (self.available_memory_proportion,)))

    @property
    def ipus(self) -> int:
        return self.pipeline * self.replicas

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.gradient_accumulation * self.replicas

    def preference(self) -> tuple:
        """Order among equals: fewer IPUs, then the axes in order (deterministic)."""
        return (self.ipus, self.system, self.pipeline, self.replicas, self.micro_batch, self.gradient_accumulation,
                self.available_memory_proportion, {None: -1, False: 0, True: 1}[self.recompute],
                OPTIMIZER_STATES.index(self.optimizer_state) if self.optimizer_state else -1,
                PARTIALS.index(self.partials), self.split, self.proportions)

    def columns(self) -> dict:
        """The candidate's CSV columns (:data:`CANDIDATE_COLUMNS`)."""
        return {"system": self.system, "ipus": self.ipus, "replicas": self.replicas, "pipeline": self.pipeline,
                "split": ",".join(map(str, self.split)), "micro_batch": self.micro_batch,
                "gradient_accumulation": self.gradient_accumulation, "global_batch": self.global_batch,
                "available_memory_proportion": (self.proportion_text() if self.proportions
                                                else self.available_memory_proportion),
                "recompute": "" if self.recompute is None else ("on" if self.recompute else "off"),
                "optimizer_state": self.optimizer_state or "", "partials": self.partials,
                "device_iterations": self.device_iterations}


def _recomputed_cycles(g: Graph, costs: dict) -> dict[str, int]:
    """Block -> cycles a micro-batch of the forward ops a pipelined backward stage recomputes for the
    block's gradient ops: the makers of the forward tensors they read, and the makers of those makers'
    inputs, back to checkpoint outputs and tensors of other blocks (restored from the stash or made
    there), as :func:`sim.schedule.stages._recompute_just_in_time` walks a stage."""
    maker = {t: op for op in g.ops if op.pass_ == "forward" for t in op.outputs}
    kept = checkpoints(op for op in g.ops if op.pass_ == "forward")
    reads: dict[str, list[str]] = {}  # block -> the tensors its gradient ops read
    for op in g.ops:
        if op.pass_ == "backward":
            reads.setdefault(op.block, []).extend(op.inputs)
    cycles: dict[str, int] = {}
    for block, todo in reads.items():
        def recomputable(t: str) -> bool:
            return t in maker and t not in kept and maker[t].block == block
        todo = [t for t in todo if recomputable(t)]
        need: set[str] = set()  # names of the ops recomputed
        while todo:
            f = maker[todo.pop()]
            if f.name not in need:
                need.add(f.name)
                todo += [t for t in f.inputs if recomputable(t)]
        cycles[block] = sum(int(costs[name].cycles) for name in need if name in costs)
    return cycles


@dataclass
class _Profile:
    """One (IPU, micro-batch, proportion, accumulation) pricing of the unsplit model."""

    forward: dict[str, int]  # block -> cycles per micro-batch
    backward: dict[str, int]
    update: dict[str, int]  # block -> cycles of the optimizer update of its weights, per step
    #: block -> cycles per micro-batch of the forward ops a pipelined backward stage runs again: those
    #: making what the block's gradient ops read, back to checkpoint outputs and other blocks' tensors
    #: (:func:`sim.schedule.stages._recompute_just_in_time`, per block)
    recompute: dict[str, int]
    #: block -> the optimizer-state tensors its update reads and writes: (name, bytes), which
    #: off-chip placement loads from and stores to streaming memory every step
    state_io: dict[str, set[tuple[str, int]]]
    #: always-live tensors: (role, bytes, blocks whose ops use it, elements)
    tensors: list[tuple[str, int, frozenset[str], int]]


def _torch_layers_note(model: Model, probe: Graph, units: list[str]) -> str:
    """What the plan splits of a PyTorch model: its layers, by the module list each comes from."""
    if not units:
        return (f"{model.torch}: no list of layers (an nn.ModuleList or nn.Sequential of two or more modules of one "
                "type), so it runs on one IPU per replica")
    from .poptorch.model_file import TorchModel
    count = TorchModel(model.torch).layers_by_list(probe.micro_batch, model.training)
    where = ", ".join(f"{n} of {prefix or 'the model'}" for prefix, n in count.items())
    return f"{model.torch}: its {len(units)} layers ({where}) are what a pipeline splits"


def balanced_split(weights: list[float], first: float, last: float, parts: int) -> tuple[int, ...]:
    """Units per part: contiguous runs of ``weights`` over ``parts`` parts minimising the
    heaviest part, where part 0 also carries ``first``, the last part ``last``, part 0 may be
    empty and the others may not. Of equal maxima, later parts take as many units as they can
    (part 0 holds the embeddings, and the deepest stash, in a pipeline)."""
    n = len(weights)
    if parts == 1:
        return (n,)
    if parts > n + 1:
        raise OptionsError(f"cannot split {n} layers over {parts} IPUs (IPU 0 may hold none, the others "
                           "at least one each)")
    prefix = [0.0]
    for w in weights:
        prefix.append(prefix[-1] + w)

    def part(i: int, a: int, b: int) -> float:  # part i holds units a..b-1
        return prefix[b] - prefix[a] + (first if i == 0 else 0.0) + (last if i == parts - 1 else 0.0)
    # best[i][k]: the lightest heaviest part placing units 0..k-1 on parts 0..i
    best = [[math.inf] * (n + 1) for _ in range(parts)]
    for k in range(n + 1):
        best[0][k] = part(0, 0, k)
    for i in range(1, parts):
        prev = best[i - 1]
        for k in range(i, n + 1):
            # prev[j] grows with j and part(i, j, k) shrinks: the optimum is where they cross
            lo, hi = i - 1, k - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if prev[mid] >= part(i, mid, k):
                    hi = mid
                else:
                    lo = mid + 1
            best[i][k] = min(max(prev[j], part(i, j, k)) for j in (lo - 1, lo) if i - 1 <= j <= k - 1)
    target = best[parts - 1][n] * (1 + 1e-12)
    counts, end = [], n
    for i in range(parts - 1, 0, -1):  # from the back: the longest run that keeps the optimum
        j = next(j for j in range(i - 1, end) if max(best[i - 1][j], part(i, j, end)) <= target)
        counts.append(end - j)
        end = j
    counts.append(end)
    return tuple(reversed(counts))


def constrained_split(weights: list[float], first: float, last: float, parts: int, part: int,
                      count: int) -> tuple[int, ...] | None:
    """As :func:`balanced_split`, with part ``part`` holding exactly ``count`` units: the
    contiguous runs minimising the heaviest part under that constraint (part 0 may be empty,
    the others may not; of equal maxima, later parts take as many units as they can). None
    when no split has ``count`` units on ``part``. Exact (a dynamic programme over the
    parts' boundaries, O(parts x units^2))."""
    n = len(weights)
    if not 0 <= part < parts:
        raise OptionsError(f"constrained_split: part {part} of {parts} parts does not exist")
    prefix = [0.0]
    for w in weights:
        prefix.append(prefix[-1] + w)

    def allowed(i: int, a: int, b: int) -> bool:
        return b - a >= (0 if i == 0 else 1) and (i != part or b - a == count)

    def load(i: int, a: int, b: int) -> float:
        return prefix[b] - prefix[a] + (first if i == 0 else 0.0) + (last if i == parts - 1 else 0.0)

    # best[i][k]: the lightest heaviest part placing units 0..k-1 on parts 0..i
    best = [[math.inf] * (n + 1) for _ in range(parts)]
    for k in range(n + 1):
        if allowed(0, 0, k):
            best[0][k] = load(0, 0, k)
    for i in range(1, parts):
        for k in range(n + 1):
            best[i][k] = min((max(best[i - 1][j], load(i, j, k)) for j in range(k + 1) if allowed(i, j, k)),
                             default=math.inf)
    if math.isinf(best[parts - 1][n]):
        return None
    target = best[parts - 1][n] * (1 + 1e-12)
    counts, end = [], n
    for i in range(parts - 1, 0, -1):  # from the back: the longest run that keeps the optimum
        j = next(j for j in range(end + 1) if allowed(i, j, end) and max(best[i - 1][j], load(i, j, end)) <= target)
        counts.append(end - j)
        end = j
    counts.append(end)
    return tuple(reversed(counts))


class Planner:
    """The candidates of ``space`` for ``model``, their bounds, and the search (:meth:`run`).

    Defaults of the axes: IPUs per replica and replicas are powers of two whose product fits
    the system (IPUs per replica at most the model's layers + 1, and 1 for a model that does
    not split); micro-batches 1, 2, 4, ... 64 (at most the global batch) and, for a global batch of one size,
    the divisors up to 64 of its share a replica (:meth:`_micro_batches_for`); gradient
    accumulation whatever makes the global batch (with a range: powers of two inside it);
    proportions 0.2, 0.4, 0.6; recomputation on and off; optimizer state on-chip, off-chip,
    rts and off-chip-rts (the sharded two with 2 replicas or more; none of them for an optimizer
    without state, e.g. sgd); float partials only (PopTorch's default; half is a precision choice
    the user makes, :attr:`Space.partials`).
    """

    def __init__(self, model: Model, space: Space):
        if model.torch is not None and model.training != space.training:  # captured as the plan runs it
            model = replace(model, training=space.training)
        self.model, self.space = model, space
        self.notes: list[str] = []
        self.systems = {name: load_system(name) for name in dict.fromkeys(space.systems)}
        self.device_iterations = space.device_iterations or (1 if space.training else 32)
        self._profiles: dict[tuple, _Profile] = {}
        probe = model.build(self._micro_batches()[0])
        #: samples per micro-batch row (``Graph.samples_per_row``): the global batch axis counts rows,
        #: the throughputs (simulated and bound) count samples
        self.samples_per_row = probe.samples_per_row
        if self.samples_per_row != 1:
            self.notes.append(f"each micro-batch row of {probe.name} carries {self.samples_per_row:g} samples "
                              "(Graph.samples_per_row, e.g. sequences per pack): the global batch counts rows, "
                              "samples/s counts samples")
        if space.partials == ("float",) and any(
                op.kind in AMP_KINDS and probe.tensors[op.inputs[0]].dtype == "float16" for op in probe.ops):
            faster = [name for name, system in self.systems.items()
                      if system.ipu.amp_fp16_flops_per_cycle > system.ipu.amp_fp16_fp32_partials_flops_per_cycle]
            self.notes.append("every configuration keeps float partials (PopTorch's default); half partials hold the "
                              "model's fp16 matmuls' and convolutions' partials in less tile memory"
                              + (f" and run them faster on {', '.join(faster)}" if faster else "")
                              + ", as Graphcore's published BERT, ViT and ResNet-50 configurations set them: "
                              "--partials float,half searches both")
        #: the model's device iterations each read what the one before made (``Graph.carries_iterations``): split
        #: over several IPUs it runs them one after another (ShardedExecution), its IPUs in turn
        self.sequential = probe.carries_iterations
        if self.sequential:
            self.notes.append(f"{probe.name} carries tensors from each device iteration to the next (a generation "
                              "loop), so split over several IPUs it runs sharded (--strategy sharded: its IPUs one "
                              "after another), not pipelined")
        if space.max_latency is not None and not (probe.inputs and probe.outputs) and not probe.carries_iterations:
            raise OptionsError(f"plan: {probe.name} streams no {'inputs' if not probe.inputs else 'outputs'}, so no "
                               "round trip from its inputs to its outputs is measured (getLatency() is 0); leave "
                               "--max-latency out")
        if space.target_throughput is not None:
            self.notes.append(f"ranked by the IPUs each configuration uses, fewest first, then by throughput, among "
                              f"those reaching --target-throughput {space.target_throughput:,.0f} samples/s")
        if not space.training and probe.carries_iterations:
            self.notes.append("latency: the time one iteration of the generation loop (a token) takes, a call's "
                              "seconds over its device iterations")
        elif not space.training:
            self.notes.append("latency: a step's average round trip (getLatency()), from the IPU's request for its "
                              "inputs to its outputs reaching the host; no published measurement checks the "
                              "simulator's (docs/reference/published-results.md 3)")
        self.units = model.units(probe)
        if model.torch is not None:
            self.notes.append(_torch_layers_note(model, probe, self.units))
        self.block_order = list(dict.fromkeys(op.block for op in probe.ops if op.block is not None))
        self._ends: dict[str, str] = {}  # block that is not a unit -> "first" or "last" IPU
        if self.units:
            two = model.build(self._micro_batches()[0], **model.placement(self.units, (0, len(self.units)), None))
            for op in two.ops:
                if op.block is not None and op.block not in self.units:
                    self._ends.setdefault(op.block, "first" if (op.ipu or 0) == 0 else "last")
        self._stages: dict[tuple[int, ...], int] = {}
        self._splits: dict[tuple, tuple[int, ...]] = {}
        #: :meth:`_split_key` -> (unit weights, first IPU's, last IPU's) the split balances
        self._weights: dict[tuple, tuple[list[float], float, float]] = {}
        self._always_live: dict[tuple, list[float]] = {}
        self.candidates = self._enumerate()
        #: each candidate's throughput bound, samples/s (:meth:`bound`)
        self.bounds = [self.bound(c) for c in self.candidates]
        #: how many of :attr:`candidates` were enumerated; the rest are reliefs the search brought in
        self.enumerated = len(self.candidates)
        self._index = {c: i for i, c in enumerate(self.candidates)}
        #: candidate index -> (relieved IPU, layers moved off it beyond the balanced split,
        #: the relieved IPU's own proportion or None) for the candidates of a relief line
        self._lineage: dict[int, tuple[int, int, float | None]] = {}
        self.relief_proportions = sorted(set(
            space.relief_proportions if space.relief_proportions is not None
            else [min(space.proportions or [0.2, 0.4, 0.6])]), reverse=True)
        lowered = [q for q in self.relief_proportions if any(q < c.available_memory_proportion for c in self.candidates)]
        if any(c.pipeline > 1 and c.split for c in self.candidates) and (space.relief or lowered):
            moved = f"up to {space.relief} layer(s) moved off its fullest IPU" if space.relief else ""
            amps = (f"that IPU's availableMemoryProportion at {', '.join(f'{q:g}' for q in lowered)} "
                    "(below its own)") if lowered else ""
            self.notes.append("a pipelined configuration that does not fit is retried with "
                              + " and with ".join(x for x in (moved, amps) if x)
                              + " (--relief, --relief-proportion)")

    # -- axes ---------------------------------------------------------------------------------

    def _micro_batches(self) -> list[int]:
        hi = self.space.global_batch[1]
        fixed = self.model.fixed_batch
        if fixed is not None:  # an ONNX model exported with a fixed batch: that is its micro-batch
            if self.space.micro_batches and fixed not in self.space.micro_batches:
                raise OptionsError(f"plan: {self.model.onnx!r} fixes its batch at {fixed}, not one of the "
                                   f"micro-batches {self.space.micro_batches}; re-export it with a dynamic batch "
                                   "axis to plan others")
            return [fixed]
        return self.space.micro_batches or [m for m in powers_of_two(MAX_MICRO_BATCH) if m <= hi]

    def _micro_batches_for(self, replicas: int) -> list[int]:
        """The micro-batches tried with ``replicas``: :meth:`_micro_batches`, and by default, for a global batch
        of one size, every divisor of its share a replica up to :data:`MAX_MICRO_BATCH` too, so that a global
        batch with odd factors (MLPerf ResNet-50's 3,520 over 16 replicas: 220 = 4 x 55) is made by the
        micro-batches that divide it (22 x 10), not only by the powers of two that do (4 x 55)."""
        base = self._micro_batches()
        lo, hi = self.space.global_batch
        if self.space.micro_batches or self.model.fixed_batch is not None or lo != hi or lo % replicas:
            return base
        share = lo // replicas
        return sorted(set(base) | {d for d in range(1, min(share, MAX_MICRO_BATCH) + 1) if share % d == 0})

    def _optimizer_states(self) -> list[str | None]:
        if not self.space.training:
            return [None]
        if Optimizer(self.space.optimizer).num_states == 0:
            if self.space.optimizer_states:
                raise OptionsError(f"plan: optimizer {self.space.optimizer!r} keeps no state, so --optimizer-state "
                                   "has nothing to place; drop it or choose an optimizer with state (adam, lamb, ...)")
            self.notes.append(f"optimizer {self.space.optimizer} keeps no state: no optimizer-state axis")
            return [None]
        return list(self.space.optimizer_states or OPTIMIZER_STATES)

    def _recompute(self) -> list[bool | None]:
        if not self.space.training or not self.model.recomputes or not self.units:
            if self.space.recompute:
                raise OptionsError(f"plan: {'inference' if not self.space.training else 'this model'} has no "
                                   "recomputation axis (only training of a zoo model with recomputation "
                                   "checkpoints: bert, gpt2, vit, swin, resnet50, resnext101; or of a --torch model "
                                   "with a list of layers)")
            return [None]
        return list(self.space.recompute or (False, True))

    def _accumulations(self, mb: int, replicas: int) -> list[int]:
        lo, hi = self.space.global_batch
        if not self.space.training:
            return [1] if lo <= mb * replicas <= hi else []
        given = self.space.gradient_accumulations
        if lo == hi:
            ga, rest = divmod(lo, mb * replicas)
            return [ga] if not rest and ga >= 1 and (given is None or ga in given) else []
        options = given or powers_of_two(hi)
        return [ga for ga in options if lo <= mb * ga * replicas <= hi]

    def _enumerate(self) -> list[Candidate]:
        sp = self.space
        out = []
        states, recomputes = self._optimizer_states(), self._recompute()
        proportions = sp.proportions or [0.2, 0.4, 0.6]
        most_stages = len(self.units) + 1 if self.units else 1
        if sp.pipelines and most_stages == 1 and any(p > 1 for p in sp.pipelines):
            raise OptionsError(f"plan: {self.model.label!r} is not split by the planner (only "
                               "bert, gpt2, vit, swin, conformer-medium, resnet50, resnext101, efficientnet and unet "
                               "are, and a --torch model with a list of layers: an nn.ModuleList or nn.Sequential of "
                               "two or more modules of one type): it runs on one IPU per replica; drop --pipeline")
        batched = False  # some (replicas, micro-batch, accumulation) makes the global batch
        tried = set()  # the replica counts tried
        for sname, system in self.systems.items():
            n = system.num_ipus
            pipelines = sp.pipelines or [p for p in powers_of_two(n) if p <= most_stages]
            for P in pipelines:
                # more IPUs per replica than the system has: one replica, which the check before
                # simulating drops with its reason (as it does replicas given that do not fit)
                replicas = sp.replicas or powers_of_two(n // P) or [1]
                tried.update(replicas)
                for R in replicas:
                    for mb in self._micro_batches_for(R):
                        for ga in self._accumulations(mb, R):
                            batched = True
                            for amp in proportions:
                                for rc, state, partials in itertools.product(recomputes, states, sp.partials):
                                    if state in SHARDED and R < 2:
                                        continue  # nothing to shard over
                                    out.append(Candidate(sname, P, R, mb, ga, float(amp), rc, state,
                                                         self.device_iterations, partials=partials))
        if not self.systems:
            raise OptionsError("plan: no system to plan for; give --system NAME[,NAME...] (see `ipusim systems`)")
        if not out and batched:
            raise OptionsError(f"plan: optimizer state {' and '.join(states)} is sharded over the replicas, and "
                               "every configuration that makes the global batch has one replica; "
                               "give --replicas 2 or more (or a larger system), or add on-chip or off-chip to "
                               "--optimizer-state")
        if not out:
            raise OptionsError(self._unreachable_batch(sorted(tried)))
        # the split of each (system, P, micro-batch, proportion), from its profile; a value given twice on an
        # axis (--micro-batch 4,4) is one configuration, simulated and ranked once
        return list(dict.fromkeys(self._with_split(c) for c in out))

    def _unreachable_batch(self, replicas: list[int]) -> str:
        """Why no configuration makes the global batch: what the micro-batches (and what fixes them), the
        ``replicas`` tried and the accumulation counts reach, and what to change."""
        lo, hi = self.space.global_batch
        mbs, given = self._micro_batches(), self.space.gradient_accumulations
        fixed = self.model.fixed_batch is not None
        per_step = sorted({mb * r for mb in mbs for r in replicas})
        if not self.space.training:
            reach = f"micro-batch x replicas reaches {per_step}"
        elif given:
            reach = f"micro-batch x replicas x accumulation reaches {sorted({n * ga for n in per_step for ga in given})}"
        else:
            reach = f"micro-batch x replicas x accumulation reaches the multiples of {per_step}"
        mb_text = (f"the micro-batch {mbs[0]} ({self.model.onnx!r} fixes its batch)" if fixed
                   else f"the micro-batches {mbs}")
        change = ["a global batch it reaches", "a range LOW-HIGH"]
        change += [] if fixed else ["--micro-batch values that reach it"]
        change += ["--gradient-accumulation counts that reach it"] if self.space.training and given else []
        change += ["--replicas counts (or a larger --system)"]
        return (f"plan: no configuration makes a global batch of {lo if lo == hi else f'{lo}-{hi}'}: with {mb_text}, "
                f"the replicas {replicas}" + (f" and the accumulation counts {given}" if given else "")
                + f", {reach}; give " + ", ".join(change[:-1]) + " or " + change[-1])

    # -- profiles, splits, bounds -------------------------------------------------------------

    @property
    def profiles_priced(self) -> int:
        """How many (IPU, micro-batch, proportion, accumulation) pricings of the model were made."""
        return len(self._profiles)

    def profile(self, system: str, mb: int, amp: float, accumulate: bool, partials: str = "float") -> _Profile:
        """Cycles per block per micro-batch and the always-live tensors of the unsplit model, its matmuls and
        convolutions at ``partials``."""
        sysobj = self.systems[system]
        key = (sysobj.ipu, mb, amp, accumulate, partials)
        if key in self._profiles:
            return self._profiles[key]
        g = self.model.build(mb, partials)
        training = self.space.training
        g = graph_to_price(g, training, Optimizer(self.space.optimizer, self.space.optimizer_state_dtype), accumulate)
        if training and accumulate and self.space.tied_gather:
            sparse_accumulate_tied_gathers(g)  # as sim.compile does with the patterns on
        assign(g, None)
        merge_norms(g, per_block=True)  # LARS's norms: a ReduceMany per block, which moves as a whole
        o = Options().setAvailableMemoryProportion({"IPU0": amp})
        o.Precision.setPartialsType(partials)
        costs = price_ops(g, sysobj, o, training, sysobj.ipu.tiles)
        sides: dict[str, dict[str, int]] = {"forward": {}, "backward": {}, "update": {}}
        users: dict[str, set[str]] = {}
        state_io: dict[str, set[tuple[str, int]]] = {}
        for op in g.ops:
            if op.pass_ == "update":
                state_io.setdefault(op.block, set()).update(
                    (t, int(g.tensors[t].nbytes)) for t in op.inputs + op.outputs if g.tensors[t].role == "state")
            if op.name in costs and op.pass_ in sides:
                side = sides[op.pass_]
                side[op.block] = side.get(op.block, 0) + int(costs[op.name].cycles)
            for t in op.inputs + op.outputs:
                if g.tensors[t].role in ("weight", "constant", "state", "accumulator"):
                    users.setdefault(t, set()).add(op.block)
        tensors = [(g.tensors[t].role, int(g.tensors[t].nbytes), frozenset(blocks), g.tensors[t].numel)
                   for t, blocks in users.items()]
        self._profiles[key] = _Profile(sides["forward"], sides["backward"], sides["update"],
                                       _recomputed_cycles(g, costs) if training else {}, state_io, tensors)
        return self._profiles[key]

    def ipu_of_blocks(self, split: tuple[int, ...]) -> dict[str, int]:
        """Block -> IPU within a replica for ``split`` (every block on IPU 0 when unsplit)."""
        if len(split) <= 1:
            return {b: 0 for b in self.block_order}
        where: dict[str, int] = {}
        start = 0
        for ipu, count in enumerate(split):
            for u in self.units[start:start + count]:
                where[u] = ipu
            start += count
        for b in self.block_order:
            if b not in where:
                where[b] = 0 if self._ends.get(b, "first") == "first" else len(split) - 1
        return where

    def _split_key(self, c: Candidate) -> tuple:
        """What a candidate's balanced split depends on: its IPU, pipeline, micro-batch, proportion and partials."""
        return self.systems[c.system].ipu, c.pipeline, c.micro_batch, c.available_memory_proportion, c.partials

    def _with_split(self, c: Candidate) -> Candidate:
        if c.pipeline == 1 or not self.units:
            return replace(c, split=(len(self.units),) if self.units else ())
        key = self._split_key(c)
        if key not in self._splits:
            prof = self.profile(c.system, c.micro_batch, c.available_memory_proportion, False, c.partials)
            # a stage's time: forward + backward, plus in pipelined training the forward ops its
            # backward stage recomputes from the stash; the blocks after the last layer (a head placed
            # back on IPU 0) run in the final forward stage, merged with its backward, which keeps its
            # activations (PopART's Pipeline::setFinalFwdStageRecomputation: past its last checkpoint)
            last = max(self.block_order.index(u) for u in self.units)
            weight = {b: prof.forward.get(b, 0) + prof.backward.get(b, 0)
                      + (prof.recompute.get(b, 0) if i <= last else 0) for i, b in enumerate(self.block_order)}
            ends = {"first": 0.0, "last": 0.0}
            for b in self.block_order:
                if b not in self.units:
                    ends[self._ends.get(b, "first")] += weight[b]
            self._weights[key] = ([weight[u] for u in self.units], ends["first"], ends["last"])
            self._splits[key] = balanced_split([weight[u] for u in self.units], ends["first"], ends["last"],
                                               c.pipeline) if c.pipeline <= len(self.units) + 1 else ()
        return replace(c, split=self._splits[key])

    def bound(self, c: Candidate) -> float:
        """Samples/s no simulation of ``c`` can exceed. Per weight update an IPU runs, one op
        after another, the forward and backward ops of its layers for each of the
        ``accumulation`` micro-batches and the optimizer ops of its weights once (1/R of them
        with rts); so a step takes at least the busiest IPU's total, and samples/s is at most
        micro-batch x samples per row x accumulation x replicas x clock over it (over all the IPUs' totals
        for a model run sharded, :attr:`sequential`). (Inference: forward ops only.) Each IPU's ops are
        priced at that IPU's proportion. With a host data rate, samples/s is also at most the rate times
        the host processes."""
        accumulate = c.gradient_accumulation > 1
        prof = self.profile(c.system, c.micro_batch, c.available_memory_proportion, accumulate, c.partials)
        where = self.ipu_of_blocks(c.split)
        busy = [0.0] * max(1, len(c.split))
        own = [prof if c.proportion(i) == c.available_memory_proportion
               else self.profile(c.system, c.micro_batch, c.proportion(i), accumulate, c.partials)
               for i in range(len(busy))]
        ga = c.gradient_accumulation
        share = c.replicas if c.optimizer_state in SHARDED else 1
        for side, times in (("forward", ga), ("backward", ga), ("update", 1 / share)):
            for b in getattr(prof, side):
                ipu = where.get(b, 0)
                busy[ipu] += getattr(own[ipu], side)[b] * times
        system = self.systems[c.system]
        clock = system.ipu.clock_hz
        if c.optimizer_state and c.optimizer_state.startswith("off-chip"):
            # loaded and stored on the IPU's own lane every step (its shard with off-chip-rts)
            moved: list[set] = [set() for _ in busy]
            for b, io in prof.state_io.items():
                moved[where.get(b, 0)] |= io
            for ipu, io in enumerate(moved):
                busy[ipu] += sum(n for _, n in io) / share / system.streaming_memory.bytes_per_s_per_ipu * clock
        busiest = sum(busy) if self.sequential else max(busy)  # sharded: the IPUs run one after another
        bound = c.micro_batch * self.samples_per_row * ga * c.replicas * clock / busiest if busiest else math.inf
        if self.space.host_data_rate:  # each host process's pipeline feeds replicas_per_process replicas
            bound = min(bound, self.space.host_data_rate * self.space.host_processes(c.replicas))
        return bound

    def latency_bound(self, c: Candidate) -> float:
        """Seconds no simulation of ``c`` can take less than for a step's round trip (``getLatency()``): one
        micro-batch of a replica passes the forward ops of every IPU of it, one IPU after another (a pipeline's
        stages, or a sharded model's IPUs), each IPU's ops one after another, between the IPU's request for
        its inputs and its outputs leaving for the host; so at least the sum over the replica's IPUs of their
        op cycles for one micro-batch, each priced at that IPU's proportion, over the clock."""
        where = self.ipu_of_blocks(c.split)
        cycles = 0
        for ipu in range(max(1, len(c.split))):
            prof = self.profile(c.system, c.micro_batch, c.proportion(ipu), c.gradient_accumulation > 1, c.partials)
            cycles += sum(n for b, n in prof.forward.items() if where.get(b, 0) == ipu)
        return cycles / self.systems[c.system].ipu.clock_hz

    def over_latency(self, seconds: float) -> str | None:
        """Why a configuration whose step's round trip takes ``seconds`` (NaN: not measured) misses the plan's
        latency limit; None if it meets it (or there is no limit)."""
        limit = self.space.max_latency
        if limit is None or seconds <= limit * (1 + _SLACK):
            return None
        if math.isnan(seconds):
            return "its latency was not measured (no host transfers to time), so it cannot be held to --max-latency"
        return (f"its step's round trip takes {seconds * 1e3:,.3f} ms on average (getLatency()), above --max-latency "
                f"{limit * 1e3:g} ms")

    def always_live_per_tile(self, c: Candidate) -> list[float]:
        """Per IPU of a replica: bytes per tile that are live all the time at the least, the
        program memory (code, vertex state, stacks) plus the on-chip weights, constants, optimizer state (1/R with rts
        for the tensors PopART shards, none off chip) and accumulators, spread evenly over the tiles."""
        key = (c.system, c.micro_batch, c.gradient_accumulation > 1, c.split, c.optimizer_state,
               c.replicas if c.optimizer_state == "rts" else 0)
        if key not in self._always_live:
            self._always_live[key] = self._always_live_per_tile(c)
        return list(self._always_live[key])

    def _always_live_per_tile(self, c: Candidate) -> list[float]:
        sysobj = self.systems[c.system]
        prof = self.profile(c.system, c.micro_batch, c.available_memory_proportion, c.gradient_accumulation > 1,
                            c.partials)  # its always-live tensors do not depend on the partials
        where = self.ipu_of_blocks(c.split)
        per_ipu = [0.0] * max(1, len(c.split))
        sharded = TensorLocationSettings().useReplicatedTensorSharding(True).sharded  # PopART's threshold
        for role, nbytes, blocks, numel in prof.tensors:
            if role == "state":
                if c.optimizer_state and c.optimizer_state.startswith("off-chip"):
                    continue
                if c.optimizer_state == "rts" and sharded(numel):
                    nbytes = nbytes / c.replicas
            for ipu in {where.get(b, 0) for b in blocks}:
                per_ipu[ipu] += nbytes
        return [sysobj.ipu.reserved_bytes_per_tile + b / sysobj.ipu.tiles for b in per_ipu]

    def forward_stages(self, split: tuple[int, ...]) -> int:
        """Forward pipeline stages of ``split`` (a head placed back on IPU 0 is a stage of its own)."""
        if len(split) <= 1:
            return 1
        if split not in self._stages:
            g = self.model.build(self._micro_batches()[0], **self.model.placement(self.units, split, None))
            self._stages[split] = len({op.stage for op in g.ops if op.pass_ == "forward"})
        return self._stages[split]

    def precheck(self, c: Candidate, structural_only: bool = False) -> tuple[str, str] | None:
        """(status, reason) of a candidate dropped without simulating it, or None.
        ``structural_only``: only what cannot even be written as a command (too many IPUs,
        a split that does not exist)."""
        system = self.systems[c.system]
        if c.ipus > system.num_ipus:
            return "invalid", (f"needs {c.pipeline} x {c.replicas} = {c.ipus} IPUs; {c.system} has "
                               f"{system.num_ipus}")
        if c.pipeline > 1 and not c.split:
            return "invalid", f"cannot split {len(self.units)} layers over {c.pipeline} IPUs"
        if structural_only:
            return None
        if c.ipus & (c.ipus - 1):  # the run would refuse it (sim.hardware.topology.check_fits): no simulation
            return "invalid", (f"needs {c.pipeline} x {c.replicas} = {c.ipus} IPUs, which is not a power of two "
                               "(Poplar attaches power-of-two partitions); give --pipeline and --replicas whose "
                               "product is one")
        F = self.forward_stages(c.split)
        if F > 1 and self.space.training and c.gradient_accumulation < 2 * F - 1:
            return "invalid", (f"gradient accumulation {c.gradient_accumulation} is below the pipeline's "
                               f"{2 * F - 1} stages (2 x {F} forward stages - 1)")
        if F > 1 and not self.space.training and c.device_iterations < F and not self.sequential:
            return "invalid", (f"device iterations {c.device_iterations} are below the inference pipeline's "
                               f"{F} stages; raise --device-iterations")
        tile = system.ipu.sram_bytes_per_tile
        margin = self.space.memory_margin
        for ipu, b in enumerate(self.always_live_per_tile(c)):
            if b * (1 + margin) > tile:
                kept = (f" (with the memory margin of {margin * 100:g}%: {math.ceil(b * (1 + margin)):,})"
                        if margin else "")
                return "oom", (f"out of memory on IPU {ipu} (not simulated): its weights, optimizer state, "
                               f"accumulators and fixed control code alone fill {math.ceil(b):,} bytes of an average "
                               f"tile{kept}, which has {tile:,}; short by at least "
                               f"{math.ceil(b * (1 + margin) - tile):,} bytes per tile")
        if self.space.max_latency is not None:
            least = self.latency_bound(c)
            if least > self.space.max_latency * (1 + _SLACK):
                return "latency", (f"(not simulated) a step's round trip takes at least {least * 1e3:,.3f} ms (one "
                                   "micro-batch's op cycles on each IPU of a replica, one IPU after another), above "
                                   f"--max-latency {self.space.max_latency * 1e3:g} ms")
        target = self.space.target_throughput
        most = self.bound(c) if target is not None else math.inf
        if target is not None and most * (1 + _SLACK) < target:
            return "slow", (f"(not simulated) at most {most:,.0f} samples/s (the busiest IPU's op cycles), "
                            f"below --target-throughput {target:,.0f}")
        return None

    def rank_key(self, c: Candidate, samples_per_second: float) -> tuple:
        """How a configuration of ``c`` at ``samples_per_second`` ranks, smaller first: the fastest first, or,
        with a target throughput, the fewest IPUs first, then the fastest."""
        return (c.ipus, -samples_per_second) if self.space.target_throughput is not None else (-samples_per_second,)

    def memory_key(self, c: Candidate) -> tuple:
        """What tile memory depends on: not the replicas (but with rts) nor the accumulation
        count (only whether there is accumulation), nor device iterations."""
        return (c.system, c.split, c.micro_batch, c.available_memory_proportion, c.proportions, c.recompute,
                c.optimizer_state, c.partials, c.gradient_accumulation > 1,
                c.replicas if c.optimizer_state in SHARDED else 0)

    def reliefs(self, i: int, reason: str | None = None) -> list[int]:
        """Bring in the relief candidates of candidate ``i``, which does not fit (the module's
        step 6): one more layer off the relieved IPU (up to :attr:`Space.relief` beyond the
        balanced split), and, on a line that has not lowered it yet, each relief proportion
        below the candidate's on the relieved IPU alone. Appends them to :attr:`candidates` and
        :attr:`bounds`; returns the indices of those new to the search. None for a candidate
        without a pipeline, when ``reason`` (its out-of-memory reason) names an IPU short of
        memory other than the relieved one (relieving that IPU would not make it fit), or for a
        relief whose bound exceeds ``i``'s."""
        c = self.candidates[i]
        if c.pipeline < 2 or not c.split or not self.units:
            return []
        if i in self._lineage:
            ipu, moved, own = self._lineage[i]
        else:  # an enumerated candidate: balanced, one proportion; relieve its fullest IPU
            live = self.always_live_per_tile(c)
            ipu, moved, own = live.index(max(live)), 0, None
        if reason is not None and short_ipus(reason) - {ipu}:
            return []
        key = self._split_key(c)
        balanced = self._splits[key]
        children: list[tuple[Candidate, tuple[int, int, float | None]]] = []
        keep = balanced[ipu] - moved - 1  # units the relieved IPU keeps
        if moved < self.space.relief and keep >= (0 if ipu == 0 else 1):
            split = constrained_split(*self._weights[key], c.pipeline, ipu, keep)
            if split is not None:
                children.append((replace(c, split=split), (ipu, moved + 1, own)))
        if own is None:
            for q in self.relief_proportions:
                if q < c.available_memory_proportion:
                    amps = tuple(q if k == ipu else c.available_memory_proportion for k in range(c.pipeline))
                    children.append((replace(c, proportions=amps), (ipu, moved, q)))
        new = []
        for child, lineage in children:
            if child in self._index:
                continue
            bound = self.bound(child)
            if bound > self.bounds[i] * (1 + _SLACK):
                continue  # not a relief: it could outrank its parent, so pruning the parent would not prune it
            self._index[child] = len(self.candidates)
            self._lineage[len(self.candidates)] = lineage
            new.append(len(self.candidates))
            self.candidates.append(child)
            self.bounds.append(bound)
        return new

    # -- the search ---------------------------------------------------------------------------

    def run(self, evaluate: Callable[[dict[int, Candidate]], Iterator[tuple[int, dict]]], *, top: int = 10,
            prune: bool = True, batch: int = 16,
            known: dict[int, dict] | Callable[[int], dict | None] | None = None,
            on_row: Callable[[int, dict], None] | None = None) -> list[dict]:
        """Decide every candidate, and the reliefs (:meth:`reliefs`) of those that do not fit;
        returns their rows (:data:`CANDIDATE_COLUMNS` + :data:`RESULT_COLUMNS`), in candidate
        order (the enumerated ones, then the reliefs in the order they were brought in).

        ``evaluate`` simulates candidates ``{index: Candidate}`` and yields ``(index, row)``
        with ``status`` ok, oom or invalid, ``reason`` and, when ok, ``samples_per_second``,
        ``seconds``, ``latency_avg_s``, ``cycle_count``, ``peak_tile_bytes``, ``stage_balance`` (an ok row over
        :attr:`Space.max_latency` becomes a ``latency`` row, one below :attr:`Space.target_throughput` a ``slow``
        row; neither ranks nor sets the pruning threshold, the ``top``-th best rank key, :meth:`rank_key`).
        ``known`` rows (by index, or a function of the index; e.g. read back by ``--resume``) stand in for the
        results of the candidates they belong to when the search comes to simulate them, so a resumed search takes
        the same decisions as one never stopped. ``on_row`` sees each row as it
        is decided. With ``prune`` False every candidate that can be written as a command is
        simulated (an exhaustive search: no bound, no inference, no check before simulating).
        """
        if top < 1 or batch < 1:
            raise OptionsError(f"plan: top ({top}) and batch ({batch}) must be >= 1")
        for i in range(self.enumerated, len(self.candidates)):  # a search of its own: no reliefs of an earlier one
            del self._index[self.candidates[i]]
        del self.candidates[self.enumerated:], self.bounds[self.enumerated:]
        self._lineage.clear()
        cands, bounds = self.candidates, self.bounds  # both grow as reliefs come in
        rows: dict[int, dict] = {}
        best: list[tuple] = []  # the `top` best rank keys, negated: a min-heap whose first is the worst of them
        oom: dict[tuple, str] = {}  # memory key -> the reason it does not fit
        rts_oom: dict[tuple, tuple[int, str]] = {}  # memory key without R -> (most replicas short, reason)
        recall = known if callable(known) else (known or {}).get
        # the undecided, the best rank their bound allows first (ties: the candidates' preference, then their order)
        queue = [(self.rank_key(cands[i], bounds[i]), cands[i].preference(), i) for i in range(len(cands))]
        heapq.heapify(queue)

        def threshold() -> tuple | None:
            """The rank key of the `top`-th best configuration found (None: fewer found)."""
            return tuple(-x for x in best[0]) if len(best) >= top else None

        def out_of_reach(i: int) -> str | None:
            """Why candidate ``i`` cannot enter the `top` best found, its bound's rank key against the `top`-th's;
            None if it can."""
            kth = threshold()
            if kth is None:
                return None
            head = self.rank_key(cands[i], bounds[i])[:-1]  # (IPUs,) with a target throughput, else ()
            if head != kth[:-1]:
                if head < kth[:-1]:
                    return None
                return (f"uses {cands[i].ipus} IPUs, more than the {_ordinal(top)} best configuration reaching "
                        f"--target-throughput, {kth[0]}")
            if bounds[i] * (1 + _SLACK) >= -kth[-1]:
                return None
            return (f"at most {bounds[i]:,.0f} samples/s (the busiest IPU's op cycles), below the "
                    f"{_ordinal(top)} best simulated, {-kth[-1]:,.0f}")

        def decide(i: int, result: dict) -> None:
            row = {**cands[i].columns(), **{k: result.get(k, "") for k in RESULT_COLUMNS}}
            row["bound_samples_per_second"] = bounds[i]
            target = self.space.target_throughput
            if row["status"] == "ok":
                missed = self.over_latency(float(row["latency_avg_s"] if row["latency_avg_s"] != "" else "nan"))
                if missed:
                    row.update(status="latency", reason=missed)
                elif target is not None and float(row["samples_per_second"]) < target:
                    row.update(status="slow", reason=f"{float(row['samples_per_second']):,.0f} samples/s, below "
                               f"--target-throughput {target:,.0f}")
            rows[i] = row
            if row["status"] == "ok":
                heapq.heappush(best, tuple(-x for x in self.rank_key(cands[i], float(row["samples_per_second"]))))
                if len(best) > top:
                    heapq.heappop(best)
            elif row["status"] == "oom":
                for j in self.reliefs(i, row["reason"]):
                    heapq.heappush(queue, (self.rank_key(cands[j], bounds[j]), cands[j].preference(), j))
                key = self.memory_key(cands[i])
                oom.setdefault(key, row["reason"])
                if cands[i].optimizer_state == "rts":
                    base = key[:-1]
                    if rts_oom.get(base, (0, ""))[0] < cands[i].replicas:
                        rts_oom[base] = (cands[i].replicas, row["reason"])
            if on_row is not None:
                on_row(i, row)

        def inferred(c: Candidate) -> str | None:
            key = self.memory_key(c)
            if key in oom:
                return oom[key] + (" [inferred, not simulated: the figures are those of a simulated configuration "
                                   "with the same split, micro-batch, proportions, recomputation and optimizer "
                                   "state, which tile memory depends on; its replicas or accumulation differ]")
            if c.optimizer_state == "rts" and rts_oom.get(key[:-1], (0, ""))[0] >= c.replicas:
                most, reason = rts_oom[key[:-1]]
                return (reason + f" [inferred, not simulated: the figures are those of the optimizer state sharded "
                        f"over {most} replicas, which does not fit, so over fewer it does not either]")
            return None

        while queue:
            wave: dict[int, Candidate] = {}
            pending: set[tuple] = set()
            deferred = []
            while queue and len(wave) < batch:
                entry = heapq.heappop(queue)
                i = entry[2]
                c = cands[i]
                dropped = self.precheck(c, structural_only=not prune)
                if dropped is None and prune:
                    why = inferred(c)
                    dropped = ("oom", why) if why else None
                if dropped is not None:
                    decide(i, {"status": dropped[0], "reason": dropped[1]})
                    continue
                beyond = out_of_reach(i) if prune else None
                if beyond:
                    decide(i, {"status": "pruned", "reason": beyond})
                    continue
                key = self.memory_key(c)
                base = key[:-1] if c.optimizer_state == "rts" else key
                if prune and base in pending:
                    deferred.append(entry)  # after the one simulated now: it may show this does not fit
                    continue
                pending.add(base)
                wave[i] = c
            for entry in deferred:
                heapq.heappush(queue, entry)
            replay = {i: row for i in sorted(wave) if (row := recall(i)) is not None}
            for i, row in replay.items():  # simulated before: replay its result
                decide(i, row)
            fresh = {i: c for i, c in wave.items() if i not in replay}
            if fresh:
                for i, result in evaluate(fresh):
                    decide(i, result)
        return [rows[i] for i in range(len(cands))]


def ranking(rows: list[dict], candidates: list[Candidate] | None = None, by_ipus: bool = False) -> list[int]:
    """Indices of the rows that fit (status ok), fastest first (``by_ipus``, a plan with a target
    throughput: the fewest IPUs first, then the fastest); ties: fewer IPUs, then, given the
    rows' ``candidates``, their :meth:`Candidate.preference` (which does not depend on the order
    in which a search brought reliefs in, so an interrupted and resumed plan ranks ties as one
    never stopped), then the rows' order."""
    ok = [n for n, r in enumerate(rows) if r["status"] == "ok"]

    def key(n: int) -> tuple:
        speed, ipus = -float(rows[n]["samples_per_second"]), int(rows[n]["ipus"])
        return ((ipus, speed) if by_ipus else (speed, ipus)) + (candidates[n].preference() if candidates else (), n)
    return sorted(ok, key=key)
