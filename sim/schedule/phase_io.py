"""What phased execution moves between streaming memory and the chip, phase by phase, and the program items
that move it: through the compute tiles, or through the IO tiles.

A TensorLocations class (``"weight"``, ``"accumulator"``, ``"activation"``) whose ``useIOTilesToLoad`` is set
(PopART's ``loadTileSet`` IO), when the IPUs have IO tiles, moves as PopART's streamingmemoryopinserter.cpp moves
it: a RemoteLoad on the IO tiles' own lane, then an IoTileCopy to the compute tiles as its phase begins; a store
is an IoTileCopy out at the phase's end, then a RemoteStore on the IO tiles while the next phase runs. PopART's
IO schedule of the class (``Options.phase_io_schedule``) says when a load runs: Preload during the phase before,
OnDemand once the phase before has ended. With batch serialisation under batchSchedule OverlapOnIo or
OverlapOnCompute, of the activations a phase loads on demand only the first piece is loaded before the phase
computes; the later pieces load on the IO tiles meanwhile and are copied in before the phase ends. The IO tiles
must hold at once a phase's stores, its on-demand loads and the next phase's preloads (a batch-serialised tensor a
piece at a time). An IPU's one streaming-memory path is shared by both tile sets (the engine's resource).

Bytes are bytes; keys are ``(phase, ipu)`` (ipu within a replica) or ``(phase, ipu, schedule)``.
"""

from __future__ import annotations

from collections import defaultdict

from ..errors import OptionsError
from ..program import Compute, RemoteCopy
from .context import Context
from .hostio import io_tile_copy_steps

#: the TensorLocations class of each role a phase loads from streaming memory (activations: "activation")
LOCATION_OF_ROLE = {"weight": "weight", "constant": "weight", "state": "optimizer", "accumulator": "accumulator"}


class PhaseTraffic:
    """The loads and stores of a phased program's phases (``phases``: per phase, its IPUs), and their items."""

    def __init__(self, ctx: Context, phases: list):
        self.ctx, self.phases = ctx, phases
        self.loads = defaultdict(int)  # (phase, ipu) -> bytes loaded through the compute tiles before it
        self.stored = defaultdict(int)  # (phase, ipu) -> bytes stored through the compute tiles after it
        self.io_loads = defaultdict(int)  # (phase, ipu, schedule) -> bytes loaded through the IO tiles
        self.io_stored = defaultdict(int)  # (phase, ipu) -> bytes stored through the IO tiles
        self.io_held = defaultdict(float)  # either key -> bytes on the IO tiles at once
        self.io_behind = defaultdict(int)  # (phase, ipu) -> bytes of later pieces loaded while the phase computes
        locations = ctx.options.TensorLocations
        self.schedule = {kind: ctx.options.phase_io_schedule(kind) for kind in locations.locations}
        #: TensorLocations class -> whether its off-chip tensors move through the IO tiles
        self.via_io = {kind: bool(locations.num_io_tiles) and where.io_tiles_to_load
                       for kind, where in locations.locations.items()}
        self.overlap = ctx.options.batch_serialization().overlaps_io
        self._landed: dict[tuple, list] = defaultdict(list)  # (phase, replica, ipu) -> its IO-tile loads
        self._behind: dict[tuple, RemoteCopy] = {}  # (phase, replica, ipu) -> its later pieces' load

    def move(self, key: tuple, kind: str, nbytes: int, piece: float, way: str) -> None:
        """Count ``nbytes`` of TensorLocations class ``kind`` loaded (``way`` "load") for, or stored after, phase
        and IPU ``key``; ``piece``: the bytes of it moved at once (a batch-serialised tensor's piece)."""
        if not self.via_io[kind]:
            (self.loads if way == "load" else self.stored)[key] += nbytes
            return
        at = key + (self.schedule[kind],) if way == "load" else key
        self.io_held[at] += piece
        if self.overlap and way == "load" and self.schedule[kind] == "OnDemand" and piece < nbytes:
            self.io_behind[key] += nbytes - int(piece)  # the later pieces: loaded while the first computes
            nbytes = int(piece)
        (self.io_loads if way == "load" else self.io_stored)[at] += nbytes

    def check(self) -> None:
        """Error if the IO tiles cannot hold what a phase needs there at once (each tile's SRAM less Poplar's
        reserved bytes)."""
        ctx = self.ctx
        io_tiles = ctx.options.TensorLocations.num_io_tiles
        room = io_tiles * (ctx.system.ipu.sram_bytes_per_tile - ctx.system.ipu.reserved_bytes_per_tile)
        held = self.io_held
        for t, works in enumerate(self.phases):
            for ipu in works:
                need = int(held[(t, ipu)] + held[(t, ipu, "OnDemand")] + held[(t + 1, ipu, "Preload")])
                if need > room:
                    raise OptionsError(
                        f"phase {t} on IPU {ipu}: its stores and loads through the IO tiles need {need:,} bytes there "
                        f"at once, but {io_tiles} IO tiles hold {room:,}; use more IO tiles (numIOTiles, at most 192), "
                        "smaller phases, or load through the compute tiles (useIOTilesToLoad(False), PopART's "
                        "loadTileSet Compute)")

    # --- program items, for every simulated replica ------------------------------------------------
    def start(self) -> None:
        """Forget the items of an earlier micro-batch's program."""
        self._landed.clear()
        self._behind.clear()

    def load_items(self, t: int) -> list:
        """Phase ``t``'s loads through the compute tiles."""
        ctx = self.ctx
        return ctx.for_replicas(lambda r: [RemoteCopy(ctx.ipus(r)[ipu], "load", self.loads[(t, ipu)], f"phase {t} load")
                                           for ipu in self.phases[t] if self.loads[(t, ipu)]])

    def io_load_items(self, t: int, when: str, ended: dict | None = None) -> list:
        """Phase ``t``'s loads to the IO tiles of schedule ``when``, on their own lane; each after the item
        ``ended`` gives for its device IPU (the end of the phase before, for a load in the phase)."""
        def make(r):
            for ipu in self.phases[t]:
                if self.io_loads[(t, ipu, when)]:
                    device = self.ctx.ipus(r)[ipu]
                    item = RemoteCopy(device, "load", self.io_loads[(t, ipu, when)],
                                      f"phase {t} load ({when}, IO tiles)", io_tiles=True,
                                      after=(ended[device],) if ended and device in ended else ())
                    self._landed[(t, r, ipu)].append(item)
                    yield item
        return self.ctx.for_replicas(lambda r: list(make(r)))

    def copies_in(self, t: int) -> list:
        """Phase ``t``'s loaded tensors copied from the IO tiles to the compute tiles once they have landed."""
        return self.ctx.for_replicas(lambda r: [
            self._copy(r, ipu, sum(item.nbytes for item in self._landed[(t, r, ipu)]), f"phase {t} in",
                       after=tuple(self._landed[(t, r, ipu)])) for ipu in self.phases[t] if self._landed[(t, r, ipu)]])

    def loads_behind(self, t: int) -> list:
        """Phase ``t``'s later batch-serialised pieces, loaded on the IO tiles while the phase computes."""
        def make(r):
            for ipu in self.phases[t]:
                if self.io_behind[(t, ipu)]:
                    self._behind[(t, r, ipu)] = RemoteCopy(self.ctx.ipus(r)[ipu], "load", self.io_behind[(t, ipu)],
                                                           f"phase {t} load (later pieces, IO tiles)", io_tiles=True)
                    yield self._behind[(t, r, ipu)]
        return self.ctx.for_replicas(lambda r: list(make(r)))

    def copies_behind(self, t: int) -> list:
        """The later pieces copied to the compute tiles: the phase ends once they have landed."""
        return self.ctx.for_replicas(lambda r: [
            self._copy(r, ipu, self.io_behind[(t, ipu)], f"phase {t} later pieces in",
                       after=(self._behind[(t, r, ipu)],)) for ipu in self.phases[t] if (t, r, ipu) in self._behind])

    def store_items(self, r: int, t: int, ipu: int) -> list:
        """Replica ``r``'s stores after phase ``t`` on IPU ``ipu``: through the compute tiles, and copied to the IO
        tiles, then stored from there while the next phase runs."""
        device, items = self.ctx.ipus(r)[ipu], []
        if self.stored[(t, ipu)]:
            items.append(RemoteCopy(device, "store", self.stored[(t, ipu)], f"phase {t} store activations"))
        if self.io_stored[(t, ipu)]:
            out = self._copy(r, ipu, self.io_stored[(t, ipu)], f"phase {t} out")
            items += [out, RemoteCopy(device, "store", self.io_stored[(t, ipu)],
                                      f"phase {t} store activations (IO tiles)", io_tiles=True, after=(out,))]
        return items

    def _copy(self, r: int, ipu: int, nbytes: int, name: str, after: tuple = ()) -> Compute:
        """The on-chip exchange of ``nbytes`` between an IPU's IO tiles and its compute tiles."""
        ctx = self.ctx
        steps = io_tile_copy_steps(name, nbytes, ctx.system.ipu, ctx.options.TensorLocations.num_io_tiles,
                                   ctx.compute_tiles)
        return Compute(ctx.ipus(r)[ipu], f"io-tile copy {name}", steps, after=after)
