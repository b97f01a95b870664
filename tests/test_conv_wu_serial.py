"""A convolution's weight-update pass serialised along its output channels, as poplin may split it.

poplin's planner (ConvModel.cpp constructModel, poplibs 8dcde1ec) serialises the output channels
(``outChanSplit.serial``, a factor of them: ``m.factorOf``) or the input channels, one kind at a time;
each output-channel piece slices its weights (``addDynamicSliceEstimate`` of ``weightsPerTile``) and
updates its outputs (``addDynamicUpdateEstimate``). The simulator's weight update ``dW = Xᵀ dY``
(M = ci x kh x kw, K = positions, N = co) used to be serialised along M only; with
``serial_out_channels`` it also tries N and keeps the cheaper. vgg16 v3L1 on Mk1 (256 KiB tiles)
needs 4 pieces either way.
"""

from sim import load_system
from sim import poplibs_benchmarks as pb
from sim.cost.amp import plan_matmul

# vgg16_tr_bs4_v3L1's weight update: ci 256, 3x3 kernel, 4 x 56 x 56 positions, co 256
M, K, N = 256 * 9, 4 * 56 * 56, 256
REARRANGED = M * K + K * N  # the im2col of X and dY (rules._conv)


def _plan(**kw):
    ipu = load_system("ipu-mk1-c2").ipu
    return plan_matmul(1, M, K, N, 2, False, ipu, ipu.tiles, 0.6, partials_bytes=4, rearranged=REARRANGED, **kw)


def test_default_serialises_the_larger_dimension():
    plan = _plan()
    assert (plan.serial, plan.dims) == (4, (1, M // 4, K, N))


def test_output_channel_pieces_divide_the_channels_and_are_cheaper():
    old, new = _plan(), _plan(serial_out_channels=True)
    assert (new.serial, new.dims) == (4, (1, M, K, N // 4))
    assert new.fits and new.total_cycles < old.total_cycles


def test_weight_update_op_uses_output_channel_serial_split():
    bench = pb.benches("IpuModel1")["vgg16_tr_bs4_v3L1"]
    graph, system = pb.graph(bench), pb.system(bench, "IpuModel1")
    from sim.cost.rules import op_cost
    wu = next(op for op in graph.ops if op.kind == "conv2d_grad_weight")
    cost = op_cost(wu, graph, system.ipu, system.ipu.tiles)
    assert cost.plan == _plan(serial_out_channels=True).describe()
