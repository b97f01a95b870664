"""How far the simulator has come out from published measurements of workloads like a run's.

``python -m sim.validation`` simulates every held-out row (``sim.validation.published.PUBLISHED_ROWS``:
published hardware measurements no constant was fitted to) and stores, beside reports/validation.md,
each row's error in :data:`TABLE` (``sim.validation.held_out.write``). A run then says, in its notes and
its summary, what those errors were over the rows of its own kind (:func:`like`): its workload family
(:mod:`sim.graph.workload`), training or inference, and, where enough rows share it, its scale (the
IPUs it runs on). So a figure is read with the bias the simulator has shown on such workloads, which
no constant corrects (the rows would be fitted). Nothing here changes a simulated number.

Error: simulated throughput over published, less 1 (+0.25: the simulator 25 % faster than the
hardware).
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..graph.workload import FAMILIES

#: the stored errors, one line a held-out row (written by ``python -m sim.validation``; shipped with the package)
TABLE = Path(__file__).resolve().parents[1] / "validation" / "held_out.csv"
COLUMNS = ("id", "model", "family", "training", "ipus", "published", "simulated", "error")
#: the columns beside :data:`COLUMNS` that say where the row's time goes (:func:`device_shares`), which the
#: report sets against the errors (reports/validation.md "What the errors follow"); runs quote none of them
SHARE_COLUMNS = ("fixed_share", "exchange_share")
#: the breakdown lines an IPU's own work is made of (``sim.program.CATEGORIES``: the rest is host and
#: streaming-memory IO, inter-IPU copies, collectives and idle), and of them the fixed costs: compute-set
#: launches, exchange set-ups and syncs, which do not shrink with the work
DEVICE_LINES = ("compute", "launch", "exchange", "exchange_setup", "sync")
FIXED_LINES = ("launch", "exchange_setup", "sync")
#: the scales rows are grouped by: at most this many IPUs (1; a POD4; a POD16; a POD64; beyond)
SCALES = (1, 4, 16, 64, 2**31)
#: rows of a run's family and mode at its scale needed before the note names that scale's spread
MIN_SCALE_ROWS = 3
#: rows of the run's own model the note lists at most
MAX_MODEL_ROWS = 4


@lru_cache(maxsize=1)
def stored() -> pd.DataFrame:
    """The errors ``python -m sim.validation`` stored (:data:`TABLE`; none before it first writes them, as
    when it builds the table from scratch)."""
    if not TABLE.exists():
        return pd.DataFrame(columns=list(COLUMNS))
    frame = pd.read_csv(TABLE, dtype={"id": str, "model": str, "family": str})
    unknown = set(frame.family) - set(FAMILIES)
    if unknown:
        raise ConfigError(f"{TABLE}: unknown families {sorted(unknown)} (known: {', '.join(FAMILIES)}); rewrite it "
                          "with python -m sim.validation")
    return frame


def device_shares(breakdown: pd.DataFrame) -> tuple[float, float]:
    """(fixed costs, exchange) each as a share of the device cycles (:data:`DEVICE_LINES`) of the IPU of a
    run's ``breakdown`` (``Run.breakdown``: cycles per line per IPU) that has the most of them; its fixed
    costs are :data:`FIXED_LINES`. (0, 0) for a run with no device work."""
    device = breakdown[list(DEVICE_LINES)]
    busiest = device.loc[device.sum(axis=1).idxmax()]
    total = float(busiest.sum())
    if not total:
        return 0.0, 0.0
    return float(busiest[list(FIXED_LINES)].sum()) / total, float(busiest["exchange"]) / total


def scale_of(ipus: int) -> tuple[int, int]:
    """The (fewest, most) IPUs of the :data:`SCALES` group ``ipus`` falls in."""
    i = int(np.searchsorted(SCALES, ipus))
    return (SCALES[i - 1] + 1 if i else 1), SCALES[i]


def scale_label(fewest: int, most: int) -> str:
    """A :data:`SCALES` group's IPUs as text: "1", "2-4", "65+"."""
    return "1" if most == 1 else (f"{fewest}-{most}" if most < SCALES[-1] else f"{fewest}+")


def spread(errors: pd.Series) -> dict:
    """Rows, median, middle half (quartiles) and extremes of ``errors``."""
    return {"rows": int(len(errors)), "median": float(errors.median()), "quartiles": [
        float(errors.quantile(0.25)), float(errors.quantile(0.75))], "low": float(errors.min()),
        "high": float(errors.max())}


def like(family: str, training: bool, ipus: int, model: str = "", frame: pd.DataFrame | None = None) -> dict | None:
    """The errors of the held-out rows of ``family`` in the same mode (``training``): their spread, that
    of those at the scale of ``ipus`` (when at least :data:`MIN_SCALE_ROWS`) and that of ``model``'s own
    rows, with the first :data:`MAX_MODEL_ROWS` of them by id. None if no row is of that kind. Of the
    stored table (``frame`` None) each kind is worked out once: every run asks, a plan's thousands of them."""
    if frame is None:
        return copy.deepcopy(_like_stored(family, training, scale_of(ipus), model))
    return _like(frame, family, training, scale_of(ipus), model)


@lru_cache(maxsize=256)
def _like_stored(family: str, training: bool, scale: tuple[int, int], model: str) -> dict | None:
    return _like(stored(), family, training, scale, model)


def _like(frame: pd.DataFrame, family: str, training: bool, scale: tuple[int, int], model: str) -> dict | None:
    kind = frame[(frame.family == family) & (frame.training == training)]
    if kind.empty:
        return None
    fewest, most = scale
    at_scale = kind[(kind.ipus >= fewest) & (kind.ipus <= most)]
    own = kind[kind.model == model]
    return {"family": family, "training": training, **spread(kind.error),
            "scale": ({"ipus": [fewest, most], **spread(at_scale.error)}
                      if len(at_scale) >= MIN_SCALE_ROWS else None),
            "model": ({"name": model, **spread(own.error),
                       "first": {row.id: float(row.error) for row in own[:MAX_MODEL_ROWS].itertuples()}}
                      if len(own) else None)}


def describe(found: dict) -> str:
    """The note a run prints for :func:`like`'s result: medians and middle halves (the extremes are in it)."""
    def pct(x: float) -> str:
        return f"{x:+.0%}" if round(x, 2) else "0%"

    def spread_text(d):
        low, high = d["quartiles"]
        return f"median {pct(d['median'])}" + (f" ({pct(low)} to {pct(high)})" if d["rows"] >= 4 else "")
    mode = "training" if found["training"] else "inference"
    parts = [f"{found['rows']} held-out published measurements of {found['family']} {mode}: {spread_text(found)}"]
    scale = found["scale"]
    if scale:
        label = scale_label(*scale["ipus"])
        parts.append(f"the {scale['rows']} on {label} IPU{'' if label == '1' else 's'}: {spread_text(scale)}")
    own = found["model"]
    if own:
        listed = ", ".join(f"{k} {pct(v)}" for k, v in own["first"].items())
        more = ", ..." if own["rows"] > len(own["first"]) else ""
        parts.append(f"{own['name']}'s {own['rows']} ({listed}{more}): {spread_text(own)}")
    return ("simulated throughput against the hardware's (middle half in brackets; positive: the simulator faster; "
            "nothing corrects for it; reports/validation.md): " + "; ".join(parts))
