"""A PyTorch model defined in a Python file, for ``ipusim run --torch`` and ``ipusim plan --torch``.

The file defines a function (``model`` unless the spec names another: ``PATH.py:FUNCTION``) that takes the
micro-batch (samples per replica per step) and returns the module and its inputs for one micro-batch::

    def model(micro_batch: int):
        net = transformers.LlamaForCausalLM(config)
        ids = torch.randint(0, config.vocab_size, (micro_batch, 128))
        return net, {"input_ids": ids, "labels": ids}   # or (net, (x,)), (net, x), (net, args, kwargs)

The module is captured as ``sim.poptorch`` captures it for ``poptorch.inferenceModel`` / ``trainingModel``
(:func:`sim.poptorch.executor.capture_for_ipu`; in training it must return a loss, as there), on tensors that
carry shapes only where the capture allows (meta-device weights work), and the captured graph is what the
zoo's graphs are to ``ipusim run``: the run's flags set replicas, accumulation, optimizer and the rest.

**Placement.** The model's *layers* are the children of its largest list of modules of one type (an
``nn.ModuleList`` or ``nn.Sequential`` of two or more: Hugging Face's ``model.layers``, ``transformer.h``,
``encoder.layer``; largest by parameters) and of any other such list, not inside it, with at least a quarter of its
parameters (T5's and Whisper's encoder stack beside the decoder's), numbered in the order the model runs them.
``layers_per_ipu`` ([n0, n1, ...]) puts n0 layers on IPU 0, the next n1 on IPU 1, and so on, as
``poptorch.BeginBlock(layer, ipu_id=k)`` on each IPU's first layer would: what the model runs before its first layer
(embeddings) stays on IPU 0, what runs after a layer outside any layer on that layer's IPU (a final norm and head:
the last IPU). An op outside the layers that reads a weight an op elsewhere read first (an LM head tied to the
embedding), and the ops outside the layers after it (its loss), go back to that op's IPU as a pipeline stage of
their own (:func:`_tie`), since PopART cannot copy a weight between a pipeline's IPUs. Only the first entry may be 0
(IPU 0 holds the embeddings alone). ``recompute`` puts ``poptorch.recomputationCheckpoint`` on every layer's output
but the last's, as Hugging Face's optimum-graphcore does with ``recompute_checkpoint_every_layer`` (its BERT and
GPT-2 pipelines: ``index != num_hidden_layers - 1``). Ops carry the block of their layer (``layer0``, ``layer1``,
...; before and after the layers ``before_layers`` and ``after_layers``), which is what the planner splits.

Captures are kept per (file, its modification time, function, micro-batch, training, partials): a planner's
worker captures each micro-batch once.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils import _pytree as pytree

from ..errors import GraphError
from ._errors import Error
from ..graph import Graph, Op

#: the function a spec names when it names none
DEFAULT_FUNCTION = "model"
#: the blocks of the ops before the first layer and after the last
BEFORE, AFTER = "before_layers", "after_layers"

#: a list of layers beside the largest (an encoder's beside a decoder's) holds at least this share of its parameters
LIST_SHARE = 0.25

#: (file, its modification time, function, micro-batch, training, partials) -> (captured graph, its lists of layers:
#: (op-name prefix, length) each)
_captures: dict[tuple, tuple[Graph, list[tuple[str, int]]]] = {}
#: (file, its modification time) -> the file imported
_modules: dict[tuple, object] = {}


@dataclass(frozen=True)
class TorchModel:
    """``PATH.py[:FUNCTION]``: a file and the function in it that builds the model for a micro-batch."""

    spec: str

    @property
    def path(self) -> Path:
        return Path(self._parts()[0])

    @property
    def function(self) -> str:
        return self._parts()[1]

    def _parts(self) -> tuple[str, str]:
        path, sep, function = self.spec.rpartition(":")
        if not sep or not function.isidentifier() or not path:  # no function named (or a Windows drive)
            return self.spec, DEFAULT_FUNCTION
        return path, function

    def check(self) -> None:
        """Raise :class:`GraphError` unless the file exists and defines the function (imports the file)."""
        self._function()

    def _function(self):
        path = self.path
        if not path.is_file():
            raise GraphError(f"--torch {self.spec!r}: " + ("a folder; give the .py file that defines the model"
                                                           if path.is_dir() else f"no such file {str(path)!r}"))
        module = _load(path)
        fn = getattr(module, self.function, None)
        if not callable(fn):
            raise GraphError(f"--torch {self.spec!r}: {str(path)!r} defines no function {self.function!r}; define "
                             f"`def {self.function}(micro_batch): return module, inputs` or name yours as "
                             f"{path}:FUNCTION")
        return fn

    def build(self, micro_batch: int) -> tuple[torch.nn.Module, tuple, dict]:
        """The module and its (args, kwargs) for one micro-batch, as the file's function returns them."""
        fn = self._function()
        call = f"--torch {self.spec!r}: {self.function}({micro_batch})"
        try:
            made = fn(micro_batch)
        except Exception as e:
            raise GraphError(f"{call} raised {type(e).__name__}: {e}") from e
        if not isinstance(made, tuple) or len(made) not in (2, 3) or not isinstance(made[0], torch.nn.Module):
            raise GraphError(f"{call} returned {type(made).__name__}; return (module, inputs) or (module, args, "
                             "kwargs): the torch.nn.Module and its inputs for one micro-batch")
        module, inputs = made[0], made[1]
        if len(made) == 3:
            args, kwargs = inputs, made[2]
        elif isinstance(inputs, dict):
            args, kwargs = (), inputs
        else:
            args, kwargs = inputs, {}
        args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
        if not isinstance(kwargs, dict):
            raise GraphError(f"{call} returned keyword inputs of type {type(kwargs).__name__}; give them as a dict")
        # each input tensor a contiguous copy of its own, as the executor streams a call's micro-batch
        # (PoplarExecutor._chunk): the same tensor given twice (input_ids as labels) is two inputs
        leaves, spec = pytree.tree_flatten((args, kwargs))
        leaves = [(t.detach().clone(memory_format=torch.contiguous_format) if t.dim() else t.detach())
                  if isinstance(t, torch.Tensor) else t for t in leaves]
        return (module, *pytree.tree_unflatten(leaves, spec))

    def graph(self, micro_batch: int, training: bool, partials: str = "float",
              layers_per_ipu: list[int] | None = None, recompute: bool | None = None) -> Graph:
        """The model captured on ``micro_batch`` samples (for training or inference, the matmuls' partials
        ``partials``) and placed (module docstring); a copy the caller may change."""
        captured, lists = self._captured(micro_batch, training, partials)
        g = captured.copy()
        _place(g, lists, layers_per_ipu, recompute, self.spec)
        g.params = {"torch": self.spec, "micro_batch": micro_batch}  # what tells two runs apart (summary.json)
        g.params.update((k, v) for k, v in (("layers_per_ipu", layers_per_ipu),
                                            ("recompute_checkpoint_every_layer", recompute)) if v is not None)
        return g

    def layers_by_list(self, micro_batch: int, training: bool) -> dict[str, int]:
        """The layers the model runs, counted by the list they come from (op-name prefix), in running order."""
        g, lists = self._captured(micro_batch, training)
        count: dict[str, int] = {}
        for key in dict.fromkeys(k for k in _layer_keys(g, lists) if k is not None):
            count[lists[key[0]][0]] = count.get(lists[key[0]][0], 0) + 1
        return count

    def _captured(self, micro_batch: int, training: bool,
                  partials: str = "float") -> tuple[Graph, list[tuple[str, int]]]:
        """The model's capture and its lists of layers (:data:`_captures`), captured once; not to be changed."""
        key = self._key(micro_batch, training, partials)
        if key not in _captures:
            _captures[key] = self._capture(micro_batch, training, partials)
        return _captures[key]

    def _key(self, micro_batch: int, training: bool, partials: str) -> tuple:
        """What a capture is kept by (:data:`_captures`)."""
        return (str(self.path.resolve()), self.path.stat().st_mtime_ns if self.path.is_file() else 0, self.function,
                micro_batch, training, partials)

    def _capture(self, micro_batch: int, training: bool, partials: str) -> tuple[Graph, list[tuple[str, int]]]:
        from .executor import capture_for_ipu
        from .host_function import refuse_in_training
        from .options import Options
        module, args, kwargs = self.build(micro_batch)
        options = Options()
        options.Precision.setPartialsType(torch.half if partials == "half" else torch.float)
        captured = capture_for_ipu(module, args, kwargs, options, training, values=False, tensor_outputs=True)
        g = captured.graph
        if training and g.loss is None:
            raise GraphError(f"--torch {self.spec!r}: --training, but the model returned no loss the simulator can "
                             "find: compute it with a torch loss (CrossEntropyLoss, NLLLoss, MSELoss, L1Loss or "
                             "their functional forms) or mark it with poptorch.identity_loss, as for "
                             "poptorch.trainingModel")
        if training:
            try:
                refuse_in_training(g)
            except Error as e:  # PopTorch's restriction, as a graph error of the --torch file
                raise GraphError(f"--torch {self.spec!r}: --training, but {e.message}") from None
        g.micro_batch = micro_batch
        g.notes = [f"graph captured from {self.spec} with {captured.method}"] + captured.notes
        return g, _layer_lists(module)


def _load(path: Path):
    """The file at ``path`` imported as a module of its own (its folder on sys.path while it imports); once,
    until the file changes."""
    key = (str(path.resolve()), path.stat().st_mtime_ns)
    if key not in _modules:
        _modules[key] = _import(path)
    return _modules[key]


def _import(path: Path):
    name = f"_ipusim_model_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise GraphError(f"--torch: importing {str(path)!r} raised {type(e).__name__}: {e}") from e
    finally:
        sys.path.remove(str(path.resolve().parent))
    return module


def _layer_lists(module: torch.nn.Module) -> list[tuple[str, int]]:
    """The model's lists of layers as (op-name prefix, length): its largest list of modules of one type (by
    parameters), and the others, not inside it nor holding it, with at least :data:`LIST_SHARE` of its
    parameters (a T5's or Whisper's encoder stack beside its decoder's); empty when it has none."""
    found = []  # (parameters, path, length)
    for path, m in module.named_modules():
        children = list(m.children())
        if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)) and len(children) >= 2 \
                and len({type(c) for c in children}) == 1:
            found.append((sum(p.numel() for p in m.parameters()), path, len(children)))
    found.sort(key=lambda f: (-f[0], f[1].count("."), f[1]))
    chosen: list[tuple[int, str, int]] = []
    for size, path, length in found:
        inside = any(path.startswith(c + ".") or c.startswith(path + ".") or not c or not path for _, c, _ in chosen)
        if not chosen or (size >= LIST_SHARE * chosen[0][0] and not inside):
            chosen.append((size, path, length))
    return [(path.replace(".", "/"), length) for _, path, length in chosen]


def _ipu_of_layers(layers_per_ipu: list[int], count: int, spec: str) -> list[int]:
    if any(not isinstance(n, int) or n < 0 for n in layers_per_ipu) or sum(layers_per_ipu) != count:
        raise GraphError(f"--torch {spec!r}: layers per IPU {layers_per_ipu} must be whole numbers summing to the "
                         f"model's {count} layers")
    empty = [i for i, n in enumerate(layers_per_ipu) if i > 0 and n == 0]
    if empty:
        raise GraphError(f"--torch {spec!r}: layers per IPU {layers_per_ipu}: IPU {empty[0]} would hold nothing; "
                         "only the first entry may be 0 (IPU 0 holding what runs before the first layer alone)")
    return [ipu for ipu, n in enumerate(layers_per_ipu) for _ in range(n)]


def _layer_keys(g: Graph, lists: list[tuple[str, int]]) -> list[tuple[int, int] | None]:
    """For each op of ``g``: (the list, the layer's index in it) of the layer it belongs to, or None."""
    patterns = [(re.compile((re.escape(prefix) + "/" if prefix else "") + r"(\d+)/"), count) for prefix, count in lists]

    def layer_of(name: str) -> tuple[int, int] | None:
        for i, (pattern, count) in enumerate(patterns):
            if (m := pattern.match(name)) and int(m.group(1)) < count:
                return i, int(m.group(1))
        return None
    return [layer_of(op.name) for op in g.ops]


def _place(g: Graph, lists: list[tuple[str, int]], layers_per_ipu, recompute, spec: str) -> None:
    """Blocks, IPUs and checkpoints of ``g``'s ops (module docstring). The layers are those of the lists whose
    ops the graph holds, numbered in the order the model runs them (a list's layer the model does not call has
    nothing to place)."""
    keys = _layer_keys(g, lists)
    number = {key: n for n, key in enumerate(dict.fromkeys(k for k in keys if k is not None))}  # in running order
    layers = [number.get(key) for key in keys]
    if not number:
        if (layers_per_ipu is not None and len(layers_per_ipu) > 1) or recompute:
            raise GraphError(f"--torch {spec!r}: the model has no list of layers (an nn.ModuleList or nn.Sequential "
                             "of two or more modules of one type) to place over IPUs or checkpoint; place it with "
                             "poptorch.BeginBlock in a sim.poptorch script instead")
        return
    ipu_of = _ipu_of_layers(layers_per_ipu, len(number), spec) if layers_per_ipu is not None else None
    last = max(i for i, layer in enumerate(layers) if layer is not None)
    block, ipu = BEFORE, 0
    for i, (op, layer) in enumerate(zip(g.ops, layers)):
        if layer is not None:  # a layer's op; one outside the layers runs where the layer before it does
            block, ipu = f"layer{layer}", ipu_of[layer] if ipu_of else 0
        elif i > last:
            block = AFTER
        op.block = block
        if ipu_of:  # else the model's own poptorch.BeginBlock placement, if any, stands
            op.ipu = ipu
    follows = _tie(g, layers)
    if ipu_of:
        stage, previous = -1, None  # a new pipeline stage each time the IPU changes, as PopTorch numbers them
        for op in g.ops:
            if op.name in follows:
                op.ipu = follows[op.name].ipu
            stage += op.ipu != previous
            op.stage, previous = stage, op.ipu
    if recompute:  # checkpoint what each layer but the last hands on: its tensors read outside it
        checkpointed = set(range(len(number) - 1))
        layer_of_op = {op.name: layer for op, layer in zip(g.ops, layers)}
        handed_on = {t for op in g.ops for t in op.inputs
                     if layer_of_op.get(g.tensors[t].producer) in checkpointed
                     and layer_of_op.get(op.name) != layer_of_op[g.tensors[t].producer]}
        for op, layer in zip(g.ops, layers):
            if layer in checkpointed:
                for t in handed_on & set(op.outputs):
                    g.checkpoint(t)


def _tie(g: Graph, layers: list[int | None]) -> dict[str, Op]:
    """Ops outside the layers that read a weight an op of another block read first (a tied LM head, a T5
    decoder's embedding shared with the encoder's), and the ops outside the layers after them (the head's loss),
    as after a ``poptorch.BeginBlock``: their block gets ``_tied`` added, and each follows the IPU of that weight's
    first reader (op name -> that op). PopART's pipeline cannot copy a weight between IPUs
    (sim.compiler.executable._check_weights_on_one_ipu); Graphcore's GPT-2 (``LM_head --> IPU 0``) and
    optimum-graphcore's pipelined models place them so (``BeginBlock`` on a shared embedding runs each of its
    calls on its IPU), the final norm staying with the last layer."""
    first_reader = {}  # weight -> the first op reading it
    for op in g.ops:
        for t in op.inputs:
            if g.tensors[t].role == "weight":
                first_reader.setdefault(t, op)
    follows, home = {}, None
    for op, layer in zip(g.ops, layers):
        if layer is not None:
            home = None
            continue
        shared = [first_reader[t] for t in op.inputs if t in first_reader and first_reader[t].block != op.block]
        home = shared[0] if shared else home
        if home is not None:
            follows[op.name] = home
    for op in g.ops:
        if op.name in follows:
            op.block += "_tied"
    return follows
