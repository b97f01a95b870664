"""A clock on which a simulated device call takes the time the simulator gives it.

A benchmark script times its own training or inference loop with ``time.perf_counter`` or
``time.time`` and prints samples per second. Run on the simulator, a call to a model returns
after the simulator's own work (capture, compilation, the CPU run that gives values), which says
nothing about the IPU. With the clock installed (``ipusim script`` does it), the standard clocks
of the ``time`` module stand still during each simulated device call (a PopTorch model's call, a
PopXL ``Session.run``) and then move on by the simulated seconds of that call; outside the calls
they move with real time, so the script's own host work (data loading, logging) counts as it
runs here. A script's printed throughput is then the simulated device time plus its real host
time; with ``host_time=False`` the clock moves only by the calls, so it is the simulated device
time alone. Compilation inside a call adds nothing (Poplar's compile time is not modelled).

Times are seconds. Only :func:`install` changes the ``time`` module, and :func:`uninstall`
restores it; :func:`device_call` does nothing but count while the clock is not installed.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

#: the clocks a script may read, and the real ones behind them (kept before any patching)
_REAL = {name: getattr(time, name) for name in ("time", "perf_counter", "monotonic", "time_ns", "perf_counter_ns",
                                                 "monotonic_ns")}
_real_perf = _REAL["perf_counter"]
#: the real ``time.perf_counter``, for the simulator's measures of its own speed (which the virtual
#: clock must not change)
real_perf_counter = _real_perf


class _State:
    def __init__(self):
        self.installed = False
        self.host_time = True  # False: the clock moves only by device calls (host work takes no time)
        self.offsets = dict.fromkeys(_REAL, 0)  # clock -> what it adds to the real clock (s, or ns for _ns)
        self.frozen: dict | None = None  # clock -> its real reading when it stopped (None: running)
        self.depth = 0  # device calls in progress (a call inside a call counts once)
        self.calls = 0  # device calls finished since install
        self.simulated = 0.0  # their simulated seconds
        self.by_label: dict[str, list] = {}  # what was called -> [calls, simulated seconds]
        self.runs: dict[str, object] = {}  # what was called -> the simulation of its latest call
        self.lock = threading.Lock()

    def read(self, name: str):
        frozen = self.frozen
        return (frozen[name] if frozen is not None else _REAL[name]()) + self.offsets[name]

    def stop(self) -> None:
        """Stand the clocks still (each keeps its current reading)."""
        self.frozen = {name: real() for name, real in _REAL.items()}

    def advance(self, seconds: float, restart: bool) -> None:
        """Move every clock on by ``seconds`` from where it stands; ``restart``: let it run with
        real time again from there."""
        for name in _REAL:
            step = int(round(seconds * 1e9)) if name.endswith("_ns") else seconds
            if restart:
                self.offsets[name] += self.frozen[name] + step - _REAL[name]()
            else:
                self.offsets[name] += step
        if restart:
            self.frozen = None


_STATE = _State()


def _clock(name: str):
    return lambda: _STATE.read(name)


def reset() -> None:
    """Start counting device calls afresh (:func:`install` does too)."""
    _STATE.calls, _STATE.simulated, _STATE.by_label, _STATE.runs = 0, 0.0, {}, {}


def install(host_time: bool = True) -> None:
    """Replace ``time.time``, ``perf_counter``, ``monotonic`` and their ``_ns`` forms with the
    virtual clock (a script that imports them afterwards, ``from time import perf_counter``
    included, reads it). ``host_time=False``: the clock moves only by the device calls' simulated
    seconds, so the script's own host work takes no time (a script that waits for the clock to
    pass a deadline would wait for ever)."""
    with _STATE.lock:
        if _STATE.installed:
            return
        _STATE.installed, _STATE.host_time = True, host_time
        _STATE.offsets = dict.fromkeys(_REAL, 0)
        _STATE.frozen = None
        if not host_time:
            _STATE.stop()
        reset()
        for name in _REAL:
            setattr(time, name, _clock(name))


def uninstall() -> None:
    """Give the ``time`` module its real clocks back."""
    with _STATE.lock:
        for name, real in _REAL.items():
            setattr(time, name, real)
        _STATE.installed, _STATE.frozen = False, None


def installed() -> bool:
    return _STATE.installed


def totals() -> tuple[int, float]:
    """(device calls, their simulated seconds) since :func:`install` or :func:`reset`."""
    return _STATE.calls, _STATE.simulated


def by_label() -> dict[str, tuple[int, float]]:
    """What was called (each call's ``label``) -> (calls, simulated seconds), since :func:`install`
    or :func:`reset`."""
    return {label: (n, seconds) for label, (n, seconds) in _STATE.by_label.items()}


def runs() -> dict:
    """What was called (each call's ``label``) -> the simulation of its latest call (a ``sim.Run``),
    for the calls that gave one, since :func:`install` or :func:`reset`."""
    return dict(_STATE.runs)


class DeviceCall:
    """What a device call reports to the clock: :attr:`seconds`, its simulated time,
    :attr:`label`, what was called (a model and its system), and :attr:`run`, its simulation."""

    def __init__(self):
        self.seconds = 0.0
        self.label = "device call"
        self.run = None


@contextlib.contextmanager
def device_call() -> Iterator[DeviceCall]:
    """Around one simulated device call: the clock stands still inside it and then moves on by
    the ``seconds`` the call sets (none if it raises). A call inside a call counts once."""
    call = DeviceCall()
    outer = _STATE.depth == 0
    moving = _STATE.installed and _STATE.host_time  # else the clock stands still outside calls too
    _STATE.depth += 1
    if outer and moving:
        _STATE.stop()
    finished = False
    try:
        yield call
        finished = True
    finally:
        _STATE.depth -= 1
        if outer:
            if _STATE.installed:
                _STATE.advance(call.seconds if finished else 0.0, restart=moving)
            if finished:
                _STATE.calls += 1
                _STATE.simulated += call.seconds
                done = _STATE.by_label.setdefault(call.label, [0, 0.0])
                done[0] += 1
                done[1] += call.seconds
                if call.run is not None:
                    _STATE.runs[call.label] = call.run
