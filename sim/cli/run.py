"""``ipusim run``: simulate one call of a zoo model (or an ONNX file) and print its numbers.

    ipusim run                                   # BERT-base inference, micro-batch 1, on ipu-mk2
    ipusim run --model bert-large --num-layers 4 --training --gradient-accumulation 8
    ipusim run --model resnet50 --micro-batch 4 --json
    ipusim run --output reports/bert             # also writes CSV/JSON/PNG files, trace.json and report.html there
    ipusim run --model bert-large --micro-batch 2 --layers-per-ipu 3,7,7,7 --system ipu-m2000 \
        --training --optimizer lamb --gradient-accumulation 10 --optimizer-state off-chip
    ipusim run --model bert-base --num-layers 4 --system ipu-m2000 --strategy parallel-phased

The flags map to PopTorch's options (their names are in the help); :func:`simulate_args` turns
parsed flags into a :class:`~sim.results.Run`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import re
from pathlib import Path

import models
import sim

from ..compiler.memory import ONNX_REMEDIES, reworded
from ..graph.training import OPTIMIZERS, Optimizer
from ..options import Options, OutputMode, OverlapMode, PipelineCopies, TensorLocationSettings
from ..results.report import OUTPUT_FILES, check_output_directory, format_summary, to_json, write_outputs
from ..strategy import (Liveness, ParallelPhasedExecution, Phase, PipelinedExecution, SerialPhasedExecution,
                        ShardedExecution, Stage, SyncPattern, assign)
from .argtypes import (QUIET, add_verbosity, given_dims, margin, name_size, positive_int, progress, proportions,
                       rate, verbosity, whole_numbers)

DEFAULT_SYSTEM = "ipu-mk2"
DEFAULT_MODEL = "bert-base"
#: parameters of the default model when ``--model`` is not given
DEFAULT_PARAMS = {"micro_batch": 1, "seq_len": 128}
#: dedicated flags for common model parameters: flag dest == the zoo's parameter name
MODEL_PARAM_FLAGS = ("micro_batch", "seq_len", "num_layers", "hidden", "heads", "vocab", "image_size")


def _parse_value(text: str):
    """An int, a float or any JSON value (list, bool, null); anything else stays a string."""
    for parse in (int, float, json.loads):
        try:
            return parse(text)
        except ValueError:
            pass
    return text


class _Given(tuple):
    """A ``--param`` as parsed, ``(key, value)``, with ``text``: the argument as typed, which the
    messages quote (``hidden=[64]``, not the list it reads as)."""

    def __new__(cls, key: str, value, text: str):
        given = super().__new__(cls, (key, value))
        given.text = text
        return given

    def __getnewargs__(self):  # copies and pickles keep the text
        return (*self, self.text)


def _key_value(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return _Given(key.strip().replace("-", "_"), _parse_value(value.strip()), text)


def _output_mode(text: str) -> tuple[OutputMode, int | None]:
    t = text.strip().lower()
    simple = {"all": OutputMode.All, "final": OutputMode.Final, "sum": OutputMode.Sum}
    if t in simple:
        return simple[t], None
    if t.startswith("everyn:") and t[7:].isdigit() and int(t[7:]) >= 1:
        return OutputMode.EveryN, int(t[7:])
    raise argparse.ArgumentTypeError(f"expected all, final, sum or everyn:N (N >= 1), got {text!r}")


STRATEGIES = ("pipelined", "sharded", "serial-phased", "parallel-phased")
SYNC_PATTERNS = {"full": SyncPattern.Full, "single-pipeline": SyncPattern.SinglePipeline,
                 "replica-and-ladder": SyncPattern.ReplicaAndLadder}
PIPELINE_COPIES = {mode.value.replace("_", "-"): mode for mode in PipelineCopies}  # merged, per-stage
OVERLAP_MODES = {"none": OverlapMode.NoOverlap, "accumulation": OverlapMode.OverlapAccumulationLoop,
                 "device": OverlapMode.OverlapDeviceIterationLoop}
OPTIMIZER_STATES = ("on-chip", "off-chip", "rts", "off-chip-rts")
#: on/off flags that each set one _Popart option: flag (its argparse name) -> (key, value)
POPART_FLAGS = {"no_outlining": ("enableOutlining", False), "just_in_time_copies": ("subgraphCopyingStrategy", 1),
                "non_stable_softmax": ("enableNonStableSoftmax", True),
                "no_fully_connected_pass": ("enableFullyConnectedPass", False),
                "tied_gather": ("patterns", {"TiedGather": True, "TiedGatherAccumulate": True})}
#: --weight-update-schedule: PopART's AccumulateOuterFragmentSchedule members
WEIGHT_UPDATE_SCHEDULES = {"scheduler": "Scheduler", "serial": "Serial", "overlap-cycle": "OverlapCycleOptimized",
                           "overlap-memory": "OverlapMemoryOptimized"}
#: --auto-recomputation: PopART's RecomputationType members, by number
AUTO_RECOMPUTATION = {"none": 0, "standard": 1, "norm-only": 2, "pipeline": 3, "recompute-all": 4}
LIVENESS = {"always-live": Liveness.AlwaysLive, "off-chip-after-fwd": Liveness.OffChipAfterFwd,
            "off-chip-after-fwd-no-overlap": Liveness.OffChipAfterFwdNoOverlap,
            "off-chip-after-each-phase": Liveness.OffChipAfterEachPhase}


_STATE_DTYPE_NAMES = {"float16": "float16", "half": "float16", "fp16": "float16",
                      "float32": "float32", "float": "float32", "fp32": "float32"}


def state_dtypes(text: str) -> tuple[str, ...]:
    """``float16`` or ``float16,float32``: the optimizer state's dtype, for all state tensors or
    one per state (also half/fp16, float/fp32)."""
    values = [_STATE_DTYPE_NAMES.get(v.strip().lower()) for v in text.split(",")]
    if not values or None in values:
        raise argparse.ArgumentTypeError(f"expected float16 or float32, or one per state like float16,float32, "
                                         f"got {text!r}")
    return tuple(values)


def optimizer_of(args, parser) -> Optimizer:
    """The :class:`~sim.Optimizer` of ``--optimizer``, ``--optimizer-state-dtype``, ``--accum-type``,
    ``--combined-accum`` and ``--max-grad-norm``."""
    dtypes = getattr(args, "optimizer_state_dtype", None)
    name = args.optimizer or "sgd"
    try:
        optimizer = Optimizer(name) if dtypes is None else Optimizer(name, dtypes[0] if len(dtypes) == 1 else dtypes)
    except sim.OptionsError as e:
        parser.error(f"--optimizer-state-dtype: {e}")
    if getattr(args, "accum_type", None):
        optimizer = dataclasses.replace(optimizer, accum_dtype=args.accum_type)
    if getattr(args, "combined_accum", False):
        optimizer = dataclasses.replace(optimizer, combined_accum=True)
    clip = getattr(args, "max_grad_norm", None)
    try:
        return optimizer if clip is None else dataclasses.replace(optimizer, clip_norm=clip)
    except sim.OptionsError as e:
        parser.error(f"--max-grad-norm: {e}")


_int_list = whole_numbers(0, "3,7,7,7")


#: an option's name in PopTorch's API as the flags' help gives it ("[autoRoundNumIPUs]"): a camelCase
#: or snake_case word (setters and groups such as ``Training.`` or ``_Popart.set`` left out)
_API_NAME = re.compile(r"\b([a-z][a-z0-9]*(?:[A-Z][A-Za-z0-9]*)+|[a-z0-9]+(?:_[a-z0-9]+)+)\b")


@functools.lru_cache(maxsize=1)
def api_flags() -> dict[str, str]:
    """{PopTorch option name, lower case: the ``ipusim run`` flag that sets it}, from each flag's help
    tag (``[outputMode]``, ``[TensorLocations.numIOTiles]``, ``[enableSyntheticData(True)]``)."""
    names = {}
    for action in configure(argparse.ArgumentParser(add_help=False))._actions:
        tag = re.match(r"\[([^\]]+)\]", action.help or "")
        if tag and action.option_strings:
            for name in _API_NAME.findall(tag.group(1)):
                names.setdefault(name.lower(), action.option_strings[-1])
    return names


def flag_hints(message: str) -> str:
    """`` (on the command line: --flag sets name, ...)`` for the PopTorch option names ``message``
    gives (an error of the Python API, seen from ``ipusim``), or ""."""
    flags = api_flags()
    found = {}
    for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", message):
        flag = flags.get(word.lower())
        if flag and flag not in found.values():
            found[word] = flag
    return (" (on the command line: " + ", ".join(f"{flag} sets {name}" for name, flag in found.items()) + ")"
            if found else "")


def configure(r: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the flags of ``ipusim run`` to ``r`` (also used by ``ipusim sweep`` for its points)."""
    r.add_argument("--system", default=DEFAULT_SYSTEM,
                   help=f"system config name or .toml path (default: {DEFAULT_SYSTEM}; see `ipusim systems`)")
    r.add_argument("--model", help=f"zoo model (default: {DEFAULT_MODEL}; see `ipusim models`)")
    r.add_argument("--onnx", metavar="PATH", type=Path,
                   help="an ONNX model instead of a zoo model (needs the onnx extra); --micro-batch sizes "
                   "its symbolic batch dimension")
    r.add_argument("--torch", metavar="PATH.py[:FUNCTION]",
                   help="a PyTorch model instead of a zoo model: FUNCTION (default: model) in the Python file, "
                   "called with the micro-batch, returns (module, inputs) for one micro-batch (see docs/poptorch.md); "
                   "--layers-per-ipu splits its layers (its nn.ModuleLists of blocks) over IPUs, --param "
                   "recompute_checkpoint_every_layer=true checkpoints them")
    r.add_argument("--dim", action="append", default=[], type=name_size, metavar="NAME=SIZE",
                   help="with --onnx: the size of another symbolic dimension (repeatable)")
    r.add_argument("--loss", metavar="TENSOR",
                   help="with --onnx and --training: the ONNX tensor to train on (default: the model's one loss)")
    m = r.add_argument_group("model parameters (passed to the zoo only when given)")
    for name in MODEL_PARAM_FLAGS:
        m.add_argument("--" + name.replace("_", "-"), dest=name, type=int, metavar="N")
    m.add_argument("--param", action="append", default=[], type=_key_value, metavar="KEY=VALUE",
                   help="any model parameter; VALUE is parsed as int, float or JSON (repeatable)")
    m.add_argument("--layers-per-ipu", type=_int_list, metavar="N,N,...",
                   help="the zoo's layers_per_ipu: place consecutive layers on IPUs 0, 1, ... (e.g. 3,7,7,7)")
    o = r.add_argument_group("options (PopTorch names in brackets)")
    o.add_argument("--device-iterations", type=int, metavar="N", help="[deviceIterations]")
    o.add_argument("--gradient-accumulation", type=int, metavar="N",
                   help="[Training.gradientAccumulation] (training only)")
    o.add_argument("--training", action="store_true", help="simulate a training step (default: inference)")
    o.add_argument("--optimizer", choices=list(OPTIMIZERS), help="optimizer of --training (default: sgd)")
    o.add_argument("--optimizer-state-dtype", type=state_dtypes, metavar="DTYPE[,DTYPE]",
                   help="[first_order_momentum_accum_type, second_order_momentum_accum_type, "
                   "velocity_accum_type] float16 or float32 for every optimizer state tensor, or one per state "
                   "in order (adam, adamw, lamb: first moment, second moment), e.g. float16,float32 "
                   "(default: float32; training only)")
    o.add_argument("--accum-type", choices=("float16", "float32"),
                   help="[accum_type] dtype of the gradient accumulators of a run with gradient accumulation "
                   "(default: the weights' dtype; PopTorch's optimizers default to float32; training only)")
    o.add_argument("--combined-accum", action="store_true",
                   help="[use_combined_accum] sgd_momentum: the velocity is the gradient accumulator (PopTorch's "
                   "SGD(use_combined_accum=True), as Graphcore's CNN examples' sgd_combined; training only)")
    o.add_argument("--max-grad-norm", type=float, metavar="NORM",
                   help="[max_grad_norm] clip the gradients to this global norm before the update (PopART's "
                   "ClipNormSettings.clipAllWeights; training only)")
    o.add_argument("--auto-loss-scaling", action="store_true",
                   help="[Training.setAutomaticLossScaling(True)] PopART's automatic loss scaling: a histogram of "
                   "every fp16 gradient it tracks, the loss scale updated each weight update (training of a "
                   "float16 model only)")
    o.add_argument("--synthetic-data", action="store_true", help="[enableSyntheticData(True)]: no host IO")
    o.add_argument("--output-mode", type=_output_mode, metavar="{all,final,sum,everyn:N}",
                   help="[outputMode] (default: all for inference, final for training)")
    o.add_argument("--available-memory-proportion", type=proportions, metavar="P[,P...]",
                   help="[setAvailableMemoryProportion] one value in (0, 1] for every IPU the model runs on, "
                   "or one per IPU of a replica (default: 0.6)")
    o.add_argument("--partials", choices=("float", "half"),
                   help="[Precision.setPartialsType] of matmuls and convolutions (default: float)")
    o.add_argument("--memory-margin", type=margin, metavar="F",
                   help="[memoryMargin, the simulator's own] fit only if every fullest tile, raised by this "
                   "fraction, fits: Poplar's fullest tile runs 8-15 %% above an even spread (default: 0)")
    x = r.add_argument_group("multi-IPU and host IO (PopTorch names in brackets)")
    x.add_argument("--strategy", choices=STRATEGIES,
                   help="[setExecutionStrategy] pipelined or sharded: the model's IPU placement as stages "
                   "(see --layers-per-ipu); serial-phased: one phase per block of the model, all on IPU 0; "
                   "parallel-phased: one phase per block, alternating IPUs 0 and 1 (default: pipelined "
                   "when the model spans several IPUs)")
    x.add_argument("--liveness", choices=list(LIVENESS),
                   help="[SerialPhasedExecution.setTensorsLiveness, ParallelPhasedExecution."
                   "sendTensorsOffChipAfterFwd] where activations a later phase reads wait: on chip, or stored "
                   "to streaming memory and loaded back (phased strategies only; parallel-phased takes "
                   "always-live or off-chip-after-fwd; default: always-live)")
    x.add_argument("--sync-pattern", choices=list(SYNC_PATTERNS), help="[syncPattern] (default: full)")
    x.add_argument("--pipeline-copies", choices=list(PIPELINE_COPIES),
                   help="the simulator's own [pipelineCopies]: how a pipeline cycle runs its stages' inter-IPU "
                   "copies: merged (PopART and PopTorch) or per-stage, one after another (TensorFlow's pipelines) "
                   "(default: merged)")
    x.add_argument("--graph-functions", action="store_true",
                   help="the simulator's own [cachedGraphFunctions]: run as TensorFlow's IPU backend builds the "
                   "program, each convolution, matmul and norm a cached graph function whose calls copy their "
                   "arguments in and results out, and no PopART outlining (default: off)")
    x.add_argument("--no-step-io-callbacks", action="store_true",
                   help="the simulator's own [stepIOCallbacks(False)]: the host serves the streams as a runtime "
                   "other than PopART's (PopRT, TensorFlow's infeeds): no StepIO callback's work before each "
                   "replica's input copy (default: PopART's, stream_callback_s of the system's config)")
    x.add_argument("--no-outlining", action="store_true",
                   help="[_Popart enableOutlining=False] no repeated op sequence becomes a call of one shared "
                   "subgraph, so no call copies its inputs and outputs (default: outlining on, as PopART and "
                   "PopTorch have it)")
    x.add_argument("--just-in-time-copies", action="store_true",
                   help="[_Popart subgraphCopyingStrategy=JustInTime] each outlined call copies an input just before "
                   "the op that reads it and an output as soon as it is made, merged only with the copies next to "
                   "that op (default: OnEnterAndExit, all copies at the call's entry and exit)")
    x.add_argument("--tied-gather", action="store_true",
                   help="[_Popart patterns TiedGather, TiedGatherAccumulate] with gradient accumulation a tied "
                   "embedding's gathered rows are added straight into its accumulator, no dense gradient table "
                   "(Graphcore's BERT and GPT-2 scripts set them; default: off, as in PopART)")
    x.add_argument("--stable-norm", action="store_true",
                   help="[enableStableNorm] every norm's statistics as the mean, then the power of the activations "
                   "less it (TensorFlow's norms.use_stable_statistics, which Graphcore's TF1 CNN and BERT examples "
                   "set; default: off)")
    x.add_argument("--non-stable-softmax", action="store_true",
                   help="[_Popart enableNonStableSoftmax=True] every softmax without the row maximum's reduction "
                   "and subtraction (popnn's SOFTMAX; PopRT's enable_non_stable_softmax; a log-softmax stays "
                   "stable; default: off)")
    x.add_argument("--no-fully-connected-pass", action="store_true",
                   help="[_Popart enableFullyConnectedPass=False] each matmul planned as a plain matmul, not as a "
                   "fully connected layer's pass (TensorFlow's matmuls.clear_pass_type, which Graphcore's TF1 BERT "
                   "sets; default: the pass is set)")
    x.add_argument("--replicas", type=positive_int, metavar="N", help="[replicationFactor] (default: 1)")
    x.add_argument("--auto-round-num-ipus", action="store_true",
                   help="[autoRoundNumIPUs] round an IPU count that is not a power of two up")
    x.add_argument("--io-tiles", type=int, metavar="N",
                   help="[TensorLocations.numIOTiles] an even number from 32 to 192 (default: none)")
    x.add_argument("--overlap", choices=list(OVERLAP_MODES),
                   help="[set_overlap_for_input/output] on every model input and output; needs --io-tiles; "
                   "a one-IPU model then runs with ShardedExecution, as PopTorch requires")
    x.add_argument("--prefetch-depth", type=positive_int, metavar="N",
                   help="[_Popart.set('defaultPrefetchBufferingDepth', N)] host stream buffers (default: 1)")
    x.add_argument("--batch-serialize", type=positive_int, metavar="N",
                   help="[_Popart batchSerializationSettings.factor] PopART's batch serialisation: each op it can "
                   "shard runs as N pieces of the micro-batch, one after another, each with a piece's temporaries "
                   "(default: none)")
    x.add_argument("--host-processes", type=positive_int, metavar="N",
                   help="the simulator's own [hostProcesses]: host processes (PopRun instances) feeding the "
                   "replicas, each filling its replicas' input buffers in turn; a divisor of the replicas (default: 1)")
    x.add_argument("--host-data-rate", type=rate, metavar="SAMPLES_PER_S",
                   help="the simulator's own [hostDataRate]: samples per second each host process's data pipeline "
                   "(DataLoader, infeed) delivers, as timed alone; a slower pipeline sets the throughput "
                   "(default: keeps up)")
    x.add_argument("--host-data-sync", action="store_true",
                   help="[hostDataRate(rate, asynchronous=False)] the data pipeline runs between the calls "
                   "(poptorch.DataLoaderMode.Sync), adding its time to each; needs --host-data-rate")
    x.add_argument("--stream-callback-threads", type=positive_int, metavar="N",
                   help="[POPLAR_ENGINE_OPTIONS streamCallbacks.numWorkerThreads] threads of each host process "
                   "that fill input buffers (default: 1, Poplar's singleThread mode)")
    x.add_argument("--wide-conv-unit-loads", action="store_true",
                   help="[_Popart.set('matmulOptions' and 'convolutionOptions', {'use128BitConvUnitLoad': 'true'})] "
                   "the AMP loads its weights 128 bits a cycle (PopRT's use_128bit_conv_unit_load)")
    x.add_argument("--auto-recomputation", choices=list(AUTO_RECOMPUTATION),
                   help="[_Popart.set('autoRecomputation', N)] what PopART recomputes for the backward pass: in a "
                   "pipeline any value but none recomputes its stages (default: pipeline); in a model that is not "
                   "pipelined (default: none) recompute-all recomputes between the recomputation checkpoints, "
                   "standard lets PopART choose what to keep, norm-only recomputes the norms; in phased execution "
                   "(default: none) any value but none recomputes every forward op but the checkpoints in its "
                   "backward phase")
    x.add_argument("--weight-update-schedule", choices=list(WEIGHT_UPDATE_SCHEDULES),
                   help="[_Popart accumulateOuterFragmentSettings.schedule] how a multi-IPU replica's weight update "
                   "runs: serial (PopART's default) and scheduler run each IPU's step alone where it syncs the "
                   "replica; overlap-cycle and overlap-memory run them together")
    x.add_argument("--weight-update-exclude", type=_int_list, metavar="N,N,...",
                   help="[_Popart accumulateOuterFragmentSettings.excludedVirtualGraphs] IPUs of a replica whose "
                   "step runs alone under the overlap schedules (Graphcore's examples exclude 0)")
    x.add_argument("--weights", choices=("on-chip", "off-chip"),
                   help="[TensorLocations.setWeightLocation] on-chip or off-chip (streaming memory); phased execution "
                   "puts them off chip unless on-chip is given (as PopTorch), which a system without streaming "
                   "memory (c600, c600-x8, ipu-mk1-c2) needs")
    x.add_argument("--optimizer-state", choices=OPTIMIZER_STATES,
                   help="[TensorLocations.setOptimizerLocation] on-chip, off-chip (streaming memory), rts "
                   "(on chip, sharded over --replicas) or off-chip-rts (in streaming memory, sharded); "
                   "training only")
    out = r.add_argument_group("output")
    out.add_argument("--output", metavar="DIR", type=Path,
                     help="also write trace.csv, ops.csv, breakdown.csv, summary.json, timeline.png, memory.png, "
                     "liveness.png, trace.json (Chrome trace events, for Perfetto) and report.html (all on one page); "
                     "the set replaces DIR as a whole (DIR must be new, empty or an earlier run's output)")
    out.add_argument("--json", action="store_true", help="print run.summary() as one JSON object (with the "
                     "options set and the system's config)")
    add_verbosity(r)
    r.set_defaults(func=_cmd_run, subparser=r)
    return r


def add_subcommand(subparsers) -> argparse.ArgumentParser:
    """Register ``run`` on ``ipusim``'s sub-parsers."""
    return configure(subparsers.add_parser("run", help="simulate one call of a model and print its numbers",
                                           description="Simulate one call (all device iterations) of a zoo model. "
                                           f"Without --model: {DEFAULT_MODEL} with "
                                           + ", ".join(f"{k}={v}" for k, v in DEFAULT_PARAMS.items()) + "."))


def given_params(args, error, flags: tuple = MODEL_PARAM_FLAGS) -> dict:
    """The model parameters the flags give (those of ``flags``: ``--num-layers`` and the like, then
    ``--param``, ``--layers-per-ipu``): one given twice with different values is an ``error``, not a
    silent choice."""
    def shown(value) -> str:
        return ",".join(map(str, value)) if isinstance(value, list) else str(value)

    def typed(kv) -> str:  # a --param as typed (one built in code: as --param reads it back)
        key, value = kv
        return getattr(kv, "text", None) or f"{key}={value if isinstance(value, str) else json.dumps(value)}"
    given = [(k, getattr(args, k), f"--{k.replace('_', '-')} {getattr(args, k)}") for k in flags
             if getattr(args, k, None) is not None]
    given += [(kv[0], kv[1], f"--param {typed(kv)}") for kv in args.param]
    if getattr(args, "layers_per_ipu", None) is not None:
        given.append(("layers_per_ipu", args.layers_per_ipu, f"--layers-per-ipu {shown(args.layers_per_ipu)}"))
    params, source = {}, {}
    for key, value, flag in given:
        if key in params and params[key] != value:
            error(f"model parameter {key} is given twice, as {source[key]} and {flag}; give it once")
        params[key], source[key] = value, flag
    return params


def _model_params(args, parser) -> dict:
    return {**(dict(DEFAULT_PARAMS) if args.model is None else {}), **given_params(args, parser.error)}


def _blocks(graph: sim.Graph) -> list[str]:
    """The model's blocks in forward order (what a phased strategy puts in its phases)."""
    return list(dict.fromkeys(op.block for op in graph.ops if op.block is not None))


def _placed_stages(graph: sim.Graph) -> list[Stage]:
    """The model's own placement as explicit stages: the blocks of each annotated stage, on its
    IPU, in stage order (empty if some op has no block, stage or IPU)."""
    if any(op.block is None or op.stage is None or op.ipu is None for op in graph.ops):
        return []
    stages: dict[int, tuple[list[str], int]] = {}
    for op in graph.ops:
        blocks, _ = stages.setdefault(op.stage, ([], op.ipu))
        if op.block not in blocks:
            blocks.append(op.block)
    return [Stage(*blocks).ipu(ipu) for _, (blocks, ipu) in sorted(stages.items())]


def _strategy(args, graph: sim.Graph, parser):
    phased = args.strategy in ("serial-phased", "parallel-phased")
    if args.liveness is not None and not phased:
        parser.error(f"--liveness {args.liveness} applies to phased execution: add --strategy serial-phased "
                     "or --strategy parallel-phased")
    if args.strategy == "parallel-phased" and args.liveness not in (None, "always-live", "off-chip-after-fwd"):
        parser.error(f"--liveness {args.liveness}: ParallelPhasedExecution only sends tensors off chip after the "
                     "forward pass (sendTensorsOffChipAfterFwd); use always-live or off-chip-after-fwd, or "
                     "--strategy serial-phased")
    if args.strategy is None:
        return None
    if args.strategy in ("pipelined", "sharded"):
        stages = _placed_stages(graph)
        if len({s._ipu for s in stages}) < 2:
            parser.error(f"--strategy {args.strategy} needs a model placed on several IPUs (e.g. "
                         "--layers-per-ipu for bert/gpt2, --param 'split_points=[...]' for resnet50)")
        cls = PipelinedExecution if args.strategy == "pipelined" else ShardedExecution
        return cls(*stages)
    blocks = _blocks(graph)
    placed = sorted({op.ipu for op in graph.ops if op.ipu})
    if placed:
        parser.error(f"--strategy {args.strategy} places the model's blocks as phases itself, so the model's own IPU "
                     f"split (its ops on IPUs up to {placed[-1]}: --layers-per-ipu, --param split_points) would not "
                     "be used: give one or the other")
    if not blocks or graph.ops[0].block is None:
        parser.error(f"--strategy {args.strategy} needs a model whose layers are blocks (e.g. bert, gpt2, "
                     f"resnet50); {graph.name!r} has {'none' if not blocks else 'ops before its first block'}")
    liveness = LIVENESS[args.liveness or "always-live"]
    if args.strategy == "serial-phased":
        return SerialPhasedExecution(*[Phase(Stage(b).ipu(0)) for b in blocks]).setTensorsLiveness(liveness)
    return ParallelPhasedExecution(*[Phase(Stage(b).ipu(i % 2)) for i, b in enumerate(blocks)]
                                   ).sendTensorsOffChipAfterFwd(liveness == Liveness.OffChipAfterFwd)


def _options(args, system: sim.System, graph: sim.Graph, parser) -> sim.Options:
    opts = sim.Options()
    strategy = _strategy(args, graph, parser)
    if strategy is not None:
        opts.setExecutionStrategy(strategy)
    if args.sync_pattern is not None:
        opts.syncPattern(SYNC_PATTERNS[args.sync_pattern])
    if args.pipeline_copies is not None:
        opts.pipelineCopies(PIPELINE_COPIES[args.pipeline_copies])
    if args.graph_functions:
        opts.cachedGraphFunctions(True)
    if args.no_step_io_callbacks:
        opts.stepIOCallbacks(False)
    for flag, (key, value) in POPART_FLAGS.items():
        if getattr(args, flag):
            opts._Popart.set(key, value)
    if args.stable_norm:
        opts.enableStableNorm(True)
    if args.replicas is not None:
        opts.replicationFactor(args.replicas)
    if args.auto_round_num_ipus:
        opts.autoRoundNumIPUs(True)
    if args.io_tiles is not None:
        opts.TensorLocations.numIOTiles(args.io_tiles)
    if args.overlap is not None and args.overlap != "none":
        if not args.io_tiles:
            parser.error(f"--overlap {args.overlap} needs IO tiles: add --io-tiles N (an even number, 32 or more)")
        for name in graph.inputs + graph.outputs:
            graph.overlap[name] = int(OVERLAP_MODES[args.overlap])
    if strategy is None and any(graph.overlap.values()) and len({op.ipu or 0 for op in graph.ops}) == 1:
        # streams overlapped by --overlap or by the model itself: what PopTorch asks for on one IPU
        opts.setExecutionStrategy(ShardedExecution())
    if args.prefetch_depth is not None:
        opts._Popart.set("defaultPrefetchBufferingDepth", args.prefetch_depth)
    if args.batch_serialize is not None:
        opts._Popart.set(Options.BATCH_SERIAL_KEYS[0], args.batch_serialize)
    if args.host_processes is not None:
        opts.hostProcesses(args.host_processes)
    if args.host_data_sync and args.host_data_rate is None:
        parser.error("--host-data-sync needs the pipeline's rate: add --host-data-rate SAMPLES_PER_S")
    if args.host_data_rate is not None:
        opts.hostDataRate(args.host_data_rate, asynchronous=not args.host_data_sync)
    if args.stream_callback_threads is not None:
        opts.streamCallbackThreads(args.stream_callback_threads)
    if args.wide_conv_unit_loads:
        opts.set_poplin_options({"use128BitConvUnitLoad": "true"})
    if args.auto_recomputation is not None:
        opts._Popart.set("autoRecomputation", AUTO_RECOMPUTATION[args.auto_recomputation])
    if args.weight_update_schedule is not None:
        opts._Popart.set(Options.OUTER_FRAGMENT_KEYS[0], WEIGHT_UPDATE_SCHEDULES[args.weight_update_schedule])
    if args.weight_update_exclude is not None:
        opts._Popart.set(Options.OUTER_FRAGMENT_KEYS[1], args.weight_update_exclude)
    if args.weights is not None:
        opts.TensorLocations.setWeightLocation(TensorLocationSettings().useOnChipStorage(args.weights == "on-chip"))
    if args.optimizer_state is not None:
        where = TensorLocationSettings().useOnChipStorage(not args.optimizer_state.startswith("off-chip"))
        if args.optimizer_state.endswith("rts"):
            where.useReplicatedTensorSharding(True)
        opts.TensorLocations.setOptimizerLocation(where)
    if args.device_iterations is not None:
        opts.deviceIterations(args.device_iterations)
    if args.gradient_accumulation is not None:
        opts.Training.gradientAccumulation(args.gradient_accumulation)
    if args.synthetic_data:
        opts.enableSyntheticData(True)
    if args.auto_loss_scaling:
        opts._Popart.set("automaticLossScalingSettings.enabled", True)
    if args.output_mode is not None:
        opts.outputMode(*args.output_mode)
    if args.partials is not None:
        opts.Precision.setPartialsType(args.partials)
    if args.memory_margin is not None:
        opts.memoryMargin(args.memory_margin)
    if args.available_memory_proportion is not None:
        ipus = _ipus_per_replica(graph, opts.execution_strategy)
        given = args.available_memory_proportion
        if len(given) not in (1, ipus):
            raise sim.IpuSimError(f"--available-memory-proportion has {len(given)} values; give one value (for every "
                                  f"IPU) or {ipus}, one for each IPU of a replica (every replica takes the same)")
        opts.setAvailableMemoryProportion({f"IPU{i}": given[i if len(given) > 1 else 0] for i in range(ipus)})
    return opts


def _ipus_per_replica(graph: sim.Graph, strategy) -> int:
    """The IPUs of one replica once ``strategy`` places ``graph`` (what compile will find)."""
    placed = graph.copy()
    assign(placed, strategy)
    return max(op.ipu for op in placed.ops) + 1 if placed.ops else 1


def _zoo_size_flags(args) -> list[str]:
    """The flags given that size a zoo model (``--seq-len`` and the like), which a file's model does not take."""
    return [f"--{k.replace('_', '-')}" for k in MODEL_PARAM_FLAGS
            if k != "micro_batch" and getattr(args, k) is not None]


def _onnx_graph(args, parser) -> sim.Graph:
    if args.model is not None:
        parser.error("give either --model or --onnx, not both")
    try:
        from .. import onnx as sim_onnx
    except ImportError as e:
        parser.error(f"--onnx needs the onnx package: pip install -e '.[onnx]' ({e})")
    if not args.onnx.is_file():
        parser.error(f"--onnx {str(args.onnx)!r}: " + ("a folder; give the .onnx file in it" if args.onnx.is_dir()
                                                      else "no such file"))
    zoo_only = _zoo_size_flags(args)
    zoo_only += ["--param"] * bool(args.param) + ["--layers-per-ipu"] * (args.layers_per_ipu is not None)
    if zoo_only:
        parser.error(f"{zoo_only[0]} sets a zoo model's parameter; an ONNX model's sizes are in its file "
                     "(size its symbolic dimensions with --micro-batch and --dim NAME=SIZE)")
    return sim_onnx.load(args.onnx, batch_size=args.micro_batch, dims=given_dims(args.dim, parser.error) or None,
                         loss=args.loss if args.training else None, batch_flag="--micro-batch")


def _torch_graph(args, parser) -> sim.Graph:
    """The graph of ``--torch PATH.py[:FUNCTION]`` at ``--micro-batch`` (default 1), placed by ``--layers-per-ipu``."""
    if args.model is not None or args.onnx is not None:
        parser.error(f"give either --torch or {'--model' if args.model is not None else '--onnx'}, not both")
    from ..poptorch.model_file import TorchModel
    zoo_only = _zoo_size_flags(args)
    zoo_only += [f"--param {key}" for key, _ in args.param if key != "recompute_checkpoint_every_layer"]
    if zoo_only:
        parser.error(f"{zoo_only[0]} sets a zoo model's parameter; a --torch model's sizes are its file's (its "
                     "function gets the micro-batch: --micro-batch N); --torch takes --layers-per-ipu and --param "
                     "recompute_checkpoint_every_layer=true|false")
    recompute = dict(args.param).get("recompute_checkpoint_every_layer")
    if recompute not in (None, True, False):
        parser.error(f"--param recompute_checkpoint_every_layer={recompute}: expected true or false")
    return TorchModel(args.torch).graph(args.micro_batch or 1, args.training, args.partials or "float",
                                        args.layers_per_ipu, recompute)


def simulate_args(args, parser) -> sim.Run:
    """The run ``ipusim run`` flags describe (usage errors through ``parser``)."""
    if args.optimizer and not args.training:
        parser.error("--optimizer only applies with --training")
    if args.optimizer_state and not args.training:
        parser.error("--optimizer-state only applies with --training")
    if args.optimizer_state_dtype and not args.training:
        parser.error("--optimizer-state-dtype only applies with --training")
    if args.max_grad_norm is not None and not args.training:
        parser.error("--max-grad-norm only applies with --training")
    if args.accum_type and not args.training:
        parser.error("--accum-type only applies with --training")
    if args.combined_accum and args.optimizer != "sgd_momentum":
        parser.error("--combined-accum only applies with --training --optimizer sgd_momentum (the velocity "
                     "becomes the gradient accumulator)")
    if args.auto_loss_scaling and not args.training:
        parser.error("--auto-loss-scaling only applies with --training")
    optimizer = optimizer_of(args, parser) if args.training else None
    if args.optimizer_state in ("rts", "off-chip-rts") and (args.replicas or 1) < 2:
        parser.error(f"--optimizer-state {args.optimizer_state} shards the state over replicas: give --replicas 2 "
                     "or more")
    if args.output is not None:
        try:
            check_output_directory(args.output)  # before simulating, not after
        except OSError as e:
            parser.error(f"--output: {e}")
    system = sim.load_system(args.system)
    progress(args, f"system {system.name} ({system.num_ipus} IPU{'s' * (system.num_ipus != 1)}) from {system.path}")
    if not args.onnx and (args.dim or args.loss):
        parser.error(f"{'--dim' if args.dim else '--loss'} applies to an ONNX model (--onnx PATH); a zoo model "
                     "takes its sizes as parameters (--seq-len, --param KEY=VALUE)")
    if args.loss and not args.training:
        parser.error("--loss names the tensor to train on: it applies with --training")
    if args.torch:
        graph = _torch_graph(args, parser)
    elif args.onnx:
        graph = _onnx_graph(args, parser)
    else:
        graph = models.get(args.model or DEFAULT_MODEL, **_model_params(args, parser))
    if args.training and graph.loss is None:
        raise sim.GraphError(f"--training: {graph.name!r} has no loss the simulator recognises"
                             + (" (a SoftmaxCrossEntropyLoss or NegativeLogLikelihoodLoss output); name the tensor "
                                "to train on with --loss TENSOR" if args.onnx else "; run it without --training"))
    progress(args, f"model {graph.name}: {len(graph.ops):,} ops; compiling and simulating "
             + ("a training step" if args.training else "inference"))
    try:
        run = sim.simulate(graph, system, _options(args, system, graph, parser), training=args.training,
                           optimizer=optimizer)
    except sim.OutOfMemoryError as e:  # an ONNX model's remedies in its own words
        if not args.onnx:
            raise
        raise reworded(e, ONNX_REMEDIES) from None
    progress(args, f"simulated {run.cycle_count:,} cycles in {run.wall_seconds:.3f} s "
             f"({run.timeline.events:,} SimPy events)")
    return run


def _cmd_run(args, parser) -> int:
    """Print the summary (text, or --json); -q prints only --json, -v adds progress and, with
    --json, the notes on stderr."""
    run = simulate_args(args, parser)
    if args.output is not None:
        progress(args, f"writing {len(OUTPUT_FILES)} files to {args.output}")
    written = write_outputs(run, args.output) if args.output is not None else []
    if args.json:
        summary = run.summary()
        if written:
            summary["outputs"] = [str(p) for p in written]
        for note in summary["notes"]:
            progress(args, f"note: {note}")
        print(to_json(summary))
    elif verbosity(args) > QUIET:
        print(format_summary(run))
        if written:
            print("\nwrote:\n" + "\n".join(f"  {p}" for p in written))
    return 0
