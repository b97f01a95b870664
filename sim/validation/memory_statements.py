"""Graphcore's published statements about tile memory (partials type, availableMemoryProportion,
recomputation checkpoints, control code), each checked on the simulator (:func:`_statement_rows`,
rows of the report's table)."""

from __future__ import annotations

from ..cost import op_cost
from ..errors import OutOfMemoryError
from ..graph import GraphBuilder
from ..hardware.system import load_system
from .memory_fits import _fits
from .setups import _bert_train


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
    return [
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
