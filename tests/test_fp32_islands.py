"""Ops kept in float32 inside a float16 graph, as PopRT's Converter keeps the ONNX op types named in
``fp16_skip_op_types`` (Graphcore's PopRT BERT examples: "Gelu,GroupNormalization"): each casts its
input to float32 and its output back, its weights in float32."""

import pytest

import models
from sim import GraphBuilder, GraphError, Options, simulate


def _kinds_and_dtypes(g):
    return [(op.kind, g.tensors[op.outputs[0]].dtype) for op in g.ops]


def test_gelu_and_layernorm_run_between_casts_with_float32_weights():
    b = GraphBuilder("island", "float16", fp32_kinds=["gelu", "layernorm"])
    x = b.input("x", (4, 64))
    b.output(b.layernorm(b.gelu(x), name="ln"))
    g = b.graph
    assert _kinds_and_dtypes(g) == [("cast", "float32"), ("gelu", "float32"), ("cast", "float16"),
                                    ("cast", "float32"), ("layernorm", "float32"), ("cast", "float16")]
    assert {w.name: w.dtype for w in g.weights()} == {"ln/gamma": "float32", "ln/beta": "float32"}


def test_only_float16_inputs_get_islands_and_other_kinds_are_untouched():
    b = GraphBuilder("plain", "float32", fp32_kinds=["gelu"])
    b.output(b.gelu(b.input("x", (4, 64))))
    assert _kinds_and_dtypes(b.graph) == [("gelu", "float32")]
    b = GraphBuilder("half", "float16", fp32_kinds=["gelu"])
    b.output(b.relu(b.layernorm(b.input("x", (4, 64)))))
    assert [k for k, _ in _kinds_and_dtypes(b.graph)] == ["layernorm", "relu"]


def test_an_op_kind_that_cannot_be_kept_in_float32_is_refused():
    with pytest.raises(GraphError, match=r"fp32 kinds \['softmax'\]: only gelu, layernorm can run in float32"):
        GraphBuilder("bad", "float16", fp32_kinds=["softmax"])
    with pytest.raises(GraphError, match="invalid parameter fp32_ops='gelu': expected a list of op kinds"):
        models.get("bert-base", fp32_ops="gelu")


def test_bert_fp32_ops_cast_every_layernorm_and_gelu_and_cost_more():
    """BERT-Base has 12 x 2 encoder layer norms, the embeddings' one and 12 GELUs (the SQuAD head
    has no transform): 37 ops, two casts each."""
    kw = dict(micro_batch=8, seq_len=128, head="squad", with_loss=False)
    half = models.get("bert-base", **kw)
    mixed = models.get("bert-base", fp32_ops=["layernorm", "gelu"], **kw)
    casts = [op for op in mixed.ops if op.kind == "cast"]
    assert len(casts) - sum(op.kind == "cast" for op in half.ops) == 2 * 37
    o = Options()
    o.Precision.setPartialsType("half")
    fast, slow = simulate(half, "c600", o), simulate(mixed, "c600", o)
    assert slow.cycle_count > fast.cycle_count
    name = "encoder/layer0/attention_norm/layernorm"
    assert slow.executable.costs[name].cycles > fast.executable.costs[name].cycles
