"""PopTorch's printing of a model: the module tree with its ``BeginBlock`` annotations.

``repr(poptorch_model)`` and ``poptorch.print(module)`` show each module's forward pre-hooks in
front of its name, so a ``BeginBlock(user_id=..., ipu_id=...)`` placed on a layer is visible
(``torch.nn.Module.__repr__`` does not show hooks).
"""

from __future__ import annotations

import builtins

import torch


def module_repr(m: torch.nn.Module) -> str:
    """``repr(m)`` with each module's forward pre-hooks (``BeginBlock``) before its name."""

    def indent(text: str) -> str:
        return "\n  ".join(text.split("\n"))

    extra = m.extra_repr()
    extra_lines = extra.split("\n") if extra else []
    child_lines = [f"({key}): {indent(module_repr(child))}" for key, child in m._modules.items()
                   if child is not None]
    lines = extra_lines + child_lines
    hooks = "".join(repr(h) + " " for h in m._forward_pre_hooks.values())
    text = hooks + m._get_name() + "("
    if lines:
        if len(extra_lines) == 1 and not child_lines:
            text += extra_lines[0]
        else:
            text += "\n  " + "\n  ".join(lines) + "\n"
    return text + ")"


def print(m) -> None:  # noqa: A001 - PopTorch's name
    """Print ``m``; a module is printed with :func:`module_repr` first, as PopTorch does."""
    if isinstance(m, torch.nn.Module):
        builtins.print(module_repr(m))
    builtins.print(m)


__all__ = ["module_repr", "print"]
