"""One command line of the ``ipusim`` CLI run in-process, shared by the CLI tests."""
from __future__ import annotations

from sim.cli.main import main


def cli(capsys, *argv) -> tuple[int, str, str]:
    """Run ``ipusim *argv`` (each argument passed through ``str``); return its exit code, stdout and
    stderr. Fails the test if either stream shows a Python traceback."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err
