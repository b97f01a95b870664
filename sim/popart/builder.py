"""``popart.Builder``: an ONNX model written op by op, as PopART's builder writes it.

The builder holds an ``onnx.ModelProto``; ``getModelProto()`` returns its bytes, which a session
(:mod:`sim.popart.session`) or :func:`sim.onnx.load` imports. What it writes follows PopART's
builder (graphcore/popart ``willow/src/builder.cpp``, ``builder_impl.cpp``):

* tensor ids: ``addInputTensor`` names a stream ``input`` (or its debug name), ``addInitializedInputTensor``
  a weight ``init_input``; an op's outputs are ``<debug name or op type>:<index>``; each id is prefixed by
  the open name scopes (``scope/``) and, when taken, suffixed ``/1``, ``/2``, ... (``getNextId``);
* ``aiOnnx`` (``aiOnnxOpset6`` ... ``aiOnnxOpset11``; PopART's default is opset 10) has one method per
  ONNX operator, named in lower case (``logical_and`` etc. for And, Or, Not, Xor); its arguments are PopART's:
  the input ids, then ``num_outputs`` for an operator with optional outputs, then the operator's required
  attributes and its optional ones, each group in alphabetical order (``auto_pad`` left out), as PopART's
  generated bindings (``popart_opset*.gen.cpp``) order them; ``debugContext`` names the op;
* ``aiGraphcore`` has PopART's own ops with its builder's arguments and the node attributes its builder writes;
* ``addInputTensor``'s ``InputSettings`` go into the model's metadata, as PopART's builder records them;
* ``virtualGraph``, ``pipelineStage``, ``executionPhase``, ``recomputeOutput``, ``outputTensorLocation``,
  ``commGroup`` (a value: a context for the ops made inside, which may be entered again, as PopART's; ids and a
  value: set on the ops that made them), ``nameScope``, ``recomputeOutputInBackwardPass``,
  ``setAvailableMemoryProportion``, ``checkpointOutput`` write PopART's ``__``-named node attributes, which
  :mod:`sim.onnx` reads as each op's placement and options. The annotations the simulator does not model
  (``setPartialsType``, ``schedulePriority``, ``outlineAttributes``, ...) are written too; a session names them
  in its run's notes (:func:`unmodelled_annotations`).

Subgraph builders (``createSubgraphBuilder``) make the callee of ``aiGraphcore.call`` and the bodies of
``aiOnnx.loop``, ``scan`` and ``logical_if``; a subgraph reads its parent's tensors after
``addInputTensorFromParentGraph``, and sim.onnx inlines a call and unrolls a loop as it does a file's.
"""

from __future__ import annotations

import numbers
import os
from typing import Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import GraphError, UnsupportedOpError
from . import VariableSettings
from ..results.report import write_bytes

DEFAULT_AI_ONNX_OPSET = 10  # popart willow/include/popart/graphcoreoperators.hpp defaultAiOnnxOpset
DEFAULT_AI_GRAPHCORE_OPSET = 1  # defaultAiGraphcoreOpset
AI_ONNX_OPSETS = range(6, 12)  # the AiOnnxOpset6 ... 11 classes of PopART's Python binding

#: PopART's data type names (TensorInfo, addInputTensor) -> ONNX element type
DATA_TYPES = {"FLOAT": TensorProto.FLOAT, "FLOAT16": TensorProto.FLOAT16, "BFLOAT16": TensorProto.BFLOAT16,
              "DOUBLE": TensorProto.DOUBLE, "INT8": TensorProto.INT8, "INT16": TensorProto.INT16,
              "INT32": TensorProto.INT32, "INT64": TensorProto.INT64, "UINT8": TensorProto.UINT8,
              "UINT16": TensorProto.UINT16, "UINT32": TensorProto.UINT32, "UINT64": TensorProto.UINT64,
              "BOOL": TensorProto.BOOL}
_NAMES_BY_TYPE = {v: k for k, v in DATA_TYPES.items()}
#: numpy's scalar types -> PopART's names (popart python/popart/python_files/tensorinfo.py)
_NUMPY_NAMES = {np.dtype(t): n for t, n in ((np.uint8, "UINT8"), (np.uint16, "UINT16"), (np.uint32, "UINT32"),
                                            (np.uint64, "UINT64"), (np.int8, "INT8"), (np.int16, "INT16"),
                                            (np.int32, "INT32"), (np.int64, "INT64"), (np.float16, "FLOAT16"),
                                            (np.float32, "FLOAT"), (np.float64, "DOUBLE"), (np.bool_, "BOOL"))}

#: PopART's node attributes for an op's placement and options (willow/include/popart/names.hpp)
VIRTUAL_GRAPH, PIPELINE_STAGE, EXECUTION_PHASE = "__ipu_number", "__pipeline_stage", "__execution_phase"
RECOMPUTE, AVAILABLE_MEMORY = "__recompute_output_in_backward_pass", "__available_memory"
#: the annotations sim.onnx reads; any other ``__`` attribute is PopART's and has no modelled effect
MODELLED_ANNOTATIONS = (VIRTUAL_GRAPH, PIPELINE_STAGE, EXECUTION_PHASE, RECOMPUTE, AVAILABLE_MEMORY,
                        "__collectiveReplicaGrouping", "__collectiveCommGroup")


def unmodelled_annotations(model: onnx.ModelProto) -> dict[str, int]:
    """PopART's ``__``-named node attributes of ``model`` that the simulator does not read -> ops holding each."""
    out: dict[str, int] = {}
    for node in model.graph.node:
        for a in node.attribute:
            if a.name.startswith("__") and a.name not in MODELLED_ANNOTATIONS:
                out[a.name] = out.get(a.name, 0) + 1
    return out

#: the model metadata keys (``<key>/<input id>``) of an input's InputSettings (names.hpp)
TILE_SET, EXCHANGE_STRATEGY, REPLICATED_STREAM_MODE = "__tile_set", "__exchange_strategy", "__replicated_stream_mode"
#: the model metadata key prefix of a variable's VariableSettings (``addInitializedInputTensor``)
VARIABLE_SETTINGS = "__variable_settings"


class InputSettings:
    """PopART's InputSettings of an input stream: ``InputSettings(tileSet, exchangeStrategy)`` or
    ``InputSettings(replicatedStreamMode)``; by default the compute tiles, JustInTime, Replicate (dataflow.cpp).
    The values are PopART's enum values (TileSet, ExchangeStrategy, ReplicatedStreamMode)."""

    def __init__(self, *args):
        values = [int(getattr(a, "value", a)) for a in args]
        if len(values) == 2:
            self._tile_set, self._exchange, self._stream = values[0], values[1], 1
        elif len(values) <= 1:
            self._tile_set, self._exchange, self._stream = 0, 0, values[0] if values else 1
        else:
            raise TypeError("InputSettings takes (tileSet, exchangeStrategy) or (replicatedStreamMode)")

    def tileSet(self) -> int:
        return self._tile_set

    def exchangeStrategy(self) -> int:
        return self._exchange

    def replicatedStreamMode(self) -> int:
        return self._stream

    def setTileSet(self, tileSet) -> None:
        self._tile_set = int(getattr(tileSet, "value", tileSet))

    def setExchangeStrategy(self, exchangeStrategy) -> None:
        self._exchange = int(getattr(exchangeStrategy, "value", exchangeStrategy))

    def setReplicatedStreamMode(self, streamMode) -> None:
        self._stream = int(getattr(streamMode, "value", streamMode))


#: PopART's RecomputeType (willow/include/popart/op.hpp): Undefined, Checkpoint, Recompute, Recomputed
RECOMPUTE_TYPES = ("Undefined", "Checkpoint", "Recompute", "Recomputed")

#: PopART's builder method names that are not the ONNX operator's name in lower case
_RENAMED = {"logical_and": "And", "logical_or": "Or", "logical_not": "Not", "logical_xor": "Xor",
            "logical_if": "If"}


def data_type_name(dtype) -> str:
    """PopART's name of ``dtype``: one of its names (any case), a numpy dtype or a Python type."""
    if isinstance(dtype, str) and dtype.upper() in DATA_TYPES:
        return dtype.upper()
    try:
        return _NUMPY_NAMES[np.dtype(dtype)]
    except (TypeError, KeyError):
        raise TypeError(f"{dtype!r} is not a data type PopART takes: one of {', '.join(DATA_TYPES)} or a numpy "
                        "dtype of them") from None


class TensorInfo:
    """A tensor's data type and shape: ``TensorInfo("FLOAT16", [2, 3])`` or ``TensorInfo(array)``."""

    def __init__(self, *args):
        if len(args) == 2:
            dtype, shape = args
        elif len(args) == 1 and isinstance(args[0], np.ndarray):
            dtype, shape = args[0].dtype, args[0].shape
        else:
            raise TypeError(f"Can not create TensorInfo with args {args}")
        self._dtype = data_type_name(dtype)
        self._shape = [int(d) for d in shape]
        if any(d < 0 for d in self._shape):
            raise ValueError(f"TensorInfo shape {self._shape}: every dimension must be >= 0")

    def data_type(self) -> str:
        return self._dtype

    def data_type_lcase(self) -> str:
        """The numpy name of the data type (``float32`` for FLOAT, ``float16`` for FLOAT16, ...)."""
        return {"FLOAT": "float32", "DOUBLE": "float64", "BOOL": "bool", "BFLOAT16": "float32"}.get(
            self._dtype, self._dtype.lower())

    def shape(self) -> list[int]:
        return list(self._shape)

    def rank(self) -> int:
        return len(self._shape)

    def nelms(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64))

    def onnx_type(self) -> int:
        return DATA_TYPES[self._dtype]

    def __eq__(self, other) -> bool:
        return isinstance(other, TensorInfo) and (self._dtype, self._shape) == (other._dtype, other._shape)

    def __repr__(self) -> str:
        return f"TensorInfo({self._dtype!r}, {self._shape})"


def _attribute_value(value):
    """``value`` as onnx.helper.make_attribute takes it (numpy scalars and arrays as Python numbers and
    lists, bools as ints), or None for an attribute left out (None, an empty list)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return numpy_helper.from_array(value) if value.ndim else value.item()
    if isinstance(value, (list, tuple)):
        if not value:
            return None
        return [v.item() if isinstance(v, np.generic) else int(v) if isinstance(v, bool) else v for v in value]
    if hasattr(value, "value") and isinstance(getattr(value, "value"), int):  # an IntEnum's member
        return int(value.value)
    return value


def _bind(what: str, params: list[str], args, kwargs: dict) -> dict:
    """A builder method's arguments after its inputs, by name: ``args`` in the order of ``params``, then
    ``kwargs``; Python's errors for too many, unknown or repeated ones."""
    if len(args) > len(params):
        raise TypeError(f"{what}() takes {len(params)} argument(s) after the inputs ({', '.join(params) or 'none'}), "
                        f"got {len(args)}")
    given = dict(zip(params, args))
    for k, v in kwargs.items():
        if k not in params:
            raise TypeError(f"{what}() got an unexpected keyword argument {k!r} (its arguments: args, "
                            f"{', '.join(params + ['debugContext'])})")
        if k in given:
            raise TypeError(f"{what}() got multiple values for argument {k!r}")
        given[k] = v
    return given


class _Opset:
    """One domain's ops at one version, as builder methods."""

    def __init__(self, builder: "Builder", version: int):
        self._builder = builder
        self.version = version


class AiOnnx(_Opset):
    """``builder.aiOnnx`` / ``aiOnnxOpsetN``: a method per ONNX operator of opset N, named in lower case."""

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        op_type = _RENAMED.get(name) or _ONNX_NAMES.get(name)
        if op_type is None:
            raise AttributeError(f"'AiOnnxOpset{self.version}' object has no attribute {name!r}: no ONNX operator "
                                 f"is named so (PopART names them in lower case: builder.aiOnnx.matmul)")
        try:
            schema = onnx.defs.get_schema(op_type, self.version, "")
        except onnx.defs.SchemaError:
            raise AttributeError(f"'AiOnnxOpset{self.version}' object has no attribute {name!r}: ONNX's "
                                 f"{op_type} is not in opset {self.version}") from None
        return _OnnxOp(self._builder, schema, name)


class _OnnxOp:
    """One ONNX operator as a builder method, with PopART's argument order."""

    def __init__(self, builder: "Builder", schema, name: str):
        self._builder, self._schema, self._name = builder, schema, name
        attrs = schema.attributes
        self._multi = schema.max_output > 1 and schema.name not in ("TopK", "DynamicQuantizeLinear")
        required = sorted(a for a, v in attrs.items() if v.required)
        optional = sorted(a for a, v in attrs.items() if not v.required and a != "auto_pad")
        self._params = (["num_outputs"] if self._multi else []) + required + optional
        self._required = set(required) | ({"num_outputs"} if self._multi else set())

    def __call__(self, *args, **kwargs):
        s, b = self._schema, self._builder
        debug = kwargs.pop("debugContext", kwargs.pop("debugPrefix", ""))
        if s.name == "Constant":
            return self._constant(*args, debug=debug, **kwargs)
        inputs = []
        if s.name not in ("RandomNormal", "RandomUniform"):  # the ops with no inputs take no list of them
            if not args and "args" not in kwargs:
                raise TypeError(f"{self._name}(): missing the list of input tensor ids (args)")
            inputs, args = (kwargs.pop("args"), args) if "args" in kwargs else (args[0], args[1:])
        params = list(self._params)
        extra = {}
        if s.name == "ConstantOfShape":  # its value is an array (PopART's binding), the attribute's tensor
            params = ["value"]
        if len(args) == len(params) + 1 and not debug:  # PopART's last positional argument is the debug context
            *args, debug = args
        given = _bind(self._name, params, args, kwargs)
        missing = [p for p in params if p in self._required and p not in given]
        if missing:
            raise TypeError(f"{self._name}() missing required argument(s): {', '.join(missing)}")
        outputs = int(given.pop("num_outputs", 1 if not self._multi else 0))
        if self._multi and outputs < 1:
            raise ValueError(f"{self._name}(): num_outputs must be >= 1")
        if s.name in ("TopK", "DynamicQuantizeLinear"):
            outputs = s.max_output
        for k, v in given.items():  # a subgraph (Loop's body, If's branches, Scan's body): a builder's graph
            if isinstance(v, Builder):
                given[k] = v._subgraph()
        if s.name == "Cast" and not isinstance(given["to"], numbers.Integral):  # a DataType or its name
            given["to"] = DATA_TYPES[data_type_name(getattr(given["to"], "name", given["to"]))]
        extra.update({k: _attribute_value(v) for k, v in given.items()})
        if s.name == "ConstantOfShape" and isinstance(given.get("value"), np.ndarray):
            extra["value"] = numpy_helper.from_array(np.asarray(given["value"]).reshape(1))
        outs = b._add_node(s.name, "", list(inputs), outputs, extra, debug)
        return outs if self._multi or outputs > 1 else outs[0]

    def _constant(self, value=None, is_value_sparse=False, debug=""):
        if isinstance(is_value_sparse, str) and not debug:  # before opset 11: constant(value, debugContext)
            is_value_sparse, debug = False, is_value_sparse
        if value is None:
            raise TypeError("constant() missing required argument: value (an array)")
        if is_value_sparse:
            raise UnsupportedOpError("aiOnnx.constant(..., is_value_sparse=True): sparse constants are not modelled")
        return self._builder._add_node("Constant", "", [], 1, {"value": numpy_helper.from_array(np.asarray(value))},
                                       debug)[0]


def _onnx_names() -> dict[str, str]:
    """Every default-domain ONNX operator by its name in lower case."""
    return {s.name.lower(): s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain == ""}


_ONNX_NAMES = _onnx_names()

#: PopART's reduction names (popart.ReductionType: Sum, Mean, NoReduction) as its builder writes them
#: (LossOp::reductionTypeToString)
_REDUCTION_STRINGS = {0: "Sum", 1: "Mean", 2: "None", "Sum": "Sum", "Mean": "Mean", "NoReduction": "None"}
#: popart.ScatterReduction's members (willow/include/popart/op/scatterreduce.hpp) as the attribute's string
_SCATTER_REDUCTIONS = ("sum", "max", "min", "mul", "none")


def _reduction(value) -> str:
    key = getattr(value, "value", value)
    if isinstance(key, numbers.Integral) and not isinstance(key, bool):
        key = int(key)
    if key not in _REDUCTION_STRINGS:
        raise ValueError(f"reduction {value!r}: give a popart.ReductionType (Sum, Mean or NoReduction)")
    return _REDUCTION_STRINGS[key]


def _scatter_reduction(value) -> str:
    key = getattr(value, "value", value)
    if isinstance(key, str) and key.lower() in _SCATTER_REDUCTIONS:
        return key.lower()
    if isinstance(key, numbers.Integral) and 0 <= int(key) < len(_SCATTER_REDUCTIONS):
        return _SCATTER_REDUCTIONS[int(key)]
    raise ValueError(f"reduction {value!r}: give a popart.ScatterReduction (Sum, Max, Min, Mul or None)")


_REQUIRED = object()

#: PopART's own ops: builder method -> (ONNX op type, its arguments after the inputs as (name, default,
#: attribute written or None: not an attribute, or a function of the value), outputs). From popart.cpp's
#: AiGraphcoreOpset1 binding (the arguments and defaults) and willow/src/builder.cpp (the attributes written).
_GRAPHCORE_OPS = {
    "gelu": ("Gelu", ()), "geluerf": ("GeluErf", ()), "detach": ("Detach", ()), "round": ("Round", ()),
    "nearbyint": ("NearbyInt", ()), "nop": ("Nop", ()), "swish": ("Swish", ()), "atan2": ("Atan2", ()),
    "expm1": ("Expm1", ()), "log1p": ("Log1p", ()), "fmod": ("Fmod", ()), "remainder": ("Remainder", ()),
    "bitwisenot": ("BitwiseNot", ()), "bitwiseand": ("BitwiseAnd", ()), "bitwiseor": ("BitwiseOr", ()),
    "bitwisexor": ("BitwiseXor", ()), "bitwisexnor": ("BitwiseXnor", ()), "copyvarupdate": ("CopyVarUpdate", ()),
    "abort": ("Abort", ()), "splineweighting": ("SplineWeighting", ()),
    "scale": ("Scale", (("scale", _REQUIRED, "scale"),)),
    "scaledadd": ("ScaledAdd", (("scale0", 1.0, "scale0"), ("scale1", 1.0, "scale1"))),
    "subsample": ("Subsample", (("strides", _REQUIRED, "strides"),)),
    "groupnormalization": ("GroupNormalization", (("num_groups", _REQUIRED, "num_groups"),
                                                  ("epsilon", 1e-5, "epsilon")), 3),  # y, mean, inv std dev
    "depthtospace": ("DepthToSpace", (("blocksize", _REQUIRED, "blocksize"), ("mode", "DCR", "mode"))),
    "reshape": ("Reshape", (("shape", _REQUIRED, "shape"),)),
    "reverse": ("Reverse", (("dimensions", _REQUIRED, "dimensions"),)),
    "slice": ("Slice", (("ends", _REQUIRED, "ends"), ("starts", _REQUIRED, "starts"), ("axes", (), "axes"))),
    "dynamicslice": ("DynamicSlice", (("axes", _REQUIRED, "axes"), ("sizes", _REQUIRED, "sizes"),
                                      ("noOverlap", 0, "noOverlap"))),
    "dynamicupdate": ("DynamicUpdate", (("axes", _REQUIRED, "axes"), ("sizes", _REQUIRED, "sizes"),
                                        ("noOverlap", 0, "noOverlap"))),
    "dynamiczero": ("DynamicZero", (("axes", _REQUIRED, "axes"), ("sizes", _REQUIRED, "sizes"))),
    "dynamicadd": ("DynamicAdd", (("axes", _REQUIRED, "axes"), ("sizes", _REQUIRED, "sizes"))),
    "sequenceslice": ("SequenceSlice", (("zeroUnused", 0, "zeroUnused"),)),
    "shapeddropout": ("ShapedDropout", (("shape", _REQUIRED, "shape"), ("ratio", 0.5, "ratio"))),
    "l1loss": ("L1", (("lambda", _REQUIRED, "lambda"), ("reduction", 1, ("reduction", _reduction)))),
    "nllloss": ("Nll", (("reduction", 1, ("reduction", _reduction)), ("ignoreIndex", None, "ignoreIndex"),
                        ("inputIsLogProbability", False, "inputIsLogProbability"))),
    "identityloss": ("IdentityLoss", (("reduction", 1, ("reduction", _reduction)),)),
    "ctcbeamsearchdecoder": ("CtcBeamSearchDecoder", (("blank", 0, "blank"), ("beam_width", 100, "beam_width"),
                                                      ("top_paths", 1, "top_paths")), 3),
    "scatterreduce": ("ScatterReduce", (("axis_size", _REQUIRED, "axis_size"), ("axis", -1, "axis"),
                                        ("reduction", 0, ("reduction", _scatter_reduction)),
                                        ("enable_index_broadcast", 1, "enable_index_broadcast"))),
    "groupedscatterreduce": ("ScatterReduce", (("axis_size", _REQUIRED, "axis_size"), ("axis", -1, "axis"),
                                               ("reduction", 0, ("reduction", _scatter_reduction)),
                                               ("group_size", 1, "group_size"),
                                               ("enable_index_broadcast", 1, "enable_index_broadcast"))),
    "groupedgather": ("GroupedGather", (("axis", 0, "axis"), ("group_size", 1, "group_size"))),
    "incrementmod": ("IncrementMod", (("increment", _REQUIRED, "increment"), ("modulus", _REQUIRED, "modulus"))),
    "bucketize": ("Bucketize", (("right", 0, "right"),)),
    "sort": ("Sort", (("axis", -1, "axis"), ("descending", 0, "descending"), ("stable", 0, "stable")), 2),
    "reducemedian": ("ReduceMedian", (("axes", None, "axes"), ("keepdims", 1, "keepdims")), 2),
    "splinebasis": ("SplineBasis", (("degree", _REQUIRED, "degree"),), 2),
    "tensorremap": ("TensorRemap", (("remap_type", 0, "remap_type"),)),
    "normalize_image": ("NormalizeImage", (("scale", 1.0, "scale"),)),
    "lstm": ("LSTM", (("outputFullSequence", 1, "output_full_sequence"),), 2),
}


class AiGraphcore(_Opset):
    """``builder.aiGraphcore`` / ``aiGraphcoreOpset1``: PopART's own ops (the ``ai.graphcore`` domain)."""

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if name == "call":
            return self._call
        if name == "packedDataBlock":
            raise UnsupportedOpError("builder.aiGraphcore.packedDataBlock: its host callback is not modelled by "
                                     "sim.popart; simulate the model without it")
        if name in ("replicatedallreduce", "replicatedreducescatter"):
            return _ReplicatedOp(self._builder, name)
        if name == "init":
            return _InitOp(self._builder)
        if name not in _GRAPHCORE_OPS:
            raise AttributeError(f"'AiGraphcoreOpset1' object has no attribute {name!r}; PopART's own ops here: "
                                 f"{', '.join(sorted([*_GRAPHCORE_OPS, 'init', 'replicatedallreduce']))}")
        op_type, params, *outs = _GRAPHCORE_OPS[name]
        return _GraphcoreOp(self._builder, name, op_type, params, outs[0] if outs else 1)


def _call(self, args, num_outputs: int, callee: "Builder", debugContext="") -> list[str]:
    """``call(args, num_outputs, callee)``: the callee builder's graph run on ``args`` (PopART's CallOp)."""
    if not isinstance(callee, Builder):
        raise TypeError(f"aiGraphcore.call: callee must be a subgraph Builder (createSubgraphBuilder), got "
                        f"{type(callee).__name__}")
    return self._builder._add_node("Call", "ai.graphcore", list(args), int(num_outputs),
                                   {"callee": callee._subgraph()}, debugContext)


AiGraphcore._call = _call


class _GraphcoreOp:
    def __init__(self, builder, name, op_type, params, outputs):
        self._builder, self._name, self._op_type, self._params, self._outputs = builder, name, op_type, params, outputs

    def __call__(self, args, *values, debugContext="", **kwargs):
        given = _bind(f"aiGraphcore.{self._name}", [p[0] for p in self._params], values, kwargs)
        attrs = {}
        for pname, default, attr in self._params:
            value = given.get(pname, default)
            if value is _REQUIRED:
                raise TypeError(f"aiGraphcore.{self._name}() missing required argument: {pname}")
            key, convert = attr if isinstance(attr, tuple) else (attr, None)
            attrs[key] = _attribute_value(convert(value) if convert else value)
        outs = self._builder._add_node(self._op_type, "ai.graphcore", list(args), self._outputs, attrs, debugContext)
        return outs if self._outputs > 1 else outs[0]


class _ReplicatedOp:
    """``replicatedallreduce`` / ``replicatedreducescatter``: the collective over PopART's CommGroup
    (``commGroup``: a ``popart.CommGroup`` or ``[type, size]``), written as its deprecated
    ``__collectiveCommGroup`` attribute, as its builder writes it."""

    _TYPES = {"replicatedallreduce": "ReplicatedAllReduce", "replicatedreducescatter": "ReplicatedReduceScatter"}

    def __init__(self, builder, name):
        self._builder, self._name = builder, name

    def __call__(self, args, collectiveOperator=None, commGroup=None, debugContext=""):
        attrs = {}
        if collectiveOperator is not None:
            attrs["__collectiveOperator"] = int(getattr(collectiveOperator, "value", collectiveOperator))
        if commGroup is not None:
            if hasattr(commGroup, "type"):
                commGroup = [int(getattr(commGroup.type, "value", commGroup.type)), int(commGroup.replicaGroupSize)]
            attrs["__collectiveCommGroup"] = [int(v) for v in commGroup]
        return self._builder._add_node(self._TYPES[self._name], "ai.graphcore", list(args), 1, attrs,
                                       debugContext)[0]


class _InitOp:
    """``init(shape, data_type, init_type[, batch_axis])``: a tensor made on the device (PopART's InitOp)."""

    def __init__(self, builder):
        self._builder = builder

    def __call__(self, shape, data_type, init_type, batch_axis=-1, debugContext=""):
        if isinstance(data_type, str):
            data_type = DATA_TYPES[data_type_name(data_type)]
        attrs = {"shape": [int(d) for d in shape], "data_type": int(data_type), "tensor_type": 2,  # TensorType::ActGrad
                 "init_type": int(getattr(init_type, "value", init_type)), "batch_axis": int(batch_axis)}
        return self._builder._add_node("Init", "ai.graphcore", [], 1, attrs, debugContext)[0]


class _Annotating:
    """PopART's AttributeContextManager: a node attribute given to the ops made inside. As PopART's, the object may
    be entered again (a script may keep one and reuse it); each exit restores what its entry found."""

    def __init__(self, context: dict, attribute: str, value):
        self._context, self._attribute, self._value, self._saved = context, attribute, value, []

    def __enter__(self):
        self._saved.append(self._context.get(self._attribute, _REQUIRED))
        self._context[self._attribute] = self._value

    def __exit__(self, *exc):
        saved = self._saved.pop()
        if saved is _REQUIRED:
            del self._context[self._attribute]
        else:
            self._context[self._attribute] = saved


class _NameScope:
    """PopART's NameContextManager: a prefix of the ids made inside; may be entered again, as PopART's."""

    def __init__(self, scopes: list, name: str):
        self._scopes, self._name = scopes, name

    def __enter__(self):
        self._scopes.append(self._name)

    def __exit__(self, *exc):
        self._scopes.pop()


class Builder:
    """PopART's builder: ``Builder()``, or ``Builder(model)`` to add to an ONNX model (a file path or its
    bytes); ``opsets={"ai.onnx": 11, "ai.graphcore": 1}`` chooses the opsets."""

    def __init__(self, modelProtoOrFilename=None, opsets: dict | None = None):
        self._model = onnx.ModelProto()
        if modelProtoOrFilename is not None:
            self._load(modelProtoOrFilename)
        self._ids = {v.name for v in self._graph.input} | {v.name for v in self._graph.initializer} | {
            o for n in self._graph.node for o in n.output}
        self._scopes: list[str] = []
        self._context: dict[str, object] = {}
        self._custom_domains: dict[str, int] = {}  # customOp's domains -> their opset version
        self._shapes: dict | None = None  # tensor -> (shape, ONNX type) by shape inference, until the next op
        self._parent: Builder | None = None  # a subgraph builder's parent
        self._outer: set[str] = set()  # a subgraph builder's reads of its parent's tensors
        opsets = dict(opsets or {})
        self._onnx_version = opsets.get("ai.onnx")
        if not self._onnx_version:  # a loaded model's own ai.onnx opset, else the first one asked for
            self._onnx_version = next((o.version for o in self._model.opset_import if o.domain in ("", "ai.onnx")),
                                      None)
        self.aiGraphcore = self.aiGraphcoreOpset1 = AiGraphcore(self, opsets.get("ai.graphcore",
                                                                                 DEFAULT_AI_GRAPHCORE_OPSET))

    def _load(self, model) -> None:
        if isinstance(model, (bytes, bytearray)):
            self._model.ParseFromString(bytes(model))
        elif isinstance(model, (str, os.PathLike)):
            if not os.path.isfile(model):
                raise GraphError(f"popart.Builder({str(model)!r}): no such ONNX file")
            self._model = onnx.load(str(model))
        elif isinstance(model, onnx.ModelProto):
            self._model.CopyFrom(model)
        else:
            raise TypeError(f"popart.Builder takes a model's bytes or file path, got {type(model).__name__}")

    @property
    def _graph(self):
        return self._model.graph

    # --- opsets -------------------------------------------------------------------------------
    def __getattr__(self, name: str):
        if name == "aiOnnx" or name.startswith("aiOnnxOpset"):
            version = int(name[len("aiOnnxOpset"):]) if name != "aiOnnx" else (self._onnx_version
                                                                               or DEFAULT_AI_ONNX_OPSET)
            if version not in AI_ONNX_OPSETS:
                raise AttributeError(f"'Builder' object has no attribute {name!r}: PopART's ai.onnx opsets are "
                                     f"{AI_ONNX_OPSETS.start} to {AI_ONNX_OPSETS.stop - 1}")
            if self._onnx_version and version != self._onnx_version:
                raise RuntimeError(f"Invalid opset '{name}' selected. Opset for domain ai.onnx already defined as "
                                   f"{self._onnx_version}")
            self._onnx_version = version
            return AiOnnx(self, version)
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"'Builder' object has no attribute {name!r}")

    def reshape_const(self, aiOnnx, args, shape, debugContext: str = "") -> str:
        """A Reshape of ``args[0]`` to ``shape`` through an int64 constant named ``<debugContext>_const``, as
        PopART's Python builder writes it."""
        new_shape = aiOnnx.constant(np.array(shape).astype(np.int64), debugContext + "_const")
        return aiOnnx.reshape([args[0], new_shape], debugContext)

    def createSubgraphBuilder(self) -> "Builder":
        """A builder of a subgraph (a call's callee, a loop's body, an if's branch): its ids unique with its
        parent's, its opsets the parent's; the parent's tensors it reads are named with
        ``addInputTensorFromParentGraph`` (ONNX's outer-scope names)."""
        child = Builder(opsets={"ai.onnx": self._onnx_version or DEFAULT_AI_ONNX_OPSET,
                                "ai.graphcore": self.aiGraphcore.version})
        child._ids, child._parent = self._ids, self
        child._custom_domains = self._custom_domains
        child._graph.name = self._next_id("subgraph")
        return child

    def addInputTensorFromParentGraph(self, tensorId: str) -> None:
        """Read the parent builder's ``tensorId`` in this subgraph (an outer-scope name, as ONNX has it)."""
        if self._parent is None or tensorId not in self._parent._ids:
            raise GraphError(f"addInputTensorFromParentGraph({tensorId!r}): no parent builder has that tensor")
        self._outer.add(tensorId)

    def _subgraph(self) -> onnx.GraphProto:
        """This builder's graph, as a subgraph attribute (its inputs, ops and outputs)."""
        if not self._graph.output:
            raise GraphError(f"subgraph {self._graph.name!r} has no outputs: give them with addOutputTensor")
        graph = onnx.GraphProto()
        graph.CopyFrom(self._graph)
        return graph

    # --- ids ----------------------------------------------------------------------------------
    def _next_id(self, name: str, index: int | None = None) -> str:
        """PopART's BuilderImpl::getNextId: the name under the open scopes, ``:index``, made unique with
        ``/1``, ``/2``, ..."""
        base = "".join(s + "/" for s in self._scopes) + name + (f":{index}" if index is not None else "")
        proposed, counter = base, 0
        while proposed in self._ids:
            counter += 1
            proposed = f"{base}/{counter}"
        self._ids.add(proposed)
        return proposed

    def _check_known(self, ids: Iterable[str], what: str) -> None:
        own = self._ids  # a subgraph's own tensors and the parent's it reads; the ids are shared with the parent
        if self._parent is not None:
            own = {v.name for v in self._graph.input} | {i.name for i in self._graph.initializer} | {
                o for n in self._graph.node for o in n.output} | self._outer
        for t in ids:
            if t not in own:
                raise GraphError(f"{what}: tensor {t!r} is not known to this builder (add it with addInputTensor "
                                 "or addInitializedInputTensor, or use an op's returned id)")

    # --- tensors ------------------------------------------------------------------------------
    def addInputTensor(self, tensorInfo, shape=None, *args, debugContext: str = "", **kwargs) -> str:
        """A host-fed input: ``addInputTensor(TensorInfo)`` or ``addInputTensor("FLOAT16", [2, 3])``, then a debug
        name; a ``popart.InputSettings`` (the stream's tile set, exchange strategy and replicated stream mode) is
        recorded in the model's metadata, as PopART's builder records it."""
        rest = list(args)
        if isinstance(tensorInfo, TensorInfo):
            if shape is not None:
                rest.insert(0, shape)
            info = tensorInfo
        else:
            info = TensorInfo(tensorInfo, shape if shape is not None else [])
        settings = kwargs.pop("settings", None)
        for a in rest:
            if isinstance(a, str):
                debugContext = a
            elif isinstance(a, InputSettings):
                settings = a
            else:
                raise TypeError(f"addInputTensor: {a!r} is neither a popart.InputSettings nor a debug name")
        if kwargs:
            raise TypeError(f"addInputTensor got unexpected keyword arguments {sorted(kwargs)}")
        name = self._next_id(debugContext or "input")
        self._graph.input.append(helper.make_tensor_value_info(name, info.onnx_type(), info.shape()))
        settings = settings or InputSettings()
        for key, value in ((TILE_SET, settings.tileSet()), (EXCHANGE_STRATEGY, settings.exchangeStrategy()),
                           (REPLICATED_STREAM_MODE, settings.replicatedStreamMode())):
            self._set_metadata(f"{key}/{name}", str(value))  # as BuilderImpl::addInputTensor records them
        return name

    def addUntypedInputTensor(self, debugContext: str = "") -> str:
        """An input of a subgraph whose type its caller's argument gives."""
        name = self._next_id(debugContext or "input")
        self._graph.input.append(helper.make_empty_tensor_value_info(name))
        return name

    def addInitializedInputTensor(self, initVal, *args, variableSettings=None, debugContext: str = "") -> str:
        """A weight (a variable) holding ``initVal``. With PopART's ``VariableSettings`` (the second argument) it
        holds a value per group of replicas, one a row of ``initVal`` when there are several groups; the builder
        records the settings in the model (``__variable_settings/<id>``) and the session reads them with the
        replicas it runs (sim/popart/session.py)."""
        for a in args:
            if isinstance(a, str):
                debugContext = a
            elif isinstance(a, VariableSettings):
                variableSettings = a
            elif a is not None:
                raise UnsupportedOpError(f"addInitializedInputTensor: {a!r} is neither a VariableSettings nor a "
                                         "debug context")
        array = np.asarray(initVal)
        data_type_name(array.dtype)  # a type PopART takes
        name = self._next_id(debugContext or "init_input")
        self._graph.initializer.append(numpy_helper.from_array(array, name))
        if variableSettings is not None:
            self._set_metadata(f"{VARIABLE_SETTINGS}/{name}", variableSettings.encoded())
        return name

    def addOutputTensor(self, tensorId: str) -> None:
        self._check_known([tensorId], "addOutputTensor")
        if tensorId not in [o.name for o in self._graph.output]:
            self._graph.output.append(helper.make_empty_tensor_value_info(tensorId))

    def getInputTensorIds(self) -> list[str]:
        inits = {i.name for i in self._graph.initializer}
        return [v.name for v in self._graph.input if v.name not in inits]

    def getOutputTensorIds(self) -> list[str]:
        return [o.name for o in self._graph.output]

    def getValueTensorIds(self) -> list[str]:
        return [o for n in self._graph.node for o in n.output]

    def getTrainableTensorIds(self) -> list[str]:
        return [i.name for i in self._graph.initializer]

    def isInitializer(self, tensorId: str) -> bool:
        return tensorId in {i.name for i in self._graph.initializer}

    def _light(self, outputs: list[str] | None = None) -> onnx.ModelProto:
        """The model without its weights' values (each large float initializer a typed graph input): what shape
        inference and the importer need, without copying the weights."""
        from ..onnx._importer import light_graph
        graph = light_graph(self._graph, outputs)
        graph.name = graph.name or "builder"
        m = helper.make_model(graph, opset_imports=list(self._proto_opsets()))
        m.ir_version = self._model.ir_version or 6
        return m

    def _info(self, tensorId: str):
        self._check_known([tensorId], "getTensorShape")
        for init in self._graph.initializer:
            if init.name == tensorId:
                return list(init.dims), init.data_type
        if self._shapes is None:  # ONNX's shape inference, as PopART runs it on each op added; kept until the next
            inferred = onnx.shape_inference.infer_shapes(self._light(), strict_mode=False).graph
            self._shapes = {}
            for v in [*inferred.input, *inferred.value_info, *inferred.output]:
                t = v.type.tensor_type
                if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
                    self._shapes[v.name] = ([d.dim_value for d in t.shape.dim], t.elem_type)
        if tensorId in self._shapes:
            return self._shapes[tensorId]
        # ONNX cannot infer PopART's own ops: the simulator's importer can
        from ..onnx import load
        graph = load(self._light(outputs=[tensorId]), name="builder")
        name, shape = graph.onnx_outputs[tensorId]
        self._shapes[tensorId] = (list(shape), {"float16": TensorProto.FLOAT16, "float32": TensorProto.FLOAT}.get(
            graph.tensors[name].dtype, TensorProto.INT32))  # kept, as the inferred ones, until the next op
        return self._shapes[tensorId]

    def getTensorShape(self, tensorId: str) -> list[int]:
        return self._info(tensorId)[0]

    def getTensorDtypeString(self, tensorId: str) -> str:
        """The data type in lower case (``float16``, ``float``, ``int32``), as PopART's."""
        return _NAMES_BY_TYPE.get(self._info(tensorId)[1], "UNDEFINED").lower()

    def customOp(self, opName: str, opVersion: int, domain: str, inputs, attributes: dict, numOutputs: int = 1,
                 name: str = "") -> list[str]:
        """A node of any op (``domain``'s ``opName`` at ``opVersion``), as PopART writes a custom op; its output
        ids. The simulator prices it once :func:`sim.onnx.register_op` gives it a rule (``opName``, or
        ``"<domain>::<opName>"``); until then a session names it as an op with no rule."""
        self._custom_domains[domain] = int(opVersion)
        return self._add_node(opName, domain, list(inputs), int(numOutputs), dict(attributes), name)

    # --- nodes --------------------------------------------------------------------------------
    def _add_node(self, op_type: str, domain: str, inputs: list, outputs: int, attrs: dict, debug) -> list[str]:
        self._check_known([i for i in inputs if i], f"{op_type}")
        debug = str(getattr(debug, "name", debug) or "")
        names = [self._next_id(debug or op_type, i) for i in range(outputs)]
        node = helper.make_node(op_type, inputs, names, domain=domain or None,
                                name="".join(s + "/" for s in self._scopes) + (debug or op_type) if (
                                    debug or self._scopes) else None)
        for k, v in {**self._context, **attrs}.items():
            v = _attribute_value(v)
            if v is not None:
                node.attribute.append(helper.make_attribute(k, v))
        self._graph.node.append(node)
        self._shapes = None
        return names

    def _nodes_making(self, ids) -> list:
        ids = [ids] if isinstance(ids, str) else list(ids)
        self._check_known(ids, "the annotation")
        nodes = [n for n in self._graph.node if set(n.output) & set(ids)]
        if not nodes:
            raise GraphError(f"no op makes {', '.join(ids)}: annotations are set on ops' outputs, not on inputs or "
                             "weights")
        return nodes

    def addNodeAttribute(self, attributeName: str, attributeValue, nodeOutputNames) -> None:
        for node in self._nodes_making(nodeOutputNames):
            if any(a.name == attributeName for a in node.attribute):
                raise GraphError(f"Node already has attribute {attributeName}")
            node.attribute.append(helper.make_attribute(attributeName, _attribute_value(attributeValue)))

    def _set(self, attribute: str, value, ids) -> None:
        for node in self._nodes_making(ids):
            kept = [a for a in node.attribute if a.name != attribute]
            del node.attribute[:]
            node.attribute.extend(kept + [helper.make_attribute(attribute, _attribute_value(value))])

    def nodeHasAttribute(self, attributeName: str, nodeOutputNames) -> bool:
        return any(a.name == attributeName for n in self._nodes_making(nodeOutputNames) for a in n.attribute)

    def _attribute(self, attributeName: str, nodeOutputNames):
        for node in self._nodes_making(nodeOutputNames):
            for a in node.attribute:
                if a.name == attributeName:
                    return helper.get_attribute_value(a)
        raise GraphError(f"no attribute {attributeName!r} on the op making {nodeOutputNames}")

    def getAllNodeAttributeNames(self, nodeOutputNames) -> list[str]:
        return [a.name for n in self._nodes_making(nodeOutputNames) for a in n.attribute]

    def removeNodeAttribute(self, attributeName: str, nodeOutputNames) -> None:
        for node in self._nodes_making(nodeOutputNames):
            kept = [a for a in node.attribute if a.name != attributeName]
            if len(kept) == len(node.attribute):
                raise GraphError(f"Cannot remove attribute {attributeName}: the node has none")
            del node.attribute[:]
            node.attribute.extend(kept)

    # --- annotations (a value: a context; ids and a value: set on their ops) ------------------
    def _annotating(self, attribute: str, value) -> "_Annotating":
        return _Annotating(self._context, attribute, value)

    def _annotation(self, attribute: str, what: str, args):
        if len(args) == 1:
            value = args[0]
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise ValueError(f"Builder.{what}({value!r}): give a whole number >= 0")
            return self._annotating(attribute, int(value))
        if len(args) == 2:
            self._set(attribute, int(args[1]), args[0])
            return None
        raise TypeError(f"Builder.{what} takes a value (a context for the ops made inside) or tensor ids and a value")

    def virtualGraph(self, *args):
        """``with builder.virtualGraph(ipu):`` or ``builder.virtualGraph(ids, ipu)``."""
        return self._annotation(VIRTUAL_GRAPH, "virtualGraph", args)

    def pipelineStage(self, *args):
        return self._annotation(PIPELINE_STAGE, "pipelineStage", args)

    def executionPhase(self, *args):
        return self._annotation(EXECUTION_PHASE, "executionPhase", args)

    def _read_annotation(self, attribute: str, ids):
        if ids is None:
            if attribute not in self._context:
                raise GraphError(f"no {attribute} is set in the current context")
            return self._context[attribute]
        return self._attribute(attribute, ids)

    def getVirtualGraph(self, nodeOutputNames=None) -> int:
        return self._read_annotation(VIRTUAL_GRAPH, nodeOutputNames)

    def hasVirtualGraph(self, nodeOutputNames=None) -> bool:
        return VIRTUAL_GRAPH in self._context if nodeOutputNames is None else self.nodeHasAttribute(
            VIRTUAL_GRAPH, nodeOutputNames)

    def getPipelineStage(self) -> int:
        return self._read_annotation(PIPELINE_STAGE, None)

    def hasPipelineStage(self) -> bool:
        return PIPELINE_STAGE in self._context

    def getExecutionPhase(self) -> int:
        return self._read_annotation(EXECUTION_PHASE, None)

    def hasExecutionPhase(self) -> bool:
        return EXECUTION_PHASE in self._context

    def nameScope(self, name: str) -> "_NameScope":
        return _NameScope(self._scopes, str(name))

    def getNameScope(self, name: str = "") -> str:
        return "".join(s + "/" for s in self._scopes) + name

    def schedulePriority(self, value: float):
        return self._annotating("__schedule_priority", float(value))

    def outlineAttributes(self, attributes: dict):
        return self._annotating("__outline", [f"{k}:{v}" for k, v in attributes.items()])

    def recomputeOutputInBackwardPass(self, nodeOutputNames, value=2) -> None:
        """PopART's RecomputeType of the ops making ``nodeOutputNames`` (default Recompute)."""
        value = int(getattr(value, "value", value))
        if not 0 <= value < len(RECOMPUTE_TYPES):
            raise ValueError(f"recomputeOutputInBackwardPass: {value!r} is not a popart.RecomputeType")
        self._set(RECOMPUTE, value, nodeOutputNames)

    def recomputeOutput(self, *args):
        """``with builder.recomputeOutput(RecomputeType):`` (the ops made inside) or ``recomputeOutput(id, type)``."""
        if len(args) == 2:
            return self.recomputeOutputInBackwardPass(args[0], args[1])
        value = int(getattr(args[0], "value", args[0])) if args else 0
        if len(args) > 1 or not 0 <= value < len(RECOMPUTE_TYPES):
            raise ValueError(f"recomputeOutput{args!r}: give a popart.RecomputeType (and tensor ids first)")
        return self._annotating(RECOMPUTE, value)

    def outputTensorLocation(self, *args):
        """``with builder.outputTensorLocation(TensorLocation):`` or ``outputTensorLocation(id, location)``:
        where an op's outputs live (written as PopART serialises it; not modelled, the notes say so)."""
        given = bool(args) and hasattr(args[-1], "storage")  # a popart.TensorLocation (else PopART's default)
        fields = ("storage", "loadTileSet", "storageTileSet", "replicatedTensorSharding")
        value = [int(getattr(v, "value", v)) for v in (getattr(args[-1], f) for f in fields)] if given else [0] * 4
        domain = args[-1].shardingDomain if given else None
        value += [int(getattr(domain.type, "value", domain.type)), int(domain.replicaGroupSize)] if domain else [0, 0]
        if len(args) == 2 or (len(args) == 1 and not given):
            self._set("__output_tensor_location", value, args[0])
            return None
        return self._annotating("__output_tensor_location", value)

    def commGroup(self, type: int = 0, groupSize: int = 0):
        """``with builder.commGroup(type, groupSize):``: the replica group of the collectives made inside."""
        return self._annotating("__collectiveCommGroup", [int(getattr(type, "value", type)), int(groupSize)])

    def getRecomputeOutputInBackwardPass(self, nodeOutputNames) -> bool:
        return self.nodeHasAttribute(RECOMPUTE, nodeOutputNames) and self._attribute(
            RECOMPUTE, nodeOutputNames) == RECOMPUTE_TYPES.index("Recompute")

    def checkpointOutput(self, nodeOutputNames) -> list[str]:
        """An identity of each tensor, kept for the backward pass (RecomputeType Checkpoint)."""
        out = []
        for t in nodeOutputNames:
            out.append(self._add_node("Identity", "", [t], 1, {RECOMPUTE: 1}, "Checkpoint")[0])
        return out

    def setAvailableMemoryProportion(self, nodeOutputName, availableMemoryProportion: float) -> None:
        value = float(availableMemoryProportion)
        if not 0 < value <= 1:
            raise ValueError(f"setAvailableMemoryProportion: {value} must be in (0, 1]")
        self._set(AVAILABLE_MEMORY, value, nodeOutputName)

    def setPartialsType(self, nodeOutputName: str, partialsType: str) -> None:
        self._set("__partials_type", str(partialsType), nodeOutputName)

    def setSerializeMatMul(self, nodeOutputNames, mode: str, factor: int = 0, keep_precision: bool = False) -> None:
        for t in nodeOutputNames:
            self._set("__serialize_matmul_mode", str(mode), t)

    def setInplacePreferences(self, nodeOutputName: str, prefs: dict) -> None:
        self._set("__inplace_preferences", [f"{k}:{v}" for k, v in prefs.items()], nodeOutputName)

    def excludePatterns(self, nodeOutputName: str, patternNames) -> None:
        self._set("__exclude_patterns", list(patternNames), nodeOutputName)

    def setEnableConvDithering(self, nodeOutputName: str, value: int) -> None:
        self._set("__enable_conv_dithering", int(value), nodeOutputName)

    def embedReplicationFactor(self, replicationFactor: int) -> None:
        self._set_metadata("replicationFactor", str(int(replicationFactor)))

    def setGraphName(self, name: str) -> None:
        self._graph.name = str(name)

    def _set_metadata(self, key: str, value: str) -> None:
        kept = [p for p in self._model.metadata_props if p.key != key]
        del self._model.metadata_props[:]
        self._model.metadata_props.extend(kept + [onnx.StringStringEntryProto(key=key, value=value)])

    # --- the model ----------------------------------------------------------------------------
    def _proto(self) -> onnx.ModelProto:
        """A copy of the model with its opset imports set."""
        m = onnx.ModelProto()
        m.CopyFrom(self._model)
        if not m.ir_version:
            m.ir_version = 6  # ONNX's IR version of opsets 10 and 11
        del m.opset_import[:]
        m.opset_import.extend(self._proto_opsets())
        m.producer_name = m.producer_name or "sim.popart"
        return m

    def _proto_opsets(self) -> list:
        """The ai.onnx opset, and each other domain's that an op uses."""
        domains = {"ai.graphcore": self.aiGraphcore.version, **self._custom_domains}
        used = {n.domain for n in self._graph.node}
        return [helper.make_opsetid("", self._onnx_version or DEFAULT_AI_ONNX_OPSET)] + [
            helper.make_opsetid(d, v) for d, v in sorted(domains.items()) if d and d in used]

    def getModelProto(self, humanReadable: bool = False):
        """The model's serialized bytes (its text form with ``humanReadable``)."""
        m = self._proto()
        return str(m).encode() if humanReadable else m.SerializeToString()

    def saveModelProto(self, filename: str) -> None:
        """Write the model to ``filename``, whole or not at all."""
        write_bytes(filename, self.getModelProto())
