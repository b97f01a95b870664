"""PopART's TiedGather and TiedGatherAccumulate patterns (sim.graph.training.sparse_accumulate_tied_gathers):
with gradient accumulation a tied embedding's gathered rows are added straight into its accumulator."""

import models
import sim
from sim.options import Options

PATTERNS = {"TiedGather": True, "TiedGatherAccumulate": True, "UpdateInplacePrioritiesForIpu": True}


def _compile(patterns: dict | None, accumulation: int = 8, **params):
    o = Options()
    if accumulation > 1:
        o.Training.gradientAccumulation(accumulation)
    if patterns is not None:
        o._Popart.set("patterns", patterns)
    graph = models.get("bert-base", micro_batch=2, seq_len=128, num_layers=2, **params)
    return o, sim.compile(graph, "ipu-mk2", o, training=True, optimizer="sgd")


def _word_ops(ex):
    return [(op.kind, op.inputs, op.outputs, op.attrs.get("into_table", False)) for op in ex.graph.ops
            if op.name.startswith(("embeddings/word", "embeddings/word_embeddings")) and op.pass_ != "forward"]


def test_the_tied_table_gets_its_rows_added_into_its_accumulator():
    """The word embedding is gathered and read by the MLM head (tied): its dense gradient table and the
    sum with the head's gradient are gone; the head's gradient is accumulated, then the gathered rows'
    gradients are added into the same accumulator (popops multiUpdateAdd, no zeroed table)."""
    _, ex = _compile(PATTERNS)
    acc = "embeddings/word_embeddings/accum"
    assert _word_ops(ex) == [
        ("accumulate", [acc, "mlm_head/table_t/grad"], [acc], False),
        ("embedding_grad", ["input_ids", "embeddings/layernorm/layernorm/grad", acc], [acc], True),
        ("sgd_update", ["embeddings/word_embeddings", acc], ["embeddings/word_embeddings"], False)]
    assert "embeddings/word/grad" not in ex.graph.tensors and "embeddings/word/sum" not in ex.graph.tensors
    # the projection serialised over the vocabulary (slices of the table, PopART's PadSum) matches too
    _, serial = _compile(PATTERNS, embedding_serialization=2)
    assert [kind for kind, *_ in _word_ops(serial)] == ["accumulate", "embedding_grad", "sgd_update"]
    # an untied table (positions: only gathered) keeps its dense gradient
    assert any(op.kind == "embedding_grad" and not op.attrs.get("into_table") and "position" in op.name
               for op in ex.graph.ops)


def test_without_the_patterns_or_accumulation_the_table_gradient_is_dense():
    """PopART's default (the patterns off) and a run without gradient accumulation (the pattern matches
    only with it, TiedGatherAccumulatePattern::matches) keep the zeroed dense table and the sum."""
    for patterns, accumulation in ((None, 8), ({"TiedGather": True}, 8), (PATTERNS, 1)):
        _, ex = _compile(patterns, accumulation)
        kinds = [kind for kind, _, _, into in _word_ops(ex)]
        assert "embedding_grad" in kinds and "add" in kinds, (patterns, accumulation, kinds)
        assert not any(into for *_, into in _word_ops(ex))


def test_the_sparse_update_is_cheaper_and_the_other_patterns_are_reported_unmodelled():
    """The multiUpdateAdd into the accumulator costs less than zeroing the dense table first and adding it;
    the run's unmodelled options name the patterns the simulator does not model."""
    o, ex = _compile(PATTERNS)
    _, dense = _compile(None)
    sparse_cost = sum(ex.costs[op.name].cycles for op in ex.graph.ops if op.name.startswith("embeddings/word/"))
    dense_cost = sum(dense.costs[op.name].cycles for op in dense.graph.ops if op.name.startswith("embeddings/word/"))
    assert sparse_cost < dense_cost
    assert o.unmodelled() == {"_Popart.patterns.UpdateInplacePrioritiesForIpu": True}
