"""End to end: :data:`END_TO_END`, published training throughputs (graphcore.ai/performance-results)
held at 30 % and never used to fit anything: ResNet-50 (:func:`resnet50_training`) and BERT-Large
(the held-out rows B10 and B12)."""

from __future__ import annotations

from functools import lru_cache

from .. import simulate
from .calibration import Check
from .published import PUBLISHED_BY_ID
from .setups import _resnet_e2e


# --- end to end: published throughputs, never used to fit anything ------------------------------
PERFORMANCE_RESULTS = "graphcore.ai/performance-results (Bow Pod training table, pre-SDK 2.5 rows)"


@lru_cache(maxsize=None)
def resnet50_training(system: str, replicas: int, global_batch: int, amp: float, micro_batch: int = 20,
                      replicas_per_process: int = 2) -> float:
    """ResNet-50 training as Graphcore's TF1 ResNet-50 config runs it (:func:`_resnet_e2e`), images/s."""
    setup = _resnet_e2e(system, replicas, global_batch, amp, micro_batch, replicas_per_process)
    return simulate(setup.graph(), system, setup.options(), training=True,
                    optimizer=setup.sim_optimizer()).samples_per_second


_E2E_WHY = ("published by Graphcore for another software stack and data pipeline; a guard against "
            "regressions, not a fit: nothing was tuned to it")
END_TO_END = [
    Check("resnet50_bow_pod16", "ResNet-50 training, Bow Pod16, batch 1,920", 42029, "images/s", 0.3,
          "end to end", _E2E_WHY, lambda: resnet50_training("bow-pod16", 16, 1920, 0.15)),
    Check("resnet50_bow_pod64", "ResNet-50 training, Bow Pod64, batch 2,560", 145287, "images/s", 0.3,
          "end to end", _E2E_WHY, lambda: resnet50_training("bow-pod64", 64, 2560, 0.145, replicas_per_process=4)),
    Check("bert_large_ph1_bow_pod16", "BERT-Large phase 1 (SL128), Bow Pod16, GBS 65,536", 5179, "sequences/s", 0.3,
          "end to end", _E2E_WHY, lambda: PUBLISHED_BY_ID["B10"].simulated()),
    Check("bert_large_ph1_bow_pod64", "BERT-Large phase 1 (SL128), Bow Pod64, GBS 65,536", 19353, "sequences/s", 0.3,
          "end to end", _E2E_WHY, lambda: PUBLISHED_BY_ID["B12"].simulated()),
]


_END_TO_END_BY_ID = {"B1": END_TO_END[0], "B2": END_TO_END[1]}  # GCN-P B1, B2: already end to end
