"""A layer's weight kept as several tensors and concatenated before its matmul
(GraphBuilder.linear's ``pieces``; the zoo BERT's ``split_qkv``, as Graphcore's PopART BERT keeps
its QKV weights: bert_model.py qkv_weights)."""
import pytest

import models
import sim
from sim import GraphBuilder
from sim.errors import GraphError

QKV = "encoder/layer0/attention/qkv"


def _compile(split: bool, optimizer="lamb"):
    # a small vocabulary leaves room on the one IPU for the embedding's and the head's LAMB state
    g = models.get("bert-large", num_layers=2, micro_batch=2, split_qkv=split, vocab=8192)
    return g, sim.compile(g, "ipu-mk2", sim.Options(), training=True, optimizer=optimizer)


def test_the_qkv_weight_is_three_tensors_and_one_matmul():
    (fused, ex_fused), (split, ex_split) = _compile(False), _compile(True)
    assert split.num_parameters() == fused.num_parameters()
    assert len(split.weights()) == len(fused.weights()) + 2 * 2 * 2  # 2 layers x (weight, bias) x 2 more
    assert [split.tensors[f"{QKV}/{p}_weight"].shape for p in ("query", "key", "value")] == [(1024, 1024)] * 3
    assert split.tensors[f"{QKV}/weight"].weight_view and split.tensors[f"{QKV}/weight"].role == "activation"
    # the same three passes, priced as the fused layer's (the concatenation is a view)
    for name in (f"{QKV}/matmul", f"{QKV}/matmul/grad_a", f"{QKV}/matmul/grad_b"):
        assert ex_split.costs[name] == ex_fused.costs[name]
    assert {op.attrs["fully_connected_pass"] for op in ex_split.graph.ops
            if op.kind == "matmul" and op.name.startswith(QKV)} == {"TRAINING_FWD", "TRAINING_BWD", "TRAINING_WU"}
    # each piece has its own update; the fused weight's is gone
    updates = {op.name.split("/")[-2] for op in ex_split.graph.ops if op.name.startswith(QKV) and op.pass_ == "update"}
    assert updates == {"query_weight", "key_weight", "value_weight", "query_bias", "key_bias", "value_bias"}


def test_more_weights_cost_more_update_time():
    assert sim.run_executable(_compile(True)[1]).cycle_count > sim.run_executable(_compile(False)[1]).cycle_count


def test_pieces_must_split_the_output_features():
    b = GraphBuilder("g")
    x = b.input("x", (4, 8))
    with pytest.raises(GraphError, match="10 output features do not split into 3 pieces"):
        b.linear(x, 10, pieces=("a", "b", "c"))
