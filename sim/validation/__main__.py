"""``python -m sim.validation``: writes reports/validation.md (or ``--output``) and prints it, and stores the
held-out rows' errors runs quote (:func:`sim.validation.held_out.write`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import __doc__ as PACKAGE_DOC
from . import held_out
from .report import REPORT, report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.validation", description=PACKAGE_DOC.splitlines()[0])
    parser.add_argument("--output", type=Path, default=REPORT, help=f"markdown file (default: {REPORT})")
    args = parser.parse_args(argv)
    from ..results.report import atomic_write
    text = report()
    atomic_write(args.output, lambda tmp: Path(tmp).write_text(text))
    held_out.write()
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
