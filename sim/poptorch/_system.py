"""Which system a PopTorch model is simulated on.

In order: ``Options.simulatedSystem(name_or_path)``; the ``IPUSIM_SYSTEM`` environment variable
(a config name or a TOML path); else the smallest Mk2 system that holds the IPUs the run
reserves (IPUs per replica x replicas of every process, rounded up as PopTorch rounds):
ipu-mk2 (1 IPU), ipu-m2000 (4), ipu-pod16, ipu-pod64, ipu-pod128, ipu-pod256.
"""

from __future__ import annotations

from ..hardware.system import System, choose_system


def round_num_ipus(n: int) -> int:
    """What PopTorch reserves for ``n`` IPUs: a power of two, or a multiple of 64 above 64."""
    if n <= 64:
        return 1 << max(0, (n - 1).bit_length())
    return -(-n // 64) * 64


def choose(options, ipus_needed: int) -> tuple[System, str]:
    """(system, why) for a run that reserves ``ipus_needed`` IPUs."""
    return choose_system(ipus_needed, getattr(options, "simulated_system", None),
                         "set with Options.simulatedSystem", "choose a system with Options.simulatedSystem(...)")
