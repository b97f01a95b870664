"""popnn's recurrent layers (LSTM and GRU) as PopART runs them: the work of one layer pass.

PopTorch lowers ``nn.LSTM`` to PopART's LSTM op (its dispatcher takes ``lstm.input`` whole;
``popart_canonicalization/RNNOps.cpp`` sums the two biases into one), and ONNX's LSTM and GRU nodes
are PopART's LSTM / GRU ops (``nn.GRU`` reaches PopTorch 3 as ATen's per-step ops instead:
``sim/poptorch/_ops_layers.py``). They call ``popnn::lstm::lstmFwd`` / ``lstmBwdWithWU`` and
``popnn::gru::gruFwd`` / ``gruBwdWithWU`` (``willow/src/popx/op/lstmx.cpp``, ``grux.cpp``). popnn runs the
time steps as one loop (``rnn::Rnn``) whose body is the cell: this module lists a pass as :class:`Part` s -- one matmul
or one element-wise compute set each, with how many times the pass runs it -- which
``sim/cost/rules.py`` prices with the matmul planner and the codelet rates. The loop itself
(``Rnn.cpp``: ``Repeat`` over the steps of ``checkLimit`` then the body) runs, each step, its
counter (a ``ForLoopCounter`` vertex on one tile, its own compute set) and a popops dynamic slice
of every sequence the body reads and a dynamic update of every sequence it writes (``sliceShard``,
``updateShard``: one ``DynamicSlice1D`` compute set each), priced by popops' estimates.

LSTM (``lib/popnn/Lstm.cpp``), per step forward (``basicLstmCellForwardPass``): the step's input
sliced from the sequence, one matmul ``[x_t, h] @ [W_i; W_h]`` (``basicLstmUnitsNlInput``: the
input weights are not applied to the whole sequence up front, ``preCalcWeights`` is off by default),
the result rearranged like the cell state (``rearrangeUnitsOutputFwd``), the bias added, the four
gates' non-linearities in one compute set (``applyGateNonlinearities``), ``[f, g] * [c, i]``,
``c' = f c + i g``, ``tanh(c')`` and ``h = o tanh(c')``; in training the step's six intermediates
and the new state are copied out, and the output is written into the sequence. Backward, per step
(``backwardStepImpl``): the step's intermediates sliced, the output gradients added, ``[o, tanh] *
dh``, one compute set of the two non-linearity gradients, the cell-state gradient added, a 4-way
``mul``, one compute set of the three gate gradients, one matmul ``d[x, h] = dgates @ [W_i; W_h]ᵀ``
(the weights transposed once before the loop, ``lstmBwdRearrangeWeights``), the input gradient
written into its sequence and the gate gradients kept for the weight update. The weight update
(``basicLstmParamUpdate``) is one accumulating matmul ``[x, h]ᵀ @ dgates`` over ``steps_per_wu``
steps at a time (the steps folded into the reduction dimension; several steps planned as
INFERENCE_FWD within the memory the cadence leaves, one as TRAINING_WU) plus the bias gradients
reduced over those steps, and a last reduction over the batch (``basicLstmParamUpdateFinal``);
``steps_per_wu`` as ``interleaveWUCadence`` picks it (see :func:`lstm_wu_cadence`). poplibs of 2021
(before the cadence) updated a step at a time.

GRU (``lib/popnn/Gru.cpp``, ``resetAfter``: PyTorch's form, ONNX's ``linear_before_reset`` 1), per step forward:
two matmuls (``x_t @ W_i`` and ``h @ W_h``), their results rearranged, the biases added, the
update and reset gates' sum and sigmoid, the reset gate applied to the recurrent candidate, the
candidate's sum and tanh, then ``h = c + u (h - c)`` as one map. Backward per step
(``backwardStepImplResetAfter``): the output gradient copied and added, ``1 - u`` and ``h - c``,
``[1 - u, h - c] * dh``, one compute set of the candidate's and update gate's gradients, the reset gate's product and
gradient, two matmuls (to ``h`` and to ``x``) and ``dh_prev`` as one map. The weight update
(``basicGruParamUpdate``) runs a step at a time: inside the backward loop when that saves memory
(``interleavedWUIsBeneficial``: the weights no larger than the sequence's gate gradients), else in
a loop of its own over the kept gate gradients (``gruWUImpl``, an ``rnn::Rnn`` loop); either way its
accumulating matmuls have the batch as their reduction dimension. ONNX's default GRU
(``linear_before_reset`` 0, not ``resetAfter``)
runs two matmuls of ``[x_t, h]`` and ``[x_t, r h]`` per step instead, and two backward.

Memory: beside each part's own temporaries, the tensors popnn creates for its loops live while the parts they
outlive run (``Part.held``): the copy of the input sequence the forward loop slices (``prevLayerActsCopy``), the
weights transposed for the backward loop (``preArrangeMatMulInputRHS``) and, when the update runs in a loop of
its own, the gate gradients the backward loop keeps for it and that loop's copies of the input and of the
output shifted a step.

Not modelled: popnn's sharding of long sequences over tile sets (``numShards``), the variable
sequence lengths' masks, and the cadence's serial split of the weight-update matmul (its FLOPs
are the same).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..graph.ir import RNN_GATES, RNN_SAVED

#: popnn's default availableMemoryProportion for the LSTM cadence (Lstm.cpp defaultAvailMemoryProp)
_LSTM_MEMORY_PROPORTION = 0.2
#: share of that memory the backward intermediates may take (Lstm.cpp interleaveWUCadence)
_BWD_INTERMEDIATES_SHARE = 0.1
#: bits the data path moves per cycle: the cadence rounds its steps to a multiple of 64 bits
_DATA_PATH_BITS = 64


@dataclass(frozen=True)
class Part:
    """One compute set (or one matmul) of a recurrent layer's pass, run ``count`` times.

    ``kind``: ``"matmul"`` (``shape`` = (M, K, N); ``weight`` when the right operand is a weight),
    ``"reduce_sum"`` (``shape`` = (rows, columns), summed over the rows), ``"transpose"``
    (``shape`` = (rows, columns)), ``"dynamic_slice"`` (one step's slice of a sequence, or its
    update, ``shape`` = (elements,)), ``"loop_counter"`` (the step loop's counter, ``shape`` = (1,))
    or an element-wise codelet kind over ``shape`` = (elements,), ``broadcast`` elements of a second
    operand repeated over them (a bias)."""

    kind: str
    shape: tuple[int, ...]
    count: int = 1
    weight: bool = False
    broadcast: int = 0
    fc_pass: str = ""
    memory_proportion: float | None = None  # a matmul's availableMemoryProportion (None: the layer's)
    held: int = 0  # elements (the layer's type) of the layer's own tensors live while it runs (:func:`_holding`)


def _holding(parts: list[Part], elements: int) -> list[Part]:
    """``parts`` with ``elements`` more of the layer's own tensors live while each runs: a tensor popnn
    creates for its loops (the copy of the input the steps slice, the transposed weights, the kept gate
    gradients), counted with the temporaries of every part it outlives."""
    return [replace(p, held=p.held + elements) for p in parts]


def lstm_wu_cadence(T: int, B: int, I: int, H: int, itemsize: int, tile_bytes: int,
                    tiles: int) -> tuple[int, float | None]:
    """``(time steps per weight-update matmul, that matmul's availableMemoryProportion)`` as popnn's
    ``interleaveWUCadence`` picks them: the gate gradients of as many steps as fit in 10 % of 20 % of
    a tile (the LSTM's default memory proportion), rounded down to a multiple of the 64-bit data
    path, the matmul then planned within what is left of the 20 % (``memoryPropMatMul``; None when
    one step runs at a time, planned as any TRAINING_WU matmul: no step fits after rounding, the
    cadence's fallback); when not even one step fits, one step if interleaving saves memory
    (``interleavedWUIsBeneficial``), else the whole sequence. The plan's serial split of the
    matmul's input channels, which divides the steps further, is taken as one."""
    grain = math.gcd(16, H)  # rnn::getNumGrains: the state laid out in grains of gcd(16, H)
    per_tile = math.ceil(B * H // grain / tiles) * grain * itemsize  # RnnParams::getOutputBytesPerTile
    per_step = per_tile * 4
    available = int(tile_bytes * _LSTM_MEMORY_PROPORTION)
    fits = min(T, int(_BWD_INTERMEDIATES_SHARE * available) // per_step)
    if fits == 0:
        return (1 if (I + H) * H * 4 <= B * H * 4 * T else T), None
    align = max(1, _DATA_PATH_BITS // (8 * itemsize))
    steps = fits // align * align
    if steps <= 1:  # none after rounding: one step per update (the cadence's fallback)
        return 1, None
    return steps, (available - per_step * fits) / tile_bytes


def forward_parts(cell: str, T: int, B: int, I: int, H: int, training: bool, reset_after: bool = True) -> list[Part]:
    """The compute sets of one forward pass over ``T`` steps (see the module docstring);
    ``reset_after`` False: ONNX's default GRU (``linear_before_reset`` 0), whose candidate's matmul
    takes ``[x_t, r h]`` after the gates' (``gruCellForwardPassCalcUnits`` twice)."""
    BH = B * H
    parts = [Part("loop_counter", (1,), T),  # rnn::Rnn's step counter (checkLimit)
             Part("dynamic_slice", (B * I,), T)]  # each step's input, sliced from the sequence
    if cell == "lstm":
        parts += [Part("matmul", (B, I + H, 4 * H), T, weight=True),
                  Part("copy", (4 * BH,), T),  # rearranged like the cell state
                  Part("add", (4 * BH,), T, broadcast=4 * H),  # AddBias
                  Part("sigmoid", (4 * BH,), T),  # the gates' non-linearities, one compute set
                  Part("mul", (2 * BH,), T), Part("add", (BH,), T), Part("tanh", (BH,), T), Part("mul", (BH,), T)]
    elif not reset_after:
        parts += [Part("matmul", (B, I + H, 2 * H), T, weight=True), Part("copy", (2 * BH,), T),
                  Part("add", (2 * BH,), T, broadcast=2 * H), Part("sigmoid", (2 * BH,), T),  # update and reset
                  Part("mul", (BH,), T),  # r h
                  Part("matmul", (B, I + H, H), T, weight=True), Part("copy", (BH,), T),
                  Part("add", (BH,), T, broadcast=H), Part("tanh", (BH,), T),  # the candidate
                  Part("map:sub,mul,add", (BH,), T)]
    else:
        parts += [Part("matmul", (B, I, 3 * H), T, weight=True), Part("matmul", (B, H, 3 * H), T, weight=True),
                  Part("copy", (6 * BH,), T), Part("copy", (3 * BH,), T),  # both results rearranged
                  Part("add", (6 * BH,), T, broadcast=6 * H),  # both biases
                  Part("add", (2 * BH,), T), Part("sigmoid", (2 * BH,), T),  # update and reset gates
                  Part("mul", (BH,), T), Part("add", (BH,), T), Part("tanh", (BH,), T),  # the candidate
                  Part("map:sub,mul,add", (BH,), T)]  # h = c + u (h - c)
    if training:  # the step's intermediates written into their sequence, the new state copied out
        parts += [Part("dynamic_slice", (RNN_SAVED[cell] * BH,), T),
                  Part("copy", (2 * BH if cell == "lstm" else BH,), T)]
    parts.append(Part("dynamic_slice", (BH,), T))  # the output written into the sequence
    # the input sequence copied to the loop's layout first (lstmFwd, gruFwd: prevLayerActsCopy), live
    # through the loop
    parts = _holding([Part("copy", (T * B * I,)), *parts], T * B * I)
    return _with_fc_passes(parts, "TRAINING_FWD" if training else "INFERENCE_FWD")


def backward_parts(cell: str, T: int, B: int, I: int, H: int, itemsize: int, tile_bytes: int,
                   tiles: int, reset_after: bool = True, step_wu: bool = False) -> list[Part]:
    """The compute sets of one backward pass with the weight update (``*BwdWithWU``). ``step_wu``: the
    LSTM's weight update a step at a time, as poplibs did before the cadence (8dcde1ec, the
    ``lstm_layer`` benchmarks' version: ``lstmWUImpl``), inside the backward loop when
    ``interleavedWUIsBeneficial`` (the weights no larger than the sequence's gate gradients), else in a
    loop of its own after it over the kept gate gradients, on a copy of the input sequence and the
    output sequence shifted a step (``inputCopy``, ``rnn::shiftRnnTensor``)."""
    BH, G = B * H, RNN_GATES[cell]
    # rnn::Rnn's step loop: its counter, the step's slices of the output gradient and of the saved
    # intermediates, and of the input and previous output the weight update reads
    saved = [Part("loop_counter", (1,), T), Part("dynamic_slice", (BH,), T),
             Part("dynamic_slice", (RNN_SAVED[cell] * BH,), T)]
    wu_inputs = [Part("dynamic_slice", (B * I,), T), Part("dynamic_slice", (BH,), T)]
    if cell == "lstm":
        interleaved = not step_wu or (I + H) * 4 * H <= 4 * BH * T
        transposes = [Part("transpose", (I + H, 4 * H))]  # lstmBwdRearrangeWeights, before the loop
        step = [*saved, Part("add", (BH,), T), Part("mul", (2 * BH,), T), Part("tanh_grad", (2 * BH,), T),
                Part("add", (BH,), T), Part("mul", (4 * BH,), T), Part("sigmoid_grad", (3 * BH,), T),
                Part("matmul", (B, 4 * H, I + H), T, weight=True)]
        steps, wu_memory = (1, None) if step_wu else lstm_wu_cadence(T, B, I, H, itemsize, tile_bytes, tiles)
        wu_k = [I + H]
    else:
        # Gru.cpp: the update's matmuls run a step at a time, inside the backward loop when
        # interleavedWUIsBeneficial, else in a loop of their own after it (gruWUImpl)
        interleaved = (I + H) * 3 * H <= 3 * BH * T
        steps, wu_memory = 1, None
        # the output gradient copied and added, a constant of ones copied, 1 - u and h - c (two popops subs),
        # [1 - u, h - c] * dh, the candidate's and update gate's non-linearity gradients in one compute set
        gru_step = [*saved, Part("copy", (BH,), T), Part("add", (BH,), T), Part("copy", (BH,), T),
                    Part("sub", (BH,), T), Part("sub", (BH,), T), Part("mul", (2 * BH,), T),
                    Part("tanh_grad", (2 * BH,), T)]
        if not reset_after:  # Gru.cpp backwardStepImpl: the candidate's matmul, then the gates'
            transposes = [Part("transpose", (I + H, 3 * H))]
            step = [*gru_step, Part("matmul", (B, H, I + H), T, weight=True), Part("mul", (BH,), T),
                    Part("sigmoid_grad", (BH,), T), Part("matmul", (B, 2 * H, I + H), T, weight=True),
                    Part("map:mul,add,mul,add,add", (BH,), T)]
            wu_k = [I + H]
        else:
            transposes = [Part("transpose", (I, 3 * H)), Part("transpose", (H, 3 * H))]
            step = [*gru_step, Part("mul", (BH,), T), Part("sigmoid_grad", (BH,), T), Part("mul", (BH,), T),
                    Part("matmul", (B, 3 * H, H), T, weight=True), Part("matmul", (B, 3 * H, I), T, weight=True),
                    Part("map:mul,add", (BH,), T)]
            wu_k = [I, H]
    step.append(Part("dynamic_slice", (B * I,), T))  # the input gradient written into its sequence
    calls = math.ceil(T / steps)
    # accumulating matmuls [x, h]ᵀ @ dgates over ``steps`` steps, then added in: a step at a time
    # TRAINING_WU, several (the LSTM's cadence) INFERENCE_FWD within the cadence's memory
    # (Lstm.cpp basicLstmParamUpdate: the plan found at that proportion, then kept)
    wu_pass = "INFERENCE_FWD" if steps > 1 and wu_memory is not None else ""
    wu = [part for k in wu_k for part in (
        Part("matmul", (k, steps * B, G * H), calls, fc_pass=wu_pass, memory_proportion=wu_memory),
        Part("add", (k * G * H,), calls))]
    wu.append(Part("reduce_sum", (steps, G * BH), calls))  # the bias gradients over the steps
    zero = Part("copy", ((I + H) * G * H + G * H * B,))  # the accumulators zeroed (popops::zero)
    # live beside the parts' own temporaries: the weights transposed for the backward matmuls
    # (preArrangeMatMulInputRHS) through the backward loop; without interleaving, the gate gradients it
    # keeps for the update's own loop, which reads them with a copy of the input sequence and the
    # output sequence shifted a step (lstmWUImpl, gruWUImpl: inputCopy, rnn::shiftRnnTensor)
    transposed = (I + H) * G * H
    if interleaved:
        parts = [zero, *_holding([*transposes, *step, *wu_inputs, *wu], transposed)]
    else:
        kept = G * BH * T
        wu_loop = [Part("copy", (T * B * I,)), Part("copy", (T * BH,)), Part("loop_counter", (1,), T),
                   *wu_inputs, Part("dynamic_slice", (G * BH,), T), *wu]
        parts = [*_holding(transposes, transposed), *_holding(step, transposed + kept), zero,
                 *_holding(wu_loop, kept + T * B * I + T * BH)]
    parts.append(Part("reduce_sum", (B, G * H)))  # the bias gradients over the batch, once (ParamUpdateFinal)
    return _with_fc_passes(parts, "TRAINING_BWD")


def _with_fc_passes(parts: list[Part], weights_pass: str) -> list[Part]:
    """``parts`` with each matmul's ``fullyConnectedPass`` as popnn sets it in its matmul options:
    ``weights_pass`` on a matmul by the layer's weights (``INFERENCE_FWD`` / ``TRAINING_FWD`` when
    the layer is inference-only or not, ``TRAINING_BWD`` for the gradient through them: Lstm.cpp
    ``basicLstmCellForwardPass``, ``backwardStepImpl``; Gru.cpp likewise), ``TRAINING_WU`` on the
    weight update's accumulating matmuls (``basicLstmParamUpdate``, ``basicGruParamUpdate``)."""
    return [replace(p, fc_pass=p.fc_pass or (weights_pass if p.weight else "TRAINING_WU")) if p.kind == "matmul"
            else p for p in parts]
