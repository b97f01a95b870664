"""Which system a PopTorch model is simulated on.

In order: ``Options.simulatedSystem(name_or_path)``; the ``IPUSIM_SYSTEM`` environment variable
(a config name or a TOML path); else the smallest Mk2 system that holds the IPUs the run
reserves (IPUs per replica x replicas of every process, rounded up as PopTorch rounds):
ipu-mk2 (1 IPU), ipu-m2000 (4), ipu-pod16, ipu-pod64, ipu-pod128, ipu-pod256; or, for an offline
target of another IPU version (``Options.useOfflineIpuTarget``), that IPU's system.
"""

from __future__ import annotations

import os

from ..errors import ConfigError
from ..hardware.system import SYSTEM_ENV_VAR, System, choose_system, load_system


def round_num_ipus(n: int) -> int:
    """What PopTorch reserves for ``n`` IPUs: a power of two, or a multiple of 64 above 64."""
    if n <= 64:
        return 1 << max(0, (n - 1).bit_length())
    return -(-n // 64) * 64


#: ``Options.useOfflineIpuTarget``'s IPU versions -> the system simulated for them (None: the Mk2
#: systems by size); PopTorch's versions: 1 Mk1, 2 Mk2, 21 Mk2 with FP8 support (the C600)
IPU_VERSIONS = {1: "ipu-mk1-c2", 2: None, 21: "c600"}


def choose(options, ipus_needed: int) -> tuple[System, str]:
    """(system, why) for a run that reserves ``ipus_needed`` IPUs."""
    explicit, source = getattr(options, "simulated_system", None), "set with Options.simulatedSystem"
    version = getattr(options, "ipu_version", None)
    if not explicit and not os.environ.get(SYSTEM_ENV_VAR, "").strip() and IPU_VERSIONS.get(version):
        explicit, source = IPU_VERSIONS[version], f"the offline target of useOfflineIpuTarget({version})"
        if load_system(explicit).num_ipus < ipus_needed:
            raise ConfigError(f"useOfflineIpuTarget({version}): the run needs {ipus_needed} IPUs, more than "
                              f"{explicit} has ({load_system(explicit).num_ipus}); name a larger system with "
                              "Options.simulatedSystem(...)")
    return choose_system(ipus_needed, explicit, source, "choose a system with Options.simulatedSystem(...)")
