"""Argument types shared by the command-line tools."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """A whole number >= 1, or argparse's usage error."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value
