"""``python -m sim.onnx model.onnx [--system S] [--batch-size N] ...``: import an ONNX model,
simulate one call and print what ``ipusim run`` prints (:func:`build_parser`, :func:`main`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..compiler.memory import ONNX_REMEDIES, reworded
from ..errors import IpuSimError, OutOfMemoryError
from ._importer import load


def build_parser() -> argparse.ArgumentParser:
    from ..cli.argtypes import name_size, positive_int
    from ..graph.training import OPTIMIZERS
    p = argparse.ArgumentParser(prog="python -m sim.onnx", description="Simulate one call of an ONNX model "
                                "on an IPU system and print what `ipusim run` prints.")
    p.add_argument("model", type=Path, help="the .onnx file")
    p.add_argument("--system", default="ipu-mk2", help="system config name or .toml path (default: ipu-mk2)")
    p.add_argument("--batch-size", type=positive_int, metavar="N",
                   help="size of the inputs' symbolic leading (batch) dimension: the micro-batch")
    p.add_argument("--dim", action="append", default=[], type=name_size, metavar="NAME=SIZE",
                   help="size of another symbolic dimension (repeatable)")
    p.add_argument("--dtype", choices=["float16", "float32"], help="dtype of every float tensor (default: the model's)")
    p.add_argument("--device-iterations", type=positive_int, metavar="N", help="[deviceIterations]")
    p.add_argument("--replicas", type=positive_int, metavar="N", help="[replicationFactor]")
    p.add_argument("--training", action="store_true", help="simulate a training step (the model needs a loss)")
    p.add_argument("--loss", metavar="TENSOR", help="the ONNX tensor to train on (default: the model's one loss)")
    p.add_argument("--gradient-accumulation", type=positive_int, metavar="N", help="[Training.gradientAccumulation]")
    p.add_argument("--optimizer", choices=list(OPTIMIZERS), help="optimizer of --training (default: sgd)")
    p.add_argument("--synthetic-data", action="store_true", help="[enableSyntheticData(True)]: no host IO")
    p.add_argument("--json", action="store_true", help="print run.summary() as one JSON object")
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m sim.onnx model.onnx [--system S] [--batch-size N] [--device-iterations N]
    [--json] ...``: import, simulate one call, print the summary; returns the exit code
    (0 success, 2 a usage or simulator error, 3 out of tile memory, 1 a file error)."""
    import sim

    from ..cli.argtypes import given_dims
    from ..results.report import format_summary, to_json

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.optimizer and not args.training:
            parser.error("--optimizer only applies with --training")
        if args.gradient_accumulation and not args.training:
            parser.error("--gradient-accumulation only applies with --training")
        graph = load(args.model, batch_size=args.batch_size, dtype=args.dtype, loss=args.loss,
                     dims=given_dims(args.dim, parser.error), batch_flag="--batch-size")
        if args.training and graph.loss is None:
            outs = ", ".join(graph.outputs)
            parser.error(f"--training needs a loss: name it with --loss TENSOR, a one-element tensor the model "
                         f"computes (the model's outputs: {outs})")
        system = sim.load_system(args.system)
        opts = sim.Options()
        if args.device_iterations:
            opts.deviceIterations(args.device_iterations)
        if args.replicas:
            opts.replicationFactor(args.replicas)
        if args.gradient_accumulation:
            opts.Training.gradientAccumulation(args.gradient_accumulation)
        if args.synthetic_data:
            opts.enableSyntheticData(True)
        try:
            run = sim.simulate(graph, system, opts, training=args.training,
                               optimizer=(args.optimizer or "sgd") if args.training else None)
        except OutOfMemoryError as e:  # its remedies in an ONNX model's words
            raise reworded(e, ONNX_REMEDIES) from None
        print(to_json(run.summary()) if args.json else format_summary(run))
        return 0
    except SystemExit as e:  # argparse: --help, usage errors
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except OutOfMemoryError as e:
        print(f"sim.onnx: error: {e}", file=sys.stderr)
        return 3
    except IpuSimError as e:
        print(f"sim.onnx: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"sim.onnx: error: {e}", file=sys.stderr)
        return 1
