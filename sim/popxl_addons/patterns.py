"""popxl-addons' ``apply_pre_alias_patterns``: PopART's graph patterns, which the simulator does not
run (its graphs are priced as written; the run's notes say so)."""

from __future__ import annotations

LEVELS = ("no_patterns", "minimal", "default", "all")


def apply_pre_alias_patterns(ir, level: str = "default") -> None:
    if level not in LEVELS:
        raise KeyError(f"apply_pre_alias_patterns: level must be one of {', '.join(LEVELS)}, got {level!r}")
    ir._note(f"apply_pre_alias_patterns({level!r}): PopART's patterns are not run; the graphs are priced as "
             "written")
