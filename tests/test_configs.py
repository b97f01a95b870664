"""The system configs in ``configs/``: they load, they have the right size, their per-tile
constants reproduce the published figures in ``../shared/calibration/hardware.csv``, every
number carries a comment, and broken configs fail with a ConfigError naming file and field."""

import csv
import math
import re
from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.hardware import available_systems, load_system
from sim.hardware.configs import CONFIG_DIR

HARDWARE_CSV = Path(__file__).parents[2] / "shared" / "calibration" / "hardware.csv"

NUM_IPUS = {
    "ipu-mk1-c2": 2,
    "ipu-mk2": 1, "ipu-m2000": 4,
    "ipu-pod16": 16, "ipu-pod64": 64, "ipu-pod128": 128, "ipu-pod256": 256,
    "bow-ipu": 1, "bow-2000": 4, "c600": 1, "c600-x8": 8,
    "bow-pod16": 16, "bow-pod64": 64, "bow-pod128": 128, "bow-pod256": 256,
}

# Datasheet figures are rounded (250 TFLOP/s for 1472 x 1.325 GHz x 128 = 249.7 TFLOP/s,
# "1.394 PFLOPS" per Bow-2000), so derived peaks are compared within 1 %.
PEAK_TOLERANCE = 0.01

# Published figures hardware.csv does not hold: (generation, row name, value, source).
EXTRA_FIGURES = [
    ("mk1", "peak_fp32", 31.1e12, "Jia et al. 2019, Dissecting the Graphcore IPU architecture"),
    ("ipu21", "tiles_per_ipu", 1472, "C600 datasheet: the Mk2 IPU (with FP8)"),
    ("ipu21", "sram_per_tile", 638976, "C600 datasheet: the Mk2 IPU, 900 MB of In-Processor-Memory"),
    ("ipu21", "clock", 1.5e9, "graphcore/PopRT tools/calc_ipu_utilization.py, C600 clock"),
    ("ipu21", "peak_fp16", 280e12, "C600 launch coverage: 280 TFLOP/s of 16-bit floating point"),
    ("ipu21", "worker_threads_per_tile", 6, "the Mk2 tile (C600 datasheet)"),
]


@pytest.mark.parametrize("name", available_systems())
def test_every_config_loads(name):
    assert load_system(name).name == name


@pytest.mark.parametrize("name, num_ipus", sorted(NUM_IPUS.items()))
def test_num_ipus(name, num_ipus):
    assert name in available_systems()
    assert load_system(name).num_ipus == num_ipus


@pytest.mark.parametrize("name, pods", [("ipu-pod64", 1), ("ipu-pod128", 2), ("ipu-pod256", 4),
                                        ("bow-pod64", 1), ("bow-pod128", 2), ("bow-pod256", 4)])
def test_pods_are_joined_by_gw_links_beyond_64_ipus(name, pods):
    system = load_system(name)
    assert len({system.pod_of(i) for i in range(system.num_ipus)}) == pods


def _published_figures():
    if not HARDWARE_CSV.exists():
        return []
    with open(HARDWARE_CSV, newline="") as f:
        rows = [(r["generation"], r["name"], float(r["value"]), r["source"])
                for r in csv.DictReader(f)
                if r["name"] in {"tiles_per_ipu", "clock", "sram_per_tile", "peak_fp16",
                                 "peak_fp32", "worker_threads_per_tile"}]
    return rows + EXTRA_FIGURES


def _derived(ipu, name):
    return {
        "tiles_per_ipu": ipu.tiles,
        "clock": ipu.clock_hz,
        "sram_per_tile": ipu.sram_bytes_per_tile,
        "worker_threads_per_tile": ipu.worker_threads,
        "peak_fp16": ipu.tiles * ipu.clock_hz * ipu.amp_fp16_flops_per_cycle,
        "peak_fp32": ipu.tiles * ipu.clock_hz * ipu.amp_fp32_flops_per_cycle,
    }[name]


@pytest.mark.skipif(not HARDWARE_CSV.exists(), reason=f"{HARDWARE_CSV} not found")
@pytest.mark.parametrize("name", available_systems())
def test_per_tile_constants_reproduce_published_figures(name):
    ipu = load_system(name).ipu
    figures = [f for f in _published_figures() if f[0] in (ipu.generation, "all")]
    assert figures, f"no published figures for generation {ipu.generation}"
    for _, figure, value, source in figures:
        tolerance = PEAK_TOLERANCE if figure.startswith("peak_") else 1e-9
        got = _derived(ipu, figure)
        assert math.isclose(got, value, rel_tol=tolerance), f"{name}: {figure} = {got:g}, {source} says {value:g}"


NUMERIC_LINE = re.compile(r"^\s*[A-Za-z_][\w.-]*\s*=\s*[-+]?(\d|\.\d|inf|nan)")


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.toml")), ids=lambda p: p.name)
def test_every_number_has_a_comment(path):
    bare = [f"{path.name}:{n}: {line.strip()}"
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if NUMERIC_LINE.match(line) and "#" not in line]
    assert not bare, "numbers without a source comment:\n" + "\n".join(bare)


STRING_LINE = re.compile(r'^\s*(?!name\b|description\b|extends\b)[A-Za-z_][\w.-]*\s*=\s*"')


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.toml")), ids=lambda p: p.name)
def test_every_hardware_string_has_a_comment(path):
    """``generation`` and ``topology`` are facts about the hardware too; only the file's own name,
    description and parent need no source."""
    bare = [f"{path.name}:{n}: {line.strip()}"
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if STRING_LINE.match(line) and "#" not in line]
    assert not bare, "hardware strings without a source comment:\n" + "\n".join(bare)


@pytest.mark.parametrize("system, itemsize, partials, rate", [
    ("bow-ipu", 4, 4, "amp_fp32_flops_per_cycle"),
    ("c600", 1, 2, "amp_fp8_flops_per_cycle"),
])
def test_amp_rates_time_the_fp32_and_fp8_vertices(system, itemsize, partials, rate):
    """Each AMP rate of the IPU config is what the vertex estimate runs at: a user halving it sees
    the vertex's per-position cycles double (the tables keep only poplibs' fixed overheads)."""
    import dataclasses
    from sim.cost.amp import amp_mode, amp_vertex_cycles
    ipu = load_system(system).ipu
    slow = dataclasses.replace(ipu, **{rate: getattr(ipu, rate) / 2})
    g, m, k, n = 1, 600, 256, 256
    fast_cycles = float(amp_vertex_cycles(ipu, amp_mode(ipu, itemsize, partials), g, m, k, n))
    slow_cycles = float(amp_vertex_cycles(slow, amp_mode(slow, itemsize, partials), g, m, k, n))
    mode = amp_mode(ipu, itemsize, partials)
    pairs = (k // mode.in_group) * (n // mode.out_group)
    # each of the 6 workers runs 100 positions: 97 beyond poplibs' first three, at the per-position rate
    assert slow_cycles - fast_cycles == pytest.approx(pairs * 6 * 97 * mode.cycles_per_position)


# --- broken configs ------------------------------------------------------------------------

def _write(tmp_path, text, name="broken.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(path):
    with pytest.raises(ConfigError) as e:
        load_system(path)
    return str(e.value)


@pytest.mark.parametrize("body, field", [
    ("[ipu]\ntile_count = 1472\n", "ipu.tile_count"),                  # unknown key
    ("[host_link]\nhost_to_ipu_bytes_per_s = -1.0\n", "host_link.host_to_ipu_bytes_per_s"),
    ("[ipu_link]\nbytes_per_s = -26e9\n", "ipu_link.bytes_per_s"),     # negative bandwidth
    ('[ipu]\nclock_hz = "fast"\n', "ipu.clock_hz"),                    # string for a number
    ("[system]\nnum_ipus = 2.5\n", "system.num_ipus"),                 # not a whole number
    ('[system]\ntopology = "mesh"\n', "system.topology"),
    ("[ipu]\ntiles = 0\n", "ipu.tiles"),                               # must be > 0
    ("[sram]\nbytes = 1\n", "sram"),                                   # unknown table
])
def test_broken_override_names_file_and_field(tmp_path, body, field):
    path = _write(tmp_path, 'extends = "ipu-mk2"\n' + body)
    message = _error(path)
    assert str(path) in message and field in message


def test_a_file_outside_configs_extends_a_config_by_name(tmp_path):
    path = _write(tmp_path, 'extends = "ipu-mk2"\n[system]\nnum_ipus = 8  # test\ntopology = "ladder"\n')
    system = load_system(path)
    assert system.num_ipus == 8 and system.ipu.tiles == load_system("ipu-mk2").ipu.tiles


def test_missing_key(tmp_path):
    text = (CONFIG_DIR / "ipu-mk2.toml").read_text()
    path = _write(tmp_path, re.sub(r"(?m)^tiles = .*\n", "", text))
    message = _error(path)
    assert str(path) in message and "ipu.tiles" in message


def test_extends_a_missing_file(tmp_path):
    path = _write(tmp_path, 'extends = "no-such-system"\n')
    message = _error(path)
    assert str(path) in message and "no-such-system" in message


def test_unknown_system_name():
    with pytest.raises(ConfigError, match="unknown system 'ipu-pod32'"):
        load_system("ipu-pod32")


def test_extends_cycle(tmp_path):
    _write(tmp_path, 'extends = "b"\n', "a.toml")
    path = _write(tmp_path, 'extends = "a"\n', "b.toml")
    assert "cycle" in _error(path)


def test_a_config_is_named_after_itself_not_its_parent(tmp_path):
    path = _write(tmp_path, 'extends = "ipu-pod16"\n[ipu_link]\nbytes_per_s = 52.9e9\n', "fast-links.toml")
    system = load_system(path)
    assert system.name == "fast-links" and "changed by fast-links.toml" in system.description
    named = _write(tmp_path, 'extends = "fast-links"\nname = "mine"\ndescription = "my POD"\n', "named.toml")
    assert (load_system(named).name, load_system(named).description) == ("mine", "my POD")


def test_name_and_description_must_be_strings(tmp_path):
    assert "name = 5; expected a string" in _error(_write(tmp_path, 'extends = "ipu-mk2"\nname = 5\n'))


def test_extends_a_path_is_relative_to_the_file_not_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    _write(tmp_path, 'extends = "ipu-pod16"\nname = "base"\n[system]\nnum_ipus = 8  # test\n', "base.toml")
    child = _write(tmp_path, 'extends = "../base.toml"\nname = "child"\n', "sub/child.toml")
    monkeypatch.chdir(tmp_path / "sub")  # where "../base.toml" would be another file
    assert load_system(child).num_ipus == 8
    monkeypatch.chdir(tmp_path)
    assert load_system("sub/child.toml").num_ipus == 8
    missing = _write(tmp_path, 'extends = "nowhere/base.toml"\n', "sub/missing.toml")
    assert "does not exist" in _error(missing)


def test_extends_cycle_through_a_roundabout_path_is_an_error(tmp_path):
    (tmp_path / "sub").mkdir()
    path = _write(tmp_path, 'extends = "sub/../loop"\n', "loop.toml")
    assert "cycle" in _error(path)


def test_an_error_in_a_parent_names_the_parent(tmp_path):
    parent = _write(tmp_path, 'extends = "ipu-pod16"\n[ipu]\nclock_hz = 1.3e12\n', "parent.toml")
    child = _write(tmp_path, 'extends = "parent"\n[system]\nnum_ipus = 8  # test\n', "child.toml")
    message = _error(child)
    assert message.startswith(f"{parent} (extended by {child}): ipu.clock_hz")
    typo = _write(tmp_path, 'extends = "ipu-pod16"\n[ipu]\ntile = 5\n', "typo.toml")
    child = _write(tmp_path, 'extends = "typo"\n', "child2.toml")
    assert _error(child).startswith(f"{typo} (extended by {child}): unknown key ipu.tile")


@pytest.mark.parametrize("body, words", [
    ("num_ipus = 8  # test\n", "topology = 'single' but system.num_ipus = 8"),
    # PODs of 12 IPUs: 16 replicas would hold one POD and a third of another
    ('num_ipus = 24  # test\nchassis_per_pod = 3  # test\ntopology = "ladder"\n', "12 IPUs, which is not a power"),
])
def test_a_system_table_that_contradicts_itself(tmp_path, body, words):
    message = _error(_write(tmp_path, 'extends = "ipu-mk2"\n[system]\n' + body))
    assert words in message
