"""PopTorch's ``OptionsDict`` interface (``set(**kw)``, ``createOrSet(**kw)``, ``exists``, ``opts("name")``,
``toDict()``) over the simulator's option groups.

PopTorch keeps every option group's values in a dictionary under snake_case names (``device_iterations``,
``output_mode``, ``gradient_accumulation``, ...): ``set`` changes one that exists (an ``AssertionError`` for an
unknown name or a value not of the default's type), ``createOrSet`` also adds a new one, calling the options
with a name reads one (python/_options_impl.py ``OptionsDict``, sdk/poptorch/3.4.0). Here each group lists its
names and current values (``_dict_values``) and the setter each name goes through (``_dict_setters``), so a
value set by name has the effect (and the checks) of its setter. A name no setter reads (``createOrSet`` of a
new one) is kept, shown by ``toDict`` and reported in the run's notes as accepted with no modelled effect.
"""

from __future__ import annotations


class OptionsDictMixin:
    """``set``, ``createOrSet``, ``exists``, ``__call__`` and ``toDict`` by PopTorch's option names."""

    def _dict_values(self) -> dict:
        """PopTorch's option names of this group and their current values."""
        raise NotImplementedError

    def _dict_setters(self) -> dict:
        """The setter (a function of the value) each name of :meth:`_dict_values` goes through."""
        raise NotImplementedError

    def _dict_extras(self) -> dict:
        extras = self.__dict__.get("_ipusim_extra_values")
        if extras is None:
            extras = {}
            object.__setattr__(self, "_ipusim_extra_values", extras)
        return extras

    def _all_values(self) -> dict:
        return {**self._dict_values(), **self._dict_extras()}

    def _invalid(self, option: str, values: dict) -> AssertionError:
        return AssertionError(f"Invalid option {option}, valid options are {values.keys()}")

    def exists(self, option: str) -> bool:
        """Has this group a value named ``option`` (PopTorch's name, e.g. ``"random_seed"`` once set)?"""
        return option in self._all_values()

    def __call__(self, option: str):
        """The value named ``option`` (``opts("device_iterations")``), PopTorch's ``AssertionError`` if none."""
        values = self._all_values()
        if option not in values:
            raise self._invalid(option, values)
        return values[option]

    def toDict(self) -> dict:
        """This group's values by name."""
        return self._all_values()

    def set(self, **kwargs) -> None:
        """Change existing values by name (``opts.set(device_iterations=4)``), each through its setter."""
        self._check_frozen()
        values = self._all_values()
        for option, value in kwargs.items():
            if option not in values:
                raise self._invalid(option, values)
            if not isinstance(value, type(values[option])):
                raise AssertionError(f"Unexpected type {type(value)} for option {option}. "
                                     f"Expected {type(values[option])}")
        for option, value in kwargs.items():
            self._set_one(option, value)

    def createOrSet(self, **kwargs) -> None:
        """:meth:`set` for the names that exist; a new name is added (no modelled effect, said in the notes)."""
        self._check_frozen()
        values = self._all_values()
        for option, value in kwargs.items():
            if option in values:
                self.set(**{option: value})
            else:
                self._set_one(option, value)

    def _set_one(self, option: str, value) -> None:
        setter = self._dict_setters().get(option)
        if setter is not None:
            setter(value)
            return
        self._dict_extras()[option] = value
        prefix = getattr(self, "_ipusim_dict_prefix", "")
        self._root()._record(f"{prefix}createOrSet.{option}", value)
