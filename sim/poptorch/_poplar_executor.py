"""``poptorch._poplar_executor._OverwriteContextManager``: substitutions made while PopTorch
traces a model.

PopTorch enters every registered substitution manager (an object with ``replace()`` and
``restore()``) around the tracing of a model (python/_poplar_executor.py,
``_compileWithDispatch``); PopTorch Geometric registers one that swaps some PyG functions for
IPU-friendly forms and turns on PyG's ``disable_dynamic_shapes`` mode
(poptorch_geometric/python/override.py, registered from its ``__init__.py`` by loading this
module through ``importlib``). The simulator enters them around the capture and around the CPU
runs that compute the outputs, so both see the model as PopTorch traces it.

Imports are absolute: PopTorch Geometric loads this file again as ``poptorch._poplar_executor``,
and the registry must be the executor's whichever copy registers into it.
"""

from __future__ import annotations

from sim.poptorch import executor as _executor


class _OverwriteContextManager:
    """Enters (``replace()``) every registered manager, and leaves them in reverse order."""

    _subsitution_manager_types = _executor.SUBSTITUTION_MANAGERS

    def __init__(self):
        self.substitution_managers = [t() for t in self._subsitution_manager_types]

    def __enter__(self):
        for manager in self.substitution_managers:
            manager.replace()
        return self

    def __exit__(self, exc_type, value, traceback):
        for manager in reversed(self.substitution_managers):
            manager.restore()

    @classmethod
    def registerSubsitutionManager(cls, manager_type) -> None:
        """Enter a ``manager_type()`` around every capture from now on (PopTorch's spelling)."""
        if manager_type not in cls._subsitution_manager_types:
            cls._subsitution_manager_types.append(manager_type)


__all__ = ["_OverwriteContextManager"]
