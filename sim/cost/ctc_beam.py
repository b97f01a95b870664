"""CTC beam search decoding as PopART runs it: ``CtcBeamSearchDecoderOpx`` (popart ``willow/src/popx/op/
ctcbeamsearchx.cpp``, PopTorch's ``poptorch.ctc_beam_search_decoder``) plans popnn's decoder with no options (float
partials) and calls ``popnn::ctc_infer::beamSearchDecoderLogProbabilities`` (poplibs ``lib/popnn/CTCInference.cpp``,
``CTCInferencePlan.cpp``) on log-probabilities ``(T, B, C)`` with a beam of ``bw``.

The plan never splits time: each batch entry gets ``BEP`` tiles (its *batch entry partitions*), the most that any
stage's partition of the work asks for: ``extend`` partitions of the ``C - 1`` non-blank classes, ``copy`` (and
merge, select and output) partitions of the beams, and per sort stage ``rank`` and ``reduce`` partitions of each
group of candidates. With ``BEP > 1`` the input is first copied whole to each of them.

The decoder is a loop over the time steps (popops' countedForLoop: a counter compute set a step), each step:

1. the step's index broadcast to the tiles (a copy);
2. the candidates generated: an extend vertex per (class, beam range) and a copy vertex per beam;
3. the copy candidates broadcast to the merge vertices' tiles and the extend candidates' totals and addends to
   the select tiles (adjacent copies, which the code groups "to allow poplar to optimise": one exchange here);
4. ``bw x bw`` merge vertices (a copy candidate against the extend candidate of the same output);
5. the select compute set: a vertex per beam choosing among the merged copies, another per beam zeroing the
   merged extends;
6. per sort stage (two stages from 20 classes, grouped by ``floor(sqrt(C))``) a rank compute set and a reduce
   compute set;
7. the update compute set: one vertex a tile updating its copy of the beams' history and probabilities.

After the loop a vertex per top path traces its beam back (and a cast when the input is not float). The ranking,
reduction and update vertices have poplibs estimators (``popnnCycleEstimators.cpp``); the other five are
placeholders there (``// TODO``, no cycles), so their worker cycles are the ``[ctc_beam_search]`` estimates of
``configs/_vector-ops.toml``. The loop runs once per step of the longest sequence (``max(lengths)``, known only
at run time), priced at the input's ``T``. Cycles are tile cycles (the six workers together), bytes are bytes.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from functools import lru_cache

from .ctc import LOG_ADD_CYCLES, LOG_MUL_CYCLES
from .vector import whole_number_table

#: a candidate's fields (parent, addend, non-blank, blank and total probabilities), each 4 bytes on the tile
FIELDS, WORD = 5, 4
#: popnn sorts in two stages from this many classes (CTCInferencePlan.cpp)
TWO_STAGE_CLASSES = 20


@lru_cache(maxsize=1)
def vertex_cycles() -> dict[str, int]:
    """The ``[ctc_beam_search]`` worker cycles of the vertices poplibs gives no estimate."""
    return whole_number_table("ctc_beam_search", ("fixed", "per_beam_extend", "merge", "per_entry_select",
                                                  "per_step_output"))


def argument_problem(probs: tuple, lengths: tuple, blank: int, beam_width: int, top_paths: int) -> str:
    """What is wrong with a decoder's arguments as PopART's CtcBeamSearchDecoderOp takes them: log-probabilities of
    shape ``probs`` ``(T, B, C)``, lengths of shape ``lengths`` ``(B,)``; empty when nothing is."""
    if len(probs) != 3:
        return f"probs must be [input_length, batch_size, num_classes], got {tuple(probs)}"
    if tuple(lengths) != tuple(probs[1:2]):
        return f"lengths must be of shape [batch_size] = [{probs[1]}], got {tuple(lengths)}"
    if not 0 <= blank < probs[2]:
        return f"blank {blank} is not one of the {probs[2]} classes"
    if not 1 <= top_paths <= beam_width:
        return f"top_paths ({top_paths}) must be from 1 to beam_width ({beam_width})"
    return ""


def _fmp(size: int, parts: int) -> int:
    """popnn's partition count of ``size`` things over at most ``parts``: the least count of the same size."""
    return math.ceil(size / math.ceil(size / max(parts, 1)))


@dataclass(frozen=True)
class SortStage:
    """One stage of the candidates' sort: ``groups`` groups, each ranked and reduced over partitions (tiles)."""

    groups: int
    candidates: int  # candidates a group ranks
    rank: int  # rank partitions a group
    reduce: int  # reduce partitions a group
    groups_per_tile: int


@dataclass(frozen=True)
class BeamPlan:
    """popnn's ``ctc_infer::plan`` of a decoder (CTCInferencePlan.cpp): partitions per batch entry."""

    batch: int  # batch partitions
    entries: int  # batch entries a partition holds
    extend: int  # partitions of the non-blank classes
    extend_vertices: int  # extend vertices a (class) partition: min(bw, workers - 1)
    beams: int  # copy, merge, select and output partitions
    sort: tuple  # a SortStage a stage
    partitions: int  # tiles a batch entry (BEP)

    @property
    def tiles(self) -> int:
        return self.batch * self.partitions


def plan(batch: int, classes: int, beam: int, workers: int, tiles: int) -> BeamPlan:
    """The plan popnn makes for ``batch`` entries of ``classes`` classes (blank included) and a ``beam``."""
    parts = math.ceil(batch / max(math.ceil(batch / tiles), 1))
    per_entry = max(tiles // parts, 1)
    extend = _fmp(classes - 1, per_entry)
    if classes >= TWO_STAGE_CLASSES:
        groups = math.isqrt(classes)
        total = beam * classes
        while groups > 1 and total - (groups - 1) * math.ceil(total / groups) < beam:
            groups -= 1
        stage_groups = [groups, 1]
    else:
        stage_groups = [1]
    stages, candidates_in = [], beam * classes
    for groups in stage_groups:
        candidates = math.ceil(candidates_in / groups)
        per_group = max(1, per_entry // groups)
        rank = math.ceil(candidates / max(workers, math.ceil(candidates / per_group)))
        stages.append(SortStage(groups, candidates, rank, _fmp(beam, per_group), math.ceil(groups / per_entry)))
        candidates_in = groups * beam
    first = stages[0]
    beams = _fmp(beam, per_entry)
    bep = max(max(first.rank, first.reduce) * first.groups // first.groups_per_tile, beams, extend)
    return BeamPlan(parts, math.ceil(batch / parts), extend, min(beam, workers - 1), beams, tuple(stages), bep)


def _plain(costs: list[int], workers: int) -> int:
    """Tile cycles of a compute set of plain vertices of worker cycles ``costs`` on one tile: each worker takes the
    next vertex as it comes free (the longest first), the tile busy until its busiest worker is done."""
    load = [0] * workers
    for c in sorted(costs, reverse=True):
        heapq.heapreplace(load, load[0] + c)
    return workers * max(load)


def rank_cycles(candidates: int, ranked: int, beam: int, workers: int) -> int:
    """popnn's CTCRankCandidates estimate: ``ranked`` of a group's ``candidates``."""
    per_worker = math.ceil(ranked / workers)
    worker = 13 + per_worker * 28 + per_worker * 3 * ((candidates - 1) // 2) + 15
    return 14 + (5 + 6) * beam + 8 + worker * workers


def reduce_cycles(partitions: int, workers: int) -> int:
    """popnn's CTCReduceCandidates estimate: one output from ``partitions`` ranked lists."""
    return 24 + 12 + (13 + (partitions - 1) // 2 + 6) * workers


def update_cycles(beam: int, workers: int) -> int:
    """popnn's CTCUpdate estimate: a tile's copy of the beams updated."""
    return 12 + 16 + (16 + beam * 7 + 1) * workers


@dataclass(frozen=True)
class Step:
    """One compute set of a loop iteration on the busiest tile: its cycles, the fixed part, the bytes it receives
    first, and its flops over all tiles."""

    name: str
    compute: int
    launch: int
    received: int
    flops: float


def _fixed(vertices: int, workers: int) -> int:
    """The fixed part of a compute set of ``vertices`` plain vertices on one tile (each worker's vertex entries)."""
    return workers * math.ceil(vertices / workers) * vertex_cycles()["fixed"]


def loop_steps(p: BeamPlan, classes: int, beam: int, workers: int) -> list[Step]:
    """The compute sets of one time step on the busiest tile (the first of each batch entry, which every kind of
    partition starts on), with what each receives."""
    v = vertex_cycles()
    n = p.entries
    entries = p.batch * p.entries
    beams_tile = math.ceil(beam / p.beams)
    classes_tile = math.ceil((classes - 1) / p.extend)
    extend = v["fixed"] + v["per_beam_extend"] * math.ceil(beam / p.extend_vertices)
    # the copy vertex: an extend's beam, then the non-blank path's multiply and add
    copy = v["fixed"] + v["per_beam_extend"] + LOG_MUL_CYCLES + LOG_ADD_CYCLES
    generate = [extend] * (n * classes_tile * p.extend_vertices) + [copy] * (n * beams_tile)
    merges = n * beam * beams_tile
    selects = 2 * n * beams_tile
    steps = [
        Step("generate", _plain(generate, workers), _fixed(len(generate), workers), 0,
             float(entries * beam * (classes + 7))),
        # the copy candidates broadcast to every merge tile's beams, those beams' extend candidates (parent, addend,
        # non-blank probability of every class), and the extends' totals and addends to the select tiles
        Step("merge", _plain([v["merge"]] * merges, workers), _fixed(merges, workers),
             n * beams_tile * (FIELDS * beam + 5 * (classes - 1)) * WORD, float(entries * beam * beam)),
        Step("select", _plain([v["fixed"] + v["per_entry_select"] * beam] * selects, workers),
             _fixed(selects, workers), n * beams_tile * (FIELDS + 2) * beam * WORD, float(entries * 2 * beam * beam)),
    ]
    for s, stage in enumerate(p.sort):
        ranks = n * stage.groups_per_tile
        ranked = math.ceil(stage.candidates / stage.rank)
        steps.append(Step(f"rank {s + 1}", ranks * rank_cycles(stage.candidates, ranked, beam, workers),
                          ranks * (14 + 8), ranks * stage.candidates * FIELDS * WORD,
                          float(entries * stage.groups * stage.candidates ** 2 * 2)))
        reduces = ranks * math.ceil(beam / stage.reduce)
        steps.append(Step(f"reduce {s + 1}", reduces * reduce_cycles(stage.rank, workers), reduces * (24 + 12),
                          reduces * stage.rank * FIELDS * WORD, float(entries * stage.groups * beam * stage.rank * 5)))
    steps.append(Step("update", n * update_cycles(beam, workers), n * (12 + 16), n * beam * FIELDS * WORD, 0.0))
    return steps


def temp_bytes(p: BeamPlan, time: int, classes: int, beam: int, in_bytes: int) -> int:
    """Bytes the decoder holds on its busiest tile: the input copied whole to each of an entry's tiles, the beams'
    history (parent and addend a step), the candidates and what the merge and rank vertices receive."""
    n = p.entries
    data = time * classes * in_bytes if p.partitions > 1 else 0
    history = 2 * (time + 1) * beam * WORD + 6 * beam * WORD
    candidates = FIELDS * (math.ceil((classes - 1) / p.extend) * beam + math.ceil(beam / p.beams) * beam) * WORD
    sort = max(st.candidates * st.groups_per_tile for st in p.sort) * FIELDS * WORD
    return n * (data + history + candidates + sort)


def output_step(p: BeamPlan, time: int, top_paths: int, workers: int) -> Step:
    """The compute set after the loop: a vertex per top path tracing its beam back through the steps."""
    per_tile = p.entries * math.ceil(top_paths / p.beams)
    traceback = vertex_cycles()["fixed"] + vertex_cycles()["per_step_output"] * time
    return Step("output", _plain([traceback] * per_tile, workers), _fixed(per_tile, workers), 0, 0.0)
