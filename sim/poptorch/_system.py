"""Which system a PopTorch model is simulated on.

In order: ``Options.simulatedSystem(name_or_path)``; the ``IPUSIM_SYSTEM`` environment variable
(a config name or a TOML path); else the smallest Mk2 system that holds the IPUs the run
reserves (IPUs per replica x replicas of every process, rounded up as PopTorch rounds):
ipu-mk2 (1 IPU), ipu-m2000 (4), ipu-pod16, ipu-pod64, ipu-pod128, ipu-pod256.
"""

from __future__ import annotations

import os

from ..errors import OptionsError
from ..hardware import System, load_system

MK2_SYSTEMS = ("ipu-mk2", "ipu-m2000", "ipu-pod16", "ipu-pod64", "ipu-pod128", "ipu-pod256")
ENV_VAR = "IPUSIM_SYSTEM"


def round_num_ipus(n: int) -> int:
    """What PopTorch reserves for ``n`` IPUs: a power of two, or a multiple of 64 above 64."""
    if n <= 64:
        return 1 << max(0, (n - 1).bit_length())
    return -(-n // 64) * 64


def choose(options, ipus_needed: int) -> tuple[System, str]:
    """(system, why) for a run that reserves ``ipus_needed`` IPUs."""
    explicit = getattr(options, "simulated_system", None)
    if explicit:
        return load_system(explicit), "set with Options.simulatedSystem"
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return load_system(env), f"from the {ENV_VAR} environment variable"
    for name in MK2_SYSTEMS:
        system = load_system(name)
        if system.num_ipus >= ipus_needed:
            return system, f"the smallest Mk2 system with {ipus_needed} IPU(s)"
    raise OptionsError(
        f"the run needs {ipus_needed} IPUs, more than the largest Mk2 system ({MK2_SYSTEMS[-1]}); "
        f"choose a system with Options.simulatedSystem(...) or {ENV_VAR}")
