"""The zoo BERT's SQuAD span head (``head="squad"``): shapes, placement on the last IPU as
Graphcore's PipelinedBertForQuestionAnswering puts it, the loss, and what inference streams back."""

from __future__ import annotations

import pytest

import models
import sim
from sim.errors import GraphError
from sim.program import StreamCopy, leaves


def _head_ops(g):
    return [op for op in g.ops if op.block == "head"]


def test_the_span_head_is_a_linear_layer_to_two_logits_per_token_and_two_cross_entropies():
    g = models.get("bert-large", head="squad", seq_len=384, micro_batch=4, layers_per_ipu=[2, 3, 3, 3, 3, 3, 3, 4])
    assert g.inputs == ["input_ids", "attention_mask", "token_type_ids", "positions"]
    assert g.tensors["positions"].shape == (4, 2) and g.tensors["positions"].dtype == "int32"
    assert [g.tensors[o].shape for o in g.outputs] == [(4, 384), (4, 384), (1,)]
    assert g.outputs[:2] == ["squad_head/start_logits", "squad_head/end_logits"] and g.loss == g.outputs[2]
    weights = {t.name: t.shape for t in g.weights() if t.name.startswith("squad_head/")}
    assert weights == {"squad_head/qa_outputs/weight": (1024, 2), "squad_head/qa_outputs/bias": (2,)}
    loss = next(op for op in g.ops if op.outputs == [g.loss])
    assert loss.kind == "softmax_cross_entropy"
    assert g.tensors[loss.inputs[0]].shape == (4, 2, 384)  # start and end rows over the positions
    assert loss.inputs[1] == "positions"
    assert not any(t.name.startswith("mlm_head/") or t.name == "labels" for t in g.tensors.values())


def test_the_head_is_on_the_last_ipu_in_the_last_encoder_stage():
    g = models.get("bert-large", head="squad", seq_len=384, micro_batch=4, layers_per_ipu=[2, 3, 3, 3, 3, 3, 3, 4])
    head = _head_ops(g)
    assert head and {op.ipu for op in head} == {7} and {op.stage for op in head} == {7}
    assert max(op.stage for op in g.ops) == 7  # no stage of its own (the MLM head adds one on IPU 0)
    mlm = models.get("bert-large", seq_len=384, micro_batch=4, layers_per_ipu=[2, 3, 3, 3, 3, 3, 3, 4])
    assert {op.ipu for op in _head_ops(mlm)} == {0} and max(op.stage for op in mlm.ops) == 8


def test_an_unplaced_model_keeps_the_head_unplaced_and_bad_heads_are_refused():
    g = models.get("bert-base", head="squad", num_layers=2)
    assert {op.ipu for op in _head_ops(g)} == {None}
    with pytest.raises(GraphError, match="invalid parameter head='qa'.*'mlm', 'squad'"):
        models.get("bert-base", head="qa")
    with pytest.raises(GraphError, match="with_loss"):
        models.get("bert-base", head="squad", with_loss="no")


def test_inference_streams_back_only_the_two_logits_per_token():
    B, S = 16, 128
    g = models.get("bert-base", head="squad", with_loss=False, num_layers=1, micro_batch=B, seq_len=S)
    assert g.loss is None and g.inputs == ["input_ids", "attention_mask", "token_type_ids"]
    ex = sim.compile(g, "bow-ipu", sim.Options().deviceIterations(4))
    out = {c.name: c.nbytes for c in leaves(ex.program) if isinstance(c, StreamCopy) and c.direction == "from_ipu"}
    assert out == {"squad_head/start_logits": B * S * 2, "squad_head/end_logits": B * S * 2}  # fp16
    run = sim.run_executable(ex)
    assert run.samples_per_second > 0


def test_the_squad_head_trains_through_a_pipeline():
    g = models.get("bert-base", head="squad", num_layers=2, layers_per_ipu=[1, 1], micro_batch=2)
    o = sim.Options()
    o.Training.gradientAccumulation(4)
    run = sim.simulate(g, "ipu-pod16", o, training=True, optimizer="adamw")
    graph = run.executable.graph
    grads = [op for op in graph.ops if op.kind == "softmax_cross_entropy_grad"]
    assert len(grads) == 1 and grads[0].ipu == 1
    assert {op.ipu for op in graph.ops if op.pass_ == "update" and op.attrs["weight"].startswith("squad_head/")} == {1}
