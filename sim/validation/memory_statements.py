"""Graphcore's published statements about tile memory (recomputation checkpoints in an LSTM, a CNN cast to FP16,
partials type, availableMemoryProportion, recomputation checkpoints in BERT, control code), each checked on the
simulator (:func:`_statement_rows`, rows of the report's table)."""

from __future__ import annotations

from .. import compile as compile_graph
from ..cost import op_cost
from ..errors import OutOfMemoryError
from ..graph import Graph, GraphBuilder
from ..hardware.system import load_system
from ..options import Options
from .memory_fits import _fits
from .setups import _bert_train

#: graphcore/examples tutorials/feature_examples/tensorflow2/recomputation_checkpoints (README.md and
#: recompute_lstm.py at the examples' HEAD): its PopVision liveness figures (static/LSTM_no_checkpoints.png and
#: LSTM_7_checkpoints.png: total bytes over the tiles, always-live included), read off the plots' MB axes to about
#: 5 %: the peak without checkpoints and with 7, and the maximum memory line (the hardware is not named; the
#: line is a Mk2 IPU's 918 MB)
LSTM_TUTORIAL_PEAK_MB = {0: 1100, 7: 620}
LSTM_TUTORIAL_MAX_MB = 900


def checkpointed_lstm(checkpoints: int, steps: int = 2048, batch: int = 16, width: int = 512, units: int = 256,
                      concat: bool = True, keep_sequence: bool = True) -> Graph:
    """recompute_lstm.py's model (fp32): one LSTM of ``units`` over ``steps`` steps of ``width`` inputs run as
    ``checkpoints + 1`` LSTM layers of equal steps sharing their weights, each starting from the state the one
    before ends with, that state (h, c) a recomputation checkpoint; a dense layer to one output and an MSE
    loss over the whole output sequence (``concat``) or only the last section's. With ``keep_sequence`` the
    sequence the dense layer reads is kept too: the example's second pipeline stage starts there, and a
    stage's input is stashed for its backward pass. Time-major, as popnn runs it (the Keras layer's
    transposes of the batch-major input and output are not built)."""
    b = GraphBuilder(f"lstm_{checkpoints}_checkpoints", "float32")
    n = checkpoints + 1
    x, y = b.input("x", (steps, batch, width)), b.input("y", (steps if concat else steps // n, batch, 1))
    w_in, w_rec = b.weight("w_input", (width, 4 * units)), b.weight("w_recurrent", (units, 4 * units))
    bias, h, c = b.weight("bias", (4 * units,)), b.constant("h0", (batch, units)), b.constant("c0", (batch, units))
    outs = []
    for i in range(n):
        piece = b.slice(x, 0, i * steps // n, (i + 1) * steps // n, name=f"slice{i}") if n > 1 else x
        seq, h, c = b.recurrent("lstm", piece, w_in, w_rec, bias, h, c, name=f"lstm{i}")
        if i < n - 1:
            b.checkpoint(h)
            b.checkpoint(c)
        outs.append(seq)
    seq = b.concat(outs, 0) if concat and n > 1 else outs[-1]
    if keep_sequence:
        b.checkpoint(seq)
    b.mse_loss(b.linear(seq, 1, name="dense"), y)
    return b.graph


def lstm_tutorial_peak(checkpoints: int) -> float:
    """The simulated peak of the recomputation-checkpoint tutorial's training on one Mk2 IPU, bytes summed over
    the tiles (as PopVision's liveness report plots it): gradient accumulation 4, SGD, each section recomputed
    before its gradient from its checkpointed state (TensorFlow's RecomputeAndBackpropagateInterleaved; in
    PopART's terms RecomputeAll with explicitRecomputation, under which the ops after the last checkpoint are
    recomputed too)."""
    o = Options()
    o.Training.gradientAccumulation(4)
    o._Popart.set("autoRecomputation", 4)
    o._Popart.set("explicitRecomputation", True)
    run = compile_graph(checkpointed_lstm(checkpoints), "ipu-mk2", o, training=True, optimizer="sgd")
    live = run.memory[0].liveness
    return float(max(live.always_live + live.activations + live.temporaries))


#: graphcore/examples tutorials/tutorials/pytorch/mixed_precision (README.md, walkthrough.py; SDK 3.1): its PopVision
#: memory report of the same training session with the CNN in FP32 and cast to FP16 (static/MemoryDiffReport.png,
#: 1,216 tiles of 256 kB: a Mk1 IPU's, or Poplar's IPU Model of one [U]), read off the plot: the top of each series
#: in every pixel column (0 at row 720, 256 kB at row 135), kB (KiB, as the axis's 256 is a tile's 262,144 B) by
#: precision: the mean tile and the fullest. The text: "We observed a ~26% reduction in memory usage".
MIXED_PRECISION_TUTORIAL_KB = {"float32": (133.0, 156.2), "float16": (107.1, 119.0)}


def mixed_precision_tutorial_kb(dtype: str) -> tuple[float, float]:
    """(mean tile, fullest tile) in KiB of the mixed-precision tutorial's training on one Mk1 IPU (``ipu-mk1-c2``),
    through sim.poptorch as walkthrough.py sets it up: FashionMNIST resized to 128 x 128, batch 12, its CNN (two
    convolutions, max pool, group norm, two linear layers), AdamW, stochastic rounding, float partials; in
    ``float16`` the model cast with ``half()``, the images FP16, AdamW's ``accum_type`` FP16 and loss scaling 1,024
    (its moments stay FP32: PopTorch's ``first/second_order_momentum_accum_type`` defaults)."""
    import torch

    from .. import poptorch

    class CustomModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.pool = torch.nn.Conv2d(1, 5, 3), torch.nn.MaxPool2d(2, 2)
            self.conv2, self.norm = torch.nn.Conv2d(5, 12, 5), torch.nn.GroupNorm(3, 12)
            self.fc1, self.relu, self.fc2 = torch.nn.Linear(41772, 100), torch.nn.ReLU(), torch.nn.Linear(100, 10)
            self.log_softmax, self.loss = torch.nn.LogSoftmax(dim=0), torch.nn.NLLLoss()

        def forward(self, x, labels):
            x = self.norm(self.relu(self.conv2(self.pool(self.relu(self.conv1(x))))))
            x = self.log_softmax(self.fc2(self.relu(self.fc1(torch.flatten(x, start_dim=1)))))
            return x, self.loss(x, labels)

    half = dtype == "float16"
    model = CustomModel().half() if half else CustomModel()
    optimizer = poptorch.optim.AdamW(params=model.parameters(), lr=0.001, accum_type=getattr(torch, dtype),
                                     loss_scaling=1024 if half else None)
    opts = poptorch.Options().simulatedSystem("ipu-mk1-c2")
    opts.Precision.enableStochasticRounding(True)
    opts.Precision.setPartialsType(torch.float)
    trained = poptorch.trainingModel(model.train(), options=opts, optimizer=optimizer)
    trained.compile(torch.zeros(12, 1, 128, 128, dtype=getattr(torch, dtype)), torch.zeros(12, dtype=torch.long))
    memory = trained.executable.memory[0]
    return memory.total_bytes / len(memory.always_live) / 1024, memory.peak_tile_bytes / 1024


def _statement_rows() -> list[str]:
    """Graphcore's published statements about tile memory, each checked on the simulator."""
    mk2 = load_system("ipu-mk2").ipu
    sram = mk2.sram_bytes_per_tile

    def ffn1(partials: str, amp: float):  # BERT-Large FFN1 at micro-batch 8, SL128
        b = GraphBuilder("ffn1", "float16")
        b.matmul(b.input("x", (1024, 1024)), b.weight("w", (1024, 4096)))
        g = b.graph
        return op_cost(g.ops[-1], g, mk2, mk2.tiles, amp, partials)

    flt, half = ffn1("float", 0.6), ffn1("half", 0.6)
    bounds = {amp: ffn1("float", amp).temp_bytes_per_tile for amp in (0.1, 0.3, 0.6)}
    bound_ok = all(t <= amp * sram for amp, t in bounds.items())

    def bert_l128(amp, recompute=None):
        setup = _bert_train("bert-large", "bow-pod16", 4, 8, 2048, [3, 7, 7, 7], [amp] * 4, recompute=recompute)
        memory = _fits(setup)
        return memory if isinstance(memory, OutOfMemoryError) else memory[1]

    with_ck, without_ck = bert_l128(0.25), bert_l128(0.25, recompute=False)

    def not_always_live(m) -> str:
        if isinstance(m, OutOfMemoryError):
            return "out of memory"
        return f"{(m.peak_tile_bytes - int(m.always_live[m.fullest_tile])) / 1e3:,.0f} kB"

    low, high = bert_l128(0.15), bert_l128(0.25)  # 0.25: the config's own proportion on IPUs 1-3
    # the mean tile's: the fullest tile's always-live bytes also follow where its weights land
    always = [None if isinstance(m, OutOfMemoryError) else round(float(m.always_live.mean())) for m in (low, high)]
    more_code = None not in always and always[0] > always[1]
    lstm = {k: lstm_tutorial_peak(k) / 1e6 for k in LSTM_TUTORIAL_PEAK_MB}
    pub, mp = MIXED_PRECISION_TUTORIAL_KB, {d: mixed_precision_tutorial_kb(d) for d in MIXED_PRECISION_TUTORIAL_KB}
    lstm_source = ("graphcore/examples `tutorials/feature_examples/tensorflow2/recomputation_checkpoints/README.md` "
                   "(its liveness figures, read off the plots)")
    return [
        "| Recomputation checkpoints that cut a long LSTM (2,048 steps, batch 16, 512 inputs, 256 units, fp32) "
        "into 8 sections lower the peak liveness: about "
        f"{LSTM_TUTORIAL_PEAK_MB[0]:,} MB without, {LSTM_TUTORIAL_PEAK_MB[7]:,} MB with 7 | {lstm_source} | "
        f"peak {lstm[0]:,.0f} MB without, {lstm[7]:,.0f} MB with (summed over the tiles; each section recomputed "
        "before its gradient from the checkpointed state) | " + ("agrees" if lstm[7] < lstm[0] else "disagrees")
        + " |",
        "| Without those checkpoints the liveness exceeds the maximum memory (the figures' line, about "
        f"{LSTM_TUTORIAL_MAX_MB} MB) | the same | peak {lstm[0]:,.0f} MB: the simulated peaks are about half the "
        "figures' with and without checkpoints (TensorFlow's copies around the layer, its infeed and its "
        "pipeline's buffers are not built; the source gives no breakdown) | "
        + ("agrees" if lstm[0] > LSTM_TUTORIAL_MAX_MB else "disagrees: a known gap") + " |",
        "| Casting a small CNN's training to FP16 (weights, images, the optimizer's accumulation type) cuts its "
        "tile memory by about 26 % (its PopVision memory report: mean tile about "
        f"{pub['float32'][0]:.0f} kB in FP32 and {pub['float16'][0]:.0f} kB in FP16, fullest {pub['float32'][1]:.0f} "
        f"and {pub['float16'][1]:.0f} kB, read off the plot) | graphcore/examples `tutorials/tutorials/pytorch/"
        "mixed_precision/README.md` | the tutorial's session on Mk1 through sim.poptorch: mean tile "
        f"{mp['float32'][0]:.0f} and {mp['float16'][0]:.0f} kB, fullest {mp['float32'][1]:.0f} and "
        f"{mp['float16'][1]:.0f} kB, {100 * (1 - mp['float16'][0] / mp['float32'][0]):.0f} % less (the plot's "
        f"{100 * (1 - pub['float16'][0] / pub['float32'][0]):.0f} % on the mean tile, "
        f"{100 * (1 - pub['float16'][1] / pub['float32'][1]):.0f} % on the fullest); the simulated tiles hold "
        f"{100 * (1 - mp['float32'][0] / pub['float32'][0]):.0f} % less in FP32 and "
        f"{100 * (1 - mp['float16'][0] / pub['float16'][0]):.0f} % less in FP16 (gaps and uneven mappings are not "
        "modelled, \"The fullest tile\") | "
        + ("agrees" if mp["float16"][0] < mp["float32"][0] else "disagrees") + " |",
        "| Using FP16 for the partials reduces the temporary memory of a matmul/convolution by half (of the "
        "partials) | *Memory and Performance Optimisation on the IPU* 5.2 | BERT-Large FFN1 1024×1024×4096 on "
        f"Mk2, AMP 0.6: temporaries {flt.temp_bytes_per_tile:,} B per tile with fp32 partials, "
        f"{half.temp_bytes_per_tile:,} B with fp16 (the partials buffer halves; the planner may re-split) | "
        + ("agrees" if half.temp_bytes_per_tile < flt.temp_bytes_per_tile else "disagrees") + " |",
        "| availableMemoryProportion is the planner's upper bound on a matmul's temporary memory per tile "
        "(disregarded only when nothing fits) | the same guide 5.1; poplibs `ConvPlan.cpp` runPlanner | the "
        "same matmul: " + ", ".join(f"AMP {a}: {t:,} B ≤ {a * sram:,.0f} B" for a, t in bounds.items()) + " | "
        + ("agrees" if bound_ok else "disagrees") + " |",
        "| A recomputation checkpoint after each hidden layer limits the not-always-live memory | graphcore/"
        "examples `nlp/bert/tensorflow2/README.md` | BERT-Large SL128 [3, 7, 7, 7], IPU1's fullest tile: "
        f"not-always-live {not_always_live(with_ck)} with checkpoints, {not_always_live(without_ck)} without | "
        + ("agrees" if isinstance(without_ck, OutOfMemoryError) or (
            not isinstance(with_ck, OutOfMemoryError)
            and with_ck.peak_tile_bytes < without_ck.peak_tile_bytes) else "disagrees") + " |",
        "| Lowering availableMemoryProportion increases always-live memory, as more control code is needed | "
        "graphcore/examples `vision/unet_medical/tensorflow2/README.md` | the same BERT, IPU1: always-live "
        + (f"{always[0]:,} B on the mean tile at AMP 0.15 and {always[1]:,} B at 0.25 (a serialised matmul is "
           "a loop over its pieces: one piece's steps and the loop counter's, `sim.compiler.program_memory`)"
           if None not in always else "out of memory at AMP 0.15 or 0.25") + " | "
        + ("agrees" if more_code else "disagrees") + " |",
    ]
