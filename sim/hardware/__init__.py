"""The hardware: IPUs, links and systems described by ``configs/*.toml``, and their topology.

``system`` loads and validates a system description (:func:`load_system`); ``configs`` finds
the shipped descriptions; ``topology`` says where IPUs sit, how they reach each other and what
a sync across them costs.
"""

from .configs import available_systems
from .system import (IPU, SYSTEM_ENV_VAR, GWLink, HostLink, IPULink, StreamingMemory, System,
                     SystemLayout, choose_system, load_system)

__all__ = ["IPU", "GWLink", "HostLink", "IPULink", "StreamingMemory", "System", "SystemLayout",
           "SYSTEM_ENV_VAR", "available_systems", "choose_system", "load_system"]
