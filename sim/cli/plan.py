"""``ipusim plan``: the fastest configurations of a model for a global batch on one or more systems.

    ipusim plan --model bert-large --system bow-pod64 --training --optimizer lamb --global-batch 65536
    ipusim plan --model resnet50 --system bow-pod16,bow-pod64 --global-batch 1024-4096 --csv plan.csv
    ipusim plan --config plan.toml --dask tcp://scheduler:8786 --csv plan.csv --resume

The search (:mod:`sim.planner`) covers replicas x IPUs per replica (the layers split over a
pipeline to balance the stages) x micro-batch x gradient accumulation x availableMemoryProportion
x recomputation x optimizer-state placement; a pipelined configuration that does not fit brings
in its reliefs (layers moved off its fullest IPU, a lower proportion on that IPU alone). Each candidate is an ``ipusim run`` command line,
simulated on a process pool (``--workers``) or a Dask cluster (``--dask``) through
:func:`sim.cli.sweep.run_points`; ``--csv`` gets a row per candidate as it is decided (status
ok, oom, invalid or pruned, with the reason), and ``--resume`` keeps the rows a CSV already has.
Prints the best configurations as a table and as ``ipusim run`` commands.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import shlex
import signal
import sys
import time
import tomllib
from pathlib import Path

import pandas as pd

from .. import planner
from ..errors import IpuSimError, OutOfMemoryError
from ..graph.training import Optimizer
from ..results.run import unmodelled_call_effect
from . import run
from .argtypes import (QUIET, csv_file, given_dims, margin, milliseconds, name_size, positive_int, progress,
                       proportions, rate, verbosity, whole_numbers)
from .sweep import (PointError, SweepInterrupted, _CsvRows, _progress_bar, _read_rows, _signals_interrupt,
                    kept_csv_error, run_points, simulate_point)

#: the CSV: a candidate's columns, its result, and its ``ipusim run`` command line
COLUMNS = list(planner.CANDIDATE_COLUMNS) + list(planner.RESULT_COLUMNS) + ["command", "plan"]
#: the breakdown's categories of an IPU's own op work (what the split balances)
_OP_WORK = ("compute", "launch", "exchange", "exchange_setup")
#: model parameters with a flag of their own in ``ipusim run`` (the rest go as --param)
_PARAM_FLAGS = tuple(n for n in run.MODEL_PARAM_FLAGS if n != "micro_batch")


def plan_point(argv: list[str]) -> dict:
    """Simulate one candidate (``ipusim run`` flags); its result columns (status ok, oom or invalid)."""
    try:
        result = simulate_point(argv)
    except OutOfMemoryError as e:
        others = sorted(i for i in e.shortfalls if i != e.ipu)
        more = f"; also short: IPU{'s' * (len(others) > 1)} {', '.join(map(str, others))}" if others else ""
        return {"status": "oom", "reason": f"out of memory on IPU {e.ipu}: short by {e.shortfall_bytes:,} bytes "
                f"per tile{oom_where(e)}{oom_margin(e)}{more}"}
    except (IpuSimError, PointError) as e:
        return {"status": "invalid", "reason": str(e).splitlines()[0]}
    breakdown = result.breakdown
    replica0 = [ipu for ipu in breakdown.index if ipu < result.executable.ipus_per_replica]
    busy = [int(breakdown.loc[ipu, list(_OP_WORK)].sum()) for ipu in replica0]
    return {"status": "ok", "samples_per_second": result.samples_per_second, "seconds": result.seconds,
            "latency_avg_s": step_latency(result),
            "cycle_count": result.cycle_count,
            "peak_tile_bytes": max(m["peak_tile_bytes"] for m in result.memory.values()),
            "stage_balance": min(busy) / max(busy) if max(busy) else 1.0, "reason": ""}


def step_latency(result) -> float:
    """A run's latency for a plan, in seconds: ``getLatency()``'s average round trip of a step; for a generation loop
    (``Graph.carries_iterations``), whose iterations stream nothing, the time one iteration (a token) takes, the
    call's seconds over its device iterations; NaN when neither is measured (synthetic data)."""
    if result.executable.graph.carries_iterations:
        return result.seconds / result.executable.options.device_iterations
    return result.latency[2] if result.latency_measured() else math.nan


def oom_where(e: OutOfMemoryError) -> str:
    """`` at op 'x' (matmul, backward pass, pipeline stage 3)``: where ``e``'s worst IPU peaks (its pass and
    stage or phase, which tell a forward stage from a backward one on the same IPU), or only the op."""
    if e.where and e.where.startswith("op "):
        return f" at {e.where}"
    return f" at op {e.op!r}" if e.op else ""


def oom_margin(e: OutOfMemoryError) -> str:
    """What of ``e``'s shortfall is the memory margin's: whether the configuration fits without it."""
    if not e.margin:
        return ""
    bare = e.shortfall_bytes - e.margin_bytes
    left = f"it fits without it, {-bare:,} bytes to spare" if bare <= 0 else f"{bare:,} without it"
    return f" with the memory margin of {e.margin * 100:g}% ({left})"


def _param_text(value) -> str:
    """A model parameter as ``ipusim run --param`` reads it back (int, float, JSON or text)."""
    if isinstance(value, str) and run._parse_value(value) == value:
        return value
    return json.dumps(value, separators=(",", ":"))


def _param_order(params: dict) -> list[tuple[str, object]]:
    """The model parameters in one order whatever order they were given in (flags, ``--param``, a ``--config``
    file's ``[params]``): those with a flag of their own first, in ``ipusim run``'s order, then the rest by name.
    A candidate's command line is what ``--resume`` finds its row by, so the same plan must write the same one."""
    def key(item):
        name = item[0]
        return (0, _PARAM_FLAGS.index(name), "") if name in _PARAM_FLAGS else (1, 0, name)
    return sorted(params.items(), key=key)


def command(pl: planner.Planner, c: planner.Candidate) -> list[str]:
    """The ``ipusim run`` flags of candidate ``c``."""
    m, sp = pl.model, pl.space
    argv = ["--system", c.system] + (["--torch", m.torch] if m.torch else ["--onnx", str(m.onnx)] if m.onnx
                                     else ["--model", m.name])
    argv += [a for name, size in sorted(m.dims.items()) for a in ("--dim", f"{name}={size}")]  # as _param_order
    argv += ["--loss", m.loss] if m.loss else []
    for key, value in _param_order(m.params):
        argv += ([f"--{key.replace('_', '-')}", str(value)] if key in _PARAM_FLAGS and isinstance(value, int)
                 else ["--param", f"{key}={_param_text(value)}"])
    argv += ["--micro-batch", str(c.micro_batch)]
    for key, value in m.placement(pl.units, c.split, c.recompute).items():
        if value is None:
            continue  # the zoo's default (e.g. resnet50's recompute_checkpoints: none)
        argv += (["--layers-per-ipu", ",".join(map(str, value))] if key == "layers_per_ipu"
                 else ["--param", f"{key}={_param_text(value)}"])
    if pl.sequential and c.pipeline > 1:
        argv += ["--strategy", "sharded"]
    if c.recompute and c.pipeline == 1:  # one IPU: PopTorch's default (None) would recompute nothing
        argv += ["--auto-recomputation", "recompute-all"]
    if c.replicas > 1:
        argv += ["--replicas", str(c.replicas)]
    if c.replicas > sp.replicas_per_process:
        argv += ["--host-processes", str(sp.host_processes(c.replicas))]
    if sp.host_data_rate:
        argv += ["--host-data-rate", str(sp.host_data_rate)]
    if sp.training:
        argv += ["--training", "--optimizer", sp.optimizer]
        dtypes = Optimizer(sp.optimizer, sp.optimizer_state_dtype).state_dtypes
        if dtypes and set(dtypes) != {"float32"}:
            argv += ["--optimizer-state-dtype", ",".join(dtypes)]
        if c.gradient_accumulation > 1:
            argv += ["--gradient-accumulation", str(c.gradient_accumulation)]
        if c.optimizer_state:
            argv += ["--optimizer-state", c.optimizer_state]
    argv += ["--available-memory-proportion", c.proportion_text()]
    if c.device_iterations != 1:
        argv += ["--device-iterations", str(c.device_iterations)]
    if c.partials != "float":
        argv += ["--partials", c.partials]
    if sp.memory_margin:
        argv += ["--memory-margin", f"{sp.memory_margin:g}"]
    if sp.tied_gather:
        argv += ["--tied-gather"]
    return argv


def command_line(argv: list[str]) -> str:
    return "ipusim run " + shlex.join(argv)


# --- argument types -----------------------------------------------------------------------------

_ints = whole_numbers(1, "1,2,4")


def _count(zero_means: str):
    """An argument type: a whole number >= 0, where 0 means ``zero_means``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value < 0:
            raise argparse.ArgumentTypeError(f"expected a whole number >= 0 (0: {zero_means}), got {text!r}")
        return value
    return parse


_layers = _count("balanced splits only")  # layers a relief may move
_commands = _count("no commands")  # commands to print


def _relief_proportions(text: str) -> list[float]:
    """``0.1,0.15`` -> [0.1, 0.15]; ``none`` -> [] (no per-IPU proportions)."""
    return [] if text.strip().lower() == "none" else proportions(text)


def _choices(allowed: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        values = [v.strip() for v in text.split(",")]
        bad = [v for v in values if v not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(f"{bad[0]!r} is not one of {', '.join(allowed)}")
        return values
    return parse


def _systems(text: str) -> list[str]:
    """``--system NAME[,NAME...]``: config names or TOML paths, separated by commas (spaces around them
    left out); the path of a file whose name holds a comma is one system."""
    if Path(text).is_file():
        return [text]
    return [s.strip() for s in text.split(",") if s.strip()]


def _config_system(path: Path, value: str) -> str:
    """A ``system`` of a ``--config`` file as the command line takes it: a TOML path (``.toml``, or with a
    folder) is relative to the config file's folder, as ``onnx`` and ``torch`` are and as ``extends`` in a system
    config is; a config name stays a name."""
    given = Path(value)
    if (given.suffix == ".toml" or "/" in value) and not given.is_absolute():
        return str(path.parent / given)
    return value


def _global_batch(text: str) -> tuple[int, int]:
    """``1024`` -> (1024, 1024); ``512-4096`` -> (512, 4096)."""
    lo, sep, hi = text.partition("-")
    try:
        pair = (int(lo), int(hi) if sep else int(lo))
    except ValueError:
        pair = (0, 0)
    if not 1 <= pair[0] <= pair[1]:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1 (e.g. 1024) or a range LOW-HIGH "
                                         f"(e.g. 512-4096), got {text!r}")
    return pair


def configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the flags of ``ipusim plan`` to ``p``."""
    w = p.add_argument_group("what to plan")
    w.add_argument("--config", type=Path, metavar="FILE.toml",
                   help="read the plan's flags from a TOML file (keys are the flags' names, e.g. model, system, "
                   "global_batch, training, micro_batch = [1, 2]; model parameters in a [params] table); "
                   "flags on the command line override it")
    w.add_argument("--model", help="zoo model (see `ipusim models`)")
    w.add_argument("--onnx", metavar="PATH", help="an ONNX model instead (needs the onnx extra)")
    w.add_argument("--torch", metavar="PATH.py[:FUNCTION]",
                   help="a PyTorch model instead: FUNCTION (default: model) in the file returns (module, inputs) for "
                   "the micro-batch it is given, as `ipusim run --torch`; its layers (its nn.ModuleLists of blocks) split "
                   "over a pipeline's IPUs")
    w.add_argument("--dim", action="append", default=[], type=name_size, metavar="NAME=SIZE",
                   help="with --onnx: the size of a symbolic dimension other than the batch (repeatable)")
    w.add_argument("--loss", metavar="TENSOR",
                   help="with --onnx --training: the ONNX tensor to train on (default: the model's one loss)")
    for name in _PARAM_FLAGS:
        w.add_argument("--" + name.replace("_", "-"), dest=name, type=int, metavar="N", help=argparse.SUPPRESS)
    w.add_argument("--param", action="append", default=[], type=run._key_value, metavar="KEY=VALUE",
                   help="a model parameter (repeatable); --seq-len, --num-layers, --hidden, --heads, --vocab, "
                   "--image-size work too")
    w.add_argument("--system", type=_systems, metavar="NAME[,NAME...]",
                   help="the system(s) to plan for: config names (see `ipusim systems`) or .toml paths (required)")
    w.add_argument("--global-batch", type=_global_batch, metavar="N|LOW-HIGH",
                   help="samples per weight update (training) or per step (inference): micro-batch x "
                   "accumulation x replicas; a range takes every global batch in it (required)")
    w.add_argument("--training", action="store_true", help="plan training (default: inference)")
    w.add_argument("--optimizer", choices=list(run.OPTIMIZERS), help="with --training (default: sgd)")
    w.add_argument("--optimizer-state-dtype", type=run.state_dtypes, metavar="DTYPE[,DTYPE]",
                   help="as `ipusim run --optimizer-state-dtype`, for every candidate (default: float32)")
    a = p.add_argument_group("the search space (comma-separated values; defaults in docs/cli.md)")
    a.add_argument("--pipeline", type=_ints, metavar="P,...", help="IPUs per replica (pipeline stages); "
                   "default: powers of two up to the system's IPUs and the model's layers + 1")
    a.add_argument("--replicas", type=_ints, metavar="R,...", help="default: powers of two that fit the system")
    a.add_argument("--micro-batch", type=_ints, metavar="N,...",
                   help="default: 1, 2, 4, ... 64 and, for a global batch of one size, every divisor up to 64 of a "
                   "replica's share of it")
    a.add_argument("--gradient-accumulation", type=_ints, metavar="N,...",
                   help="default: whatever makes the global batch (with a range: powers of two inside it)")
    a.add_argument("--available-memory-proportion", type=proportions, metavar="P,...",
                   help="on every IPU of a replica; default: 0.2,0.4,0.6")
    a.add_argument("--relief", type=_layers, default=3, metavar="N",
                   help="a pipelined configuration that does not fit is retried with 1, 2, ... N layers moved "
                   "off its fullest IPU (by weights, optimizer state and accumulators per tile), the others "
                   "rebalanced; 0: balanced splits only (default: 3)")
    a.add_argument("--relief-proportion", type=_relief_proportions, metavar="P,...",
                   help="availableMemoryProportion values that fullest IPU alone also tries, below the "
                   "configuration's own (default: the lowest --available-memory-proportion; none: same on "
                   "every IPU)")
    a.add_argument("--recompute", type=_choices(("on", "off")), metavar="on,off",
                   help="recomputation checkpoint after every layer (bert, gpt2, vit, swin) or block (resnet50); "
                   "default: both, in training")
    a.add_argument("--optimizer-state", type=_choices(run.OPTIMIZER_STATES), metavar="on-chip,off-chip,rts,...",
                   help="default: all four in training (rts and off-chip-rts with 2 replicas or more), none "
                   "for sgd")
    a.add_argument("--partials", type=_choices(planner.PARTIALS), default=["float"], metavar="float,half",
                   help="[Precision.setPartialsType] of the candidates: float, half or both (float,half; half "
                   "partials hold fp16 matmuls' and convolutions' partials in less memory and, but on Mk1, run them "
                   "faster, at a cost in precision; default: float, PopTorch's)")
    a.add_argument("--device-iterations", type=positive_int, metavar="N",
                   help="of every candidate (default: 1 in training, 32 in inference)")
    a.add_argument("--tied-gather", action="store_true",
                   help="with --training: PopART's TiedGather and TiedGatherAccumulate patterns on every candidate, "
                   "as `ipusim run --tied-gather` (Graphcore's BERT and GPT-2 scripts set them; default: off)")
    a.add_argument("--memory-margin", type=margin, default=planner.DEFAULT_MEMORY_MARGIN, metavar="F",
                   help="[memoryMargin] of every candidate: it fits only if each fullest tile, raised by this "
                   "fraction, fits (default: %(default)s, the largest that keeps every configuration Graphcore "
                   "publishes as running; 0 to fit to the byte)")
    a.add_argument("--replicas-per-process", type=positive_int, default=2, metavar="N",
                   help="replicas each host process (PopRun instance) feeds at most; a candidate runs with the fewest "
                   "--host-processes that divide its replicas (default: 2, as Graphcore's PopRun scripts)")
    a.add_argument("--host-data-rate", type=rate, metavar="SAMPLES_PER_S",
                   help="[hostDataRate] of every candidate: samples per second each host process's data pipeline "
                   "delivers, timed alone; a slower pipeline sets a candidate's throughput (default: keeps up)")
    a.add_argument("--target-throughput", type=rate, metavar="SAMPLES_PER_S",
                   help="keep only configurations reaching this many samples per second and rank them by the IPUs "
                   "they use, fewest first, then by throughput: the smallest system for a throughput (default: rank "
                   "by throughput alone)")
    a.add_argument("--max-latency", type=milliseconds, metavar="MS",
                   help="inference: keep only configurations whose step's round trip (getLatency()'s average: from "
                   "the IPU's request for a step's inputs to its outputs reaching the host) takes at most MS "
                   "milliseconds (default: no limit)")
    s = p.add_argument_group("the search")
    s.add_argument("--top", type=positive_int, default=10, metavar="K",
                   help="show the K best; pruning keeps them exact (default: 10)")
    s.add_argument("--commands", type=_commands, default=3, metavar="N",
                   help="print the N best as `ipusim run` commands, at most --top (default: 3)")
    s.add_argument("--exhaustive", action="store_true",
                   help="simulate every candidate: no bound, no inference, no check before simulating")
    s.add_argument("--batch", type=positive_int, default=16, metavar="N",
                   help="candidates simulated between pruning decisions (default: 16)")
    s.add_argument("--workers", type=positive_int, metavar="N", help="processes, >= 1 (default: all cores)")
    s.add_argument("--dask", metavar="ADDRESS", help="simulate on this Dask scheduler instead")
    s.add_argument("--csv", type=csv_file, metavar="FILE", help="write a row per candidate, each as it is decided")
    s.add_argument("--resume", action="store_true",
                   help="with --csv: keep the candidates the CSV already holds and decide the others")
    p.set_defaults(func=_cmd_plan, subparser=p)
    return p


def add_subcommand(subparsers) -> argparse.ArgumentParser:
    """Register ``plan`` on ``ipusim``'s sub-parsers."""
    return configure(subparsers.add_parser("plan", help="the fastest configurations of a model for a global batch",
                                           description=__doc__.split("\n\n")[0]))


# --- --config ----------------------------------------------------------------------------------

def config_argv(path: Path, parser: argparse.ArgumentParser) -> list[str]:
    """The flags a ``--config`` TOML file stands for (placed before the command line's)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        parser.error(f"--config {str(path)!r}: {e.strerror or e}")
    except tomllib.TOMLDecodeError as e:
        parser.error(f"--config {str(path)!r}: not valid TOML ({e})")
    flags = {a.dest: a for a in parser._actions if a.option_strings}
    argv: list[str] = []
    for key, value in data.items():
        dest = key.replace("-", "_")
        if key == "params":
            if not isinstance(value, dict):
                parser.error(f"--config {str(path)!r}: 'params' must be a table of model parameters")
            argv += [a for k, v in value.items() for a in ("--param", f"{k}={_param_text(v)}")]
            continue
        if dest in ("config", "help", "resume", "verbosity") or dest not in flags:
            valid = sorted(d for d in flags if d not in ("config", "help", "resume", "verbosity")) + ["params"]
            parser.error(f"--config {str(path)!r}: unknown key {key!r}; valid keys: {', '.join(valid)}")
        flag = flags[dest].option_strings[-1]
        if isinstance(flags[dest], argparse._StoreTrueAction) and not isinstance(value, bool):
            parser.error(f"--config {str(path)!r}: {key} = {value!r}: expected true or false")
        if isinstance(value, bool):
            if not isinstance(flags[dest], argparse._StoreTrueAction):
                parser.error(f"--config {str(path)!r}: {key} = {str(value).lower()}: expected a value, not true/false")
            argv += [flag] if value else []
        elif dest == "system" and isinstance(value, (str, list)):
            systems = [value] if isinstance(value, str) else value
            if not systems or not all(isinstance(v, str) and v.strip() for v in systems):
                parser.error(f"--config {str(path)!r}: system = {value!r}: expected a config name or the path of a "
                             ".toml file, or a list of them")
            argv += [flag, ",".join(_config_system(path, v.strip()) for v in systems)]
        elif isinstance(value, list) and isinstance(flags[dest], argparse._AppendAction):
            argv += [a for v in value for a in (flag, str(v))]  # dim = ["seq=128"]: one flag a value
        elif isinstance(value, list):
            argv += [flag, ",".join(str(v) for v in value)]
        else:
            if dest in ("onnx", "torch"):
                value = str((path.parent / str(value)))
            argv += [flag, str(value)]
    return argv


def merge_config(args: argparse.Namespace, parser: argparse.ArgumentParser) -> argparse.Namespace:
    """``args`` with what ``--config`` sets wherever the command line left a flag at its
    default; the model parameters add up, the command line's (``--param`` or ``--num-layers`` and the
    like) replacing the file's for the same parameter."""
    if args.config is None:
        return args
    cfg = parser.parse_args(config_argv(args.config, parser))
    merged = argparse.Namespace(**vars(args))
    given = {k for k, _ in args.param} | {k for k in _PARAM_FLAGS if getattr(args, k, None) is not None}
    typed = _typed_flags(args, parser)
    for dest, value in vars(cfg).items():
        if dest == "param":  # the command line's value of a parameter replaces the file's
            merged.param = [kv for kv in cfg.param if kv[0] not in given] + args.param
        elif dest in _PARAM_FLAGS and dest in given:
            continue  # the command line gave this parameter (as --param)
        elif dest not in typed:
            setattr(merged, dest, value)
    return merged


def _typed_flags(args: argparse.Namespace, parser: argparse.ArgumentParser) -> set[str]:
    """The dests of the flags typed on the command line (even at their default's value); without the
    typed words (``args.argv``, set by ``ipusim``'s main), those whose value is not the default."""
    argv = getattr(args, "argv", None)
    if argv is None or "plan" not in argv:
        return {d for d, v in vars(args).items() if v != parser.get_default(d)}
    unset = object()
    saved = {a: a.default for a in parser._actions}
    try:
        for a in saved:  # an appending flag's list starts empty (None), the others at a marker
            a.default = None if isinstance(a, argparse._AppendAction) else unset
        typed, _ = parser.parse_known_args(argv[argv.index("plan") + 1:])
    finally:
        for a, default in saved.items():
            a.default = default
    return {d for d, v in vars(typed).items() if v is not unset and v is not None}


# --- the command --------------------------------------------------------------------------------

def build_planner(args, parser) -> planner.Planner:
    """The planner the flags describe (usage errors through ``parser``)."""
    if args.system is None or args.global_batch is None:
        parser.error("give --system and --global-batch (or a --config file with system and global_batch)")
    if args.optimizer and not args.training:
        parser.error("--optimizer only applies with --training")
    if args.optimizer_state_dtype and not args.training:
        parser.error("--optimizer-state-dtype only applies with --training")
    if args.loss and not args.training:
        parser.error("--loss names the tensor to train on: it applies with --training")
    state_dtype = run.optimizer_of(args, parser).state_dtype
    if [args.model, args.onnx, args.torch].count(None) != 2:
        parser.error("give --model NAME, --onnx PATH or --torch PATH.py[:FUNCTION] (one of them)")
    if args.resume and args.csv is None:
        parser.error("--resume needs --csv FILE (the CSV of the plan to finish)")
    kept = kept_csv_error(args.csv, args.resume, "plan")
    if kept:
        parser.error(kept)
    model = planner.Model(args.model, run.given_params(args, parser.error, _PARAM_FLAGS), args.onnx,
                          given_dims(args.dim, parser.error), args.loss, args.torch, args.training)
    space = planner.Space(
        systems=args.system, global_batch=args.global_batch, training=args.training,
        optimizer=args.optimizer or "sgd", pipelines=args.pipeline, replicas=args.replicas,
        micro_batches=args.micro_batch, gradient_accumulations=args.gradient_accumulation,
        proportions=args.available_memory_proportion,
        recompute=None if args.recompute is None else [v == "on" for v in args.recompute],
        optimizer_states=args.optimizer_state, device_iterations=args.device_iterations, partials=args.partials,
        optimizer_state_dtype=state_dtype, relief=args.relief, relief_proportions=args.relief_proportion,
        replicas_per_process=args.replicas_per_process, memory_margin=args.memory_margin,
        tied_gather=args.tied_gather, host_data_rate=args.host_data_rate, max_latency=args.max_latency,
        target_throughput=args.target_throughput)
    return planner.Planner(model, space)


def plan_key(pl: planner.Planner) -> str:
    """What a plan's rows belong to (its CSV's ``plan`` column): the model with its parameters and
    dimensions, and the space searched."""
    m = pl.model
    return json.dumps({"model": m.name, "onnx": m.onnx and str(m.onnx), "params": m.params, "dims": m.dims,
                       "loss": m.loss, **({"torch": m.torch} if m.torch else {}),
                       "space": dataclasses.asdict(pl.space)}, sort_keys=True, default=str)


def _known_rows(path: Path, key: str) -> dict[str, dict]:
    """Rows of an earlier run of the plan ``key`` from its CSV, by command line; a CSV that holds
    another plan's rows is a :class:`PointError` (its rows would mix with this plan's)."""
    rows = _read_rows(path, COLUMNS)
    other = next((r for r in rows if r.get("plan") != key), None)
    if other is not None:
        raise PointError(f"--resume: {str(path)!r} holds the rows of another plan (another model, parameter or "
                         "search axis); resume with that plan's flags, or give a new --csv")
    return {r["command"]: r for r in rows if r.get("command")}


def _replayable(row: dict, exhaustive: bool) -> bool:
    """Whether a row ``--resume`` read back stands for its candidate's result when the search comes to simulate
    it: not a pruned row (its bound was below the best of that run, whose ``--top`` or batches may have been
    others), and under ``exhaustive`` only a simulated one (not an out-of-memory inferred from another
    configuration or from always-live bytes, nor one over the latency limit or below the target throughput by
    its bound, which an exhaustive search simulates)."""
    if row.get("status") == "pruned":
        return False
    return not (exhaustive and row.get("status") in ("oom", "latency", "slow") and any(
        mark in row.get("reason", "") for mark in ("[inferred, not simulated", "(not simulated)")))


def plan(pl: planner.Planner, *, top: int = 10, exhaustive: bool = False, batch: int = 16,
         workers: int | None = None, dask: str | None = None, csv_path: Path | None = None,
         resume: bool = False, bar: bool = True) -> pd.DataFrame:
    """Decide every candidate of ``pl``; a row per candidate (:data:`COLUMNS`), in candidate order.

    Simulates on a process pool (``workers``) or the Dask scheduler at ``dask``; with
    ``csv_path`` each row is appended as it is decided, and with ``resume`` the candidates the
    CSV already holds (same command line) are not simulated again.
    """
    argvs: dict[int, list[str]] = {}  # candidate index -> its flags (reliefs come in as the search goes)

    def argv(i: int) -> list[str]:
        if i not in argvs:
            argvs[i] = command(pl, pl.candidates[i])
        return argvs[i]

    key = plan_key(pl)
    known = _known_rows(csv_path, key) if resume and csv_path else {}
    done_before = sum(command_line(argv(i)) in known for i in range(len(pl.candidates)))
    out = _CsvRows(csv_path, COLUMNS, append=resume)
    progress = _progress_bar(len(pl.candidates), done_before) if bar else None
    replayed: set[int] = set()  # candidates whose row the CSV held, standing in for their simulation

    def recall(i: int) -> dict | None:
        row = known.get(command_line(argv(i)))
        if row is None or not _replayable(row, exhaustive):
            return None
        replayed.add(i)
        return row

    def evaluate(wave: dict[int, planner.Candidate]):
        with contextlib.closing(run_points({i: argv(i) for i in wave}, workers, dask, point=plan_point)) as done:
            yield from done

    def on_row(i: int, row: dict) -> None:
        row["command"], row["plan"] = command_line(argv(i)), key
        before = known.get(row["command"])
        if i in replayed or (before is not None and (before["status"] == row["status"] == "pruned" or (
                before["status"], before["reason"]) == (row["status"], row["reason"]))):
            return  # the CSV holds this row already (pruned again: only the threshold in its reason differs)
        out.write(row)  # new, or decided otherwise than the CSV's row (e.g. pruned then): --resume reads the last
        if before is None:
            if progress is not None:
                if progress.total < len(pl.candidates):  # reliefs brought in
                    progress.total = len(pl.candidates)
                progress.update()
    try:
        rows = pl.run(evaluate, top=top, prune=not exhaustive, batch=batch, known=recall, on_row=on_row)
    finally:
        if progress is not None:
            progress.close()
        out.close()
    table = pd.DataFrame(rows, columns=COLUMNS)
    for c in ("samples_per_second", "bound_samples_per_second", "seconds", "latency_avg_s", "cycle_count",
              "peak_tile_bytes", "stage_balance"):  # rows read back from a CSV hold text, "" where there is no number
        table[c] = pd.to_numeric(table[c].mask(table[c] == ""))
    for c in ("ipus", "replicas", "pipeline", "micro_batch", "gradient_accumulation", "global_batch",
              "device_iterations"):
        table[c] = table[c].astype(int)
    for c in ("split", "available_memory_proportion", "recompute", "optimizer_state", "partials", "reason", "status"):
        table[c] = table[c].fillna("").astype(str)
    return table


def rank(table: pd.DataFrame, pl: planner.Planner | None = None) -> pd.DataFrame:
    """The configurations that fit, fastest first (:func:`sim.planner.ranking`; with the planner
    whose :func:`plan` made ``table``, ties by the candidates' own preference)."""
    return table.iloc[planner.ranking(table.to_dict("records"), pl.candidates if pl is not None else None,
                                      by_ipus=pl is not None and pl.space.target_throughput is not None)]


def _summary(table: pd.DataFrame, seconds: float, reliefs: int = 0, latency_limit: bool = False,
             target: bool = False) -> str:
    n = table["status"].value_counts()
    oom = table["reason"][table["status"] == "oom"]
    inferred = oom.str.contains("[inferred", regex=False)
    # an inferred reason says "[inferred, not simulated ...]" too: only the rest were dropped on their own bytes
    always_live = int((oom.str.contains("(not simulated)", regex=False) & ~inferred).sum())
    relieved = f" ({reliefs:,} of them reliefs)" if reliefs else ""
    slow = table["reason"][table["status"] == "latency"]
    over = (f"{len(slow):,} over --max-latency ({int(slow.str.contains('(not simulated)', regex=False).sum()):,} by "
            "their latency bound), " if latency_limit else "")
    short = table["reason"][table["status"] == "slow"]
    if target:
        unsimulated = int(short.str.contains("(not simulated)", regex=False).sum())
        over += f"{len(short):,} below --target-throughput ({unsimulated:,} by their throughput bound), "
    return (f"{len(table):,} configurations{relieved} in {seconds:.0f} s: {n.get('ok', 0):,} fit, {over}"
            f"{n.get('oom', 0):,} out of memory ({int(inferred.sum()):,} inferred, {always_live:,} from always-live "
            f"bytes), {n.get('invalid', 0):,} invalid, {n.get('pruned', 0):,} pruned by their "
            + ("IPUs or throughput bound" if target else "throughput bound"))


def _fastest_round_trip(table: pd.DataFrame, pl: planner.Planner) -> str:
    """What the configurations over the latency limit came to: the shortest round trip simulated, with its
    command, or (none simulated) the shortest latency bound's reason (``table``: :func:`plan`'s rows of ``pl``, in
    candidate order)."""
    slow = table[table["status"] == "latency"]
    timed = slow[slow["latency_avg_s"].notna()]
    if len(timed):
        row = timed.loc[timed["latency_avg_s"].idxmin()]
        return f"the shortest round trip simulated is {row['latency_avg_s'] * 1e3:,.3f} ms: {row['command']}"
    row = slow.loc[min(slow.index, key=lambda n: pl.latency_bound(pl.candidates[n]))]
    return f"none was simulated; the shortest by its bound: {row['command']}: {row['reason']}"


def _fastest(table: pd.DataFrame) -> str:
    """What the configurations below the target throughput came to: the fastest simulated, with its command,
    or (none simulated) the highest throughput bound's reason."""
    slow = table[table["status"] == "slow"]
    timed = slow[slow["samples_per_second"].notna()]
    if len(timed):
        row = timed.loc[timed["samples_per_second"].idxmax()]
        return f"the fastest simulated reaches {row['samples_per_second']:,.0f}: {row['command']}"
    row = slow.loc[slow["bound_samples_per_second"].idxmax()]
    return f"none was simulated; the highest bound: {row['command']}: {row['reason']}"


def format_table(best: pd.DataFrame, partials: bool = False, inference: bool = False) -> str:
    """The screen table of the ranked configurations; ``partials``: with their partials type (a plan that
    searched half partials); ``inference``: with each one's average round trip of a step in ms, without the
    training axes (accumulation, recomputation, optimizer state)."""
    show = pd.DataFrame({
        "rank": range(1, len(best) + 1),
        "samples/s": [f"{v:,.0f}" for v in best["samples_per_second"]],
        "system": best["system"], "IPUs": best["ipus"],
        "replicas x pipeline": [f"{r} x {p}" for r, p in zip(best["replicas"], best["pipeline"])],
        "split": best["split"].replace("", "-"), "micro-batch": best["micro_batch"],
        "accumulation": best["gradient_accumulation"], "AMP": best["available_memory_proportion"],
        "recompute": best["recompute"].replace("", "-"), "optimizer state": best["optimizer_state"].replace("", "-"),
        "peak tile KiB": [f"{v / 1024:,.0f}" for v in best["peak_tile_bytes"]],
        "balance": [f"{v:.2f}" for v in best["stage_balance"]]})
    if partials:
        show.insert(show.columns.get_loc("optimizer state") + 1, "partials", best["partials"].to_numpy())
    if inference:
        show.insert(show.columns.get_loc("samples/s") + 1, "latency ms",
                    ["-" if math.isnan(v) else f"{v * 1e3:,.3f}" for v in best["latency_avg_s"]])
        show = show.drop(columns=["accumulation", "recompute", "optimizer state"])
    return show.to_string(index=False)


def _header(pl: planner.Planner) -> str:
    m, sp = pl.model, pl.space
    lo, hi = sp.global_batch
    what = (f"training ({sp.optimizer})" if sp.training else "inference")
    gb = f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"
    return (f"plan: {m.label} on {', '.join(dict.fromkeys(sp.systems))}, {what}, global batch {gb}, "
            f"device iterations {pl.device_iterations}" + "".join(f"\nnote: {n}" for n in pl.notes))


def _interrupted_message(e: SweepInterrupted, csv_path: Path | None) -> str:
    head = f"ipusim: plan stopped by {signal.Signals(e.signum).name}"
    if csv_path is None:
        return head + "; without --csv its rows are not kept (give --csv FILE to be able to --resume)"
    return head + f"; rows so far in {str(csv_path)!r}: run the same command with --resume to finish"


def _held_out_note(pl: planner.Planner, top) -> str | None:
    """What the held-out published measurements of workloads like the best configuration say of the
    simulator's error (sim.results.held_out), as a run's note says it; None if none is of its kind."""
    from ..graph.workload import family
    from ..results import held_out
    found = held_out.like(family(pl.model.build(int(top["micro_batch"]))), pl.space.training, int(top["ipus"]),
                          pl.model.name or "")
    return f"note: validation: {held_out.describe(found)}" if found else None


def _cmd_plan(args, parser) -> int:
    t0 = time.perf_counter()
    quiet = verbosity(args) <= QUIET
    args = merge_config(args, parser)
    try:
        pl = build_planner(args, parser)
    except PointError as e:
        parser.error(str(e))
    if not quiet:
        print(_header(pl), flush=True)
    progress(args, f"{len(pl.candidates):,} configurations, bounded in {time.perf_counter() - t0:.1f} s (the "
             f"model priced at {pl.profiles_priced} IPU x micro-batch x proportion x accumulation points); "
             f"simulating in batches of {args.batch} on "
             + (f"the Dask scheduler {args.dask}" if args.dask else f"{args.workers or 'all'} worker(s)"))
    try:
        with _signals_interrupt():
            table = plan(pl, top=args.top, exhaustive=args.exhaustive, batch=args.batch, workers=args.workers,
                         dask=args.dask, csv_path=args.csv, resume=args.resume, bar=not quiet)
    except PointError as e:
        parser.error(str(e))
    except SweepInterrupted as e:
        print(_interrupted_message(e, args.csv), file=sys.stderr)
        return 128 + e.signum
    best = rank(table, pl)
    if not quiet:
        print(_summary(table, time.perf_counter() - t0, len(pl.candidates) - pl.enumerated,
                       pl.space.max_latency is not None, pl.space.target_throughput is not None))
    if best.empty and (table["status"] == "latency").any():
        print(f"ipusim: no configuration meets --max-latency {pl.space.max_latency * 1e3:g} ms; "
              + _fastest_round_trip(table, pl), file=sys.stderr)
        return 2
    if best.empty and (table["status"] == "slow").any():
        print(f"ipusim: no configuration reaches --target-throughput {pl.space.target_throughput:,.0f} samples/s; "
              + _fastest(table), file=sys.stderr)
        return 2
    if best.empty:
        dropped = table[table["status"] == "oom"]
        example = dropped if len(dropped) else table[table["reason"].astype(str) != ""]
        head = "no configuration fits" if len(dropped) else "no valid configuration (every one is invalid)"
        print(f"ipusim: {head}" + (f"; e.g. {example['command'].iloc[0]}: {example['reason'].iloc[0]}"
                                   if len(example) else ""), file=sys.stderr)
        return 3 if len(dropped) else 2
    print(format_table(best.head(args.top), partials=pl.space.partials != ("float",), inference=not pl.space.training))
    if not quiet and pl.space.training and best["pipeline"].iloc[0] > 1:
        print("note: the best is a pipelined training configuration (not modelled): "
              + unmodelled_call_effect(best["seconds"].iloc[0]))
    note = None if quiet else _held_out_note(pl, best.iloc[0])
    if note:
        print(note)
    shown = min(args.commands, args.top, len(best))  # the top K are exact; the rest may be pruned away
    if shown > 0 and not quiet:
        print(f"\nthe best {shown} as commands:")
        for n, cmd in enumerate(best["command"].head(shown), 1):
            print(f"  {n}. {cmd}")
    if args.csv is not None and not quiet:
        print(f"\nevery configuration, with its status and reason: {args.csv}")
    return 0
