"""Mk2 to Bow: which parts of a step scale with the clock. The pairs of rows that run one workload
on Mk2 and on Bow (:data:`MK2_TO_BOW`), the breakdown lines priced in tile cycles
(:data:`CLOCK_LINES`) and in seconds (:data:`SECONDS_LINES`), and each pair's setup and published
figure."""

from __future__ import annotations

from .end_to_end import _END_TO_END_BY_ID
from .published import PUBLISHED_BY_ID
from .setups import Setup, _resnet_e2e


# --- Mk2 -> Bow: which parts of a step scale with the clock ------------------------------------
# The Bow IPU is the Mk2 GC200 tile design clocked at 1.85 GHz instead of 1.325 GHz; the Bow-2000
# keeps the IPU-M2000's gateway, host link, IPU-Links and GW-Links (configs/bow-ipu.toml). So what
# is priced in tile cycles takes the same cycles on both, and what is priced in seconds (host,
# gateway, links, streaming memory) the same seconds.
#: Rows of one workload run on Mk2 and on Bow: (Mk2 row, Bow row). B1 and B2 are the end-to-end
#: rows (the same GBS as M5 and M6); the MLPerf pairs differ in batch, GA and SDK as published.
MK2_TO_BOW = (("M5", "B1"), ("M6", "B2"), ("M13", "M23"), ("M14", "M24"), ("M15", "M25"), ("M16", "M26"))
#: breakdown lines priced in tile cycles only: the same cycles on Mk2 and Bow
CLOCK_LINES = ("compute", "launch", "exchange", "exchange_setup")
#: breakdown lines priced in seconds (host CPU, host link, gateway, IPU-Links): the same seconds
SECONDS_LINES = ("host_io", "remote_io", "inter_ipu", "collective")
#: B1 and B2 (END_TO_END, :func:`resnet50_training`) as Setups
_E2E_SETUPS = {"B1": _resnet_e2e("bow-pod16", 16, 1920, 0.15),
               "B2": _resnet_e2e("bow-pod64", 64, 2560, 0.145, replicas_per_process=4)}


def _pair_setup(row_id: str) -> Setup:
    return _E2E_SETUPS.get(row_id) or PUBLISHED_BY_ID[row_id].setup


def _pair_published(row_id: str) -> float:
    return (_END_TO_END_BY_ID.get(row_id) or PUBLISHED_BY_ID[row_id]).published
