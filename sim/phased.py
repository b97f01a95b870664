"""Phased execution (serial and parallel)."""
from .errors import OptionsError


def build(ctx):
    raise OptionsError("phased execution is not modelled yet")
