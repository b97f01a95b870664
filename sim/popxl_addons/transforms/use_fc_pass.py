"""popxl-addons' ``disable_fc_pass`` / ``enable_fc_pass``: every matmul of the Ir without (or with again)
PopART's fully-connected pass, which plans a weight's matmuls of training jointly and keeps the
weight's transpose for the backward pass (in an inference program, memory for nothing). In the
simulator it is the Ir's PopART option ``enableFullyConnectedPass``, which the simulated training's
matmul plans follow (the property ``sim.options.Options.fully_connected_pass``)."""

from __future__ import annotations

__all__ = ["disable_fc_pass", "enable_fc_pass"]


def disable_fc_pass(ir) -> None:
    ir._fully_connected_pass = False


def enable_fc_pass(ir) -> None:
    ir._fully_connected_pass = True
