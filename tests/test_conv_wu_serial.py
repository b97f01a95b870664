"""Serialised matmul plans, cut as poplin cuts them.

poplin's planner (ConvModel.cpp constructModel) serialises a convolution's output channels
(``outChanSplit.serial``) or its input channels (``inChanSplit.serial``), one kind at a time, each
at most the channels' grains; never the field or the batch. Each piece dynamically slices, on every
tile, that tile's share of the operand it cuts before any broadcast (``addDynamicSliceEstimate`` of
``weightsPerTile`` / ``inputsPerTile``: the tensor over the used tiles); an output-channel piece
writes its outputs into the result (``addDynamicUpdateEstimate``), an input-channel piece adds its
partial sums into an accumulator of the tile's outputs (``addInPlaceEstimate``), which stays live
(``addInPlaceTempBytes``). A matmul ``[M, K] @ [K, N]`` is cut along N or K.

vgg16 v3L1's weight update on Mk1 (256 KiB tiles) needs 4 pieces; PopSparse's dense matmuls on a
Bow IPU at availableMemoryProportion 0.6 are cut in 2 and run near the unserialised rate.
"""

from sim import load_system
from sim import poplibs_benchmarks as pb
from sim.cost.amp import plan_matmul
from sim.cost.matmul_swap import plan_matmul_none_pass
from sim.cost.vector import dynamic_slice_tile_cycles

# vgg16_tr_bs4_v3L1's weight update: ci 256, 3x3 kernel, 4 x 56 x 56 positions, co 256
M, K, N = 256 * 9, 4 * 56 * 56, 256
REARRANGED = M * K + K * N  # the im2col of X and dY (rules._conv)


def _plan():
    ipu = load_system("ipu-mk1-c2").ipu
    # as sim/cost/rules.py plans a convolution's weight update: its channels split in whole grains
    return plan_matmul(1, M, K, N, 2, False, ipu, ipu.tiles, 0.6, partials_bytes=4, rearranged=REARRANGED,
                       pads_channels=False, channel_grains=True)


def test_weight_update_is_cut_along_its_output_channels():
    plan = _plan()
    assert (plan.serial, plan.serial_dim, plan.dims) == (4, "N", (1, M, K, N // 4))
    assert plan.fits


def test_weight_update_op_uses_the_plan():
    bench = pb.benches("IpuModel1")["vgg16_tr_bs4_v3L1"]
    graph, system = pb.graph(bench), pb.system(bench, "IpuModel1")
    from sim.cost.rules import op_cost
    wu = next(op for op in graph.ops if op.kind == "conv2d_grad_weight")
    cost = op_cost(wu, graph, system.ipu, system.ipu.tiles)
    assert cost.plan == _plan().describe()


def test_a_matmul_is_never_cut_along_its_rows():
    """A plain matmul whose rows (poplin's batch or field) are the larger dimension is still cut along
    its channels: [4096, 4096] @ [4096, 2048] fp16 on a Bow IPU, planned swapped (poplin's
    NONE_MATMUL), does not fit 0.6 of a tile whole and is cut in 2."""
    ipu = load_system("bow-ipu").ipu
    plan, swapped = plan_matmul_none_pass(1, 4096, 4096, 2048, 2, ipu, ipu.tiles, 0.6, 2)
    assert swapped and plan.serial == 2 and plan.serial_dim in ("N", "K")
    whole, _ = plan_matmul_none_pass(1, 4096, 4096, 2048, 2, ipu, ipu.tiles, 0.9, 2)
    assert whole.serial == 1
    # the cut costs under 10 % (PopSparse's Bow run: 211 TFLOP/s, within 6 % of the unserialised rate)
    assert whole.total_cycles < plan.total_cycles < 1.1 * whole.total_cycles


def test_an_input_channel_piece_adds_into_a_live_accumulator():
    """Cut along K, each piece's temporary memory holds its operand blocks, its partials and the
    accumulator of the outputs; its cycles include the two slices, the add and the loop counter's."""
    ipu = load_system("bow-ipu").ipu
    from sim.cost.amp import _search
    budget = 0.6 * ipu.sram_bytes_per_tile
    cut = _search(1, 8192, 512, 2048, 2, 2, True, ipu, ipu.tiles, budget, None, 2, grain_splits=True,
                  serial_dim="K")
    assert cut.serial_dim == "K" and cut.dims == (1, 8192, 512, 2048)
    pg, pm, pn, pk = cut.splits
    m, n, k = -(-8192 // pm), -(-2048 // pn), -(-512 // pk)
    # operand blocks, fp16 partials and the accumulator of the tile's share of the outputs, 2 bytes each
    assert cut.temp_bytes_per_tile == int(2 * (m * k + k * n + m * n) + 2 * m * n / pk)
    slices = (dynamic_slice_tile_cycles(-(-8192 * 512 // cut.tiles_used), 2, 6)
              + dynamic_slice_tile_cycles(-(-512 * 2048 // cut.tiles_used), 2, 6))
    same_splits_whole = _search(1, 8192, 512, 2048, 2, 2, True, ipu, ipu.tiles, 1e9, None, 1, grain_splits=True)
    assert same_splits_whole.splits == cut.splits
    add = 176 + -(-m * n / pk * 0.75 // 1)  # a BinaryOp1D ADD of the half partials (configs/_vector-ops.toml)
    counter = 176  # the loop counter's one-element add (Convolution.cpp cpt.loopPost)
    assert cut.compute_cycles == 2 * (same_splits_whole.compute_cycles + slices + add + counter)
