"""``ipusim collective``: time one collective across replicas on a system.

    ipusim collective --system ipu-pod64 --op all-reduce --bytes 64MiB --replicas 64
    ipusim collective --system ipu-pod128 --op all-reduce --bytes 1GiB --replicas 128 --algorithm ring --json
    python -m sim.cli.collective --system ipu-pod16 --op reduce-scatter --bytes 16MB --replicas 16

The collective runs through the engine as a program of one Collective over the members (the
first IPU of each replica), so the time printed is the engine's. It prints the time, the
algorithm (``auto`` picks the fastest for the size and topology), the algorithm bandwidth
``S / t`` and the bus bandwidth (NCCL's convention: the algorithm bandwidth times
``2(N-1)/N`` for all-reduce, ``(N-1)/N`` for reduce-scatter, all-gather and all-to-all).

Exit codes: 0 success; 2 a usage error or invalid input (unknown system, bad size, more
replicas than IPUs, an algorithm that does not apply).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from fractions import Fraction

from .argtypes import QUIET, add_verbosity, positive_int, progress, verbosity
from ..results.collective import run_collective
from ..schedule.collectives import ALGORITHMS, OPS, normalize_op
from ..errors import IpuSimError, OptionsError, show_number
from ..hardware.system import load_system

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text: str) -> int:
    """``"64MiB"`` -> 67108864; ``"1.5GB"`` -> 1500000000; a plain number is bytes.

    Suffixes (any case): B, KB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB (powers of 1024).
    """
    m = _SIZE.match(str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise argparse.ArgumentTypeError(
            f"expected a size such as 1024, 64KiB, 64MiB, 1GiB or 100MB, got {text!r}")
    value = Fraction(m.group(1)) * _UNITS[unit]  # exact: no float rounding or overflow
    if value < 1 or value.denominator != 1:
        raise argparse.ArgumentTypeError(f"a size must be a whole number of bytes >= 1, got {text!r}")
    return int(value)


def _op(text: str) -> str:
    try:
        return normalize_op(text)
    except OptionsError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``collective`` arguments to ``p`` (a sub-parser of ``ipusim`` or a parser of its own)."""
    p.add_argument("--system", required=True, help="system config name or .toml path (see `ipusim systems`)")
    p.add_argument("--op", required=True, type=_op, metavar="{" + ",".join(o.replace("_", "-") for o in OPS) + "}",
                   help="the collective")
    p.add_argument("--bytes", required=True, type=parse_bytes, dest="nbytes", metavar="SIZE",
                   help="tensor size per replica: bytes, or with a suffix KiB/MiB/GiB or KB/MB/GB")
    p.add_argument("--replicas", required=True, type=positive_int, metavar="N", help="replicas taking part (>= 2)")
    p.add_argument("--ipus-per-replica", type=positive_int, default=1, metavar="K",
                   help="IPUs per replica (default 1); the collective runs between the first IPU of each, and "
                        "each step waits for a sync of all the replicas' IPUs")
    p.add_argument("--algorithm", default="auto", choices=("auto",) + ALGORITHMS,
                   help="GCL-style algorithm (default: auto, the fastest for the size and topology)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_verbosity(p)
    p.set_defaults(func=_cmd_collective, subparser=p)
    return p


def add_subcommand(subparsers) -> argparse.ArgumentParser:
    """Register ``collective`` on ``ipusim``'s sub-parsers (``func(args, parser)`` convention)."""
    return configure(subparsers.add_parser(
        "collective", help="time one collective (all-reduce, ...) across replicas",
        description="Time one collective across replicas through the engine; prints seconds, "
                    "algorithm, algorithm and bus bandwidth."))


def build_parser() -> argparse.ArgumentParser:
    return configure(argparse.ArgumentParser(prog="ipusim collective", description=__doc__.split("\n\n")[0]))


def _gb(x: float) -> str:
    return f"{x / 1e9:.2f} GB/s"


def _cmd_collective(args, parser) -> int:
    system = load_system(args.system)
    k = args.ipus_per_replica
    need = args.replicas * k
    if need > system.num_ipus:
        per = f" ({show_number(k)} IPUs per replica = {show_number(need)} IPUs)" if k > 1 else ""
        ipus = f"{system.num_ipus} IPU{'s' * (system.num_ipus != 1)}"
        raise OptionsError(f"{show_number(args.replicas)} replicas{per} do not fit on system {system.name!r}, which "
                           f"has {ipus}; use fewer replicas or a larger system (ipusim systems)")
    if args.replicas < 2:
        raise OptionsError(f"a collective needs at least 2 replicas, got {args.replicas}")
    if need & (need - 1):
        if k & (k - 1):
            fix = f"use a power-of-two --ipus-per-replica (no number of replicas makes {k} x N a power of two)"
        else:  # the powers of two either side that leave at least 2 replicas and fit on the system
            near = [r for r in ((1 << (need.bit_length() - 1)) // k, (1 << need.bit_length()) // k)
                    if r >= 2 and r * k <= system.num_ipus]
            fix = (f"use --replicas {' or '.join(map(str, near))}" if near else
                   f"use a system with at least {(1 << need.bit_length()):,} IPUs (ipusim systems)")
        per = f" of {k} IPUs each" if k > 1 else ""
        raise OptionsError(f"--replicas {args.replicas}: {args.replicas} replicas{per} need {need} IPUs, which is "
                           "not a power of two; a V-IPU partition holds a power-of-two number of IPUs, so PopTorch "
                           f"refuses to run on {need}; {fix}")
    memory = system.ipu.tiles * system.ipu.sram_bytes_per_tile + system.streaming_memory.bytes_per_ipu
    if args.nbytes > memory:
        raise OptionsError(f"--bytes {show_number(args.nbytes)} is more than one IPU of {system.name!r} holds "
                           f"({memory:,} bytes of tile SRAM and streaming memory), and each replica holds the "
                           f"whole tensor; give at most {memory:,} bytes")
    members = [r * args.ipus_per_replica for r in range(args.replicas)]
    progress(args, f"timing {args.op.replace('_', '-')} of {args.nbytes:,} bytes between IPUs "
             f"{', '.join(map(str, members[:3]))}{', ...' * (len(members) > 3)} of "
             f"{system.name} (algorithm {args.algorithm})")
    result = run_collective(system, args.op, args.nbytes, members, args.algorithm,
                            partition_ipus=args.replicas * args.ipus_per_replica)
    summary = result.summary()
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    if verbosity(args) <= QUIET:
        return 0
    rows = [("system", f"{system.name} ({system.num_ipus} IPUs)"),
            ("op", f"{summary['op']} of {args.nbytes:,} bytes over {args.replicas} replicas"),
            ("algorithm", summary["algorithm"] + (" (auto)" if args.algorithm == "auto" else "")),
            ("time", f"{result.seconds:.6g} s ({result.cycles:,} cycles, {summary['steps']} steps)"),
            ("algorithm bandwidth", _gb(result.algorithm_bandwidth)),
            ("bus bandwidth", _gb(result.bus_bandwidth))]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k.ljust(width)}  {v}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``ipusim collective`` with ``argv`` (the arguments after ``collective``); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return args.func(args, parser)
    except SystemExit as e:  # argparse: --help and usage errors
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except IpuSimError as e:
        print(f"ipusim collective: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
