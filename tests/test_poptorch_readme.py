"""The README's PopTorch example is a plain PopTorch script (only the import differs) and runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

README = Path(__file__).resolve().parent.parent / "README.md"


def example() -> str:
    section = README.read_text().split("## PopTorch scripts", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_example_differs_from_poptorch_only_in_its_import():
    code = example()
    imports = [line for line in code.splitlines() if "poptorch" in line and "import" in line]
    assert imports == ["import sim.poptorch as poptorch  # on IPU hardware: import poptorch"]
    assert "sim." not in code.replace("import sim.poptorch as poptorch", "")


def test_the_example_runs(capsys):
    exec(compile(example(), str(README), "exec"), {"__name__": "__main__"})  # noqa: S102
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["epoch 0", "epoch 1"]
    assert all("cycles per call" in line and "samples/s" in line for line in lines)
