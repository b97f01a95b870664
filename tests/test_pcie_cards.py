"""Host streams of a PCIe card (C2, C600): no gateway, so the IPU's stream copy reads (or writes) host
memory over the card's own PCIe link, crossing it once; behind an IPU-Machine's gateway a copy
crosses the host link to the gateway's buffer and then the gateway-to-tiles link."""

import pytest

from sim import load_system
from sim.engine import Engine
from sim.program import Sequence, StreamCopy


@pytest.mark.parametrize("name, gateway", [("c600", False), ("ipu-mk1-c2", False), ("ipu-mk2", True),
                                           ("ipu-m2000", True), ("bow-pod16", True)])
def test_only_ipu_machines_have_a_gateway(name, gateway):
    assert load_system(name).has_gateway is gateway


def test_a_card_copy_crosses_its_pcie_link_once():
    """15.75 MB at the C600's 15.75 GB/s is 1 ms (1.5 M cycles at 1.5 GHz), in the IPU's copy only;
    the host side is the request and the buffer fill, on the host process's callback thread."""
    system = load_system("c600")
    hl = system.host_link
    engine = Engine(system)
    nbytes = 15_750_000
    host, device = engine.prefetch_phases(StreamCopy(0, "x", "to_ipu", nbytes, 0))
    fill = system.seconds_to_cycles(hl.latency_s) + system.seconds_to_cycles(nbytes / hl.host_prepare_bytes_per_s)
    assert host == [([("host_callbacks", 0, 0)], fill)]
    assert device == [([], hl.host_sync_cycles), ([("host_link", 0, "to_ipu")], 1_500_000)]
    host, device = engine.prefetch_phases(StreamCopy(0, "y", "from_ipu", nbytes, 0))
    assert host == [] and device[1] == ([("host_link", 0, "from_ipu")], 1_500_000)
    # one copy alone: the fill, the sync and one PCIe transfer
    total = engine.run(Sequence([StreamCopy(0, "x", "to_ipu", nbytes, 0)])).total_cycles
    assert total == fill + hl.host_sync_cycles + 1_500_000


def test_a_gateway_copy_crosses_the_host_link_and_the_gateway():
    system = load_system("ipu-m2000")
    host, device = Engine(system).prefetch_phases(StreamCopy(0, "x", "to_ipu", 1_000_000, 0))
    assert [len(p[0]) for p in host] == [1, 1] and [len(p[0]) for p in device] == [0, 0]


def test_eight_c600_cards_form_a_ring_of_ipu_link_cables():
    """configs/c600-x8.toml: eight C600s, each with its own PCIe link and no gateway, cabled in a ring
    (two cables a card), 32 GB/s each way between neighbours (two IPU-Links of 16 GB/s): 32 MB to the
    next card is 1 ms (1.5 M cycles at 1.5 GHz) after the link's latency; to the card opposite, four hops."""
    from sim.hardware.topology import hops, route
    from sim.program import IpuCopy
    system = load_system("c600-x8")
    assert system.num_ipus == 8 and not system.has_gateway and system.host_link.ipus_per_link == 1
    assert [hops(system, 0, b) for b in range(8)] == [0, 1, 2, 3, 4, 3, 2, 1]
    # four cards of the ring are a line, not a ring of their own (a card has no second side to come back
    # down, as a ladder of IPU-Machines has): from the fourth back to the first is three hops
    assert [hops(system, 3, b, partition_ipus=4) for b in range(4)] == [3, 2, 1, 0]
    assert route(system, 3, 0, partition_ipus=4) == [(3, 2), (2, 1), (1, 0)]
    latency = system.ipu_link.latency_cycles
    engine = Engine(system)
    assert engine.ipu_copy_cycles(IpuCopy(((0, 1, 32_000_000),))) == latency + 1_500_000
    assert engine.ipu_copy_cycles(IpuCopy(((0, 4, 32_000_000),))) == 4 * latency + 1_500_000
