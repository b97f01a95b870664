"""The backward pass of a kxk convolution whose input field is not zDeltas' (a stride, or less than
"same" padding) is planned as poplin convolves it: over dX's field, zDeltas dilated by the stride and
padded by ``kernel - 1 - padding`` (poplin ``getGradientParams``), the nx1 worklists skipping the
(output, kernel position) pairs that meet a dilation zero or padding (sim/cost/amp.py
``kernel_hits`` with a dilation, sim/cost/rules.py ``_grad_input_field``)."""

import numpy as np
import pytest

from sim import load_system
from sim.cost import rules
from sim.cost.amp import ConvShape, amp_mode, kernel_hits, nx1_vertex_cycles


def test_dilated_hits_exact():
    # forward 7 -> 4 (kernel 3, stride 2, padding 1); backward: 4 zDeltas dilated by 2, padded by 1
    assert kernel_hits(7, 3, 4, 1, dilation=2) == (1, 2, 1, 2, 1, 2, 1)
    # no dilation: the padding alone, as kernel_hits of the same stride-1 convolution
    assert kernel_hits(13, 3, 11, 2, dilation=1) == kernel_hits(13, 3, 11, 2) == (1, 2) + (3,) * 9 + (2, 1)


@pytest.mark.parametrize("size,kernel,stride,pad", [(224, 11, 4, 3), (224, 7, 2, 3), (299, 3, 2, 0),
                                                    (35, 3, 2, 0), (13, 3, 1, 0), (17, 3, 2, 0)])
def test_dilated_hits_count_the_forward_pairs(size, kernel, stride, pad):
    # the backward pass meets exactly the (output, kernel index) pairs of the forward pass that meet real input
    out = (size + 2 * pad - kernel) // stride + 1
    fwd = kernel_hits(out, kernel, size, pad, stride)
    bwd = kernel_hits(size, kernel, out, kernel - 1 - pad, dilation=stride)
    assert len(bwd) == size and sum(bwd) == sum(fwd)


def test_dilation_thins_worklist_entries():
    # per kernel position a dilated input's worklists hold 1/dilation of the rows (createPartitions)
    ipu = load_system("ipu-mk2").ipu
    mode = amp_mode(ipu, 2, 4)
    plain = ConvShape(3, 3, 1, 112, 64, 4, 112)
    dilated = ConvShape(3, 3, 1, 112, 64, 4, 112, dilation=2)
    args = (np.array([1]), np.array([2000]), np.array([576]), np.array([8]))
    assert nx1_vertex_cycles(ipu, mode, dilated, *args)[0][0] < nx1_vertex_cycles(ipu, mode, plain, *args)[0][0]


def _grad_input_M(monkeypatch, x_shape, cout, kernel, stride, padding):
    seen = []
    real = rules.plan_matmul

    def spy(G, M, K, N, *a, **k):
        seen.append((M, K, N, k.get("conv")))
        return real(G, M, K, N, *a, **k)
    monkeypatch.setattr(rules, "plan_matmul", spy)
    n, ci, h, w = x_shape
    ho = (h + 2 * padding - kernel) // stride + 1
    attrs = dict(kernel=kernel, stride=stride, padding=padding, groups=1, n=n, ci=ci, co=cout, ho=ho, wo=ho)
    ipu = load_system("ipu-mk2").ipu
    rules._conv("conv2d_grad_input", [((n, cout, ho, ho), "float16", "input")], [(x_shape, "float16")], attrs,
                ipu, ipu.tiles, 0.6, 4)
    return seen[0]


def test_strided_stem_backward_runs_on_the_input_field(monkeypatch):
    # alexnet_tr_bs4_layer1: 4 x 4 x 224 x 224, 11x11 stride 4 padding 3 -> zDeltas 55 x 55
    M, K, N, conv = _grad_input_M(monkeypatch, (4, 4, 224, 224), 64, 11, 4, 3)
    assert (M, K, N) == (4 * 224 * 224, 64 * 121, 4)
    assert conv.dilation == 4 and conv.width == 224 and conv.height == 224
    assert conv.row_hits == kernel_hits(224, 11, 55, 7, dilation=4)


def test_valid_padding_backward_runs_on_the_input_field(monkeypatch):
    # alexnet_tr_bs4_layer7: 13 x 13, 3x3, no padding -> zDeltas 11 x 11, dX 13 x 13
    M, _, _, conv = _grad_input_M(monkeypatch, (4, 192, 13, 13), 384, 3, 1, 0)
    assert M == 4 * 13 * 13 and conv.dilation == 1 and conv.row_hits == (1, 2) + (3,) * 9 + (2, 1)


def test_same_padding_backward_on_zdeltas_field_with_hits(monkeypatch):
    # "same" padding, stride 1: dX's field is zDeltas', planned on it; the worklists skip the pairs on
    # the padding (kernel - 1 - padding per side), as the forward pass's (ConvVertices.cpp createPartitions)
    M, _, _, conv = _grad_input_M(monkeypatch, (4, 64, 56, 56), 64, 3, 1, 1)
    assert M == 4 * 56 * 56 and conv.dilation == 1
    assert conv.row_hits == conv.col_hits == (2,) + (3,) * 54 + (2,)
