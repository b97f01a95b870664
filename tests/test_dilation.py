"""Dilated (atrous) convolutions: priced as the undilated kernel with the padding that keeps the
output field, in every front end (the builder, ONNX, PopXL, PopTorch), and noted in the run.

poplin runs a dilated kernel with the same multiply-adds per output (each output meets the kernel's
taps, further apart); the simulator prices it as the undilated kernel over the same output field
(sim.graph.ir.undilated_padding), so its wider input window's extra rows are not exchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sim
import sim.poptorch as poptorch
from sim.graph.ir import undilated_padding


def _builder(dilation, padding):
    b = sim.GraphBuilder("atrous", "float16")
    b.output(b.conv2d(b.input("x", (2, 64, 33, 33)), 64, 3, padding=padding, dilation=dilation, name="c"))
    return b.graph


def test_undilated_padding_keeps_the_output_field():
    assert undilated_padding(3, 2, 2) == (1, 1)  # DeepLab's rate 2: 3x3, padding 2 -> padding 1
    assert undilated_padding((3, 5), (4, 8), (4, 4)) == (1, 2)  # 4 - 3 x 1, 8 - 3 x 2
    assert undilated_padding(3, 0, 2) == (0, 0)  # valid: no padding to take off
    g = _builder(2, 2)
    op = g.ops[0]
    assert (op.attrs["dilation"], op.attrs["padding"]) == (2, 1) and g.tensors[op.outputs[0]].shape == (2, 64, 33, 33)
    valid = _builder(3, 0)
    assert valid.tensors[valid.ops[0].outputs[0]].shape == (2, 64, 27, 27)  # 33 - 3 x 2
    with pytest.raises(sim.GraphError, match="dilation 0x0: give whole numbers >= 1"):
        _builder(0, 0)


def test_a_dilated_kernel_costs_the_undilated_one_over_the_same_field():
    opts = sim.Options().enableSyntheticData(True)
    atrous = sim.simulate(_builder(2, 2), "ipu-mk2", opts)
    plain = sim.simulate(_builder(1, 1), "ipu-mk2", opts)
    assert atrous.cycle_count == plain.cycle_count
    assert any(n.startswith("1 convolution(s) with a dilated kernel (e.g. c/conv2d): priced as the undilated")
               for n in atrous.executable.notes)
    assert not any("dilated" in n for n in plain.executable.notes)


def test_front_ends_agree_on_a_dilated_convolution():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c = torch.nn.Conv2d(64, 64, 3, padding="same", dilation=2, bias=False)

        def forward(self, x):
            return self.c(x)
    model = poptorch.inferenceModel(Net(), poptorch.Options())
    model.compile(torch.zeros(2, 64, 33, 33, dtype=torch.float16).float())
    conv = next(op for op in model.executable.graph.ops if op.kind == "conv2d")
    assert (conv.attrs["dilation"], conv.attrs["padding"]) == (2, 1)

    import sim.popxl as popxl
    from sim.popxl import ops
    ir = popxl.Ir()
    with ir.main_graph:
        y = ops.conv(popxl.variable(np.zeros((2, 64, 33, 33), np.float16)),
                     popxl.variable(np.zeros((64, 64, 3, 3), np.float16)), padding=(2, 2, 2, 2), dilation=(2, 2))
    assert y.shape == (2, 64, 33, 33)
    popxl_conv = next(op for op in ir.main_graph.sim_graph.ops if op.kind == "conv2d")
    assert (popxl_conv.attrs["dilation"], popxl_conv.attrs["padding"]) == (2, 1)
