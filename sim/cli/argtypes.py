"""Argument types shared by the command-line tools."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def positive_int(text: str) -> int:
    """A whole number >= 1, or argparse's usage error."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def csv_file(text: str) -> Path:
    """A path to write CSV rows to: not an existing folder."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file path, e.g. {str(path / 'rows.csv')!r}")
    return path


def name_size(text: str) -> tuple[str, int]:
    """``NAME=SIZE`` (a symbolic dimension of an ONNX model and its size, >= 1)."""
    key, sep, value = text.partition("=")
    size = int(value) if value.strip().isdigit() else 0
    if not sep or not key or size < 1:
        raise argparse.ArgumentTypeError(f"expected NAME=SIZE with SIZE >= 1, got {text!r}")
    return key, size


def given_dims(pairs: list[tuple[str, int]], error) -> dict[str, int]:
    """The symbolic dimensions ``--dim NAME=SIZE`` gives (``pairs``, as :func:`name_size` reads them),
    by name: one given twice with different sizes is an ``error`` (argparse's usage error), not a
    silent choice of the last; the same size twice is one."""
    dims: dict[str, int] = {}
    for name, size in pairs:
        if dims.get(name, size) != size:
            error(f"symbolic dimension {name} is given twice, as --dim {name}={dims[name]} and --dim {name}={size}; "
                  "give it once")
        dims[name] = size
    return dims


def whole_numbers(least: int, example: str):
    """An argparse type: comma-separated whole numbers, each >= ``least``, as a list."""
    def parse(text: str) -> list[int]:
        try:
            values = [int(v) for v in text.split(",")]
        except ValueError:
            values = []
        if not values or any(v < least for v in values):
            bound = f" >= {least}" if least else ""
            raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers{bound} like {example}, "
                                             f"got {text!r}")
        return values
    return parse


def proportions(text: str) -> list[float]:
    """``0.6`` or ``0.15,0.25,0.25,0.25``: availableMemoryProportion values, each in (0, 1]."""
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected proportions like 0.6 or 0.15,0.25, got {text!r}") from None
    if not values or any(not 0 < v <= 1 for v in values):
        raise argparse.ArgumentTypeError(f"each proportion must be in (0, 1], got {text!r}")
    return values


def _above_zero(text: str, unit: str, example: str) -> float:
    """``text`` as a finite number above 0, or argparse's usage error naming ``unit`` with ``example``."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected {unit} above 0, like {example}, got {text!r}")
    return value


def rate(text: str) -> float:
    """``40000``: a rate above 0 (samples per second), or argparse's usage error."""
    return _above_zero(text, "samples per second", "40000")


def milliseconds(text: str) -> float:
    """``2.5``: a time above 0 in milliseconds, as seconds, or argparse's usage error."""
    return _above_zero(text, "milliseconds", "2.5") / 1e3


def margin(text: str) -> float:
    """``0.08``: a memory margin, a fraction of a tile from 0 to 1 (``Options.memoryMargin``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction like 0.08, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"the margin must be from 0 to 1 (0.08: 8 % of a tile), got {text!r}")
    return value


# --- how much a subcommand prints ---------------------------------------------------------------
#: ``args.verbosity``: -1 with -q/--quiet, 0 by default, 1 with -v/--verbose
QUIET, NORMAL, VERBOSE = -1, 0, 1


def add_verbosity(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``-v/--verbose`` and ``-q/--quiet`` (one or the other) to ``parser``, as
    ``args.verbosity`` (:data:`QUIET`, :data:`NORMAL`, :data:`VERBOSE`). Quiet: print only
    errors and the machine output asked for (``--json``, listings, tables); verbose: also
    progress and the run's notes, on stderr. Adding them twice to a parser does nothing."""
    if any(action.dest == "verbosity" for action in parser._actions):
        return parser
    group = parser.add_argument_group("verbosity").add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=VERBOSE, default=NORMAL,
                       help="also print progress and the run's notes (on stderr)")
    group.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=QUIET,
                       help="print only errors and the machine output asked for (--json, listings)")
    return parser


def add_verbosity_to_subcommands(subparsers) -> None:
    """:func:`add_verbosity` on every sub-parser registered so far (``ipusim``'s sub-parsers)."""
    for parser in subparsers.choices.values():
        add_verbosity(parser)


def verbosity(args) -> int:
    """``args.verbosity``, or :data:`NORMAL` for a namespace without it."""
    return getattr(args, "verbosity", NORMAL)


def progress(args, message: str) -> None:
    """Print ``ipusim: message`` on stderr when ``args`` asked for --verbose."""
    if verbosity(args) >= VERBOSE:
        print(f"ipusim: {message}", file=sys.stderr, flush=True)
