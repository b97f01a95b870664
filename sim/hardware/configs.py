"""Where the system descriptions (``configs/*.toml``) are found.

They live in the repository's top-level ``configs/`` folder. A wheel ships them inside the
package as ``sim/configs/`` (see ``[tool.setuptools.package-dir]`` in pyproject.toml); an
editable install or a source checkout reads the top-level folder itself.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def _config_dir() -> Path:
    shipped = Path(str(resources.files("sim"))) / "configs"
    if shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parents[2] / "configs"


CONFIG_DIR = _config_dir()


def available_systems() -> list[str]:
    """Names of the systems in ``configs/``, sorted (files starting with ``_`` are tables, not systems)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.toml") if not p.stem.startswith("_"))
