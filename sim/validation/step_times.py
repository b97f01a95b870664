"""Time per step of the MLPerf rows: packed BERT SL512 (:func:`packed_step_seconds`, the line
through the step times against GA, :func:`packed_step_line`) and TF1 ResNet-50
(:data:`RESNET_STEP_ROWS`, the published clean step times :data:`RESNET_CLEAN_STEP_MS`); and the
Pod16 / Pod64 pairs of training rows (:data:`POD_PAIRS`), split the same way."""

from __future__ import annotations

import numpy as np

from .published import Row


#: MLPerf v2.0's packed BERT-Large on Bow Pod64, Pod128 and Pod256: the same work per replica
#: (micro-batch 3, one placement) at GA 96, 64 and 36, so their step times against GA lie on a line
#: whose slope is the time per micro-batch and whose intercept what every step adds whatever its GA
PACKED_STEP_FIT_ROWS = ("M18", "M19", "M20")
#: the packed BERT SL512 MLPerf rows shown with their time per step (one of each configuration)
PACKED_STEP_ROWS = ("M1", "M3", "M7", "M9", "M11", "M17", "M18", "M19", "M20")


def packed_step_seconds(row: Row, samples_per_second: float) -> float:
    """Seconds per weight update of a packed BERT training row at ``samples_per_second``
    (sequences/s): the sequences of one step (packs per micro-batch x packing factor x GA x
    replicas) over the throughput."""
    params = dict(row.setup.params)
    sequences = params["micro_batch"] * params.get("packing_factor", 1.0) * row.setup.accumulation * row.setup.replicas
    return sequences / samples_per_second


def packed_step_line(rows: list[Row], samples_per_second: list[float]) -> tuple[float, float]:
    """(seconds every step adds, seconds per micro-batch): the least-squares line through the
    rows' step times (seconds) against their gradient accumulation counts."""
    if len({r.setup.accumulation for r in rows}) < 2:
        raise ValueError("packed_step_line needs rows with at least two gradient accumulation counts")
    ga = np.array([r.setup.accumulation for r in rows], dtype=float)
    seconds = np.array([packed_step_seconds(r, v) for r, v in zip(rows, samples_per_second)])
    per_micro_batch, per_step = np.polyfit(ga, seconds, 1)
    return float(per_step), float(per_micro_batch)


#: training on a Pod16 and a Pod64 with the same work per replica (micro-batch, placement, global batch;
#: each at its config's memory proportions) at GA 4 x apart: the line through each pair's step times splits
#: a step into a time per micro-batch and what every step adds. (Pod16 row, Pod64 row, what it runs)
POD_PAIRS = (("B10", "B12", "BERT-Large Ph1, PopART"), ("B32", "B35", "BERT-Large Ph1 packed, PopART"),
             ("B38", "B40", "BERT-Large Ph2 packed, PopART"), ("B34", "B37", "BERT-Large Ph1 packed, PyTorch"),
             ("B39", "B41", "BERT-Large Ph2 packed, PyTorch"), ("B22", "B23", "ViT-B/16 pre-training, PyTorch"),
             ("C2", "C3", "Conformer-medium, PyTorch, Mk2"), ("C5", "C6", "Conformer-medium, PyTorch, Bow"))


#: the TF1 ResNet-50 MLPerf rows shown with their time per weight update (v1.1 and v2.0: LARS)
RESNET_STEP_ROWS = ("M13", "M14", "M15", "M16", "M23", "M24", "M25", "M26")
#: ms per weight update over the epochs the script's checkpoints leave alone: the median epoch of each
#: result_*.txt (mlcommons training_results_v1.1 / v2.0, Graphcore/results/*TF1*/resnet) without the
#: epochs holding an eval_start (instance 0 saves a checkpoint there: train.py epochs_per_ckpt 4) and
#: the epochs after them (the next call uploads every variable again, poplar_executor.cc
#: CheckMoveHostToDeviceRequired), over the steps of an epoch, averaged over the runs
RESNET_CLEAN_STEP_MS = {"M13": 108.04, "M14": 35.59, "M15": 27.63, "M16": 29.42,
                        "M23": 81.65, "M24": 34.55, "M25": 21.54, "M26": 22.85}
