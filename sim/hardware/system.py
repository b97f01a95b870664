"""The hardware a simulation runs on, loaded from ``configs/*.toml``.

A system file has one table per component (``[ipu]``, ``[host_link]``, ``[ipu_link]``,
``[gw_link]``, ``[streaming_memory]``, ``[system]``). A file may start with
``extends = "other-config"`` to inherit every value of another config and override some: the
parent is a file beside it (``"base"`` or ``"base.toml"``; a path is relative to the file's
folder, never to the working directory), else a config of ``configs/`` by name. ``name`` is not
inherited (without one a file is named after itself), nor is ``description`` (without one it is
the parent's, marked as changed by the file). Every value is checked: an unknown key, a missing
key, a wrong type or a value out of range is a :class:`~sim.errors.ConfigError` that names the
file that sets it (and the file that extends it) and the field; so is a [system] table whose
numbers contradict each other (``topology = "single"`` with several IPUs, several PODs of a number
of IPUs that is not a power of two). ``topology`` is recorded with a run, not simulated: routes
and syncs follow ``ipus_per_chassis`` and ``chassis_per_pod`` (:mod:`sim.hardware.topology`).

:func:`load_system` takes a config name or a path: a bare name of ``configs/`` is that config even
where the working directory holds a file or folder of that name (the file is given as ``./name``);
the ``_``-prefixed files of ``configs/`` are cost tables, not systems, and are refused by name, by
path and in ``extends``.

Units are in the field names: ``_hz``, ``_bytes``, ``_cycles``, ``_bytes_per_s``,
``_per_cycle``. Seconds and bytes/s are converted to cycles of the IPU clock by the helpers
here, so the rest of the simulator counts cycles only.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, show_number
from .configs import CONFIG_DIR, available_systems



@dataclass(frozen=True)
class IPU:
    """One IPU chip. Per-tile rates are per cycle of ``clock_hz``."""

    generation: str
    tiles: int
    clock_hz: float
    sram_bytes_per_tile: int
    worker_threads: int
    amp_fp16_flops_per_cycle: float  # per tile, fp16 in, fp16 partials; one multiply-add = 2 FLOP
    amp_fp16_fp32_partials_flops_per_cycle: float  # per tile, fp16 in, fp32 partials
    amp_fp32_flops_per_cycle: float  # per tile
    amp_fp8_flops_per_cycle: float  # per tile, FP8 (quarter) in, fp16 partials; 0: the IPU has no FP8 AMP
    amp_vertex_overhead_cycles: int  # fixed cycles of one AMP vertex call on a tile
    amp_pair_overhead_cycles: int  # fixed cycles per (input group, output group) pair of a vertex
    amp_fp16_input_group: int  # input channels (K) the AMP consumes together in fp16; K pads to it
    amp_fp32_input_group: int  # the same in fp32
    amp_fp16_output_group: int  # output channels (N) per pass with fp16 partials (conv units); N pads to it
    amp_fp16_fp32_partials_output_group: int  # the same, fp16 in with fp32 partials
    amp_fp32_output_group: int  # the same in fp32
    data_path_bits: int  # width of one load from tile memory (Target::getDataPathWidth)
    memory_element_bytes: int  # one tile memory element (bank), bytes
    vertex_overhead_cycles: int  # supervisor launch + worker entry, per compute set per tile
    exchange_bytes_per_cycle_per_tile: float  # send rate of one tile: the exchange's data width
    exchange_efficiency: float  # fraction of that rate an on-chip exchange's data moves at, on average
    exchange_setup_cycles: int  # fixed cycles of one exchange phase
    internal_sync_cycles: int  # one on-chip (tiles of one IPU) barrier
    external_sync_cycles: int  # one barrier between IPUs, base cost
    external_sync_cycles_per_hop: int  # added per IPU-Link hop of the sync group's span
    reserved_bytes_per_tile: int  # fixed control code on every tile (runtime, host exchange), bytes
    control_code_bytes_per_step: float  # control code per program step (compute set or exchange), every tile
    vertex_code_bytes_per_codelet: int  # code of one codelet, once per tile that runs it
    vertex_state_bytes_per_vertex: int  # fields of one vertex (one per compute set per working tile)
    exchange_code_bytes_per_phase: int  # exchange code of one exchange phase on a tile receiving in it
    stack_bytes_per_tile: int  # supervisor + worker stacks on a tile that runs vertices
    # poplin's matmul / convolution options as a compile sets them (Options.poplin_options), never
    # config keys: bits of AMP weights loaded per cycle (64, or 128 with use128BitConvUnitLoad), the
    # partials reduction's fast single-input vertex (enableFastReduce) and its stages
    # (enableMultiStageReduce: several when the depth is large, as by default, or one)
    conv_unit_load_bits: int = 64
    fast_reduce: bool = False
    multi_stage_reduce: bool = True

    @property
    def exchange_rate(self) -> float:
        """Bytes per cycle one tile receives (or sends) in an on-chip exchange, on average."""
        return self.exchange_bytes_per_cycle_per_tile * self.exchange_efficiency


@dataclass(frozen=True)
class HostLink:
    """The link from a host to the IPUs behind one gateway (or PCIe card)."""

    host_to_ipu_bytes_per_s: float  # host to gateway over the host link (shared)
    ipu_to_host_bytes_per_s: float  # gateway to host over the host link (shared)
    gateway_to_ipu_bytes_per_s: float  # gateway buffer to one IPU's tiles and back (per IPU)
    host_prepare_bytes_per_s: float  # host filling a stream buffer before a copy (host CPU)
    latency_s: float  # one stream copy's fixed cost (request, doorbell, completion)
    host_sync_cycles: int  # one IPU-host sync
    ipus_per_link: int  # IPUs sharing one host link
    popxl_run_s: float  # the host's fixed work in one PopXL Session.run, beside the device's (seconds)
    popxl_stream_s: float  # the host's fixed work per stream load or store of a PopXL run, per replica (seconds)
    stream_callback_s: float  # the host's work per replica's input copy in PopART's StepIO (seconds)
    poptorch_call_s: float  # the host's fixed work in one PopTorch model call, beside the device's (seconds)


@dataclass(frozen=True)
class IPULink:
    """One direction of the IPU-Link connection between two neighbouring IPUs."""

    bytes_per_s: float  # usable bandwidth between a neighbouring pair, one direction
    latency_cycles: int  # per transfer, and per hop of a ring step beyond its first
    reduce_step_s: float  # a GCL reduce-scatter ring step's fixed time, its link latency included, its sync not
    gather_step_s: float  # a GCL all-gather ring step's fixed time, its link latency included, its sync not


@dataclass(frozen=True)
class GWLink:
    """One direction of the gateway link between two chassis groups (PODs)."""

    bytes_per_s: float
    latency_cycles: int


@dataclass(frozen=True)
class StreamingMemory:
    """Off-chip DRAM behind the gateway, reached by remote buffers."""

    bytes_per_ipu: int
    bytes_per_s_per_ipu: float
    latency_cycles: int


@dataclass(frozen=True)
class SystemLayout:
    """How many IPUs and how they are grouped."""

    num_ipus: int
    ipus_per_chassis: int
    chassis_per_pod: int  # chassis joined by IPU-Links; PODs are joined by GW-Links
    topology: str  # "single", "card", "ladder"


@dataclass(frozen=True)
class System:
    """A whole system: IPUs, links, memory and layout."""

    name: str
    description: str
    ipu: IPU
    host_link: HostLink
    ipu_link: IPULink
    gw_link: GWLink
    streaming_memory: StreamingMemory
    layout: SystemLayout
    path: str

    @property
    def num_ipus(self) -> int:
        return self.layout.num_ipus

    @property
    def has_gateway(self) -> bool:
        """Do the IPUs sit behind a gateway (an IPU-Machine's, whose DRAM is the streaming memory)?
        A PCIe card (C2, C600) has neither: its IPU reads and writes host memory over its own PCIe
        link, so a stream copy crosses that link once, in the copy itself."""
        return self.streaming_memory.bytes_per_ipu > 0

    # --- unit conversions at the boundary: everything inside is cycles -------------------
    def seconds_to_cycles(self, seconds: float) -> int:
        return int(math.ceil(seconds * self.ipu.clock_hz))

    def cycles_to_seconds(self, cycles: float) -> float:
        return cycles / self.ipu.clock_hz

    def bytes_per_cycle(self, bytes_per_s: float) -> float:
        return bytes_per_s / self.ipu.clock_hz

    def chassis_of(self, ipu: int) -> int:
        return ipu // self.layout.ipus_per_chassis

    def pod_of(self, ipu: int) -> int:
        return self.chassis_of(ipu) // self.layout.chassis_per_pod

    def one_ipu(self) -> "System":
        """One IPU of this system, named ``"<name> (1 IPU)"`` (itself if it has one): a device of a single IPU,
        as Poplar's ``createTestDevice`` makes and a program attached to one IPU of a card or chassis runs on."""
        if self.num_ipus == 1:
            return self
        return dataclasses.replace(self, name=f"{self.name} (1 IPU)",
                                   layout=dataclasses.replace(self.layout, num_ipus=1))

    def with_tiles(self, tiles: int) -> "System":
        """This system with ``tiles`` tiles per IPU and nothing else changed, as Poplar's
        ``createTestDevice(deviceType, numIPUs, tilesPerIPU)`` makes an IPUModel with fewer tiles
        (poplibs' tools' ``--tiles-per-ipu``). Named ``"<name> (<tiles> tiles)"``."""
        if isinstance(tiles, bool) or not isinstance(tiles, int) or not 1 <= tiles <= self.ipu.tiles:
            raise ConfigError(f"{self.name}: tiles per IPU = {tiles!r} is out of range: expected a whole number "
                              f"from 1 to {self.ipu.tiles} (the IPU's tiles)")
        if tiles == self.ipu.tiles:
            return self
        return dataclasses.replace(self, name=f"{self.name} ({tiles} tiles)",
                                   ipu=dataclasses.replace(self.ipu, tiles=tiles))


_SECTIONS = {
    "ipu": IPU,
    "host_link": HostLink,
    "ipu_link": IPULink,
    "gw_link": GWLink,
    "streaming_memory": StreamingMemory,
    "system": SystemLayout,
}
_TOP_KEYS = {"name", "description", "extends"}
_STRINGS = {"generation", "topology"}
_GENERATIONS = {"mk1", "mk2", "bow", "ipu21"}
_TOPOLOGIES = {"single", "card", "ladder"}


#: Mk2 systems from smallest to largest, what a front end picks from by default
MK2_SYSTEMS = ("ipu-mk2", "ipu-m2000", "ipu-pod16", "ipu-pod64", "ipu-pod128", "ipu-pod256")
SYSTEM_ENV_VAR = "IPUSIM_SYSTEM"  # a config name or TOML path that overrides the default choice


def choose_system(ipus_needed: int, explicit=None, explicit_source: str = "",
                  how_to_choose: str = "") -> tuple["System", str]:
    """(system, why) for a run that reserves ``ipus_needed`` IPUs.

    In order: ``explicit`` (a name, path or System, given by ``explicit_source``); the
    ``IPUSIM_SYSTEM`` environment variable; else the smallest Mk2 system that holds them.
    """
    if explicit:
        return load_system(explicit), explicit_source
    env = os.environ.get(SYSTEM_ENV_VAR, "").strip()
    if env:
        return load_system(env), f"from the {SYSTEM_ENV_VAR} environment variable"
    for name in MK2_SYSTEMS:
        system = load_system(name)
        if system.num_ipus >= ipus_needed:
            return system, f"the smallest Mk2 system with {ipus_needed} IPU(s)"
    raise ConfigError(f"the run needs {ipus_needed} IPUs, more than the largest Mk2 system ({MK2_SYSTEMS[-1]}); "
                      f"{how_to_choose or 'choose a system'} or set {SYSTEM_ENV_VAR}")


def _shipped(name: str) -> Path | None:
    """The config of ``configs/`` a bare name (no folder, no ``.toml``) names, or None. Files whose
    name starts with ``_`` are cost tables shared by every system, not systems."""
    if not name or name.startswith("_") or "/" in name or os.sep in name or Path(name).suffix == ".toml":
        return None
    candidate = CONFIG_DIR / f"{name}.toml"
    return candidate if candidate.is_file() else None


def _unknown_hint(text: str) -> str:
    """`` (what it may have meant)`` for a name or path that names no config, or ""."""
    p = Path(text)
    known = available_systems()
    if p.suffix.lower() == ".toml" and p.stem in known and len(p.parts) == 1:
        return f" (the system {p.stem} of configs/ is named without .toml: {p.stem})"
    if not p.suffix and Path(f"{text}.toml").is_file():
        return f" (a file {text}.toml is there: give its path, {text}.toml)"
    near = difflib.get_close_matches(text.lower(), known, n=1, cutoff=0.75)
    return f" (did you mean {near[0]}?)" if near else ""


def _cost_table(p: Path) -> bool:
    """Is ``p`` (a name or a path) one of the cost tables of ``configs/`` (``_vector-ops``), not a system?"""
    table = CONFIG_DIR / f"{p.stem}.toml"
    if not p.stem.startswith("_") or not table.is_file():
        return False
    return (len(p.parts) == 1 and not p.suffix) or (p.exists() and p.resolve() == table.resolve())


def _resolve(name_or_path: str | Path) -> Path:
    text = str(name_or_path)
    if not text.strip():
        raise ConfigError("the system is empty; give a config name (ipusim systems lists them) or the path of a "
                          ".toml file")
    p = Path(name_or_path)
    if _cost_table(p):
        raise ConfigError(f"{text!r} is a table of codelet costs that every system shares (configs/{p.stem}.toml), "
                          f"not a system; known systems: {', '.join(available_systems())}")
    shipped = _shipped(text)
    if shipped is not None and not (isinstance(name_or_path, Path) and p.exists()):
        # a config name, even where the working directory holds a file or folder of that name (an
        # ``ipusim run --output ipu-pod16`` folder); such a file is given as a path, ./ipu-pod16
        return shipped
    if p.suffix == ".toml" or p.exists():
        if not p.exists():
            raise ConfigError(f"system config file {p} does not exist{_unknown_hint(text)}")
        if not p.is_file():  # a directory, a device such as /dev/zero (read forever), a FIFO
            raise ConfigError(f"system config {p} is not a regular file; give a .toml file or a config name")
        return p
    raise ConfigError(
        f"unknown system {text!r}{_unknown_hint(text)}; known systems: {', '.join(available_systems())}"
        " (or pass the path of a .toml file)"
    )


def _read_file(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                          "a system config is a TOML file, which must be saved as UTF-8") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}; fix the file (see configs/ipu-mk2.toml "
                          "for the format)") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the system config: {e.strerror or e}") from None


def _parent(path: Path, parent_name) -> Path:
    """The file ``extends = parent_name`` in ``path`` names: a file beside ``path`` (its name, with or
    without ``.toml``, or a path relative to ``path``'s folder, or an absolute path), else a config
    of ``configs/`` by name. Never a file relative to the working directory."""
    if not isinstance(parent_name, str) or not parent_name.strip():
        raise ConfigError(f"{path}: extends = {parent_name!r}; expected the name of a config (see ipusim systems) "
                          "or the path of a .toml file, relative to this file's folder")
    given = Path(parent_name)
    near = path.parent / (parent_name if given.suffix == ".toml" else parent_name + ".toml")
    if near.exists():
        if not near.is_file():
            raise ConfigError(f"{path}: extends = {parent_name!r}: {near} is not a regular file; give a .toml file "
                              "or a config name")
        return near
    if given.suffix == ".toml" or len(given.parts) > 1:
        raise ConfigError(f"{path}: extends = {parent_name!r}: {near} does not exist (a path in 'extends' is "
                          f"relative to the folder of {path.name})")
    if _cost_table(given):
        raise ConfigError(f"{path}: extends = {parent_name!r}: configs/{parent_name}.toml is a table of codelet "
                          f"costs that every system shares, not a system; extend one of: "
                          f"{', '.join(available_systems())}")
    shipped = _shipped(parent_name)
    if shipped is not None:
        return shipped
    raise ConfigError(f"{path}: extends = {parent_name!r}: no file {near.name} beside it and no system of that "
                      f"name; known systems: {', '.join(available_systems())} (or give the path of a .toml file, "
                      f"relative to the folder of {path.name})")


def _read_merged(path: Path, seen: tuple[Path, ...] = ()) -> tuple[dict, dict]:
    """The values of the config at ``path`` over those of the configs it ``extends``, and the file each
    value comes from (``{"table.key" or "key": path}``, so an error names the file that holds it).

    ``name`` is never inherited (a file without one is named after its file), nor is
    ``description`` (a file without one is described as its parent, changed).
    """
    real = path.resolve()
    if real in seen:
        chain = " -> ".join(str(s) for s in seen + (real,))
        raise ConfigError(f"{path}: 'extends' forms a cycle: {chain}; a config cannot extend itself, directly "
                          "or through others")
    data = _read_file(path)
    for key in ("name", "description"):
        if key in data and not isinstance(data[key], str):
            raise ConfigError(f"{path}: {key} = {data[key]!r}; expected a string")
    if "name" in data and not data["name"].strip():
        raise ConfigError(f"{path}: name = {data['name']!r}; expected a name (or no name: the file's)")
    parent_name = data.pop("extends", None)
    if parent_name is None:
        merged, origin = {}, {}
    else:
        merged, origin = _read_merged(_parent(path, parent_name), seen + (real,))
    parent_label = merged.pop("name", parent_name)
    parent_description = merged.pop("description", "")
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
            origin = {k: v for k, v in origin.items() if not k.startswith(f"{key}.")}
        origin[key] = path
        if isinstance(value, dict):
            origin.update({f"{key}.{k}": path for k in value})
    merged.setdefault("name", path.stem)
    if "description" not in data and parent_name is not None:
        merged["description"] = f"{parent_description or parent_label}; changed by {path.name}"
    return merged, origin


def _source(path: Path, origin: dict, key: str) -> str:
    """The file that sets ``key`` (``"table.key"``), and the file loaded when that is another."""
    src = origin.get(key, path)
    return str(path) if src == path else f"{src} (extended by {path})"


def _build_section(path: Path, section: str, cls, values, origin: dict) -> object:
    if not isinstance(values, dict):
        raise ConfigError(f"{_source(path, origin, section)}: [{section}] must be a table")
    # fields with a default are compile options, not hardware: a config cannot set them
    fields = {f.name: f for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"{_source(path, origin, f'{section}.{unknown[0]}')}: unknown key {section}.{unknown[0]}; the keys of "
            f"[{section}] are: "
            f"{', '.join(fields)}"
        )
    missing = [k for k in fields if k not in values]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise ConfigError(f"{path}: missing key {section}.{missing[0]}{more} (every key of [{section}] is required); "
                          f"set it, or start the file with extends = \"ipu-mk2\" (or another config of ipusim "
                          "systems) to take every value you do not set from it")
    kwargs = {}
    for key, f in fields.items():
        v = values[key]
        where = f"{_source(path, origin, f'{section}.{key}')}: {section}.{key}"
        if key in _STRINGS:
            allowed = _GENERATIONS if key == "generation" else _TOPOLOGIES
            if not isinstance(v, str) or v not in allowed:
                raise ConfigError(f"{where} = {v!r}; expected one of {sorted(allowed)}")
        else:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ConfigError(f"{where} = {v!r}; expected a number")
            if isinstance(v, float) and not math.isfinite(v):
                raise ConfigError(f"{where} = {v!r}; must be a finite number")
            if f.type == "int" and isinstance(v, float) and not v.is_integer():
                raise ConfigError(f"{where} = {v!r}; expected a whole number")
            _check_range(where, key, v)
            step = _MULTIPLE_OF.get(key)
            if step and v % step:
                raise ConfigError(f"{where} = {show_number(v)}; expected a multiple of {step} (a load carries whole "
                                  f"{step}-bit words: 64 on every IPU)")
            v = int(v) if f.type == "int" else float(v)
        kwargs[key] = v
    return cls(**kwargs)


# (lowest, highest, unit, why) of every number of a config. The bounds are far outside every
# real system and keep the simulator's arithmetic (int64 cycles, per-tile numpy arrays, one
# engine task per ring step) fast and exact; a value outside them is almost always a unit slip.
_CYCLES = (0, 10**9, "cycles", "a fixed cost in cycles of the IPU clock; the published costs are tens to "
           "thousands of cycles, and 10^9 cycles is most of a second")
_BANDWIDTH = (1e6, 1e15, "bytes/s", "bytes per second: IPU links, host links and DRAM run at 1e9 to 1e11 "
              "(an IPU-Link 26.45e9)")
_PER_TILE_RATE = (0.01, 1e6, "per tile per cycle", "a Mk2 tile does 128 fp16 FLOP, 8 vector bytes and 4 "
                  "exchange bytes per cycle")
_BYTES_PER_TILE = (0, 2**30, "bytes", "a tile's SRAM in bytes: 256 KiB on Mk1, 624 KiB on Mk2 and Bow")
_RANGES = {
    "exchange_efficiency": (0.01, 1, "fraction", "a fraction of the exchange's data width: 1 is the full "
                            "4 bytes per cycle per tile"),
    "tiles": (1, 65536, "tiles", "costs and memory are per-tile arrays; IPUs have 1216 (Mk1) or 1472 "
              "(Mk2, Bow) tiles"),
    "amp_fp8_flops_per_cycle": (0, 1e6, "per tile per cycle", "FP8 FLOP per cycle of a tile's AMP: 256 on an "
                                "IPU21 (C600), 0 on IPUs without FP8"),
    "clock_hz": (1e6, 1e10, "Hz", "the clock is in Hz, 1 MHz to 10 GHz: 1.325 GHz is clock_hz = 1.325e9"),
    "sram_bytes_per_tile": (1024, 2**30, "bytes", _BYTES_PER_TILE[3]),
    "reserved_bytes_per_tile": _BYTES_PER_TILE,
    "control_code_bytes_per_step": _BYTES_PER_TILE,
    "vertex_code_bytes_per_codelet": _BYTES_PER_TILE,
    "vertex_state_bytes_per_vertex": _BYTES_PER_TILE,
    "exchange_code_bytes_per_phase": _BYTES_PER_TILE,
    "stack_bytes_per_tile": _BYTES_PER_TILE,
    "memory_element_bytes": (1, 2**30, "bytes", "one tile memory element (bank): 32 KiB on Mk2"),
    "data_path_bits": (32, 1024, "bits", "the width of one load from tile memory: 64 on every IPU; the "
                       "estimators count the 32-bit and 16-bit elements one load carries, so at least 32"),
    "worker_threads": (1, 64, "threads", "hardware worker threads per tile: 6 on every IPU"),
    "reduce_step_s": (0, 1e-3, "s", "seconds of a collective's ring step beyond its data and sync: microseconds "
                      "(5.82e-6), so more than a millisecond is a unit slip"),
    "gather_step_s": (0, 1e-3, "s", "seconds of a collective's ring step beyond its data and sync: microseconds "
                      "(2.88e-6), so more than a millisecond is a unit slip"),
    "latency_s": (0, 1.0, "s", "seconds per stream copy: the fixed cost is microseconds (5.0e-6), so more "
                  "than a second is a unit slip"),
    "popxl_run_s": (0, 1.0, "s", "seconds of host work a PopXL Session.run takes beside the device's: about "
                    "half a millisecond (5.8e-4)"),
    "popxl_stream_s": (0, 1.0, "s", "seconds of host work per stream load or store of a PopXL run, per "
                       "replica: tens of microseconds (3.1e-5)"),
    "stream_callback_s": (0, 1.0, "s", "seconds of host work per replica's input copy in PopART's StepIO: tens of "
                          "microseconds (2.0e-5)"),
    "poptorch_call_s": (0, 1.0, "s", "seconds of host work a PopTorch model call takes beside the device's: about "
                        "half a millisecond (4.9e-4)"),
    "ipus_per_link": (1, 64, "IPUs", "IPUs sharing one host link: 4 behind an IPU-M2000 gateway; the simulator "
                      "simulates every replica behind one link"),
    "bytes_per_ipu": (0, 2**44, "bytes", "streaming memory per IPU: 112 GB on an IPU-M2000"),
    "num_ipus": (1, 4096, "IPUs", "the largest IPU systems built have 1024 IPUs, and collectives are "
                 "simulated ring step by ring step, so larger systems take minutes"),
    "ipus_per_chassis": (1, 64, "IPUs", "an IPU-M2000 or Bow-2000 holds 4 IPUs"),
    "chassis_per_pod": (1, 1024, "chassis", "an IPU-POD64 joins 16 chassis by IPU-Links"),
}
#: ranges of the fields _RANGES does not name, by a part of their name (first match)
_RANGES_BY_NAME_PART = (
    ("_cycles", _CYCLES),
    ("bytes_per_s", _BANDWIDTH),
    ("_per_cycle", _PER_TILE_RATE),
    ("_group", (1, 1024, "channels", "channels the AMP consumes or produces together: 8 or 16 on Mk2")),
)
_ANY_NUMBER = (0, 2**53, "", "far beyond any IPU figure")
#: fields that must be a multiple of a step as well as in range
_MULTIPLE_OF = {"data_path_bits": 32}


def _check_range(where: str, key: str, value: float) -> None:
    """A ConfigError naming the field, the value, the allowed range and why it is bounded."""
    by_part = (r for part, r in _RANGES_BY_NAME_PART if part in key)
    low, high, unit, why = _RANGES.get(key) or next(by_part, _ANY_NUMBER)
    if not low <= value <= high:
        raise ConfigError(f"{where} = {show_number(value)} is out of range: expected {show_number(low)} to "
                          f"{show_number(high)}{' ' + unit if unit else ''} ({why})")


#: every IPU loaded or derived so far, one object for each set of figures: the cost caches, keyed by the
#: IPU among others, then find an entry by identity instead of comparing every field of two equal IPUs
_IPUS: dict[IPU, IPU] = {}


def interned(ipu: IPU) -> IPU:
    """The one object holding ``ipu``'s figures (``ipu`` itself the first time they are seen)."""
    return _IPUS.setdefault(ipu, ipu)


def _check_layout(path: Path, origin: dict, layout: SystemLayout) -> None:
    """A ConfigError for a [system] table whose numbers contradict each other."""
    n = layout.num_ipus
    if layout.topology == "single" and n > 1:
        raise ConfigError(f"{_source(path, origin, 'system.topology')}: system.topology = 'single' but system.num_ipus "
                          f"= {n}: 'single' is one IPU on its own; set topology = \"ladder\" (IPU-Machines joined by "
                          "IPU-Links) or \"card\" (PCIe cards)")
    pod = layout.ipus_per_chassis * layout.chassis_per_pod
    if n > pod and pod & (pod - 1):
        # a replicated run holds a power-of-two partition from IPU 0: with PODs of another size it would
        # hold part of a POD, and a collective across PODs (GW-Links) needs the same IPUs in each
        lower = 1 << (pod.bit_length() - 1)
        raise ConfigError(
            f"{_source(path, origin, 'system.chassis_per_pod')}: system.num_ipus = {n} spans "
            f"{-(-n // pod)} PODs of system.ipus_per_chassis x system.chassis_per_pod = {layout.ipus_per_chassis} x "
            f"{layout.chassis_per_pod} = {pod} IPUs, which is not a power of two, so a power-of-two partition "
            f"(every replicated run) would hold part of a POD; make a POD {lower} or {lower * 2} IPUs, or "
            f"system.num_ipus at most {pod} (one POD)")


def load_system(name_or_path: str | Path) -> System:
    """Load a system by config name (``"ipu-pod16"``) or by the path of a TOML file."""
    if isinstance(name_or_path, System):
        return name_or_path
    path = _resolve(name_or_path)
    data, origin = _read_merged(path)
    unknown = sorted(set(data) - set(_SECTIONS) - _TOP_KEYS)
    if unknown:
        raise ConfigError(
            f"{_source(path, origin, unknown[0])}: unknown key or table {unknown[0]!r}; expected tables "
            f"{', '.join('[' + s + ']' for s in _SECTIONS)} and keys name, description, extends"
        )
    parts = {}
    for section, cls in _SECTIONS.items():
        if section not in data:
            raise ConfigError(f"{path}: missing table [{section}]; give it, or start the file with "
                              "extends = \"ipu-mk2\" (or another config of ipusim systems) to take every table "
                              "you do not give from it")
        parts[section] = _build_section(path, section, cls, data[section], origin)
    ipu: IPU = interned(parts["ipu"])
    if ipu.reserved_bytes_per_tile >= ipu.sram_bytes_per_tile:
        raise ConfigError(f"{path}: ipu.reserved_bytes_per_tile = {ipu.reserved_bytes_per_tile:,} leaves nothing "
                          f"of ipu.sram_bytes_per_tile = {ipu.sram_bytes_per_tile:,}; Poplar's reserved space "
                          "must be less than a tile's SRAM")
    layout: SystemLayout = parts["system"]
    if layout.num_ipus > layout.ipus_per_chassis and layout.num_ipus % layout.ipus_per_chassis:
        raise ConfigError(
            f"{path}: system.num_ipus = {layout.num_ipus} is not a whole number of chassis of "
            f"{layout.ipus_per_chassis} IPUs"
        )
    _check_layout(path, origin, layout)
    return System(
        name=data["name"],
        description=data.get("description", ""),
        ipu=ipu,
        host_link=parts["host_link"],
        ipu_link=parts["ipu_link"],
        gw_link=parts["gw_link"],
        streaming_memory=parts["streaming_memory"],
        layout=layout,
        path=str(path),
    )
