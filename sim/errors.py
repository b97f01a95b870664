"""Errors the simulator raises.

Every error names what is wrong, where, and what to do about it, the way PopTorch does.
"""

from decimal import Decimal


class IpuSimError(Exception):
    """Base class of every error ipusim raises on purpose."""


class ConfigError(IpuSimError):
    """A system description (``configs/*.toml``) is malformed."""


class OptionsError(IpuSimError):
    """An option value, or a combination of options, is not valid."""


class GraphError(IpuSimError):
    """A graph is malformed (shape mismatch, unknown tensor, bad annotation)."""


class UnsupportedOpError(IpuSimError):
    """The cost model cannot price an op: an error, never a silent zero."""


class OutOfMemoryError(IpuSimError):
    """A program does not fit in tile memory.

    Attributes
    ----------
    ipu: the IPU that overflows by most (within a replica).
    op: the op (or stage) whose allocation overflows, if one can be named.
    shortfall_bytes: bytes over the limit on that IPU's fullest tile.
    shortfalls: every IPU that overflows -> its shortfall in bytes (the worst included).
    where: what runs at the worst IPU's peak (``op 'x' (matmul, backward pass, pipeline stage 3)``), or None.
    margin: the memory margin (``Options.memoryMargin``) the shortfall counts (0: none).
    margin_bytes: bytes of the shortfall that are the margin's (0 without one): the tile is short by
        ``shortfall_bytes - margin_bytes`` without it (0 or less: it fits without the margin).
    """

    #: defaults for a subclass that does not call this ``__init__`` (``sim.poptorch``'s ``OutOfMemory``)
    where: str | None = None
    margin: float = 0.0
    margin_bytes: int = 0

    def __init__(self, message: str, *, ipu: int, op: str | None, shortfall_bytes: int,
                 shortfalls: dict[int, int] | None = None, where: str | None = None, margin: float = 0.0,
                 margin_bytes: int = 0):
        super().__init__(message)
        self.ipu = ipu
        self.op = op
        self.shortfall_bytes = shortfall_bytes
        self.shortfalls = dict(shortfalls) if shortfalls else {ipu: shortfall_bytes}
        self.where = where
        self.margin = margin
        self.margin_bytes = margin_bytes


def show_number(value) -> str:
    """A number for an error message: ints with thousands separators, floats as written,
    and anything of 16 digits or more in scientific notation (``1e+30``), so a huge value
    keeps the message on one readable line."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if abs(value) < 10**15 else f"{Decimal(value):.3g}"
    if isinstance(value, float) and value.is_integer() and abs(value) < 10**15:
        return f"{int(value):,}"
    return f"{value:g}" if isinstance(value, float) else repr(value)
