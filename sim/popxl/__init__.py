"""A PopXL-style front end: ``import sim.popxl as popxl``.

A PopXL program (an ``Ir`` with a main graph of ops, host streams, variables, subgraphs,
collectives across replicas) is recorded into the simulator's :class:`~sim.graph.Graph` as it
is written, and ``popxl.Session(ir, "ipu_hw").run(inputs)`` simulates ``ir.num_host_transfers``
host transfers on ``ir.replication_factor`` replicas of a simulated IPU system. The session's
``cycle_count`` and ``simulation`` (a :class:`sim.Run`) hold the results; the outputs it returns
are zeros, because the simulator computes times, not values.

Names, signatures and defaults follow PopXL (graphcore/popart, ``python/popxl``); where the
simulator does something different it says so in the run's notes and in docs/popxl.md.
"""

from __future__ import annotations

from . import dtypes, fp8_utils, ops, transforms, utils  # utils: popxl.utils, as PopXL's modules import it
from .context import (gcg, get_current_context, get_current_graph, get_ir, get_main_graph, gir, gmg, in_sequence,
                      io_tiles, ipu, name_scope)
from .dtypes import (bool, dtype, float8_143, float8_152, float16, float32, float64, half, int8, int32,
                     int64, uint8, uint32, uint64)
from .dtypes import double, float
from .errors import NotModelledError, PopXLError, SessionIOError, not_modelled
from .graph import Graph
from .ir import Ir, ReplicaGrouping, SessionOptions
from .module import Module
from .remote_buffer import (RemoteBuffer, remote_buffer, remote_replica_sharded_variable, remote_variable,
                            replica_sharded_buffer, replica_sharded_variable)
from .random_seed import create_seeds, two_uint32_to_uint64
from .session import Session
from .streams import DeviceToHostStream, HostToDeviceStream, d2h_stream, h2d_stream
from .tensor import (Constant, GradTensor, Tensor, TensorSpec, Variable, constant, graph_input,
                     graph_output, variable)

TensorByRef = Tensor  # PopXL's type hint for inputs passed by reference: the same here

__version__ = "3.4.0+ipusim"

__all__ = [
    "Constant",
    "DeviceToHostStream",
    "GradTensor",
    "Graph",
    "HostToDeviceStream",
    "Ir",
    "Module",
    "NotModelledError",
    "PopXLError",
    "RemoteBuffer",
    "ReplicaGrouping",
    "Session",
    "SessionIOError",
    "SessionOptions",
    "Tensor",
    "TensorByRef",
    "TensorSpec",
    "Variable",
    "bool",
    "constant",
    "create_seeds",
    "d2h_stream",
    "dtype",
    "double",
    "dtypes",
    "float",
    "float16",
    "float8_143",
    "float8_152",
    "float32",
    "float64",
    "gcg",
    "gir",
    "get_current_context",
    "get_current_graph",
    "get_ir",
    "get_main_graph",
    "gmg",
    "graph_input",
    "graph_output",
    "h2d_stream",
    "half",
    "fp8_utils",
    "in_sequence",
    "int8",
    "int32",
    "int64",
    "io_tiles",
    "ipu",
    "name_scope",
    "ops",
    "remote_buffer",
    "remote_replica_sharded_variable",
    "remote_variable",
    "replica_sharded_buffer",
    "replica_sharded_variable",
    "transforms",
    "two_uint32_to_uint64",
    "uint8",
    "uint32",
    "uint64",
    "variable",
]


def __getattr__(name: str):
    if name.startswith("_"):
        raise AttributeError(name)
    raise not_modelled("popxl", name, [n for n in __all__ if n[0].islower() and not isinstance(
        globals()[n], dtype)])
