"""The AMP's weight loads: per (input group, output group) pair the conv units' weights, at 64 bits a
cycle (poplin's default) or 128 with its ``use128BitConvUnitLoad`` option, which PopART takes in its
``matmulOptions`` and ``convolutionOptions`` maps (poplibs ConvModel.cpp, poplinCycleEstimators.cpp:
the target's load rate is halved unless the option is set)."""

from dataclasses import replace

import pytest

from sim import ConfigError, GraphBuilder, Options, OptionsError, load_system, simulate
from sim.cost.amp import amp_fp32_vertex_cycles, amp_mode, amp_pair_cycles, amp_vertex_cycles

MK2 = load_system("ipu-mk2").ipu
WIDE = replace(MK2, conv_unit_load_bits=128)


def test_pair_cost_holds_the_weight_load_of_the_modes_conv_units():
    """133 fixed cycles (19 + 6 + 108) plus conv units x 32 B at 8 B a cycle: fp32 partials' 8 units
    load in 32 cycles, fp16 partials' 16 in 64; 128-bit loads halve both."""
    half_float, half_half = amp_mode(MK2, 2, 4), amp_mode(MK2, 2, 2)
    assert (amp_pair_cycles(MK2, half_float), amp_pair_cycles(MK2, half_half)) == (165, 197)
    assert (amp_pair_cycles(WIDE, half_float), amp_pair_cycles(WIDE, half_half)) == (149, 165)


def test_one_pair_vertex_stays_on_the_bow_sweep_fit():
    """[16, 16] x [16, 16] with fp16 partials: 133 + 197 + 16 positions x 4 cycles = 394, the sweep's
    4N + 330 at N = 16 (hardware.csv bow_amp_tile_fit)."""
    assert float(amp_vertex_cycles(MK2, amp_mode(MK2, 2, 2), 1, 16, 16, 16)) == 394


def test_fp32_vertex_loads_its_weights_twice_as_fast_with_128_bits():
    """m = 24, k = 16, n = 32: 2 x 2 pairs, each loading 16 units x 32 B: 64 cycles at 64 bits, 32 at
    128, so 4 x 32 = 128 cycles less (2205 in tests/test_fp32_vertices.py)."""
    mode = amp_mode(MK2, 4, 4)
    assert float(amp_fp32_vertex_cycles(mode, 1, 24, 16, 32)[0]) == 2205
    assert float(amp_fp32_vertex_cycles(mode, 1, 24, 16, 32, load_bits=128)[0]) == 2205 - 128


def test_options_read_poplins_option_maps():
    o = Options()
    default = {"conv_unit_load_bits": 64, "fast_reduce": False, "multi_stage_reduce": True}
    assert o.poplin_options(False) == o.poplin_options(True) == default
    o._Popart.set("matmulOptions", {"use128BitConvUnitLoad": "true", "enableFastReduce": "true",
                                    "enableMultiStageReduce": "false", "partialsType": "half"})
    assert o.poplin_options(False) == {"conv_unit_load_bits": 128, "fast_reduce": True, "multi_stage_reduce": False}
    assert o.poplin_options(True) == default
    o._Popart.set("convolutionOptions", {"use128BitConvUnitLoad": True})
    assert o.poplin_options(True)["conv_unit_load_bits"] == 128
    # the modelled keys are not reported; the map's other keys are, one by one
    assert o.unmodelled() == {"_Popart.matmulOptions.partialsType": "half"}


@pytest.mark.parametrize("value, match", [
    ({"use128BitConvUnitLoad": "yes"}, r"matmulOptions\['use128BitConvUnitLoad'\] = 'yes': expected 'true' or 'false'"),
    ("use128BitConvUnitLoad", "expected a dict of Poplar option names"),
])
def test_bad_option_map_is_refused_with_what_to_give(value, match):
    o = Options()
    o._Popart.set("matmulOptions", value)
    with pytest.raises(OptionsError, match=match):
        o.poplin_options(False)


def _matmul_and_conv():
    b = GraphBuilder("loads", "float16")
    x = b.input("x", (64, 512))
    y = b.linear(x, 512, name="fc")
    img = b.input("img", (4, 64, 28, 28))
    z = b.conv2d(img, 64, 3, 1, name="conv")
    b.output(y, z)
    return b.graph


def _op_cycles(options):
    run = simulate(_matmul_and_conv(), "ipu-mk2", options)
    costs = run.executable.costs
    return costs["fc/matmul"].cycles, costs["conv/conv2d"].cycles


def test_matmul_options_speed_up_matmuls_only_and_convolution_options_convolutions():
    base = _op_cycles(Options())
    o = Options()
    o._Popart.set("matmulOptions", {"use128BitConvUnitLoad": "true"})
    fast_mm = _op_cycles(o)
    assert fast_mm[0] < base[0] and fast_mm[1] == base[1]
    o._Popart.set("convolutionOptions", {"use128BitConvUnitLoad": "true"})
    both = _op_cycles(o)
    assert both[0] == fast_mm[0] and both[1] < base[1]


def test_a_config_cannot_set_the_compile_option(tmp_path):
    from sim.hardware.configs import CONFIG_DIR
    text = (CONFIG_DIR / "ipu-mk2.toml").read_text().replace("[ipu]\n", "[ipu]\nconv_unit_load_bits = 128\n", 1)
    path = tmp_path / "wide.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="unknown key ipu.conv_unit_load_bits"):
        load_system(str(path))
