"""docs/cli.md stays true: every flag of every subcommand of ``build_parser()`` is in it, in
that subcommand's section (flags every subcommand takes in their own section)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from sim.cli.main import build_parser

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
COMMON = "Flags every subcommand takes"
COMMON_FLAGS = {"-h", "--help", "-v", "--verbose", "-q", "--quiet"}


def _sections(doc: Path = DOC) -> dict[str, str]:
    """Heading (after ``## ``) -> the text up to the next ``## `` heading."""
    parts = re.split(r"^## (.+)$", doc.read_text(encoding="utf-8"), flags=re.M)
    return {head.strip(): body for head, body in zip(parts[1::2], parts[2::2])}


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _names(action: argparse.Action) -> list[str]:
    """How the doc writes an argument: its flags, a positional's metavar, ``--`` for the rest."""
    if action.option_strings:
        return list(action.option_strings)
    if action.nargs == argparse.REMAINDER:
        return ["--"]
    return [action.metavar or action.dest]


def _undocumented(command: str, doc: Path = DOC) -> list[str]:
    """The arguments of ``ipusim command`` that ``doc`` does not name (in backticks) where it should."""
    sections = _sections(doc)
    assert f"ipusim {command}" in sections, f"docs/cli.md has no '## ipusim {command}' section"
    own, common = sections[f"ipusim {command}"], sections[COMMON]
    return [name for action in _subcommands()[command]._actions for name in _names(action)
            if f"`{name}`" not in (common if name in COMMON_FLAGS else own)]


@pytest.mark.parametrize("command", sorted(_subcommands()))
def test_every_flag_of_the_subcommand_is_documented(command):
    missing = _undocumented(command)
    assert missing == [], f"docs/cli.md, section 'ipusim {command}', does not name {missing}"


def test_every_subcommand_takes_quiet_and_verbose():
    for command, parser in _subcommands().items():
        flags = {s for a in parser._actions for s in a.option_strings}
        assert {"-q", "--quiet", "-v", "--verbose"} <= flags, command


def test_the_check_sees_a_missing_flag(tmp_path):
    doc = tmp_path / "cli.md"
    doc.write_text(DOC.read_text(encoding="utf-8").replace("`--tolerance`", "tolerance"), encoding="utf-8")
    assert _undocumented("compare", doc) == ["--tolerance"]
    assert _undocumented("compare") == []
