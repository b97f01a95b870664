"""popxl-addons' ``TaskSession``: a PopXL session that also holds the task's input and output streams
and its state (the named variables), and saves and loads that state as checkpoints.

On the simulator the session's variables hold what PopXL's session gives here (the written data, or
zeros: the simulator computes times, not values), so a checkpoint holds those; the files are
popxl-addons' layout: ``model/<name>.npy`` for each state tensor and ``session_info.json`` for the
session state (``steps``, the number of runs, and what ``add_session_state_info`` added). Loading also
reads popxl-addons' own ``model/<name>.npz`` files (``np.savez`` of each tensor under its name), so a
checkpoint saved on hardware loads here; a data loader is saved and resumed as popxl-addons asks,
``save(filename)`` and ``resume(filename=...)`` with ``dataloader.bin`` in the checkpoint."""

from __future__ import annotations

import json
import logging
import shutil
from collections import deque
from pathlib import Path

import numpy as np

from .. import popxl
from ..popxl.errors import not_modelled
from .named_tensors import NamedTensorData, NamedTensors
from .streams import InputStreams, OutputStreams

__all__ = ["TaskSession"]

_REPORTS = ("none", "warn", "error")


class TaskSession(popxl.Session):
    """``TaskSession(inputs, outputs, state, max_checkpoints=1, *args, **kwargs)``: the streams (an
    ``InputStreams`` / ``OutputStreams`` or the streams themselves), the state (``NamedTensors`` of
    variables) and what ``popxl.Session`` takes."""

    def __init__(self, inputs, outputs, state: NamedTensors, max_checkpoints: int = 1, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.inputs = inputs if isinstance(inputs, InputStreams) else InputStreams.from_streams(inputs)
        self.outputs = outputs if isinstance(outputs, OutputStreams) else OutputStreams.from_streams(outputs)
        self.state = state
        self.session_state = {"steps": 0}
        self._dataloader = None
        self._checkpoints: deque[Path] = deque()
        self._max_checkpoints = max_checkpoints

    @property
    def dataloader(self):
        return self._dataloader

    @dataloader.setter
    def dataloader(self, dl) -> None:
        if not (hasattr(dl, "save") and hasattr(dl, "resume")):
            raise ValueError("TaskSession.dataloader must implement save and resume methods")
        self._dataloader = dl

    def add_session_state_info(self, info: dict) -> None:
        """Extra state saved with each checkpoint (a learning-rate schedule, say)."""
        self.session_state.update(info)

    def run(self, inputs=None, downcast_inputs: bool = True) -> dict:
        """``popxl.Session.run``, counting the runs in ``session_state['steps']``."""
        self.session_state["steps"] += 1
        return super().run(inputs, downcast_inputs)

    def get_named_tensors_data(self) -> NamedTensorData:
        """The state's data by name."""
        data = self.get_tensors_data(self.state.tensors)
        return NamedTensorData.from_dict({name: data[t] for name, t in self.state.to_dict().items()})

    def load_from_session(self, src: "TaskSession", report_missing: str = "none") -> None:
        """The state of ``src`` written into this session's variables of the same names."""
        self._load(src.get_named_tensors_data().to_dict(), report_missing)

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        """The state's data (``model/<name>.npy``), the session state (``session_info.json``) and the
        data loader's (``dataloader.bin``, when one is set) in ``checkpoint_dir``; the oldest of more
        than ``max_checkpoints`` checkpoints is removed."""
        if str(checkpoint_dir).startswith("wandb://"):
            raise not_modelled("popxl_addons.TaskSession", "save_checkpoint('wandb://...')", ["a directory"])
        path = Path(checkpoint_dir).expanduser()
        state = self.get_named_tensors_data().to_dict()
        if len(self._checkpoints) >= self._max_checkpoints:
            shutil.rmtree(self._checkpoints.popleft(), ignore_errors=True)
        (path / "model").mkdir(parents=True, exist_ok=True)
        for name, data in state.items():
            np.save(path / "model" / f"{name}.npy", data)
        (path / "session_info.json").write_text(json.dumps(self.session_state))
        if self._dataloader is not None:  # popxl-addons calls save(filename): the data loader writes the file
            self._dataloader.save(str(path / "dataloader.bin"))
        self._checkpoints.append(path)

    def load_checkpoint(self, checkpoint_dir: str, report_missing: str = "warn", skip_memmap: bool = False) -> None:
        """The state, the session state and the data loader's from a checkpoint :meth:`save_checkpoint`
        wrote."""
        path = Path(checkpoint_dir).expanduser()
        if not (path / "model").is_dir():
            raise FileNotFoundError(f"TaskSession.load_checkpoint: {str(path)!r} has no model/ directory of "
                                    "tensors (save one with save_checkpoint)")
        data = {f.stem: np.load(f) for f in sorted((path / "model").glob("*.npy"))}
        for f in sorted((path / "model").glob("*.npz")):  # popxl-addons' files: np.savez(name=array) each
            with np.load(f, allow_pickle=True) as arrays:
                data.update({name: arrays[name] for name in arrays.files})
        self._load(data, report_missing)
        info = path / "session_info.json"
        if info.exists():
            self.session_state.update(json.loads(info.read_text()))
        if self._dataloader is not None:  # popxl-addons calls resume(filename=...)
            self._dataloader.resume(filename=str(path / "dataloader.bin"))

    def _load(self, data: dict, report_missing: str) -> None:
        if report_missing not in _REPORTS:
            raise ValueError(f"report_missing must be one of {', '.join(_REPORTS)}, got {report_missing!r}")
        state = self.state.to_dict()
        missing = sorted(set(data) ^ set(state))
        if missing and report_missing != "none":
            message = (f"checkpoint keys not in the state: {sorted(set(data) - set(state))}; state keys not in the "
                       f"checkpoint: {sorted(set(state) - set(data))}")
            if report_missing == "error":
                raise ValueError(message)
            logging.warning(message)
        self.write_variables_data({state[n]: d for n, d in data.items() if n in state})

    def wandb_variable_histograms(self, step: int = 0):
        raise not_modelled("popxl_addons.TaskSession", "wandb_variable_histograms", ["save_checkpoint"])
