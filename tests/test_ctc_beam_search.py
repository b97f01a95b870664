"""CTC beam search decoding: popnn's plan of the decoder, its cost, PopTorch's ``ctc_beam_search_decoder`` and
PopART's ``ai.graphcore::CtcBeamSearchDecoder`` (sim/cost/ctc_beam.py; docs/reference/poplibs-costs.md 6.12)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sim.cost import ctc_beam

torch = pytest.importorskip("torch")
import sim.poptorch as poptorch  # noqa: E402
from sim.poptorch.ops import _beam_search  # noqa: E402


def test_the_plan_is_popnns():
    """popnn's ctc_infer::plan for one entry of 29 classes and a beam of 16 on 1,472 tiles: 28 extend partitions,
    16 of the beams, a two-stage sort (5 groups of 93 candidates ranked in 16 partitions and reduced in 16, then
    one of 80 in 14 and 16), so 80 tiles an entry (max(16, 16) x 5 groups); under 20 classes one stage."""
    p = ctc_beam.plan(1, 29, 16, 6, 1472)
    assert (p.batch, p.entries, p.extend, p.extend_vertices, p.beams, p.partitions) == (1, 1, 28, 5, 16, 80)
    assert [(s.groups, s.candidates, s.rank, s.reduce, s.groups_per_tile) for s in p.sort] == [
        (5, 93, 16, 16, 1), (1, 80, 14, 16, 1)]
    small = ctc_beam.plan(4, 10, 4, 6, 1472)
    assert (small.batch, small.extend, small.beams) == (4, 9, 4)
    assert [(s.groups, s.candidates, s.rank) for s in small.sort] == [(1, 40, 7)]
    assert small.partitions == 9 and small.tiles == 36


def _exact(x: np.ndarray, blank: int) -> list[tuple[tuple, float]]:
    """Every labelling's log-probability, summed over every alignment that collapses to it, the best first."""
    scores: dict[tuple, float] = {}
    for path in itertools.product(range(x.shape[1]), repeat=x.shape[0]):
        labels = tuple(s for i, s in enumerate(path) if s != blank and (i == 0 or path[i - 1] != s))
        scores[labels] = np.logaddexp(scores.get(labels, -np.inf), sum(x[t, s] for t, s in enumerate(path)))
    return sorted(scores.items(), key=lambda kv: -kv[1])


@pytest.mark.parametrize("seed, blank", [(0, 0), (1, 2), (2, 1)])
def test_the_cpu_beam_search_is_exact_with_a_wide_beam(seed, blank):
    """With a beam wider than the labellings it can meet, the beam search's best paths and probabilities are the
    exact ones: every alignment of 5 steps over 3 classes enumerated."""
    x = np.log(np.random.default_rng(seed).dirichlet(np.ones(3), size=5))
    found = _beam_search(x, 5, blank, 300, 3)
    exact = _exact(x, blank)[:3]
    assert [labels for labels, _ in found] == [labels for labels, _ in exact]
    assert [p for _, p in found] == pytest.approx([p for _, p in exact], abs=1e-9)


class Decoder(torch.nn.Module):
    def __init__(self, beam_width: int = 8, top_paths: int = 2):
        super().__init__()
        self.fc = torch.nn.Linear(16, 29)
        self.beam_width, self.top_paths = beam_width, top_paths

    def forward(self, x, lengths):
        return poptorch.ctc_beam_search_decoder(self.fc(x).log_softmax(-1), lengths, 0, self.beam_width,
                                                self.top_paths)


def _run(T: int = 20, beam_width: int = 8, top_paths: int = 2):
    torch.manual_seed(0)
    model = poptorch.inferenceModel(Decoder(beam_width, top_paths))
    x, lengths = torch.randn(T, 2, 16), torch.tensor([T, T // 2])
    return model, model(x, lengths), lengths


def test_poptorch_decoder_outputs_and_graph():
    """The outputs PopTorch gives (probabilities, lengths, labels), each sequence decoded over its own length; the
    graph: the log-softmax, the lengths cast as PopTorch's handler casts them, popnn's decoder."""
    model, (probs, lengths, labels), given = _run()
    assert (probs.shape, lengths.shape, labels.shape) == ((2, 2), (2, 2), (2, 2, 20))
    assert (probs.dtype, lengths.dtype, labels.dtype) == (torch.float32, torch.int32, torch.int32)
    assert bool((probs[:, 0] >= probs[:, 1]).all()) and bool((lengths <= given[:, None]).all())
    for b in range(2):
        for k in range(2):
            assert not labels[b, k, int(lengths[b, k]):].any() and not (labels[b, k, :int(lengths[b, k])] == 0).any()
    g = model.executable.graph
    assert "graph captured with torch.fx" in model.simulation.all_notes
    assert [op.kind for op in g.ops] == ["matmul", "add", "softmax", "cast", "ctc_beam_search"]
    op = g.ops[-1]
    assert op.attrs == {"blank": 0, "beam_width": 8, "top_paths": 2}
    assert [g.tensors[t].shape for t in op.outputs] == [(2, 2), (2, 2), (2, 2, 20)]


def test_decoder_cost_follows_its_loop_and_beam():
    """The loop's compute sets run once a step: twice the steps cost close to twice the cycles; a wider beam costs
    more a step (bw x bw merge vertices over bw tiles: a tile's go as the beam, and so do its select and update
    vertices' loops), though less than twice (the steps' syncs and exchanges do not grow)."""
    def decoder_cycles(T: int, beam: int) -> int:
        model, _, _ = _run(T, beam)
        ops = model.simulation.op_trace()
        decoder = ops[ops.kind == "ctc_beam_search"]
        return int((decoder.end - decoder.start).sum())

    short, long, wide = decoder_cycles(20, 8), decoder_cycles(40, 8), decoder_cycles(20, 16)
    assert 1.8 < long / short < 2.05
    assert 1.2 * short < wide < 2 * short


def test_decoder_argument_errors():
    x, lengths = torch.randn(5, 1, 4), torch.tensor([5])
    with pytest.raises(poptorch.Error, match="probs must be a torch.tensor"):
        poptorch.ctc_beam_search_decoder([1.0], lengths)
    with pytest.raises(poptorch.Error, match="blank 4 is not one of the 4 classes"):
        poptorch.ctc_beam_search_decoder(x, lengths, blank=4)
    with pytest.raises(poptorch.Error, match=r"top_paths \(3\) must be from 1 to beam_width \(2\)"):
        poptorch.ctc_beam_search_decoder(x, lengths, beam_width=2, top_paths=3)
    with pytest.raises(poptorch.Error, match=r"lengths must be of shape \[batch_size\] = \[1\], got \(2,\)"):
        poptorch.ctc_beam_search_decoder(x, torch.tensor([5, 5]))

    class Decoder(torch.nn.Module):  # the same errors from a model, which torch.fx captures
        def forward(self, x, lengths):
            return poptorch.ctc_beam_search_decoder(x, lengths, blank=7)

    with pytest.raises(poptorch.Error, match="blank 7 is not one of the 4 classes"):
        poptorch.inferenceModel(Decoder())(x, lengths)


def test_onnx_graphcore_decoder():
    """PopART's ai.graphcore::CtcBeamSearchDecoder from an ONNX file: the same op, its attributes and outputs."""
    onnx = pytest.importorskip("onnx")
    import sim.onnx
    h = onnx.helper
    node = h.make_node("CtcBeamSearchDecoder", ["x", "len"], ["p", "l", "d"], domain="ai.graphcore", beam_width=8,
                       top_paths=2)
    graph = h.make_graph([node], "decoder",
                         [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT16, [20, 2, 29]),
                          h.make_tensor_value_info("len", onnx.TensorProto.UINT32, [2])],
                         [h.make_tensor_value_info("p", onnx.TensorProto.FLOAT16, [2, 2]),
                          h.make_tensor_value_info("l", onnx.TensorProto.UINT32, [2, 2]),
                          h.make_tensor_value_info("d", onnx.TensorProto.UINT32, [2, 2, 20])])
    g = sim.onnx.load(h.make_model(graph, opset_imports=[h.make_opsetid("", 11), h.make_opsetid("ai.graphcore", 1)]))
    (op,) = g.ops
    assert (op.kind, op.attrs) == ("ctc_beam_search", {"blank": 0, "beam_width": 8, "top_paths": 2})
    assert [g.tensors[t].dtype for t in op.outputs] == ["float16", "int32", "int32"]
    run = sim.simulate(g, "ipu-mk2", sim.Options())
    assert run.breakdown.sum(axis=1).iloc[0] == run.cycle_count
