"""The ``ipusim`` command line.

    ipusim run                                   # BERT-base inference, micro-batch 1, on ipu-mk2
    ipusim run --model bert-large --num-layers 4 --training --gradient-accumulation 8
    ipusim run --model resnet50 --micro-batch 4 --json
    ipusim run --output reports/bert             # also writes CSV/JSON/PNG files there
    ipusim systems                               # the system configs
    ipusim models                                # the model zoo and its default parameters

Exit codes: 0 success; 2 a usage error or an error the simulator raises (unknown system or
model, bad parameter, invalid options); 3 out of tile memory; 1 a file could not be written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import sim
import models
from .options import OutputMode
from .report import format_summary, prepare_directory, to_json, write_outputs
from .training import OPTIMIZERS

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


def _key_value(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip().replace("-", "_"), _parse_value(value.strip())


def _output_mode(text: str) -> tuple[OutputMode, int | None]:
    t = text.strip().lower()
    simple = {"all": OutputMode.All, "final": OutputMode.Final, "sum": OutputMode.Sum}
    if t in simple:
        return simple[t], None
    if t.startswith("everyn:") and t[7:].isdigit() and int(t[7:]) >= 1:
        return OutputMode.EveryN, int(t[7:])
    raise argparse.ArgumentTypeError(f"expected all, final, sum or everyn:N (N >= 1), got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ipusim", description="Discrete-event performance simulator "
                                "for Graphcore IPU systems.")
    p.add_argument("--version", action="version", version=f"ipusim {sim.__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="simulate one call of a model and print its numbers",
                       description="Simulate one call (all device iterations) of a zoo model. "
                       f"Without --model: {DEFAULT_MODEL} with "
                       + ", ".join(f"{k}={v}" for k, v in DEFAULT_PARAMS.items()) + ".")
    r.add_argument("--system", default=DEFAULT_SYSTEM,
                   help=f"system config name or .toml path (default: {DEFAULT_SYSTEM}; see `ipusim systems`)")
    r.add_argument("--model", help=f"zoo model (default: {DEFAULT_MODEL}; see `ipusim models`)")
    m = r.add_argument_group("model parameters (passed to the zoo only when given)")
    for name in MODEL_PARAM_FLAGS:
        m.add_argument("--" + name.replace("_", "-"), dest=name, type=int, metavar="N")
    m.add_argument("--param", action="append", default=[], type=_key_value, metavar="KEY=VALUE",
                   help="any model parameter; VALUE is parsed as int, float or JSON (repeatable)")
    o = r.add_argument_group("options (PopTorch names in brackets)")
    o.add_argument("--device-iterations", type=int, metavar="N", help="[deviceIterations]")
    o.add_argument("--gradient-accumulation", type=int, metavar="N",
                   help="[Training.gradientAccumulation] (training only)")
    o.add_argument("--training", action="store_true", help="simulate a training step (default: inference)")
    o.add_argument("--optimizer", choices=list(OPTIMIZERS), help="optimizer of --training (default: sgd)")
    o.add_argument("--synthetic-data", action="store_true", help="[enableSyntheticData(True)]: no host IO")
    o.add_argument("--output-mode", type=_output_mode, metavar="{all,final,sum,everyn:N}",
                   help="[outputMode] (default: all for inference, final for training)")
    o.add_argument("--available-memory-proportion", type=float, metavar="P",
                   help="[setAvailableMemoryProportion] for every IPU, in (0, 1] (default: 0.6)")
    out = r.add_argument_group("output")
    out.add_argument("--output", metavar="DIR", type=Path,
                     help="also write trace.csv, ops.csv, breakdown.csv, summary.json, timeline.png, memory.png")
    out.add_argument("--json", action="store_true", help="print run.summary() as one JSON object")
    r.set_defaults(func=_cmd_run, subparser=r)

    s = sub.add_parser("systems", help="list the system configs")
    s.set_defaults(func=_cmd_systems, subparser=s)
    z = sub.add_parser("models", help="list the zoo models with their default parameters")
    z.set_defaults(func=_cmd_models, subparser=z)
    return p


def _model_params(args) -> dict:
    params = dict(DEFAULT_PARAMS) if args.model is None else {}
    params.update({k: getattr(args, k) for k in MODEL_PARAM_FLAGS if getattr(args, k) is not None})
    params.update(dict(args.param))
    return params


def _options(args, system: sim.System) -> sim.Options:
    opts = sim.Options()
    if args.device_iterations is not None:
        opts.deviceIterations(args.device_iterations)
    if args.gradient_accumulation is not None:
        opts.Training.gradientAccumulation(args.gradient_accumulation)
    if args.synthetic_data:
        opts.enableSyntheticData(True)
    if args.output_mode is not None:
        opts.outputMode(*args.output_mode)
    if args.available_memory_proportion is not None:
        opts.setAvailableMemoryProportion(
            {f"IPU{i}": args.available_memory_proportion for i in range(system.num_ipus)})
    return opts


def _cmd_run(args, parser) -> int:
    if args.optimizer and not args.training:
        parser.error("--optimizer only applies with --training")
    if args.output is not None and args.output.exists() and not args.output.is_dir():
        parser.error(f"--output {str(args.output)!r} exists and is not a directory")
    system = sim.load_system(args.system)
    graph = models.get(args.model or DEFAULT_MODEL, **_model_params(args))
    run = sim.simulate(graph, system, _options(args, system), training=args.training,
                       optimizer=args.optimizer or "sgd")
    written = write_outputs(run, prepare_directory(args.output)) if args.output is not None else []
    if args.json:
        summary = run.summary()
        if written:
            summary["outputs"] = [str(p) for p in written]
        print(to_json(summary))
    else:
        print(format_summary(run))
        if written:
            print("\nwrote:\n" + "\n".join(f"  {p}" for p in written))
    return 0


def _cmd_systems(args, parser) -> int:
    rows = [("name", "IPUs", "gen", "clock", "description")]
    for name in sim.available_systems():
        try:
            s = sim.load_system(name)
            rows.append((name, str(s.num_ipus), s.ipu.generation, f"{s.ipu.clock_hz / 1e9:.4g} GHz",
                         s.description))
        except sim.ConfigError as e:
            rows.append((name, "?", "?", "?", f"invalid config: {e}"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join([r[0].ljust(widths[0]), r[1].rjust(widths[1]), r[2].ljust(widths[2]),
                         r[3].rjust(widths[3]), r[4]]))
    return 0


def _cmd_models(args, parser) -> int:
    width = max(map(len, models.names()))
    for name in models.names():
        params = " ".join(f"{k}={json.dumps(v)}" for k, v in models.describe(name).items())
        print(f"{name.ljust(width)}  {params}")
    return 0


def _error(message: object) -> None:
    print(f"ipusim: error: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (never raises for user errors)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return args.func(args, args.subparser)
    except SystemExit as e:  # argparse: --help, --version, usage errors
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except sim.OutOfMemoryError as e:
        _error(e)
        return 3
    except sim.IpuSimError as e:
        _error(e)
        return 2
    except OSError as e:
        _error(e)
        return 1
    except KeyboardInterrupt:
        _error("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
