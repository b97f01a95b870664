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

import collections
import contextlib
import copy
import datetime
import inspect
import logging
import os
import weakref

import torch
from torch.utils import _pytree as pytree

from .. import compile as sim_compile
from ..compiler.executable import check_overlap
from .. import optimizer_write_seconds, run_executable, variable_copy_seconds
from .. import virtual_clock
from ..virtual_clock import device_call, frozen, real_perf_counter
from ..errors import OptionsError, OutOfMemoryError, UnsupportedOpError
from ..graph.training import Optimizer as _SimOptimizer
from ..strategy import AutoStage, PipelinedExecution, ShardedExecution, assign
from . import _args, _precision, _system, enums
from . import optim as _optim
from ._capture import Captured, capture, on_meta_device
from ._device import ipu_device
from ._errors import NO_EXECUTABLE, OutOfMemory, compile_error, error
from .host_function import refuse_in_training
from . import replica_grouping
from ._printing import module_repr
from .dataloader import loader_modes
from ..options import CPU_OUTPUTS_ENV_VAR, cpu_outputs
from .annotations import attribute_notes, on_ipu
from .options import Options

logger = logging.getLogger("poptorch")

_DISABLED = "Cycle count logging is disabled. Please set option logCycleCount to True to enable."
_NOT_RUN = "Please run the model at least once before obtaining cycle count."
_ALREADY_WRAPPED = ("Model has already been wrapped in 'poptorch.trainingModel'. Call model.destroy() "
                    "on the model to unwrap before wrapping again.")
_NO_BACKWARD = ("backward() cannot be called explicitly on outputs of a PopTorch model. If you're using "
                "a trainingModel, the backwards pass is performed automatically when invoking the model. "
                "If you're using an inferenceModel, you should use a trainingModel instead.")

#: torch models wrapped by a live trainingModel (PopTorch refuses to wrap one twice)
_WRAPPED: "weakref.WeakKeyDictionary[torch.nn.Module, object]" = weakref.WeakKeyDictionary()


#: seconds of a call's CPU run of the outputs beyond which the model says, once, how to skip it
SLOW_CPU_OUTPUTS_S = 10.0


#: environment variables PopTorch or Poplar read that change nothing in the simulation; when one
#: is set, the run's notes say so (POPTORCH_LOG_LEVEL, POPTORCH_CACHE_DIR,
#: POPTORCH_DEFAULT_OPTIONS and POPTORCH_IPU_MODEL are read: see docs/poptorch.md)
_UNMODELLED_ENV = ("POPLAR_ENGINE_OPTIONS", "POPLAR_TARGET_OPTIONS", "POPLAR_LOG_LEVEL",
                   "POPART_LOG_LEVEL", "POPTORCH_WAIT_FOR_IPU", "POPTORCH_EXCEPTION")

#: anchor names the simulator computes for a training model: <prefix><parameter name>
_ANCHOR_PREFIXES = ("Gradient___", "UpdatedVar___")

#: substitution manager types (``replace()`` / ``restore()``) registered with
#: ``poptorch._poplar_executor._OverwriteContextManager.registerSubsitutionManager``: entered
#: around each capture, as PopTorch enters them around its tracing, and around the CPU runs
SUBSTITUTION_MANAGERS: list = []


class _substitutions:
    """Every registered substitution manager entered (``replace()``), left in reverse order."""

    def __enter__(self):
        self.entered = []
        try:
            for manager_type in list(SUBSTITUTION_MANAGERS):
                manager = manager_type()
                manager.replace()
                self.entered.append(manager)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for manager in reversed(self.entered):
            manager.restore()


def capture_for_ipu(model: torch.nn.Module, args: tuple, kwargs: dict, options: Options, training: bool,
                    values: bool = True, user_model: torch.nn.Module | None = None,
                    tensor_outputs: bool = False) -> Captured:
    """``model(*args, **kwargs)`` captured as PopTorch traces it for the IPU: ``poptorch.isRunningOnIpu()`` true,
    the registered substitution managers entered, mixed float16/float32 operands cast as ``options`` say, and in
    inference the model (``user_model``, the module the user wrapped, when ``model`` wraps it) in eval mode.
    ``values=False``: the outputs' values are not needed; ``tensor_outputs``: outputs that are not tensors are left
    out (see :func:`sim.poptorch._capture.capture`)."""
    user_model = model if user_model is None else user_model
    with on_ipu(), attribute_notes() as attributes, _substitutions():
        settings = dict(cast_to=_precision.behaviour(options), partials=options.partials_type(), values=values,
                        tensor_outputs=tensor_outputs)
        with contextlib.nullcontext() if training else _eval_mode(user_model):  # inference runs in eval mode
            captured = capture(model, args, kwargs, type(user_model).__name__, **settings)
        captured.notes += [n for n in attributes if n not in captured.notes]
    return captured


class PoplarExecutor:
    """The wrapper ``inferenceModel``/``trainingModel`` return; call it like the model."""

    #: hooks run before / after every model capture (``registerPreCompileHook``, ...)
    _precompile_hooks: dict = collections.OrderedDict()
    _postcompile_hooks: dict = collections.OrderedDict()

    def __init__(self, model: torch.nn.Module, options: Options | None, training: bool,
                 optimizer=None, user_model: torch.nn.Module | None = None):
        if options is not None:
            if not isinstance(options, Options):
                raise error(f"Invalid type: 'options' is of type {type(options)} (Expected poptorch.Options)")
            options._freeze()
            self._user_options = options  # the object the user's DataLoaders were given
            options = options.clone()
        else:
            options = self._user_options = Options()
        self._user_model = user_model if user_model is not None else model
        #: torch.compile's wrapper (torch._dynamo's OptimizedModule) is set aside: its compilation targets the
        #: host's backends, and the module it wraps is what is captured for the IPU (the run's notes say so)
        self._compiled_wrapper = type(model).__name__ == "OptimizedModule" and hasattr(model, "_orig_mod")
        self._model = model._orig_mod if self._compiled_wrapper else model
        self._training = training
        if training and _WRAPPED.get(self._user_model, lambda: None)() is not None:
            raise RuntimeError(_ALREADY_WRAPPED)
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
        for anchor in options.anchored_tensors.values():  # anchors without a mode use the outputs'
            if anchor[1]:
                anchor[2] = options.output_mode
                if anchor[2] == enums.OutputMode.EveryN:
                    anchor[3] = options.output_return_period
        options._freeze()
        self._options = options
        self._optimizer = optimizer
        self._sim_optimizer = _optim.sim_optimizer(optimizer) if training else None
        self._executable = None
        self._captured: Captured | None = None
        self._example = None  # (args, kwargs) of the micro-batch the model was compiled for
        self._inputs = None  # (structure, leaves) of the compiled call: see _inputs_of
        self._constants_of = (None, set())  # (captured graph, positions of its constant outputs)
        self._cpu_outputs = True  # each call runs the model on the CPU for its outputs (cpu_outputs())
        self._told_slow = False  # whether a slow CPU run of the outputs was pointed out (once a model)
        self._run = None
        self._is_attached = False
        self._system_reason = ""
        self._compilation_time: datetime.timedelta | None = None
        self._anchors: dict[str, tuple[str, str]] = {}
        self._rng_state: list[int] | None = None
        self._anchor_memory: dict[str, torch.Tensor] = {}
        #: parameter name -> (CommGroupType, shards, VariableRetrievalMode), from ``<executor>.<name>.replicaGrouping``
        self._per_replica_params: dict[str, tuple] = {}
        self._grouped: dict[str, replica_grouping.Grouping] = {}  # the groupings the model was compiled with
        self._optimizer_on_ipu = None  # the optimizer the IPUs hold, as PopART sees it (_popart_view)
        self._optimizer_write_due = False  # new values to write before the next call (set while detached)
        self._optimizer_writes = {"runs": 0, "tensors": 0, "seconds": 0.0}
        self._write_seconds: dict[tuple, float] = {}  # tensors by IPU -> seconds of a write (this executable's)
        self._update_ipus: dict[str, int] = {}
        self._dirty_host_weights = False  # a training call changed the weights since the host last read them
        self._variable_seconds: dict[bool, float] = {}  # to the device? -> seconds of that copy (this executable)
        self._warned_not_contiguous_input = False
        if training:
            _WRAPPED[self._user_model] = weakref.ref(self)

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
    def optimizer_writes(self) -> dict:
        """The simulated writes of new optimizer values to the IPUs so far (``setOptimizer`` with
        other values: PopART's OptimizerFromHost engine run): ``runs``, optimizer ``tensors`` written
        by each, and their ``seconds`` in all (none in the calls' own figures)."""
        return dict(self._optimizer_writes)

    @property
    def executable(self):
        """The :class:`sim.Executable` the model was compiled to (None before compiling)."""
        return self._executable

    def __getattr__(self, attr):
        if attr.startswith("__") or attr in ("_user_model", "_model", "_per_replica_params"):
            raise AttributeError(attr)
        value = getattr(self._user_model, attr)
        if isinstance(value, torch.nn.Parameter):  # as PopTorch: with replicaGrouping (replica_grouping.py)
            return replica_grouping.wrapper(self, attr, value)
        return value

    def __repr__(self) -> str:
        """The model's repr, with the ``BeginBlock`` annotations (forward pre-hooks) shown."""
        return module_repr(self._user_model)

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
        try:
            self._options.check_input_grouping()
        except OptionsError as e:
            raise error(str(e)) from None
        di, ga, _, groups = self._factors()
        chunks = di * groups * ga
        leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
        positions = []
        for i, leaf in enumerate(leaves):
            if not isinstance(leaf, torch.Tensor):
                continue
            if leaf.requires_grad:
                leaves[i] = leaf = leaf.detach()
            if not leaf.is_contiguous():  # copied to the IPU contiguous (_chunk), as PopTorch's
                # ArgsParser converts them (python/_args_parser.py), warning once per model
                if not self._warned_not_contiguous_input:
                    logger.warning("an input tensor is not contiguous: each such input is copied to a "
                                   "contiguous one before the model runs, as PopTorch does")
                    self._warned_not_contiguous_input = True
            b = 1 if leaf.dim() == 0 else leaf.shape[0]
            if b % chunks:  # PopTorch asserts it (_poplar_executor.py _narrow_tensor)
                o = self._options
                raise AssertionError(
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
            # a contiguous copy of the micro-batch, as the IPU's stream copy of it: the model sees a
            # contiguous tensor, and an in-place op on its input in forward changes the copy, not
            # the caller's tensor (nor the input of the next run of the same call)
            filled[i] = t.narrow(0, c * mb, mb).clone(memory_format=torch.contiguous_format)
        return pytree.tree_unflatten(filled, spec)

    # --- compilation --------------------------------------------------------------------------
    @frozen  # the simulator's own work: no time on the script's clocks (sim.virtual_clock)
    def compile(self, *args, **kwargs) -> None:
        """Capture and compile the model for inputs like ``args``/``kwargs`` (without running)."""
        leaves, spec, positions, chunks = self._split(args, kwargs)
        if self._executable is not None:
            logger.warning("Call to compile() ignored: the executable is already compiled")
            return
        self._compile(*self._chunk(leaves, spec, positions, chunks, 0))

    def _computes_on_cpu(self) -> bool:
        """Whether calls run the model on the CPU for its outputs (:func:`cpu_outputs`); never for a model
        whose weights are on the meta device (:func:`on_meta_device`), which has no values to run."""
        return cpu_outputs(self._options) and not on_meta_device(self._model)

    @frozen
    def _compile(self, ex_args, ex_kwargs) -> None:
        started = real_perf_counter()
        if self._training:
            self._mean_reduction_for(self._optimizer, compiled=False)
        try:
            for hook in list(PoplarExecutor._precompile_hooks.values()):
                hook()
            self._grouped = self._groupings()
            # the capture's own run computes values only for calls that return them; a replica-grouped weight
            # is traced with its first value, as PopTorch traces it
            with replica_grouping.first_values(self._model, self._grouped):
                captured = capture_for_ipu(self._model, ex_args, ex_kwargs, self._options, self._training,
                                           values=self._computes_on_cpu(), user_model=self._user_model)
        finally:
            for hook in list(PoplarExecutor._postcompile_hooks.values()):
                hook()
        self._compile_captured(captured, ex_args, ex_kwargs)
        # on the script's virtual clock (ipusim script) compiling takes no time: Poplar's is not simulated
        took = 0.0 if virtual_clock.installed() else real_perf_counter() - started
        self._compilation_time = datetime.timedelta(seconds=took)

    def _compile_captured(self, captured, ex_args, ex_kwargs) -> None:
        g = captured.graph
        o = self._options
        if self._training and g.loss is None:
            raise error("The model returned no loss the simulator can find: compute it with a torch "
                        "loss (CrossEntropyLoss, NLLLoss, MSELoss, L1Loss or their functional forms) "
                        "or mark it with poptorch.identity_loss")
        if self._training:
            refuse_in_training(g)
            for name, grouping in self._grouped.items():  # its gradient is all-reduced within its group only
                g.tensors[name].grad_collectives = grouping.gradient_collectives(g.tensors[name].nbytes)
        self._check_overlapped_io(g)
        _check_same_as_ipu(g, o.execution_strategy)
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
        anchors = self._resolve_anchors()
        if self._training:  # the optimizer set last (a refused replacement stays the model's, as PopTorch's)
            self._sim_optimizer = _optim.sim_optimizer(self._optimizer)
        sim_opt = self._sim_optimizer
        if self._training:
            sim_opt = _SimOptimizer(self._sim_optimizer, _optim.state_dtype(self._optimizer),
                                    _optim.accum_dtype(self._optimizer), _optim.clip_norm(self._optimizer),
                                    combined_accum=_optim.combined_accum(self._optimizer),
                                    **self._per_weight(self._optimizer, {w.name for w in g.weights()}))
        try:
            exe = sim_compile(g, system, o, self._training, sim_opt)
        except OutOfMemoryError as e:  # Poplar's compile-time failure, as PopTorch reports it
            raise OutOfMemory(e) from e
        except OptionsError as e:  # a compile-time check, a poptorch.Error in PopTorch
            raise compile_error(e) from None
        except UnsupportedOpError as e:
            if self._training and "_grad" in str(e):
                raise UnsupportedOpError(
                    f"{e} — the cost model has no price for the backward pass of this op, so the "
                    "model can be simulated for inference but not trained yet") from None
            raise
        notes = [f"system {system.name}: {why}", f"graph captured with {captured.method}"]
        notes += captured.notes
        self._cpu_outputs = self._computes_on_cpu()
        if self._compiled_wrapper:
            notes.append("the model is torch.compile's wrapper of a module (OptimizedModule): the module it wraps is "
                         "captured and compiled for the IPU, and its outputs computed on the CPU as plain torch; "
                         "torch.compile's own compilation, for the host's backends, is not run")
        if on_meta_device(self._model):
            notes.append("the model's weights are on torch's meta device (shapes and dtypes, no data): each call "
                         "returns zeros of the outputs' shapes and dtypes and leaves the weights as they are, as "
                         "with Options.computeOutputsOnCpu(False); the simulated run is the same")
        elif not self._cpu_outputs:
            notes.append(f"outputs not computed on the CPU ({CPU_OUTPUTS_ENV_VAR}=0 or "
                         "Options.computeOutputsOnCpu(False)): each call returns zeros of the outputs' shapes and "
                         "dtypes (anchored tensors too) and leaves the weights as they are; the simulated run is "
                         "the same")
        notes += self._front_end_notes(anchors) + _host_conversion_notes(*self._by_name(ex_args, ex_kwargs))
        notes.append(f"each call also takes {system.host_link.poptorch_call_s * 1e3:.3g} ms of PopTorch's host work "
                     "beside the device's (poptorch_call_s, FITTED: configs): a script's timings and the samples per "
                     "second count it, the cycle count and the latencies do not")
        exe.notes[:0] = notes
        exe.front_end_call_seconds = system.host_link.poptorch_call_s
        self._variable_seconds = {}
        if self._training:
            self._name_optimizer_params()
            self._optimizer_on_ipu = self._popart_view()  # loading the executable writes them
            self._optimizer_write_due = False
            self._write_seconds = {}
            self._update_ipus = {}  # each trained weight -> the IPU of its update (LAMB's has several ops)
            for op in exe.graph.ops:
                if op.pass_ == "update" and op.inputs and exe.graph.tensors[op.inputs[0]].role == "weight":
                    self._update_ipus.setdefault(op.inputs[0], op.ipu or 0)
        self._system_reason = why
        self._anchors = anchors
        self._captured = captured
        self._executable = exe
        self._example = (ex_args, ex_kwargs)
        self._inputs = _inputs_of(*self._by_name(ex_args, ex_kwargs))
        self._is_attached = o.connection_type != enums.ConnectionType.Never
        logger.debug("Compiled %s for %s (%s)", captured.graph, system.name, why)
        self._copy_variables(to_device=True)  # attached: PopTorch's _on_device_attach writes the weights

    def _by_name(self, args, kwargs) -> tuple[tuple, dict]:
        """A call's arguments by the name of ``forward``'s parameter each binds to, as PopTorch
        names them (so ``m(x, 2)`` and ``m(x, k=2)`` are the same call); as given where they do
        not bind."""
        try:
            signature = inspect.signature(self._user_model.forward)
        except (TypeError, ValueError):  # no signature to bind to
            return args, kwargs
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            raise error(f"The call's arguments do not fit {type(self._user_model).__name__}.forward"
                        f"{signature}: {e}") from None
        bound.apply_defaults()
        return (), dict(bound.arguments)

    def _resolve_anchors(self) -> dict[str, tuple[str, str]]:
        """short name -> (prefix, parameter) of each ``Options.anchorTensor``; PopTorch-style
        error for a name the simulator cannot return."""
        params = dict(self._user_model.named_parameters())
        out = {}
        for short, (long_name, *_rest) in self._options.anchored_tensors.items():
            prefix = next((p for p in _ANCHOR_PREFIXES if long_name.startswith(p)), None)
            pname = long_name[len(prefix):] if prefix else ""
            if pname not in params and pname.startswith("model."):  # PopTorch 2's names
                pname = pname[len("model."):]
            if self._training and prefix is not None and pname in params:
                out[short] = (prefix, pname)
                continue
            what = ("Gradient___<parameter> or UpdatedVar___<parameter> of a trainingModel"
                    + (f" (parameters: {', '.join(params)})" if self._training else ""))
            raise error(f"anchorTensor({short!r}, {long_name!r}): the simulator can anchor {what}; "
                        "the values of other tensors are not computed")
        return out

    def _front_end_notes(self, anchors) -> list[str]:
        """Notes on what the front end accepts without modelling it."""
        notes = []
        if self._training:
            name = type(self._optimizer).__name__
            for key, value in _optim.unmodelled(self._optimizer).items():
                notes.append(f"optimizer {name} {key}={value!r}: accepted, no modelled effect")
            for key in CPU_ONLY_FLAGS:
                if any(g.get(key) for g in self._optimizer.param_groups):
                    what = ("the weights are updated to minimise the loss, as on the IPU" if key == "maximize"
                            else "the weight update is PopART's")
                    notes.append(f"optimizer {name} {key}=True: ignored, as PopTorch does not pass it to PopART "
                                 f"({what}; the CPU numbers step with {key}=False)")
        for var in _UNMODELLED_ENV:
            if os.environ.get(var):
                notes.append(f"environment variable {var} is set: no modelled effect")
        if anchors:
            notes.append(f"anchored tensors {', '.join(sorted(anchors))}: computed on the CPU, no "
                         "extra host transfer simulated")
        modes = loader_modes(self._user_options)
        if modes:
            notes.append(f"poptorch.DataLoader ({', '.join(modes)}) made with these options: the host's data "
                         "loading (the dataset, its workers, collation, rebatching) is not timed; each call's "
                         "host transfers start from a batch already in memory")
        return notes

    def _groupings(self) -> dict[str, replica_grouping.Grouping]:
        """The replica groupings given to the model's parameters, checked (:mod:`.replica_grouping`)."""
        if not self._per_replica_params:
            return {}
        o = self._options
        if o.Distributed.numProcesses > 1:
            raise error("replicaGrouping with several processes (PopRun instances) is not modelled: the simulator "
                        "gives each replica its group's value in one process's run only")
        if self._training and any(o.TensorLocations.locations[k].replicated_tensor_sharding
                                  for k in ("weight", "optimizer", "accumulator")):
            raise error("replicaGrouping with replicated tensor sharding is not modelled (the sharding of a "
                        "grouped weight's state over its group); turn useReplicatedTensorSharding off")
        return replica_grouping.groupings(self._model, self._per_replica_params, o.replication_factor)

    def _per_weight(self, optimizer, weights: set[str] | None = None) -> dict[str, tuple[str, ...]]:
        """``optimizer``'s per-weight settings of the priced update (:func:`_optim.per_weight`), of
        the parameters named in ``weights`` (the graph's; None: all)."""
        return _optim.per_weight(optimizer, {id(p): n for n, p in self._user_model.named_parameters()
                                             if weights is None or n in weights})

    def _name_optimizer_params(self) -> None:
        """Let a poptorch.optim optimizer name its state after the model's parameters."""
        if isinstance(self._optimizer, _optim.Optimizer):
            names = {id(p): n for n, p in self._user_model.named_parameters()}
            self._optimizer._ipusim_param_names = names

    def compilationTime(self) -> datetime.timedelta:
        """Wall-clock time the last compilation took here (capture and simulator compile); none on the
        virtual clock of ``ipusim script``, where compiling takes no time (Poplar's is not simulated)."""
        if not self.isCompiled():
            raise error("Please compile the model before obtaining compilation time.")
        if not self._options._show_compilation_progress_bar:
            raise error("Please set showCompilationProgressBar option to obtain compilation time.")
        return self._compilation_time

    def getAnchoredTensor(self, short_name: str) -> torch.Tensor:
        """The latest value of a tensor anchored with ``Options.anchorTensor``."""
        assert short_name in self._anchor_memory, "No tensor with name " + short_name + " found."
        return self._anchor_memory[short_name]

    def _check_overlapped_io(self, g) -> None:
        try:
            check_overlap(self._options, g, self._training)
        except OptionsError as e:
            raise error(str(e)) from None

    def isCompiled(self) -> bool:
        """Has the model been compiled (and not destroyed)?"""
        return self._executable is not None

    @frozen
    def destroy(self) -> None:
        """Release the (simulated) IPUs and the executable; a training model's torch model can
        then be wrapped again."""
        if self._training:
            _WRAPPED.pop(self._user_model, None)
        if not self.isCompiled():
            return
        self._executable = None
        self._run = None
        self._is_attached = False
        if self._training and isinstance(self._optimizer, _optim.Optimizer):
            self._optimizer._ipusim_param_names = None

    # --- calling -----------------------------------------------------------------------------
    @frozen  # the simulator's own work: no time on the script's clocks (sim.virtual_clock)
    def __call__(self, *args, **kwargs):
        with device_call() as call:  # on a virtual clock (ipusim script), the call takes the simulated time
            written = self._write_optimizer() if self._optimizer_write_due else 0.0
            out = self._call(args, kwargs)
            host = self._executable.front_end_call_seconds  # PopTorch's own work in the call
            call.seconds, call.host_seconds, call.run = written + host + self._run.seconds, host, self._run
            call.label = (f"{type(self._user_model).__name__} ({'trainingModel' if self._training else 'inferenceModel'}) "
                          f"on {self._executable.system.name}")
        return out

    def _call(self, args, kwargs):
        if self._options.connection_type == enums.ConnectionType.Never:
            raise AssertionError("Trying to run a model on an offline device (ConnectionType.Never): "
                                 "use model.compile(inputs) instead of model(inputs)")
        leaves, spec, positions, chunks = self._split(args, kwargs)
        if not self.isCompiled():
            self._compile(*self._chunk(leaves, spec, positions, chunks, 0))
        else:
            first = self._chunk(leaves, spec, positions, chunks, 0)
            _check_same_inputs(self._inputs, _inputs_of(*self._by_name(*first)))
        if not self._is_attached:
            self.attachToDevice()
        try:
            self._run = run_executable(self._executable)
        except OptionsError as e:  # the schedule's checks (a pipeline's depth), PopTorch's compile-time errors
            raise compile_error(e) from None
        started = real_perf_counter()
        with on_ipu(), _substitutions():
            out = self._run_on_cpu(leaves, spec, positions, chunks)
        took = real_perf_counter() - started
        if self._cpu_outputs and took > SLOW_CPU_OUTPUTS_S and not self._told_slow:
            self._told_slow = True
            logger.warning("computing this call's outputs on the CPU took %.0f s (the simulation itself %.2g s); "
                           "Options.computeOutputsOnCpu(False), %s=0 or `ipusim script --no-cpu-outputs` return "
                           "zeros of their shapes instead, with the same simulated run", took,
                           self._run.wall_seconds or 0.0, CPU_OUTPUTS_ENV_VAR)
        self._dirty_host_weights = self._dirty_host_weights or self._training
        for leaf in pytree.tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                leaf.backward = _refuse_backward
        return out

    def _run_on_cpu(self, leaves, spec, positions, chunks):
        di, ga, replicas, groups = self._factors()
        o = self._options
        group_size = o.input_group_size
        orthogonal = o.input_group_type == enums.CommGroupType.Orthogonal

        def group_of(r):
            return r % groups if orthogonal else r // group_size

        grouped = dict(self._grouped)
        named_params = dict(self._model.named_parameters())

        def call(step, acc, r):
            a, k = self._chunk(leaves, spec, positions, chunks, (step * ga + acc) * groups + group_of(r))
            with _precision.implicit_casts(_precision.behaviour(o), self._model, (a, k)), ipu_device():
                if not grouped:
                    return self._model(*a, **k)
                values = {n: g.values_for(named_params[n], r) for n, g in grouped.items()}  # this replica's
                return torch.func.functional_call(self._model, values, tuple(a), k)

        results = {}  # (step, acc, replica) -> the model's output
        anchored = {short: [] for short in self._anchors}  # short name -> a value per weight update
        if not self._cpu_outputs:  # zeros shaped as the capture's outputs, for every micro-batch
            zeros = pytree.tree_map(lambda x: torch.zeros_like(x) if isinstance(x, torch.Tensor) else x,
                                    self._captured.example_outputs)
            results = {(s, a, r): zeros for s in range(di) for a in range(ga) for r in range(replicas)}
            if self._training:
                named = dict(self._user_model.named_parameters())
                for short, (_, pname) in self._anchors.items():
                    anchored[short] = [torch.zeros_like(named[pname]).detach()] * di
                self._keep_anchors(anchored)
        elif self._training:
            params = [p for g in self._optimizer.param_groups for p in g["params"]]
            mean = o.Training.reduction_type == enums.ReductionType.Mean
            scale = _optim.loss_scaling(self._optimizer)
            accum = getattr(self._optimizer, "accum_type", None)  # gradient accumulator dtype
            running = mean and (o.Training.meanAccumulationAndReplicationReductionStrategy
                                == enums.MeanReductionStrategy.Running) and ga * replicas > 1
            named = dict(self._user_model.named_parameters())
            for step in range(di):
                self._optimizer.zero_grad(set_to_none=True)
                sums: dict = {}  # weight -> its gradient sum, where it is kept in another dtype
                for acc in range(ga):
                    for r in range(replicas):
                        out = call(step, acc, r)
                        loss = self._loss_of(out)
                        loss = loss if loss.dim() == 0 else loss.sum()
                        _cpu_backward(loss * scale if scale != 1.0 else loss)
                        results[step, acc, r] = pytree.tree_map(_detached, out)
                        if running:  # every weight's gradient a running mean, in the accumulator's dtype
                            _accumulate(params, accum, sums, mean_of=acc * replicas + r + 1)
                        elif accum is not None and ga * replicas > 1:
                            _accumulate(params, accum, sums)
                for p, total in sums.items():
                    if total.dtype != p.dtype and hasattr(p, "grad_dtype"):
                        p.grad_dtype = None  # torch checks a gradient's dtype against the tensor's: allow the wider sum
                    p.grad = total
                for name, grouping in grouped.items():  # a grouped value's gradient is its group's replicas'
                    if named_params[name].grad is not None:
                        grouping.reduce_gradients(named_params[name].grad)
                divide = (ga * replicas if mean and not running else 1)  # a running mean is divided already
                if scale == 1.0 and divide > 1:
                    for p in params:
                        if p.grad is not None:
                            p.grad.div_(divide)

                def record_gradients():
                    for short, (prefix, pname) in self._anchors.items():
                        if prefix == "Gradient___":
                            grad = named[pname].grad
                            anchored[short].append(torch.zeros_like(named[pname]).detach() if grad is None
                                                   else grad.detach().to(named[pname].dtype).clone())

                _optimizer_step(self._optimizer, params, scale * divide if scale != 1.0 else 1.0,
                                record_gradients)
                for short, (prefix, pname) in self._anchors.items():
                    if prefix == "UpdatedVar___":
                        anchored[short].append(named[pname].detach().clone())
            self._optimizer.zero_grad(set_to_none=True)
            self._keep_anchors(anchored)
        else:
            with torch.no_grad(), _eval_mode(self._user_model):
                for step in range(di):
                    per_group = {}
                    for r in range(replicas):  # replicas of the same inputs and weights give the same outputs
                        key = (group_of(r), *(g.row_of(r) for g in grouped.values()))
                        if key not in per_group:
                            per_group[key] = call(step, 0, r)
                        results[step, 0, r] = per_group[key]
        return self._combine(results, di, ga, replicas)

    def _keep_anchors(self, anchored: dict) -> None:
        """Combine each anchor's value per weight update per its output mode (PopTorch's
        ``anchorTensor`` modes: All, Final, Sum, EveryN)."""
        for short, values in anchored.items():
            _, _, mode, period = self._options.anchored_tensors[short]
            if mode in (None, enums.OutputMode.Default):
                mode = self._options.resolved_output_mode(self._training)
            if mode == enums.OutputMode.Final:
                values = values[-1:]
            elif mode == enums.OutputMode.EveryN:
                values = [v for i, v in enumerate(values) if (i + 1) % max(1, int(period or 1)) == 0]
            elif mode == enums.OutputMode.Sum:
                values = [_sum(values)]
            if values:  # concatenated along dim 0 as outputs are (PoplarExecutable.cpp: every anchor's dim 0)
                self._anchor_memory[short] = _join(values)

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
                if not isinstance(t_leaves[i], torch.Tensor):  # None or a Python value: returned as it is
                    per_leaf.append(None)
                    continue
                sums = []
                for r in range(replicas):
                    parts = [pytree.tree_leaves(results[s, a, r])[i] for s in range(di) for a in range(ga)]
                    sums.append(_sum(parts))
                per_leaf.append(sums)
        constants = self._constant_outputs(sum(isinstance(leaf, torch.Tensor) for leaf in t_leaves))
        out, n = [], 0
        for leaf, parts in zip(t_leaves, per_leaf):
            if isinstance(leaf, torch.Tensor):  # a host-side constant comes back once (popartBatchDimForAnchor: 1)
                out.append(_host_dtype(leaf) if n in constants else _join(parts))
                n += 1
            else:
                out.append(leaf)
        return pytree.tree_unflatten(out, t_spec)

    def _constant_outputs(self, tensors: int) -> set[int]:
        """Positions, among the model's tensor outputs, of those that are constants of the graph
        (PopTorch returns a host-side constant once, not once per micro-batch)."""
        captured = self._captured
        if captured is None or len(captured.output_names) != tensors:
            return set()
        if self._constants_of[0] is not captured:  # once per compilation, not per call
            self._constants_of = (captured, self._find_constant_outputs(captured))
        return self._constants_of[1]

    @staticmethod
    def _find_constant_outputs(captured) -> set[int]:
        g = captured.graph
        producers = {o: op for op in g.ops for o in op.outputs}

        def constant(name: str) -> bool:
            op = producers.get(name)
            if op is None:
                return g.tensors[name].role == "constant"
            return op.kind == "identity" and all(constant(i) for i in op.inputs)
        return {i for i, name in enumerate(captured.output_names) if constant(name)}

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
        """The names of the simulated graph's tensors; for a training model also PopART's
        ``Gradient___<parameter>`` and ``UpdatedVar___<parameter>``, which can be anchored."""
        if self._executable is None:
            raise AssertionError("Model must be compiled before calling getTensorNames")
        names = list(self._executable.graph.tensors)
        if self._training:
            params = [n for n, p in self._user_model.named_parameters() if p.requires_grad]
            names += [prefix + n for prefix in _ANCHOR_PREFIXES for n in params]
        return names

    # --- device and weights -----------------------------------------------------------------
    def isAttachedToDevice(self) -> bool:
        return self.isCompiled() and self._is_attached

    @frozen
    def attachToDevice(self) -> None:
        if not self.isCompiled():
            raise error(NO_EXECUTABLE)
        if self._options.connection_type == enums.ConnectionType.Never:
            raise AssertionError("Trying to attach to an offline device (ConnectionType.Never)")
        if self._is_attached:
            raise error("Device is already attached")
        self._is_attached = True
        self._copy_variables(to_device=True)  # as PopTorch's _on_device_attach: the weights written again

    @frozen
    def detachFromDevice(self) -> None:
        if not self.isCompiled():
            raise error(NO_EXECUTABLE)
        if not self._is_attached:
            raise error("Device is not attached")
        if self._training:  # as PopTorch: the trained weights read back first
            self.copyWeightsToHostIfNeeded()
        self._is_attached = False

    @frozen
    def copyWeightsToHost(self) -> None:
        """PopART's WeightsToHost: the weights and optimizer state streamed to the host, taking its simulated
        seconds on a virtual clock (``ipusim script``); the numbers already live in the torch model (the CPU
        computes them)."""
        if not self.isCompiled():
            raise error(NO_EXECUTABLE)
        self._dirty_host_weights = False
        self._copy_variables(to_device=False)

    @frozen
    def copyWeightsToDevice(self) -> None:
        """PopART's WeightsFromHost: the weights and optimizer state streamed to the IPUs, taking its simulated
        seconds on a virtual clock; the simulated IPU reads the torch model's weights at every call."""
        if not self.isCompiled():
            raise error(NO_EXECUTABLE)
        self._dirty_host_weights = False
        self._copy_variables(to_device=True)

    @frozen
    def copyWeightsToHostIfNeeded(self) -> bool:
        """As PopTorch's: if a training call has changed the weights since the host last read them, copy them
        (:meth:`copyWeightsToHost`) and return True, else False."""
        if not self._dirty_host_weights:
            return False
        self.copyWeightsToHost()
        return True

    def _copy_variables(self, to_device: bool) -> None:
        """A device call of :func:`sim.variable_copy_seconds` when attached (a detached model moves nothing)."""
        if not self._is_attached:
            return
        if to_device not in self._variable_seconds:
            self._variable_seconds[to_device] = variable_copy_seconds(self._executable, to_device)
        with device_call() as call:
            call.seconds = self._variable_seconds[to_device]
            call.label = (f"{type(self._user_model).__name__} (copyWeightsTo{'Device' if to_device else 'Host'}: "
                          f"Weights{'FromHost' if to_device else 'ToHost'}) on {self._executable.system.name}")

    @frozen
    def copyNamedBuffersToDevice(self) -> None:
        """The buffers named by ``Options.updatableNamedBuffers`` are read from the torch model
        at every call; PopTorch's checks."""
        if not self.isCompiled():
            raise error(NO_EXECUTABLE)
        if "updatableNamedBuffers" not in self._options._Popart.options:
            raise error("No named buffers marked as updatable via updatableNamedBuffers option")

    @frozen
    def setOptimizer(self, optimizer) -> None:
        """Use ``optimizer``: before compilation the update the model compiles; after, its new values
        written to the IPUs (PopART's OptimizerFromHost), or PopART's error where it cannot replace the
        compiled one."""
        if not self._training:
            raise error("setOptimizer() is only available for a poptorch.trainingModel()")
        _optim.check_supported(optimizer)
        if self.isCompiled():
            self._mean_reduction_for(optimizer, compiled=True)
        clip, compiled_clip = _optim.clip_norm(optimizer), _optim.clip_norm(self._optimizer)
        if self._executable is not None and clip != compiled_clip:  # PopART's Optimizer::validReplacement
            which = "at index 0 " if None not in (clip, compiled_clip) else ""
            raise error(f"Clip norm settings {which}do not match. (max_grad_norm {compiled_clip} was compiled into "
                        f"the model's gradient clipping and cannot become {clip}: give it before the first call, "
                        "or make a new trainingModel)")
        if isinstance(self._optimizer, _optim.Optimizer) and self._optimizer is not optimizer:
            self._optimizer._ipusim_param_names = None
        self._optimizer = optimizer
        if not self.isCompiled():
            return
        self._name_optimizer_params()
        if self._popart_view() != self._optimizer_on_ipu:
            self._optimizer_write_due = True  # PopTorch writes them now when attached, else before the next call
            if self.isAttachedToDevice():
                with device_call() as call:
                    call.seconds = self._write_optimizer()
                    call.label = (f"{type(self._user_model).__name__} (setOptimizer: OptimizerFromHost) on "
                                  f"{self._executable.system.name}")

    def _mean_reduction_for(self, optimizer, compiled: bool) -> None:
        """PopTorch's rule for gradient accumulators in float16 (``accum_type``, unless ``use_combined_accum``):
        the mean over micro-batches and replicas is a running mean (``MeanReductionStrategy.Running``), set
        on the options before compiling; after, an optimizer that needs it where the model compiled another
        strategy is PopTorch's ValueError (poptorch ``optim.py`` ``_toPoptorchOptimizer``'s caller)."""
        if getattr(optimizer, "accum_type", None) != torch.float16 or getattr(optimizer, "use_combined_accum", False):
            return
        training = self._options.Training
        running = enums.MeanReductionStrategy.Running
        if not compiled:
            object.__setattr__(training, "meanAccumulationAndReplicationReductionStrategy", running)
        elif training.meanAccumulationAndReplicationReductionStrategy != running:
            raise ValueError("Invalid optimizer: the new optimizer would require changing options.Training."
                             "meanAccumulationAndReplicationReductionStrategy to poptorch.MeanReductionStrategy."
                             "Running but the executable is already compiled.")

    def _popart_view(self) -> dict:
        """The optimizer as PopART sees it (:func:`sim.poptorch.optim.popart_view`)."""
        return _optim.popart_view(self._optimizer, *self._optimizer_context())

    def _optimizer_context(self) -> tuple[dict[int, str], bool]:
        """Each parameter's name by ``id``; is automatic loss scaling on (its loss scaling variable)?"""
        names = {id(p): n for n, p in self._user_model.named_parameters()}
        return names, bool(self._options._Popart.options.get("automaticLossScalingSettings.enabled", False))

    def _write_optimizer(self) -> float:
        """Simulate PopART's OptimizerFromHost run writing the optimizer's values (each weight's
        optimizer tensors, on the IPU that updates it); its seconds. PopART's error first when the
        new optimizer cannot replace the compiled one (another kind of update, a constant changed);
        the values stay due, so the next call fails too, as PopTorch's."""
        context = self._optimizer_context()
        view = _optim.popart_view(self._optimizer, *context)
        problem = _optim.replacement_error(self._optimizer_on_ipu, view)
        if problem:
            raise error(problem)
        per_weight = _optim.optimizer_tensors(self._optimizer, *context)
        by_ipu: dict[int, int] = collections.defaultdict(int)
        for weight, ipu in self._update_ipus.items():
            by_ipu[ipu] += per_weight.get(weight, 0)
        key = tuple(sorted(by_ipu.items()))  # priced once for the compiled program and a count
        if key not in self._write_seconds:
            self._write_seconds[key] = optimizer_write_seconds(self._executable, dict(by_ipu)) if by_ipu else 0.0
        seconds = self._write_seconds[key]
        w = self._optimizer_writes
        w["runs"] += 1
        w["tensors"] = sum(by_ipu.values())
        w["seconds"] += seconds
        self._optimizer_on_ipu = view
        self._optimizer_write_due = False
        return seconds

    @property
    def rng_state(self) -> list[int]:
        if not self.isCompiled():
            raise error(NO_EXECUTABLE)
        if self._rng_state is not None:
            return list(self._rng_state)
        seed = self._options.random_seed if self._options.random_seed is not None else 0
        return [seed]

    @rng_state.setter
    def rng_state(self, state: list[int]) -> None:
        if not self.isCompiled():
            raise error(NO_EXECUTABLE)
        self._rng_state = list(state)

    # --- saving ---------------------------------------------------------------------------
    @frozen
    def save(self, filename: str, export_model: bool = True, save_rng_state: bool = True) -> None:
        """Save what recompiles this model: options, example inputs and (optionally) the model."""
        if not self.isCompiled():
            raise error(NO_EXECUTABLE)
        folder = os.path.dirname(filename)  # PopTorch's handling: make the folder; a folder is model.poptorch in it
        if folder:
            if os.path.exists(folder):
                assert os.path.isdir(folder), f"Destination folder {folder} is not a directory"
            else:
                os.makedirs(folder)
        if os.path.isdir(filename):
            logger.warning("save(): %s is a directory, saving model to %s", filename,
                           os.path.join(filename, "model.poptorch"))
            filename = os.path.join(filename, "model.poptorch")
        data = {"ipusim": 1, "options": self._options, "training": self._training,
                "example": self._example, "per_replica_params": dict(self._per_replica_params)}
        if export_model:
            data["model"] = self._user_model
            data["optimizer"] = self._optimizer
        torch.save(data, filename)

    @frozen
    def compileAndExport(self, filename: str, *args, export_model: bool = True, **kwargs) -> None:
        self.compile(*args, **kwargs)
        self.save(filename, export_model)

    @frozen
    def loadExecutable(self, filename: str) -> None:
        """Compile for the inputs saved in ``filename``."""
        data = torch.load(filename, weights_only=False)
        self._executable = None
        self._per_replica_params.update(data.get("per_replica_params", {}))
        self._compile(*data["example"])


_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _check_same_as_ipu(graph, strategy) -> None:
    """PopTorch's check of ``AutoStage.SameAsIpu`` (the default of ``PipelinedExecution()`` and
    ``ShardedExecution()``, and PopTorch's default strategy): a block's stage is its IPU, so every block needs
    an ``ipu_id`` (python/options.py ``_DefaultStageManager.getStage``: an ``AssertionError`` naming the block)."""
    if not isinstance(strategy, PipelinedExecution) or strategy.block_map or \
            strategy.auto_stage != AutoStage.SameAsIpu:
        return
    for op in graph.ops:
        if op.pass_ == "forward" and op.block is not None and op.ipu is None:
            raise AssertionError(f"poptorch.AutoStage.SameAsIpu was selected but no IPU was specified for block "
                                 f"{op.block} (op {op.name!r}): give the Block (or BeginBlock) an ipu_id, or set "
                                 "an execution strategy that places the blocks, such as "
                                 "poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement) or "
                                 "PipelinedExecution(poptorch.Stage(...).ipu(n), ...)")


def _accumulate(params, accum: torch.dtype | None, sums: dict, mean_of: int = 0) -> None:
    """After one micro-batch's backward: add the gradient of each weight whose accumulator
    dtype (the optimizer's ``accum_type``) differs from its own to ``sums``, in that dtype, as
    the IPU accumulates; other weights keep accumulating in ``p.grad``. With ``mean_of`` (the
    micro-batch's number, from 1) every weight's ``sums`` entry is the running mean of its gradients
    so far, in the accumulator's dtype (its own without ``accum``), as PopART's
    ``MeanReductionStrategy::Running`` keeps it: ``mean += (g - mean) / mean_of``."""
    for p in params:
        if p.grad is None or (p.grad.dtype == accum and not mean_of):
            continue
        g = p.grad.to(accum or p.grad.dtype)
        if mean_of:
            sums[p] = g if p not in sums else sums[p] + (g - sums[p]) / mean_of
        else:
            sums[p] = g if p not in sums else sums[p] + g
        p.grad = None


#: optimizer state entries and the optimizer attribute giving the dtype they are kept in
_STATE_DTYPES = {"exp_avg": "first_order_momentum_accum_type",
                 "exp_avg_sq": "second_order_momentum_accum_type",
                 "square_avg": "second_order_momentum_accum_type",
                 "grad_avg": "first_order_momentum_accum_type"}


#: torch.optim group flags PopTorch does not pass to PopART (python/_optimizer_attributes.py reads no such
#: attribute): the IPU minimises the loss with its own update, so the CPU step runs with them off
CPU_ONLY_FLAGS = ("maximize", "differentiable", "capturable")


def _ignore_cpu_only_flags(optimizer) -> list:
    """Turn the :data:`CPU_ONLY_FLAGS` set in ``optimizer``'s groups off for one step; the (group, key) pairs
    turned off, to turn back on after it."""
    ignored = []
    for group in [optimizer.defaults, *optimizer.param_groups]:  # torch reads ``defaults["differentiable"]``
        for key in CPU_ONLY_FLAGS:
            if group.get(key):
                group[key] = False
                ignored.append((group, key))
    return ignored


def _optimizer_step(optimizer, params, unscale: float = 1.0, before_update=None) -> None:
    """One weight update as the IPU computes it: the gradients are divided by ``unscale`` (the
    loss scaling, and the mean's divisor with it) in float32; float16 weights are updated in
    float32 arithmetic and stored back in float16; a float32 weight reads its float16 gradient
    accumulator (``accum_type``) in float32; each optimizer state tensor is rounded to
    the dtype PopTorch keeps it in (its ``*_accum_type``). ``before_update()`` sees the
    gradients the update uses."""
    low = {p: p.dtype for p in params if p.dtype in _LOW_PRECISION}
    for p in low:
        p.data = p.data.float()
        if p.grad is not None:
            p.grad = p.grad.float()
    for p in params:  # the update reads the gradient (a float16 accumulator's too) in the weight's arithmetic
        if p.grad is not None and (unscale != 1.0 or p.grad.dtype != p.dtype):
            p.grad = (p.grad.float() / unscale).to(p.dtype)
    ignored = _ignore_cpu_only_flags(optimizer)
    try:
        if before_update is not None:
            before_update()
        optimizer.step()
    finally:
        for group, key in ignored:
            group[key] = True
        for p, dtype in low.items():
            p.data = p.data.to(dtype)
            if p.grad is not None:
                p.grad = p.grad.to(dtype)
    momentum = ("velocity_accum_type" if isinstance(optimizer, torch.optim.SGD)
                else "first_order_momentum_accum_type")
    for p in params:
        for key, value in optimizer.state.get(p, {}).items():
            attr = _STATE_DTYPES.get(key, momentum if key == "momentum_buffer" else None)
            kept = getattr(optimizer, attr, torch.float32) if attr else torch.float32
            if isinstance(value, torch.Tensor) and value.is_floating_point() and kept != value.dtype \
                    and kept in _LOW_PRECISION:
                value.copy_(value.to(kept))


def _cpu_backward(loss) -> None:
    """The CPU's backward pass of a call's loss, which stands in for the IPU's to update the weights the next call
    reads; where torch cannot take it (a loss no trainable weight reaches, an op torch does not differentiate, as
    floor_divide), the error says so and how to simulate without it."""
    try:
        loss.backward()
    except RuntimeError as e:
        why = str(e).splitlines()[0]
        if "does not require grad" in why:
            why = "the loss does not depend on any trainable weight"
        elif "derivative for" not in why:
            raise
        raise error(f"the CPU's backward pass, which stands in for the IPU's to update the model's weights, fails: "
                    f"{why}. The simulated call does not need it: opts.computeOutputsOnCpu(False) (or "
                    "IPUSIM_CPU_OUTPUTS=0) simulates the training step and leaves the weights as they are") from e


def _refuse_backward(*args, **kwargs):
    raise error(_NO_BACKWARD)


#: input dtypes PopTorch converts on the host before every run, and to what (PoplarExecutable.cpp ``run``:
#: ``pytorch_tensor.toType``; the IPU takes neither 64-bit type nor bfloat16)
_HOST_CONVERTED = {torch.int64: "int32", torch.float64: "float32", torch.bfloat16: "float32"}


def _host_conversion_notes(args, kwargs) -> list[str]:
    """A note naming the call's inputs PopTorch converts on the host before each run, and their bytes."""
    leaves = [(_input_name(path), leaf) for path, leaf in pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))[0]
              if isinstance(leaf, torch.Tensor) and leaf.dtype in _HOST_CONVERTED]
    if not leaves:
        return []
    nbytes = sum(t.numel() * t.element_size() for _, t in leaves)
    which = ", ".join(f"{name} ({str(t.dtype).removeprefix('torch.')} -> {_HOST_CONVERTED[t.dtype]})"
                      for name, t in leaves)
    return [f"inputs {which}: PopTorch converts them on the host before every run (PoplarExecutable.cpp), "
            f"{nbytes:,} bytes read each call; that host work is not timed (no published rate); pass "
            "int32 and float32 tensors to avoid it"]


def _inputs_of(args, kwargs):
    """A call's inputs as the compiled graph depends on them: the structure of its arguments and,
    per leaf (named as PopTorch names it: ``x``, ``args[1]``, ``k[0]``), a tensor's shape and
    dtype (of one micro-batch) or any other value itself, which the graph was built with."""
    paths, spec = pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))
    leaves = []
    for path, leaf in paths:
        name = _input_name(path)
        if isinstance(leaf, torch.Tensor):
            leaves.append((name, "tensor", tuple(leaf.shape), leaf.dtype))
        else:
            leaves.append((name, "value", type(leaf), leaf))
    return _structure(spec), leaves


def _structure(spec):
    """A pytree spec as nested (type, keys, children), without the context a custom argument
    parser keeps (the original object), which differs from call to call."""
    keys = None if spec.type in _args.PARSERS else spec.context
    return spec.type, keys, tuple(_structure(c) for c in spec.children())


def _input_name(path) -> str:
    """``args[0]``, ``y`` or ``x[1]['a']`` for a pytree key path of ``((args...), {kwargs})``."""
    where, *rest = path
    first, *rest = rest
    key = getattr(first, "idx", getattr(first, "key", None))
    name = f"args[{key}]" if getattr(where, "idx", 0) == 0 else str(key)
    return name + "".join(str(k) for k in rest)


_RECOMPILE = ("\nThis error occurred because the inputs passed at runtime don't match the inputs used "
              "to compile the model.\nTo recompile the model for the new inputs create a new "
              "inferenceModel / trainingModel wrapper or call destroy() on the current one and try again.")


def _check_same_inputs(compiled, called) -> None:
    """PopTorch's check (``_args_parser.validateInputs``) that a call's inputs match those the
    model was compiled with: the same structure, tensors of the same (micro-batch) shape and dtype,
    and the same values of non-tensor arguments, which are constants of the graph."""
    (cspec, cleaves), (spec, leaves) = compiled, called
    if cspec != spec:  # a different number of arguments, or containers of other lengths or keys
        raise error(f"Arguments mismatch: the arguments are not structured as those the model was compiled "
                    f"with (the same containers of the same lengths and keys).{_RECOMPILE}")
    for (name, kind, *was), (_, ckind, *now) in zip(cleaves, leaves):
        if kind != ckind or (kind == "value" and was[0] is not now[0]):
            got = "a tensor" if ckind == "tensor" else now[0]
            raise error(f"Type mismatch for {name}: expected {'a tensor' if kind == 'tensor' else was[0]} "
                        f"but got {got}.{_RECOMPILE}")
        if kind == "tensor" and was[1] != now[1]:
            raise error(f"Data type mismatch for {name}: expected {was[1]} but got {now[1]}.{_RECOMPILE}")
        if kind == "tensor" and was[0] != now[0]:
            raise error(f"Shape mismatch for {name}: expected {list(was[0])} but got {list(now[0])} (per "
                        f"micro-batch).{_RECOMPILE}")
        if kind == "value" and not _same_value(was[1], now[1]):
            raise error(f"Value mismatch for {name}: expected {was[1]!r} but got {now[1]!r}.{_RECOMPILE}")


def _same_value(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # an object without a plain equality: the same object
        return a is b


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


@frozen
def trainingModel(model: torch.nn.Module, options: Options | None = None, optimizer=None) -> PoplarExecutor:
    """Wrap ``model`` for training on the simulated IPU (and on the CPU for the numbers).

    ``optimizer``: a ``torch.optim`` or ``poptorch.optim`` SGD, Adam, AdamW, RMSprop or LAMB
    (default ``poptorch.optim.SGD(lr=0.01)``).
    """
    if isinstance(model, PoplarExecutor):
        model = model._user_model
    return PoplarExecutor(model, options, True, optimizer, user_model=model)


@frozen
def inferenceModel(model: torch.nn.Module, options: Options | None = None) -> PoplarExecutor:
    """Wrap ``model`` for inference on the simulated IPU (and on the CPU for the numbers)."""
    if isinstance(model, PoplarExecutor):
        model = model._user_model
    return PoplarExecutor(model, options, False)


def _register_hook(hooks: dict, hook) -> torch.utils.hooks.RemovableHandle:
    handle = torch.utils.hooks.RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def registerPreCompileHook(hook) -> torch.utils.hooks.RemovableHandle:
    """Call ``hook()`` before every model capture; ``handle.remove()`` unregisters it."""
    if not callable(hook):
        raise RuntimeError("Pre-compile hook must be callable")
    return _register_hook(PoplarExecutor._precompile_hooks, hook)


def registerPostCompileHook(hook) -> torch.utils.hooks.RemovableHandle:
    """Call ``hook()`` after every model capture (even a failed one)."""
    if not callable(hook):
        raise RuntimeError("Post-compile hook must be callable")
    return _register_hook(PoplarExecutor._postcompile_hooks, hook)


@frozen
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
    executor._per_replica_params.update(data.get("per_replica_params", {}))  # the executable's variable settings
    executor._compile(*data["example"])
    return executor


__all__ = ["PoplarExecutor", "trainingModel", "inferenceModel", "load", "registerPreCompileHook",
           "registerPostCompileHook"]
