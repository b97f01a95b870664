"""Packaging: the wheel holds every package and the system configs, and works outside the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _packages_in_tree() -> set[str]:
    found = set()
    for top in ("sim", "models"):
        for init in (ROOT / top).rglob("__init__.py"):
            found.add(".".join(init.parent.relative_to(ROOT).parts))
    return found


def test_pyproject_lists_every_package():
    """pyproject.toml lists the packages by hand (to map configs/ into the wheel): none missing."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    assert listed - {"sim.configs"} == _packages_in_tree()


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory) -> Path:
    """Build the wheel and install it (not editable) into a fresh virtual environment.

    The environment sees this interpreter's site-packages for the dependencies (numpy, pandas,
    simpy, matplotlib: no download); its own copy of ``sim`` comes first on the path.
    """
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"  # a copy, so the build leaves nothing in the checkout
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", "build", "*.egg-info", "__pycache__", ".pytest_cache", "reports"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp / "dist"), str(source)], check=True, capture_output=True)
    wheel = next((tmp / "dist").glob("ipusim-*.whl"))
    env_dir = tmp / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=False)
    python = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True)
    return env_dir


def _run(env_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "IPUSIM_SYSTEM")}
    return subprocess.run([str(env_dir / "bin" / a) if i == 0 else a for i, a in enumerate(args)],
                          cwd=cwd, env=environ, capture_output=True, text=True, timeout=300)


def test_wheel_runs_outside_the_checkout(installed_wheel, tmp_path):
    where = _run(installed_wheel, tmp_path, "python", "-c",
                 "import sim, sim.hardware.configs as c; print(sim.__file__); print(c.CONFIG_DIR)")
    assert where.returncode == 0, where.stderr
    module_file, config_dir = where.stdout.split()
    assert Path(module_file).is_relative_to(installed_wheel), "the wheel's sim was not the one imported"
    assert Path(config_dir).is_relative_to(installed_wheel)

    systems = _run(installed_wheel, tmp_path, "ipusim", "systems")
    assert systems.returncode == 0, systems.stderr
    assert "bow-pod16" in systems.stdout and "ipu-mk2" in systems.stdout

    result = _run(installed_wheel, tmp_path, "ipusim", "run", "--system", "bow-pod16", "--model", "mlp", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["cycle_count"] > 0


@pytest.mark.parametrize("module", ["sim", "sim.cli"])
def test_the_command_line_runs_as_a_module(module):
    """``python -m sim`` and ``python -m sim.cli`` are the ``ipusim`` command (the second failed until 2026-12-06:
    sim.cli is a package)."""
    out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, cwd=ROOT, check=True)
    assert "usage: ipusim" in out.stdout
