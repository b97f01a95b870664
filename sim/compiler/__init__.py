"""The compiler: Graph + Options + System -> an :class:`Executable`.

``executable`` checks the options, expands training, places stages and replicas, prices every
op and builds the program with the strategy's schedule; ``memory`` checks what each tile holds
and raises the out-of-memory error, as Poplar's compilation does.
"""

from .executable import Executable, compile
from .memory import IpuMemory, Liveness, analyse_ipu

__all__ = ["Executable", "compile", "IpuMemory", "Liveness", "analyse_ipu"]
