"""Every complete ``ipusim run`` command of the README's "Using it" block runs (exit 0).

The README is the first thing a user copies from; a command there that runs out of memory or
names a flag that no longer exists is a defect. Output folders go to a temporary directory.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from sim.cli.main import main

README = Path(__file__).resolve().parent.parent / "README.md"


def run_commands() -> list[list[str]]:
    block = README.read_text().split("## Using it", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = []
    for line in re.sub(r"\\\n\s*", " ", block).splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("ipusim run") and "..." not in line:
            commands.append(shlex.split(line)[1:])
    return commands


def test_the_readme_shows_run_commands():
    assert len(run_commands()) >= 4


@pytest.mark.parametrize("argv", run_commands(), ids=lambda a: " ".join(a[:6]))
def test_readme_run_command_succeeds(argv, tmp_path, capsys):
    argv = [str(tmp_path / "out") if i and argv[i - 1] == "--output" else a for i, a in enumerate(argv)]
    assert main(argv + ["-q"]) == 0, capsys.readouterr().err
