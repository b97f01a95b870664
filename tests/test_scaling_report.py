"""reports/scaling.py runs with the options it documents, and the README quotes its table.

The script is run by hand (``python reports/scaling.py``); these tests keep it runnable (its
ResNet-50 options compile on an IPU-POD16) and keep the README's copy of its ResNet-50 table the
same as reports/scaling.md, so a regenerated report cannot leave the README behind.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import models
import sim

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "reports"))
import scaling  # noqa: E402


def test_the_resnet_options_compile_on_a_pod16():
    exe = sim.compile(models.get("resnet50", micro_batch=scaling.ASKED_MICRO_BATCH, **scaling.RESNET), "ipu-pod16",
                      scaling._resnet_options(16, scaling.example_accumulation(16)), training=True,
                      optimizer=scaling.OPTIMIZER)
    assert exe.options.replication_factor == 16


def _samples_per_second(text: str) -> dict[str, str]:
    """system -> samples/s of the first ResNet-50 table (the example's accumulation) in ``text``."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| ((?:ipu|bow)-pod\d+) \| (\d+) \| (\d+) \|(?: [\d,]+ \|)? ([\d,]+) \|", line)
        if m and m.group(1) not in rows:
            rows[m.group(1)] = m.group(4)
    return rows


def _report_resnet_section() -> str:
    """reports/scaling.md from its ResNet-50 table at the example's accumulation on."""
    return (ROOT / "reports" / "scaling.md").read_text().split("gradient accumulation as the PopTorch example", 1)[1]


def test_the_readme_quotes_the_reports_resnet_table():
    readme = (ROOT / "README.md").read_text().split("ResNet-50 training, one IPU per replica", 1)[1]
    quoted, generated = _samples_per_second(readme), _samples_per_second(_report_resnet_section())
    assert len(quoted) == 8 and quoted == generated


def test_the_report_is_what_the_simulator_gives_now():
    """reports/scaling.md's first ResNet-50 row, re-simulated: a change of costs must regenerate the
    report (``python reports/scaling.py``), and with it the README's copy, rather than leave both behind."""
    row = scaling.resnet_row("Mk2", 16, scaling.ASKED_MICRO_BATCH, scaling.example_accumulation(16))
    assert _samples_per_second(_report_resnet_section())["ipu-pod16"] == f"{row['samples_per_second']:,.0f}"
