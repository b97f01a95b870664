"""Benchmarks of the simulator's own speed, as ratios to raw SimPy speed on the same machine.

Run ``python -m sim.cli.bench`` (or ``ipusim bench``). Each workload is simulated ``repeats`` times;
the best wall time is reported next to the raw SimPy event rate measured in the same process,
and as "raw-event equivalents" (wall time x raw rate): how many bare SimPy timeouts the
machine could have processed in the time the simulation took. That ratio, not the seconds,
is what to compare across machines.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
import simpy

import models

from .. import OutOfMemoryError, Options, compile, run_executable
from ..options import TensorLocationSettings


def raw_simpy_rate(events: int = 200_000) -> float:
    """Bare SimPy timeouts processed per second (one process yielding timeouts)."""
    env = simpy.Environment()

    def ticker():
        for _ in range(events):
            yield env.timeout(1)

    env.process(ticker())
    t0 = time.perf_counter()
    env.run()
    return events / (time.perf_counter() - t0)


def _largest_bert_large_that_fits(system: str, options: Options) -> tuple[int, object]:
    """BERT-large training with as many layers as fit on one IPU (24 down to 1)."""
    for layers in (24, 16, 12, 10, 8, 6, 4, 3, 2, 1):
        graph = models.get("bert-large", micro_batch=1, seq_len=128, num_layers=layers)
        try:
            return layers, compile(graph, system, options, training=True)
        except OutOfMemoryError:
            continue
    raise RuntimeError("BERT-large does not fit on one IPU with a single layer")


def workloads(system: str = "ipu-mk2"):
    """(label, build-and-compile function) for each benchmark workload."""
    def bert():
        o = Options()
        o.Training.gradientAccumulation(16)
        layers, ex = _largest_bert_large_that_fits(system, o)
        return f"bert-large training, {layers} layers, mb 1, seq 128, GA 16", ex

    def resnet():
        ex = compile(models.get("resnet50", micro_batch=4), system, Options().deviceIterations(16))
        return "resnet50 inference, mb 4, 16 device iterations", ex

    def bert_pod16():
        o = Options().replicationFactor(4)
        o.Training.gradientAccumulation(16)
        o.TensorLocations.setOptimizerLocation(TensorLocationSettings().useReplicatedTensorSharding(True))
        graph = models.get("bert-large", micro_batch=2, seq_len=128, layers_per_ipu=[3, 7, 7, 7])
        ex = compile(graph, "ipu-pod16", o, training=True, optimizer="lamb")
        return "bert-large training on ipu-pod16: 4 replicas x 4-stage pipeline, GA 16, LAMB + RTS", ex

    return [bert, resnet, bert_pod16]


def run_benchmarks(system: str = "ipu-mk2", repeats: int = 3) -> pd.DataFrame:
    """One row per workload: compile and simulate wall times, SimPy events, ratios."""
    rate = raw_simpy_rate()
    rows = []
    for make in workloads(system):
        best_compile = best_sim = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            label, ex = make()
            t1 = time.perf_counter()
            run = run_executable(ex)
            t2 = time.perf_counter()
            best_compile = min(best_compile, t1 - t0)
            best_sim = min(best_sim, t2 - t1)
        total = best_compile + best_sim
        rows.append({"workload": label, "system": ex.system.name, "simulated_cycles": run.cycle_count,
                     "compile_s": best_compile, "simulate_s": best_sim, "total_s": total,
                     "simpy_events": run.timeline.events, "raw_simpy_events_per_s": rate,
                     "raw_event_equivalents": total * rate})
    return pd.DataFrame(rows)


def _configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--system", default="ipu-mk2", help="system config (default: ipu-mk2)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per workload; the best counts")
    parser.set_defaults(func=_cmd_bench, subparser=parser)
    return parser


def add_subcommand(subparsers) -> argparse.ArgumentParser:
    """Register ``bench`` on ``ipusim``'s sub-parsers."""
    return _configure(subparsers.add_parser("bench", help="measure the simulator's own speed",
                                            description=__doc__.splitlines()[0]))


def _cmd_bench(args, parser) -> int:
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    df = run_benchmarks(args.system, args.repeats)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(df.to_string(index=False, float_format=lambda v: f"{v:,.4g}"))
    return 0


def main(argv=None) -> int:
    args = _configure(argparse.ArgumentParser(prog="ipusim bench", description=__doc__.splitlines()[0])).parse_args(argv)
    return args.func(args, args.subparser)


if __name__ == "__main__":
    raise SystemExit(main())
