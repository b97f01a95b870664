"""Replica scaling report: ResNet-50 data-parallel training and BERT-large with RTS.

    python reports/scaling.py              # writes reports/scaling.md and prints it
    python reports/scaling.py --stdout     # print only

ResNet-50 training, one IPU per replica, 16 -> 64 -> 128 -> 256 replicas on Mk2 (IPU-POD16 ...
IPU-POD256) and Bow Pods: samples/s and the share of the run in the gradient all-reduce
(``Run.breakdown["collective"] / cycle_count`` of IPU 0), the all-reduces merged into one call as
the example merges them. The asked micro-batch is 20. It fits
with recomputation as Graphcore's ResNet-50 config uses it (its recomputation checkpoints: 10 of the
first 13 blocks' residual adds and every convolution, norm and add of layer4; RecomputeAll;
availableMemoryProportion 0.16); without recomputation it does not, and the report gives
that out-of-memory error with its shortfall. If a micro-batch does not fit, the tables use the
largest that does. Gradient accumulation follows Graphcore's PopTorch
ResNet-50 example (examples/vision/cnns/pytorch/train/configs.yml: 16 replicas x GA 57 and
64 replicas x GA 14, momentum SGD), i.e. about 912 micro-batches per weight update:
GA = round(912 / replicas); a second table uses GA 1 (an all-reduce after every micro-batch).

BERT-large training, 4 replicas x 4 pipeline stages on an IPU-POD16 (layers per IPU 3, 7, 7, 7,
micro-batch 2, sequence 128, GA 16, LAMB) with the optimizer state sharded over replicas (RTS)
and without: the fullest tile of each IPU and the time of one call.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import models  # noqa: E402
import sim  # noqa: E402
from sim.options import TensorLocationSettings  # noqa: E402

REPLICAS = (16, 64, 128, 256)
FAMILIES = {"Mk2": "ipu-pod{}", "Bow": "bow-pod{}"}
ASKED_MICRO_BATCH = 20
#: the example's sgd_combined with momentum 0.9: SGD(use_combined_accum=True), the velocity as the accumulator
OPTIMIZER = sim.Optimizer("sgd_momentum", combined_accum=True)
EXAMPLE_UPDATE_MICRO_BATCHES = 912  # 16 x 57 in the PopTorch example (64 x 14 = 896)


def example_accumulation(replicas: int) -> int:
    """The PopTorch ResNet-50 example's gradient accumulation, extended at its global batch."""
    return max(1, round(EXAMPLE_UPDATE_MICRO_BATCHES / replicas))


RESNET = dict(recompute_checkpoints="graphcore", eight_bit_io=True)  # Graphcore's config's checkpoints, eight_bit_io
MEMORY_PROPORTION = 0.16  # Graphcore's configs: available_memory_proportion [0.16]


def _resnet_options(replicas: int, accumulation: int, recompute: bool = True) -> sim.Options:
    """The example's options (as ``sim.validation`` runs its PyTorch ResNet-50 row, B14): the
    proportion on the replica's one IPU, half partials, the gradient all-reduces merged into
    one call (examples ``vision/cnns/pytorch/utils/ipu_settings.py``:
    ``replicatedCollectivesSettings.mergeAllReduceCollectives``), and PopRun instances of 2
    replicas, each process filling its replicas' inputs (examples 8ae588c
    ``vision/cnns/pytorch/train/benchmarks.yml``: 8 instances on a Pod16), and the recomputation its
    ``recompute_mode: manual`` asks PopART for (``ipu_settings.py``: RecomputeAll, explicitRecomputation),
    or, without ``recompute``, its ``none`` (PopART's default, None)."""
    o = sim.Options().replicationFactor(replicas).hostProcesses(max(1, replicas // 2))
    if recompute:
        o._Popart.set("autoRecomputation", 4)
        o._Popart.set("explicitRecomputation", True)
    o.Training.gradientAccumulation(accumulation)
    o.setAvailableMemoryProportion({"IPU0": MEMORY_PROPORTION})
    o.Precision.setPartialsType("half")
    o._Popart.set("replicatedCollectivesSettings.mergeAllReduceCollectives", True)
    return o


def without_recomputation_error(system: str, accumulation: int):
    """The out-of-memory error of the asked micro-batch without recomputation (or None)."""
    try:
        sim.compile(models.get("resnet50", micro_batch=ASKED_MICRO_BATCH), system,
                    _resnet_options(16, accumulation, recompute=False), training=True, optimizer=OPTIMIZER)
    except sim.OutOfMemoryError as e:
        return e
    return None


def resnet_fit(system: str, accumulation: int, start: int = ASKED_MICRO_BATCH):
    """(largest micro-batch <= start that fits, the out-of-memory error at ``start`` or None)."""
    first_error = None
    for mb in range(start, 0, -1):
        try:
            sim.compile(models.get("resnet50", micro_batch=mb, **RESNET), system, _resnet_options(16, accumulation),
                        training=True, optimizer=OPTIMIZER)
            return mb, first_error
        except sim.OutOfMemoryError as e:
            first_error = first_error or e
    return None, first_error


def resnet_row(family: str, replicas: int, micro_batch: int, accumulation: int) -> dict:
    system = FAMILIES[family].format(replicas)
    run = sim.simulate(models.get("resnet50", micro_batch=micro_batch, **RESNET), system,
                       _resnet_options(replicas, accumulation), training=True, optimizer=OPTIMIZER)
    ipu0 = run.breakdown.loc[run.executable.ipus[0]]
    trace = run.trace
    allreduce = trace[(trace.kind == "collective") & (trace.ipu == run.executable.ipus[0])]
    algorithm = next((c.algorithm for c in _collectives(run.executable.program)), "none")
    return {"family": family, "system": system, "replicas": replicas, "micro_batch": micro_batch,
            "accumulation": accumulation, "global_batch": micro_batch * accumulation * replicas,
            "samples_per_second": run.samples_per_second, "seconds": run.seconds,
            "collective_share": ipu0["collective"] / run.cycle_count,
            "host_io_share": ipu0["host_io"] / run.cycle_count,
            "allreduce_ms": system_ms(run, int(allreduce.cycles.sum())), "algorithm": algorithm,
            "simulated_replicas": len(run.executable.simulated_replicas)}


def system_ms(run, cycles: int) -> float:
    return 1e3 * run.executable.system.cycles_to_seconds(cycles)


def _collectives(program):
    from sim.program import Collective, leaves
    return [item for item in leaves(program) if isinstance(item, Collective)]


def bert_rts(rts: bool) -> dict:
    g = models.get("bert-large", micro_batch=2, seq_len=128, layers_per_ipu=[3, 7, 7, 7])
    o = sim.Options().replicationFactor(4)
    o.Training.gradientAccumulation(16)
    if rts:
        o.TensorLocations.setOptimizerLocation(TensorLocationSettings().useReplicatedTensorSharding(True))
    try:
        run = sim.simulate(g, "ipu-pod16", o, training=True, optimizer="lamb")
    except sim.OutOfMemoryError as e:
        return {"rts": rts, "error": e}
    names = sorted(set(run.trace[run.trace.kind == "collective"].name))
    return {"rts": rts, "run": run, "peak": {ipu: m["peak_tile_bytes"] for ipu, m in run.memory.items()},
            "seconds": run.seconds, "samples_per_second": run.samples_per_second, "collectives": names}


# --- markdown ---------------------------------------------------------------------------------

def _resnet_table(rows: list[dict]) -> list[str]:
    out = ["| system | replicas | GA | global batch | samples/s | speed-up vs 16 | all-reduce | "
           "all-reduce time | share in all-reduce | share in host IO |",
           "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    base = {}
    for r in rows:
        base.setdefault(r["family"], r["samples_per_second"] / r["replicas"] * 16)
        speedup = r["samples_per_second"] / base[r["family"]]
        out.append(f"| {r['system']} | {r['replicas']} | {r['accumulation']} | {r['global_batch']:,} | "
                   f"{r['samples_per_second']:,.0f} | {speedup:.2f}x (ideal {r['replicas'] / 16:.0f}x) | "
                   f"{r['algorithm']} | {r['allreduce_ms']:.2f} ms | {100 * r['collective_share']:.1f} % | "
                   f"{100 * r['host_io_share']:.1f} % |")
    return out


def build_report() -> str:
    lines = ["# Replica scaling", "",
             "Generated by `python reports/scaling.py` (ipusim " + sim.__version__ + "). Times are simulated; "
             "the share columns are cycles of IPU 0 in `Run.breakdown` over `cycle_count`.", ""]
    lines += ["## ResNet-50 training, one IPU per replica", ""]
    fits = {}
    for family, pattern in FAMILIES.items():
        system = pattern.format(16)
        for ga_name, ga16 in (("example", example_accumulation(16)), ("ga1", 1)):
            fits[(family, ga_name)] = resnet_fit(system, ga16)
    mb_example, err = fits[("Mk2", "example")]
    lines.append(f"Optimizer: momentum SGD (`{OPTIMIZER.describe()}`), real data (host IO simulated), deviceIterations 1, "
                 f"availableMemoryProportion {MEMORY_PROPORTION}, the config's recomputation checkpoints (the residual "
                 "adds of 10 of the first 13 blocks, every convolution, norm and add of layer4, the pool and the "
                 "classifier) with RecomputeAll, and 8-bit images cast on the IPU, as Graphcore's PopTorch "
                 "ResNet-50 config. "
                 "The 4 IPUs of a chassis share one host link, so host IO still takes a share; with synthetic "
                 "data it would not.")
    lines.append("")
    plain = without_recomputation_error(FAMILIES["Mk2"].format(16), example_accumulation(16))
    if plain is not None:
        lines += [f"Without recomputation, micro-batch {ASKED_MICRO_BATCH} does not fit on one IPU:", "",
                  "```", str(plain), "```", ""]
    if err is not None:
        lines += [f"**Micro-batch {ASKED_MICRO_BATCH} does not fit on one IPU** "
                  f"(GA {example_accumulation(16)}, so gradient accumulators are on chip):", "",
                  "```", str(err), "```", "",
                  f"Shortfall: {err.shortfall_bytes:,} bytes on the fullest tile of IPU {err.ipu}. "
                  "Largest micro-batch that fits: "
                  + ", ".join(f"{fam} {fits[(fam, 'example')][0]} with the example's GA, "
                              f"{fits[(fam, 'ga1')][0]} with GA 1" for fam in FAMILIES) + ".", ""]
    mb = min(fits[(fam, "example")][0] for fam in FAMILIES)
    rows = [resnet_row(fam, R, mb, example_accumulation(R)) for fam in FAMILIES for R in REPLICAS]
    lines += [f"### Micro-batch {mb}, gradient accumulation as the PopTorch example (GA = round(912 / replicas))",
              ""] + _resnet_table(rows) + [""]
    rows1 = [resnet_row(fam, R, mb, 1) for fam in FAMILIES for R in REPLICAS]
    lines += [f"### Micro-batch {mb}, gradient accumulation 1 (an all-reduce after every micro-batch)", ""]
    lines += _resnet_table(rows1) + [""]
    lines += ["Replicas simulated per run: " + ", ".join(sorted({str(r['simulated_replicas']) for r in rows + rows1}))
              + " (those behind one host link); the others follow by symmetry, and the all-reduce is priced "
              "over all of them.", ""]

    lines += ["## BERT-large training with replicated tensor sharding (RTS)", "",
              "4 replicas x 4 pipeline stages on an IPU-POD16: layers per IPU 3, 7, 7, 7, micro-batch 2, "
              "sequence 128, GA 16, LAMB; RTS = `setOptimizerLocation(TensorLocationSettings()"
              ".useReplicatedTensorSharding(True))`.", "",
              "| RTS | fits | fullest tile per IPU (bytes, IPU 0-3) | time per call | samples/s "
              "| gradient collectives |",
              "|---|---|---|---:|---:|---|"]
    failures = []
    for rts in (False, True):
        r = bert_rts(rts)
        if "error" in r:
            e = r["error"]
            failures.append((rts, e))
            lines.append(f"| {'on' if rts else 'off'} | no: short by {e.shortfall_bytes:,} bytes on IPU {e.ipu} | "
                         "— | — | — | — |")
        else:
            peaks = " / ".join(f"{v:,}" for v in r["peak"].values())
            kinds = ", ".join(sorted({n.split(" (")[0] for n in r["collectives"]}))
            lines.append(f"| {'on' if rts else 'off'} | yes | {peaks} | {1e3 * r['seconds']:.2f} ms | "
                         f"{r['samples_per_second']:,.0f} | {kinds} |")
    for rts, e in failures:
        lines += ["", f"With RTS {'on' if rts else 'off'}:", "", "```", str(e), "```"]
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Write the replica scaling report (reports/scaling.md).")
    p.add_argument("--stdout", action="store_true", help="print the report instead of writing it")
    p.add_argument("--output", type=Path, default=Path(__file__).resolve().parent / "scaling.md")
    args = p.parse_args(argv)
    text = build_report()
    if not args.stdout:
        args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
