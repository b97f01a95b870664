"""popxl-addons' optimizers (``popxl_addons.optimizers``): :class:`~.adam.AdamOptimizerStep`."""

from .adam import AdamOptimizerStep

__all__ = ["AdamOptimizerStep"]
