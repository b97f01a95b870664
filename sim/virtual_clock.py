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
time alone. The simulator's own work (capturing and compiling a model, pricing and simulating
it, re-pricing a new optimizer, the wrappers' bookkeeping) takes no time on the clock: its entry
points hold the clock still while they run (:func:`frozen`), and only the simulated seconds of the
calls move it. So a compilation, in a call or by an explicit ``compile()``, adds nothing of its own
(Poplar's compile time is not modelled); the weights written when the compiled model attaches are a
device call (PopART's WeightsFromHost).

Times are seconds. Only :func:`install` changes the ``time`` module, and :func:`uninstall`
restores it; :func:`device_call` does nothing but count while the clock is not installed.
"""

from __future__ import annotations

import contextlib
import functools
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
        self.holds = 0  # frozen() regions in progress, device calls included (the clock stands still in them)
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

    def advance(self, seconds: float) -> None:
        """Move every clock on by ``seconds`` from where it stands."""
        for name in _REAL:
            self.offsets[name] += int(round(seconds * 1e9)) if name.endswith("_ns") else seconds

    def restart(self) -> None:
        """Let the clocks run with real time again from where they stand."""
        frozen = self.frozen
        for name, real in _REAL.items():
            self.offsets[name] += frozen[name] - real()
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
        if not host_time or _STATE.holds:  # (installed from inside the simulator's work: held still until it ends)
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


def by_label() -> dict[str, tuple[int, float, float]]:
    """What was called (each call's ``label``) -> (calls, simulated seconds, of them the front end's
    own host work: :attr:`DeviceCall.host_seconds`), since :func:`install` or :func:`reset`."""
    return {label: (n, seconds, host) for label, (n, seconds, host) in _STATE.by_label.items()}


def runs() -> dict:
    """What was called (each call's ``label``) -> the simulation of its latest call (a ``sim.Run``),
    for the calls that gave one, since :func:`install` or :func:`reset`."""
    return dict(_STATE.runs)


class _Frozen:
    """The clock held still while inside (re-entrant; :func:`frozen`)."""

    __slots__ = ()

    def __enter__(self) -> None:
        state = _STATE
        if state.holds == 0 and state.installed and state.host_time:
            state.stop()
        state.holds += 1

    def __exit__(self, *exc) -> bool:
        state = _STATE
        state.holds -= 1
        if state.holds == 0 and state.installed and state.host_time and state.frozen is not None:
            state.restart()
        return False


_FROZEN = _Frozen()


def frozen(func=None):
    """Hold the clock still around the simulator's own work, counting no call and adding no time:
    ``with frozen():`` around a block, or ``@frozen`` on a function (an entry point of a front end:
    a model's ``compile``, ``setOptimizer``, ...). The device calls inside (:func:`device_call`) still
    move the clock by their simulated seconds. Without the clock installed it does nothing."""
    if func is None:
        return _FROZEN

    @functools.wraps(func)
    def held(*args, **kwargs):
        with _FROZEN:
            return func(*args, **kwargs)
    return held


class DeviceCall:
    """What a device call reports to the clock: :attr:`seconds`, its simulated time,
    :attr:`host_seconds`, the part of it that is the front end's own host work (PopTorch's in a
    model's call, PopXL's in a run; the rest is the device's), :attr:`label`, what was called (a
    model and its system), and :attr:`run`, its simulation."""

    def __init__(self):
        self.seconds = 0.0
        self.host_seconds = 0.0
        self.label = "device call"
        self.run = None


@contextlib.contextmanager
def device_call() -> Iterator[DeviceCall]:
    """Around one simulated device call: the clock stands still inside it (as in :func:`frozen`) and
    then moves on by the ``seconds`` the call sets (none if it raises). A call inside a call counts
    once. Inside a :func:`frozen` region the clock moves on by the call's seconds at its end and
    stands still again until the region ends."""
    with _FROZEN:
        call = DeviceCall()
        outer = _STATE.depth == 0
        _STATE.depth += 1
        finished = False
        try:
            yield call
            finished = True
        finally:
            _STATE.depth -= 1
            if outer and finished:
                if _STATE.installed:
                    _STATE.advance(call.seconds)
                _STATE.calls += 1
                _STATE.simulated += call.seconds
                done = _STATE.by_label.setdefault(call.label, [0, 0.0, 0.0])
                done[0] += 1
                done[1] += call.seconds
                done[2] += call.host_seconds
                if call.run is not None:
                    _STATE.runs[call.label] = call.run
