"""popnn's CTC loss as popnn plans and runs it (``lib/popnn/CTCLossPlan.cpp``, ``CTCLoss.cpp``,
``PerformanceEstimation.hpp``; poplibs 7eac0f26).

The loss and its gradient come from one op (``calcLossAndGradientLogProbabilities``, which PopART's
``CtcOpx`` calls; inference calls the loss-only form, which runs the same two loops). Over the
batch ``B``, the time steps ``T`` and the extended label (``2L + 1`` symbols, blanks between the
label's ``L``), popnn partitions the work over tiles: ``pb`` batch partitions, ``pt`` time
partitions and ``pl`` label partitions (plus one for the last blank when it sits on a tile of its
own). Each tile holds its batch and time slice of the log-probabilities for the whole alphabet
(the input is copied to every label partition), and the recursion runs as a wavefront:

1. the *alpha/beta loop*: ``ceil(T / pt) x steps / 2`` iterations (``steps`` = ``pt`` rounded up
   to even), each a compute set of the CTCAlpha / CTCBeta vertices (one worker per sequence of
   the tile, so ``ceil(batch per tile / workers)`` serial runs) and an exchange of the label
   columns the next step needs;
2. the *gradient loop*: as many iterations of CTCGradGivenAlpha / Beta;
3. the loss and gradient reduced over the label partitions (``popops::reduce``, LOG_ADD) and the
   gradient turned into that of the logits (a ``popops::map``, ``exp(data) - exp(grad + loss)``).

The vertex cycles per time step and label symbol are popnn's (``alphaCycles``,
``gradGivenAlphaCycles``: log-add 16 cycles, log-multiply 1); the plan is the one popnn's
planner picks: the least estimated cycles (its own per-step exchange and sync constants, 100 and
90 cycles), then the least temporary memory, then the fewest tiles, with the temporary memory per
tile within the available-memory proportion (0.6 by default) and no empty partition. The simulator
prices the chosen plan with its own exchange, sync and launch costs, as every op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..hardware.system import IPU

#: popnn ``logAddCycles`` (min/max 4, subtract 1, exp 3, add 1, log 6, add 1) and ``logMulCycles``
LOG_ADD_CYCLES, LOG_MUL_CYCLES = 16, 1
#: the fixed exchange and sync cycles popnn's planner charges each step (CTCLossPlan.cpp estimateCycles)
PLANNER_EXCHANGE_FIXED, PLANNER_SYNC = 100, 90
LABEL_BYTES = 2  # labels are UNSIGNED_SHORT on the tile


def alpha_cycles(t: int, label: int, extra_blank: bool) -> int:
    """Worker cycles of a CTCAlpha (or CTCBeta) vertex over ``t`` steps of ``label`` symbols."""
    per_symbol = (1 + 3) * 2 + 2 * LOG_ADD_CYCLES + 2 * LOG_MUL_CYCLES + 2
    return per_symbol * label * t + ((LOG_ADD_CYCLES + LOG_MUL_CYCLES) if extra_blank else 0)


def grad_cycles(t: int, label: int, extra_blank: bool) -> int:
    """Worker cycles of a CTCGradGivenAlpha (or Beta) vertex: the other recursion plus the gradient."""
    per_symbol = (2 + 1) * 2 + (LOG_MUL_CYCLES + LOG_ADD_CYCLES) * 2
    return (alpha_cycles(t, label, extra_blank) + per_symbol * label * t
            + ((LOG_ADD_CYCLES + LOG_MUL_CYCLES) if extra_blank else 0))


@dataclass(frozen=True)
class CtcPlan:
    """A popnn CTC loss plan and what it costs.

    Cycles are tile cycles (a compute set's are ``workers x`` its busiest worker's); bytes are per
    tile where they say so."""

    batch: int  # parallel batch partitions
    time: int  # parallel time partitions
    label: int  # parallel label partitions
    last_blank_separate: bool  # the extended label's last blank on a tile of its own
    loops: int  # iterations of each of the two loops
    serial_runs: int  # vertex runs per step: ceil(sequences per tile / workers)
    alpha_compute: int  # cycles of one alpha/beta step's compute set
    grad_compute: int  # cycles of one gradient step's compute set
    alpha_exchange_bytes: int  # bytes a tile receives per alpha/beta step
    grad_exchange_bytes: int  # bytes a tile receives per gradient step
    data_bytes: int  # log-probabilities a tile receives before the loops
    temp_bytes: int  # temporary memory per tile (popnn estimateMaxTileTempMemory)
    planner_cycles: int  # popnn's own estimate, by which the plan was chosen

    @property
    def label_tiles(self) -> int:
        return self.label + int(self.last_blank_separate)

    @property
    def tiles(self) -> int:
        return self.batch * self.time * self.label_tiles

    def describe(self) -> str:
        blank = ", last blank on its own tile" if self.last_blank_separate else ""
        return (f"CTC loss: batch/{self.batch} time/{self.time} label/{self.label}{blank} on {self.tiles} tiles, "
                f"{self.loops} alpha/beta and {self.loops} gradient steps")


def _estimate(B, T, L, C, pb, pt, pl, separate, in_bytes, partials_bytes, workers, exchange_rate) -> CtcPlan:
    """popnn's ``estimateCycles`` and ``estimateMaxTileTempMemory`` of one candidate plan."""
    t_per = math.ceil(T / pt)
    steps = pt + (pt & 1)
    loops = t_per * steps // 2
    b_per = math.ceil(B / pb)
    serial = math.ceil(b_per / workers)
    l_per = math.ceil(L / pl)
    balanced = l_per == L // pl
    extra_blank = balanced and not separate
    alpha = alpha_cycles(1, l_per, extra_blank) * workers
    grad = grad_cycles(1, l_per, extra_blank) * workers
    alpha_elems = (l_per if pt > 2 else 0) + (2 if pl > 1 else 0) + (2 if pl > 1 and pt > 2 else 0)
    grad_elems = 2 + 2 * (2 * l_per)
    per_step = (alpha + PLANNER_EXCHANGE_FIXED + alpha_elems * partials_bytes // exchange_rate + PLANNER_SYNC
                + grad + PLANNER_EXCHANGE_FIXED + grad_elems * partials_bytes // exchange_rate + PLANNER_SYNC)
    planner = int(per_step * loops * serial)
    ext_per = 2 * l_per + (1 if l_per * pl == L else 0)
    label_tiles = pl + int(separate)
    grad_bytes = b_per * t_per * C * partials_bytes
    temp = (b_per * t_per * C * in_bytes  # the data, the whole alphabet on every tile
            + b_per * l_per * LABEL_BYTES
            + grad_bytes + (grad_bytes if label_tiles > 1 else 0)  # gradient, and its copy to reduce
            + b_per * ext_per * partials_bytes  # alpha/beta
            + b_per * 3 * ext_per * partials_bytes)  # the columns carried from step to step
    return CtcPlan(pb, pt, pl, separate, loops, serial, alpha, grad, alpha_elems * partials_bytes * b_per,
                   grad_elems * partials_bytes * b_per, b_per * t_per * C * in_bytes, int(temp), planner)


def _candidates(n: int) -> list[int]:
    """Partition counts of ``n`` that give distinct partition sizes, each the least such count
    (more partitions of the same size cost more tiles for nothing)."""
    out, size = [], n
    while size >= 1:
        parts = math.ceil(n / size)
        out.append(parts)
        size = math.ceil(n / parts) - 1
    return sorted(set(out))


def _no_empty(n: int, parts: int) -> bool:
    """popnn's ``checkForEmptyPartitions``: the last partition holds something."""
    return n > math.ceil(n / parts) * (parts - 1)


def plan_ctc(batch: int, time: int, label: int, classes: int, in_bytes: int, partials_bytes: int, ipu: IPU,
             tiles: int, memory_proportion: float = 0.6) -> CtcPlan:
    """The plan popnn's planner picks for a CTC loss of ``batch`` sequences of ``time`` steps,
    labels of at most ``label`` symbols and ``classes`` classes (blank included)."""
    budget = memory_proportion * ipu.sram_bytes_per_tile
    rate = max(1, int(ipu.exchange_bytes_per_cycle_per_tile))
    labels = [p for p in _candidates(label) if _no_empty(label, p)]
    times = [p for p in _candidates(time) if _no_empty(time, p)]
    plans = []
    for pb in _candidates(batch):
        for pl in labels:
            for separate in (False, True):
                for pt in times:
                    if pb * pt * (pl + separate) > tiles:
                        break
                    plans.append(_estimate(batch, time, label, classes, pb, pt, pl, separate, in_bytes,
                                           partials_bytes, ipu.worker_threads, rate))
    fitting = [p for p in plans if p.temp_bytes <= budget]
    if fitting:
        return min(fitting, key=lambda p: (p.planner_cycles, p.temp_bytes, p.tiles))
    # nothing fits (popnn: "No ctc loss plan found"): the least memory, so the out-of-memory check names it
    return min(plans, key=lambda p: (p.temp_bytes, p.planner_cycles))
