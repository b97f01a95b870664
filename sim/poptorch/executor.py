"""``poptorch.PoplarExecutor``, ``inferenceModel`` and ``trainingModel`` on the simulator.

A call ``model(*inputs)`` does what PopTorch's does, in two halves:

* **the simulation**: the first call captures the model on one micro-batch
  (:mod:`sim.poptorch._capture`), picks the system (:mod:`sim.poptorch._system`) and compiles
  it with :func:`sim.compile`; every call then simulates the whole call (all device iterations,
  accumulation steps and replicas) with :func:`sim.run_executable`. That run feeds
  ``cycleCount()``, ``getPerfCounters()`` and the four latencies.
* **the numbers**: the real outputs are computed on the CPU by running the module on each
  micro-batch of the input, in PopTorch's order (device iteration, then accumulation step, then
  replica), and combined per the output mode with PopTorch's shapes. A training model's loss
  drives a real optimizer step every ``gradientAccumulation`` micro-batches (gradients summed
  over the step's micro-batches and replicas, and divided by their number for the default
  ``ReductionType.Mean``). An inference model runs with the module in eval mode.
"""

from __future__ import annotations

import copy
import logging

import torch
from torch.utils import _pytree as pytree

from .. import compile as sim_compile
from ..compiler.executable import check_overlap
from .. import run_executable
from ..errors import OptionsError, UnsupportedOpError
from ..strategy import PipelinedExecution, ShardedExecution, assign
from . import _system, enums
from . import optim as _optim
from ._capture import Captured, capture
from ._errors import NO_EXECUTABLE, error
from .options import Options

logger = logging.getLogger("poptorch")

_DISABLED = "Cycle count logging is disabled. Please set option logCycleCount to True to enable."
_NOT_RUN = "Please run the model at least once before obtaining cycle count."


class PoplarExecutor:
    """The wrapper ``inferenceModel``/``trainingModel`` return; call it like the model."""

    def __init__(self, model: torch.nn.Module, options: Options | None, training: bool,
                 optimizer=None, user_model: torch.nn.Module | None = None):
        if options is not None:
            if not isinstance(options, Options):
                raise error(f"Invalid type: 'options' is of type {type(options)} (Expected poptorch.Options)")
            options._freeze()
            options = options.clone()
        else:
            options = Options()
        self._user_model = user_model or model
        self._model = model
        self._training = training
        if training:
            if options.defaultOutputMode():
                options.outputMode(enums.OutputMode.Final)
            if optimizer is None:
                optimizer = _optim.SGD(self._user_model.parameters(), lr=0.01)
        else:
            if options.defaultOutputMode():
                options.outputMode(enums.OutputMode.All)
            if options.Training.gradient_accumulation != 1:
                msg = ("You must set poptorch.Options().Training.gradientAccumulation to 1 or leave it "
                       "as its default value (1) when running a poptorch.inferenceModel().")
                strategy = options.execution_strategy
                if isinstance(strategy, PipelinedExecution) and not isinstance(strategy, ShardedExecution):
                    msg += (" Use poptorch.Options().deviceIterations to process a sufficient number "
                            "of batches each run for pipelined execution instead.")
                raise error(msg)
            if optimizer is not None:
                raise AssertionError("Optimizer should be None for inference")
        options._freeze()
        self._options = options
        self._optimizer = optimizer
        self._sim_optimizer = _optim.sim_optimizer(optimizer) if training else "sgd"
        self._executable = None
        self._captured: Captured | None = None
        self._example = None  # (args, kwargs) of the micro-batch the model was compiled for
        self._shapes = None
        self._run = None
        self._is_attached = False
        self._system_reason = ""

    # --- the model and its options ---------------------------------------------------------
    @property
    def model(self) -> torch.nn.Module:
        """The wrapped torch model."""
        return self._user_model

    @property
    def options(self) -> Options:
        """The (frozen) options of this model."""
        return self._options

    @property
    def simulation(self):
        """The :class:`sim.Run` of the latest call (None before the first): the trace, the
        breakdown, memory and the summary the simulator adds to PopTorch's numbers."""
        return self._run

    @property
    def executable(self):
        """The :class:`sim.Executable` the model was compiled to (None before compiling)."""
        return self._executable

    @property
    def training(self) -> bool:
        return self._training

    def __getattr__(self, attr):
        if attr.startswith("__") or attr in ("_user_model", "_model"):
            raise AttributeError(attr)
        return getattr(self._user_model, attr)

    def __repr__(self) -> str:
        return repr(self._user_model)

    def load_state_dict(self, state_dict, strict: bool = True):
        """Load weights into the wrapped model (the simulated IPU uses them from the next call)."""
        return self._user_model.load_state_dict(state_dict, strict)

    # --- batching ---------------------------------------------------------------------------
    def _factors(self):
        o = self._options
        groups = o.replication_factor // o.input_group_size
        return o.device_iterations, o.Training.gradient_accumulation, o.replication_factor, groups

    def _split(self, args, kwargs):
        """(flat leaves, spec, tensor positions, number of micro-batch chunks) of a call."""
        di, ga, _, groups = self._factors()
        chunks = di * groups * ga
        leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
        positions = []
        for i, leaf in enumerate(leaves):
            if not isinstance(leaf, torch.Tensor):
                continue
            if leaf.requires_grad:
                leaves[i] = leaf = leaf.detach()
            b = 1 if leaf.dim() == 0 else leaf.shape[0]
            if b % chunks:
                o = self._options
                raise error(
                    f"Invalid batch dimension: In the input {leaf.shape}, the batch dimension ({b}) must "
                    f"be a multiple of Options.deviceIterations({o.device_iterations}) * "
                    f"(Options.replicationFactor({o.replication_factor}) / "
                    f"Options.inputReplicaGrouping.input_group_size({o.input_group_size})) * "
                    f"Options.Training.gradientAccumulation({o.Training.gradient_accumulation}) = {chunks} "
                    "because it is used to calculate the batch size which will be executed on the device "
                    "in any given iteration. For a full explanation see the batching semantics page of "
                    "the documentation.")
            positions.append(i)
        return leaves, spec, positions, chunks

    @staticmethod
    def _chunk(leaves, spec, positions, chunks, c):
        filled = list(leaves)
        for i in positions:
            t = leaves[i]
            if t.dim() == 0:
                continue
            mb = t.shape[0] // chunks
            filled[i] = t.narrow(0, c * mb, mb)
        return pytree.tree_unflatten(filled, spec)

    # --- compilation --------------------------------------------------------------------------
    def compile(self, *args, **kwargs) -> None:
        """Capture and compile the model for inputs like ``args``/``kwargs`` (without running)."""
        leaves, spec, positions, chunks = self._split(args, kwargs)
        if self._executable is not None:
            logger.warning("Call to compile() ignored: the executable is already compiled")
            return
        self._compile(*self._chunk(leaves, spec, positions, chunks, 0))

    def _compile(self, ex_args, ex_kwargs) -> None:
        if self._training:
            captured = capture(self._model, ex_args, ex_kwargs, type(self._user_model).__name__)
        else:  # captured as it runs: in eval mode
            with _eval_mode(self._user_model):
                captured = capture(self._model, ex_args, ex_kwargs, type(self._user_model).__name__)
        g = captured.graph
        o = self._options
        if self._training and g.loss is None:
            raise error("The model returned no loss the simulator can find: compute it with a torch "
                        "loss (CrossEntropyLoss, NLLLoss, MSELoss, L1Loss or their functional forms) "
                        "or mark it with poptorch.identity_loss")
        self._check_overlapped_io(g)
        placed = copy.deepcopy(g)
        assign(placed, o.execution_strategy)
        ipus_per_replica = max((op.ipu or 0) for op in placed.ops) + 1 if placed.ops else 1
        local = ipus_per_replica * o.replication_factor
        rounded = _system.round_num_ipus(local)
        if rounded != local and not o.auto_round_num_ipus:
            raise error(
                f"The model specifies the use of {local} IPUs, however PopTorch must reserve a minimum "
                f"of {rounded} in order to allow the model to run, because PopTorch must reserve a power "
                "of 2 or maximum of 64 IPUs per process. Please reconfigure your model to use a "
                "different number of IPUs or set poptorch.Options().autoRoundNumIPUs(True).")
        system, why = _system.choose(o, rounded * o.Distributed.numProcesses)
        try:
            exe = sim_compile(g, system, o, self._training, self._sim_optimizer)
        except UnsupportedOpError as e:
            if self._training and "_grad" in str(e):
                raise UnsupportedOpError(
                    f"{e} — the cost model has no price for the backward pass of this op, so the "
                    "model can be simulated for inference but not trained yet") from None
            raise
        notes = [f"system {system.name}: {why}", f"graph captured with {captured.method}"]
        notes += captured.notes
        exe.notes[:0] = notes
        self._system_reason = why
        self._captured = captured
        self._executable = exe
        self._example = (ex_args, ex_kwargs)
        self._shapes = _shapes_of(ex_args, ex_kwargs)
        self._is_attached = o.connection_type != enums.ConnectionType.Never
        logger.debug("Compiled %s for %s (%s)", captured.graph, system.name, why)

    def _check_overlapped_io(self, g) -> None:
        try:
            check_overlap(self._options, g, self._training)
        except OptionsError as e:
            raise error(str(e)) from None

    def isCompiled(self) -> bool:
        """Has the model been compiled (and not destroyed)?"""
        return self._executable is not None

    def destroy(self) -> None:
        """Release the (simulated) IPUs and the executable."""
        if not self.isCompiled():
            return
        self._executable = None
        self._run = None
        self._is_attached = False

    # --- calling -----------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if self._options.connection_type == enums.ConnectionType.Never:
            raise AssertionError("Trying to run a model on an offline device (ConnectionType.Never): "
                                 "use model.compile(inputs) instead of model(inputs)")
        leaves, spec, positions, chunks = self._split(args, kwargs)
        if not self.isCompiled():
            self._compile(*self._chunk(leaves, spec, positions, chunks, 0))
        else:
            shapes = _shapes_of(*self._chunk(leaves, spec, positions, chunks, 0))
            if shapes != self._shapes:
                raise error(f"The model was compiled for inputs of shapes {self._shapes} (per "
                            f"micro-batch) but was called with {shapes}: call it with the same "
                            "shapes, or destroy() it and call it again to recompile")
        if not self._is_attached:
            self.attachToDevice()
        self._run = run_executable(self._executable)
        return self._run_on_cpu(leaves, spec, positions, chunks)

    def _run_on_cpu(self, leaves, spec, positions, chunks):
        di, ga, replicas, groups = self._factors()
        o = self._options
        group_size = o.input_group_size
        orthogonal = o.input_group_type == enums.CommGroupType.Orthogonal

        def group_of(r):
            return r % groups if orthogonal else r // group_size

        def call(step, acc, r):
            a, k = self._chunk(leaves, spec, positions, chunks, (step * ga + acc) * groups + group_of(r))
            return self._model(*a, **k)

        results = {}  # (step, acc, replica) -> the model's output
        if self._training:
            params = [p for g in self._optimizer.param_groups for p in g["params"]]
            mean = o.Training.reduction_type == enums.ReductionType.Mean
            for step in range(di):
                self._optimizer.zero_grad(set_to_none=True)
                for acc in range(ga):
                    for r in range(replicas):
                        out = call(step, acc, r)
                        loss = self._loss_of(out)
                        (loss if loss.dim() == 0 else loss.sum()).backward()
                        results[step, acc, r] = pytree.tree_map(_detached, out)
                if mean and ga * replicas > 1:
                    for p in params:
                        if p.grad is not None:
                            p.grad.div_(ga * replicas)
                self._optimizer.step()
            self._optimizer.zero_grad(set_to_none=True)
        else:
            with torch.no_grad(), _eval_mode(self._user_model):
                for step in range(di):
                    per_group = {}
                    for r in range(replicas):
                        gidx = group_of(r)
                        if gidx not in per_group:
                            per_group[gidx] = call(step, 0, r)
                        results[step, 0, r] = per_group[gidx]
        return self._combine(results, di, ga, replicas)

    def _loss_of(self, out) -> torch.Tensor:
        if isinstance(out, torch.Tensor):
            return out
        flat = [x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]
        index = self._captured.loss_output if self._captured else None
        if index is not None and index < len(flat):
            return flat[index]
        scalars = [x for x in flat if x.dim() == 0 and x.requires_grad]
        if scalars:
            return scalars[-1]
        raise error("The model must return its loss for a poptorch.trainingModel (as its output, or "
                    "one of its outputs)")

    def _combine(self, results, di, ga, replicas):
        mode = self._options.resolved_output_mode(self._training)
        if mode == enums.OutputMode.All:
            keys = [(s, a, r) for s in range(di) for a in range(ga) for r in range(replicas)]
        elif mode == enums.OutputMode.EveryN:
            n = self._options.output_return_period
            keys = [(s, a, r) for s in range(di) if (s + 1) % n == 0 for a in range(ga) for r in range(replicas)]
        elif mode == enums.OutputMode.Final:
            keys = [(di - 1, ga - 1, r) for r in range(replicas)]
        else:  # Sum: over steps and accumulation, per replica
            keys = None
        template = results[di - 1, ga - 1, replicas - 1]
        t_leaves, t_spec = pytree.tree_flatten(template)
        if keys is not None:
            per_leaf = [[pytree.tree_leaves(results[k])[i] for k in keys] for i in range(len(t_leaves))]
        else:
            per_leaf = []
            for i in range(len(t_leaves)):
                sums = []
                for r in range(replicas):
                    parts = [pytree.tree_leaves(results[s, a, r])[i] for s in range(di) for a in range(ga)]
                    sums.append(_sum(parts))
                per_leaf.append(sums)
        out = [_join(parts) if isinstance(leaf, torch.Tensor) else leaf
               for leaf, parts in zip(t_leaves, per_leaf)]
        return pytree.tree_unflatten(out, t_spec)

    # --- PoplarExecutor's numbers --------------------------------------------------------------
    def cycleCount(self) -> int:
        """Simulated cycles of the latest call (replica 0), as ``logCycleCount`` reports them."""
        if not self._options._Popart.options.get("instrumentWithHardwareCycleCounter"):
            raise error(_DISABLED)
        if not self.isCompiled() or self._run is None:
            raise error(_NOT_RUN)
        return self._run.cycle_count

    def getPerfCounters(self) -> dict:
        """Host timestamps (simulated seconds) of each input and output transfer of the last run."""
        if not self.isCompiled():
            return {"input": [[]], "input_complete": [[]], "output": [[]], "output_complete": [[]]}
        if self._run is None:
            g = self._executable.graph
            empty_in = [[] for _ in g.inputs] or [[]]
            empty_out = [[] for _ in g.outputs] or [[]]
            return {"input": empty_in, "input_complete": [list(x) for x in empty_in],
                    "output": empty_out, "output_complete": [list(x) for x in empty_out]}
        return copy.deepcopy(self._run.perf_counters)

    def _latency(self, start, start_reduce, end, end_reduce):
        from ..results import perfcounters
        return perfcounters.latency(self.getPerfCounters(), start, start_reduce, end, end_reduce)

    def getLatency(self):
        """Round trip (min, max, avg) in seconds: first input requested -> last output on the host."""
        return self._latency("input", min, "output_complete", max)

    def getHostIpuLatency(self):
        """(min, max, avg) seconds from the first input requested to the last input on the IPU."""
        return self._latency("input", min, "input_complete", max)

    def getComputeLatency(self):
        """(min, max, avg) seconds from the last input on the IPU to the last output offered."""
        return self._latency("input_complete", max, "output", max)

    def getIpuHostLatency(self):
        """(min, max, avg) seconds from the first output offered to the last output on the host."""
        return self._latency("output", min, "output_complete", max)

    def getTensorNames(self) -> list[str]:
        """The names of the simulated graph's tensors."""
        if self._executable is None:
            raise AssertionError("Model must be compiled before calling getTensorNames")
        return list(self._executable.graph.tensors)

    # --- device and weights -----------------------------------------------------------------
    def isAttachedToDevice(self) -> bool:
        return self.isCompiled() and self._is_attached

    def attachToDevice(self) -> None:
        if not self.isCompiled():
            raise error(NO_EXECUTABLE)
        if self._options.connection_type == enums.ConnectionType.Never:
            raise AssertionError("Trying to attach to an offline device (ConnectionType.Never)")
        if self._is_attached:
            raise error("Device is already attached")
        self._is_attached = True

    def detachFromDevice(self) -> None:
        if not self.isCompiled():
            raise error(NO_EXECUTABLE)
        if not self._is_attached:
            raise error("Device is not attached")
        self._is_attached = False

    def copyWeightsToHost(self) -> None:
        """The weights already live in the torch model (the CPU computes the numbers)."""
        if not self.isCompiled():
            raise error(NO_EXECUTABLE)

    def copyWeightsToDevice(self) -> None:
        """The simulated IPU reads the torch model's weights at every call."""
        if not self.isCompiled():
            raise error(NO_EXECUTABLE)

    def copyWeightsToHostIfNeeded(self) -> bool:
        return False

    def setOptimizer(self, optimizer) -> None:
        """Use ``optimizer`` from the next call (recompiles if its kind of update changes)."""
        if not self._training:
            raise error("setOptimizer() is only available for a poptorch.trainingModel()")
        name = _optim.sim_optimizer(optimizer)
        self._optimizer = optimizer
        if name != self._sim_optimizer:
            self._sim_optimizer = name
            if self._executable is not None:
                self._executable = None
                self._compile(*self._example)

    @property
    def rng_state(self) -> list[int]:
        if not self.isCompiled():
            raise error(NO_EXECUTABLE)
        seed = self._options.random_seed if self._options.random_seed is not None else 0
        return [seed]

    # --- saving ---------------------------------------------------------------------------
    def save(self, filename: str, export_model: bool = True, save_rng_state: bool = True) -> None:
        """Save what recompiles this model: options, example inputs and (optionally) the model."""
        if not self.isCompiled():
            raise error(NO_EXECUTABLE)
        data = {"ipusim": 1, "options": self._options, "training": self._training,
                "example": self._example}
        if export_model:
            data["model"] = self._user_model
            data["optimizer"] = self._optimizer
        torch.save(data, filename)

    def compileAndExport(self, filename: str, *args, export_model: bool = True, **kwargs) -> None:
        self.compile(*args, **kwargs)
        self.save(filename, export_model)

    def loadExecutable(self, filename: str) -> None:
        """Compile for the inputs saved in ``filename``."""
        data = torch.load(filename, weights_only=False)
        self._executable = None
        self._compile(*data["example"])


def _shapes_of(args, kwargs):
    return [(tuple(t.shape), t.dtype) for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]


def _detached(x):
    return x.detach() if isinstance(x, torch.Tensor) else x


class _eval_mode:
    """Put a module in eval mode for a while and restore every sub-module's mode after."""

    def __init__(self, module: torch.nn.Module):
        self.module = module

    def __enter__(self):
        self.modes = [(m, m.training) for m in self.module.modules()]
        self.module.eval()

    def __exit__(self, *exc):
        for m, mode in self.modes:
            m.training = mode


def _host_dtype(t: torch.Tensor) -> torch.Tensor:
    """PopTorch returns int64 outputs as int32 and float64 as float32."""
    if t.dtype == torch.int64:
        return t.int()
    if t.dtype == torch.float64:
        return t.float()
    return t


def _sum(parts):
    total = parts[0].clone()
    for p in parts[1:]:
        total = total + p
    return total


def _join(parts):
    """PopTorch's output shape: one copy as is; several copies concatenated along dim 0
    (scalars stacked)."""
    parts = [_host_dtype(p) for p in parts]
    if len(parts) == 1:
        return parts[0]
    if parts[0].dim() == 0:
        return torch.stack(parts)
    return torch.cat(parts, dim=0)


def trainingModel(model: torch.nn.Module, options: Options | None = None, optimizer=None) -> PoplarExecutor:
    """Wrap ``model`` for training on the simulated IPU (and on the CPU for the numbers).

    ``optimizer``: a ``torch.optim`` or ``poptorch.optim`` SGD, Adam, AdamW, RMSprop or LAMB
    (default ``poptorch.optim.SGD(lr=0.01)``).
    """
    return PoplarExecutor(model, options, True, optimizer, user_model=model)


def inferenceModel(model: torch.nn.Module, options: Options | None = None) -> PoplarExecutor:
    """Wrap ``model`` for inference on the simulated IPU (and on the CPU for the numbers)."""
    return PoplarExecutor(model, options, False)


def load(filename: str, edit_opts_fn=None) -> PoplarExecutor:
    """Re-create a model saved with ``compileAndExport``/``save`` (with ``export_model=True``)."""
    data = torch.load(filename, weights_only=False)
    if "model" not in data:
        raise error(f"{filename} holds no model: it was saved with export_model=False")
    options = data["options"].clone()
    if edit_opts_fn is not None:
        edit_opts_fn(options)
    if data["training"]:
        executor = trainingModel(data["model"], options, data.get("optimizer"))
    else:
        executor = inferenceModel(data["model"], options)
    executor._compile(*data["example"])
    return executor


__all__ = ["PoplarExecutor", "trainingModel", "inferenceModel", "load"]
