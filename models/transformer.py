"""Transformer pieces shared by BERT and GPT-2: attention, FFN, tied LM head, layer placement.

Shapes: activations are (batch, seq, hidden); attention works on (batch, heads, seq, head_dim).
"""

from __future__ import annotations

import math
import numbers

from sim.graph import GraphBuilder

from ._common import Params, gelu_form


def attention(b: GraphBuilder, x: str, heads: int, mask: str | None = None,
              dropout: float = 0.0, name: str = "attention", probs_dropout: float | None = None,
              split_qkv: bool = False, split_qkv_weights: bool = False, pre_scale: bool = False,
              divide_scores: bool = False) -> str:
    """Multi-head self-attention with one fused QKV projection [h, 3h], as Graphcore's BERT, or
    with ``split_qkv`` three projections [h, h] (``query``, ``key``, ``value``: Hugging Face's
    layout, which Graphcore's ViT keeps). ``split_qkv_weights``: the fused projection with its
    weight and bias kept as three tensors each (``query``, ``key``, ``value``), concatenated
    before the one matmul, as Graphcore's PopART BERT's ``split_qkv`` (``GraphBuilder.linear``'s
    pieces).

    ``mask`` is added to the scores (broadcast to (batch, heads, seq, seq)). Returns the output
    projection (after dropout), before the residual add. ``probs_dropout`` is the dropout of the
    attention probabilities (Hugging Face's ``attention_probs_dropout_prob``); None: ``dropout``.
    ``pre_scale``: Q is scaled by 1/sqrt(head_dim) before the scores' matmul (Hugging Face's CLIP
    attention, PopRT's ``pre_scale`` pass) instead of the scores after it. ``divide_scores``: the
    scores divided by sqrt(head_dim), as Hugging Face's BERT and ViT (and Graphcore's ViT) write it
    (PopART's Div: popops divides by the one-element constant), instead of multiplied by its reciprocal
    (Graphcore's BERT: "Use reciprocal multiply for speed").
    """
    probs_dropout = dropout if probs_dropout is None else probs_dropout
    batch, seq, hidden = b.shape(x)
    d = hidden // heads
    with b.scope(name):
        qkv = None if split_qkv else b.linear(x, 3 * hidden, name="qkv",
                                              pieces=("query", "key", "value") if split_qkv_weights else ())

        def split(i: int, perm: tuple[int, ...], what: str) -> str:
            t = (b.linear(x, hidden, name={"q": "query", "k": "key", "v": "value"}[what]) if split_qkv
                 else b.slice(qkv, 2, i * hidden, (i + 1) * hidden, name=what))
            return b.transpose(b.reshape(t, (batch, seq, heads, d)), perm)

        q = split(0, (0, 2, 1, 3), "q")   # (B, heads, S, d)
        k = split(1, (0, 2, 3, 1), "k")   # (B, heads, d, S)
        v = split(2, (0, 2, 1, 3), "v")   # (B, heads, S, d)
        if pre_scale:
            q = b.scale(q, 1.0 / math.sqrt(d), name="pre_scale")
        scores = b.matmul(q, k, name="scores")
        if not pre_scale:
            scores = (b.div(scores, b.constant("sqrt_head_dim", (1,)), name="scale") if divide_scores
                      else b.scale(scores, 1.0 / math.sqrt(d)))
        if mask is not None:
            scores = b.add(scores, mask, name="mask")
        probs = b.softmax(scores)
        if probs_dropout:
            probs = b.dropout(probs, probs_dropout)
        ctx = b.matmul(probs, v, name="context")  # (B, heads, S, d)
        ctx = b.reshape(b.transpose(ctx, (0, 2, 1, 3)), (batch, seq, hidden))
        out = b.linear(ctx, hidden, name="output")
        if dropout:
            out = b.dropout(out, dropout)
    return out


def ffn(b: GraphBuilder, x: str, intermediate: int, dropout: float = 0.0, name: str = "ffn",
        act_dropout: float = 0.0) -> str:
    """Position-wise feed-forward: linear(h→i), GELU, (dropout ``act_dropout``), linear(i→h), dropout."""
    hidden = b.shape(x)[-1]
    with b.scope(name):
        y = b.gelu(b.linear(x, intermediate, name="fc1"))
        if act_dropout:
            y = b.dropout(y, act_dropout)
        y = b.linear(y, hidden, name="fc2")
        if dropout:
            y = b.dropout(y, dropout)
    return y


def tied_projection(b: GraphBuilder, x: str, table: str, name: str = "decoder", serial: int = 1) -> str:
    """Logits = x @ tableᵀ: the LM head tied to the (vocab, hidden) word-embedding table.

    With ``serial`` > 1 the projection is serialised over the vocabulary, as Graphcore's examples
    have PopART serialise it (``setSerializeMatMul(..., 'output_channels', steps)`` in the PopART
    BERT's ``embedding_serialization_vocab_steps``; ``poptorch.serializedMatMul`` OutputChannels in
    the PyTorch BERT's and GPT-2's ``SerializedLinear``): ``serial`` matmuls of row blocks of the
    table, each planned on its own, their logits concatenated (a view). The table's gradient
    gathers the pieces' gradients as PopART's PadSum does (one pad, no adds)."""
    if serial <= 1:
        return b.matmul(x, b.transpose(table, (1, 0), name="table_t"), name=name)
    step = b.shape(table)[0] // serial
    pieces = [b.matmul(x, b.transpose(b.slice(table, 0, i * step, (i + 1) * step, name=f"{name}/serial{i}/rows"),
                                      (1, 0), name=f"{name}/serial{i}/table_t"), name=f"{name}/serial{i}")
              for i in range(serial)]
    return b.concat(pieces, axis=len(b.shape(x)) - 1, name=name)


def transformer_params(p: Params, extra_seq_limit: str, checkpoint_last: bool = False) -> dict:
    """Check the parameters BERT and GPT-2 share; returns them resolved (intermediate filled in)."""
    hidden, heads = p.int("hidden"), p.int("heads")
    if hidden % heads:
        p.fail("heads", f"must divide hidden={hidden}")
    seq_len = p.int("seq_len")
    if seq_len > p.int(extra_seq_limit):
        p.fail("seq_len", f"must be <= {extra_seq_limit}={p[extra_seq_limit]}")
    num_layers = p.layers("num_layers")
    vocab, serial = p.int("vocab"), p.int("embedding_serialization")
    if vocab % serial:
        p.fail("embedding_serialization", f"must divide vocab={vocab} (Graphcore's examples pad the vocabulary "
               "to a multiple of the steps: pass the padded vocab)")
    return dict(micro_batch=p.int("micro_batch"), seq_len=seq_len, num_layers=num_layers,
                hidden=hidden, heads=heads, vocab=vocab, embedding_serialization=serial,
                intermediate=p.int("intermediate", optional=True) or 4 * hidden,
                dropout=p.prob("dropout"), with_head=p.flag("with_head"), dtype=p.dtype(),
                layer_ipu=layer_ipus(p, num_layers), att_ffn=att_ffn_ipus(p, num_layers),
                checkpoints=checkpointed_layers(p, num_layers, checkpoint_last), fp32_ops=fp32_ops(p),
                gelu=gelu_form(p))


def fp32_ops(p: Params) -> tuple[str, ...]:
    """``fp32_ops``: the op kinds (``"gelu"``, ``"layernorm"``) kept in float32 in a float16 model,
    as PopRT's Converter keeps the ONNX op types of its ``fp16_skip_op_types`` (Graphcore's PopRT BERT
    examples skip "Gelu,GroupNormalization"): each such op casts its input to float32 and its output
    back (:class:`sim.graph.GraphBuilder`'s ``fp32_kinds``)."""
    ops = p.items("fp32_ops", f"op kinds among {', '.join(GraphBuilder.FP32_KINDS)}")
    if not all(isinstance(o, str) for o in ops) or not set(ops) <= set(GraphBuilder.FP32_KINDS):
        p.fail("fp32_ops", f"expected a list of op kinds among {', '.join(GraphBuilder.FP32_KINDS)}")
    return tuple(ops)


def checkpointed_layers(p: Params, num_layers: int, last: bool = False) -> set[int]:
    """The layers whose output is a recomputation checkpoint (``recompute_checkpoint_every_layer``).

    As Graphcore's BERT and GPT-2 (``recompute_checkpoint_every_layer: True`` in their configs):
    every layer but the last (the output of its FFN half, also when ``att_ffn_placement`` puts the
    halves on different IPUs), as the SDK 3.0 BERT (examples 8ae588c nlp/bert/pytorch/modeling.py:425,
    ``index != num_hidden_layers - 1``); with ``last`` every layer, as GPT-2 (8ae588c and later
    nlp/gpt2/pytorch/train_gpt2.py: every layer when ``recompute_checkpoint_layers`` is unset). ``None`` (the default) means True when ``layers_per_ipu`` or
    ``att_ffn_placement`` puts layers on an IPU other than IPU 0, so that the model is pipelined over several IPUs (where
    PopTorch recomputes, ``RecomputationType::Pipeline``), and False otherwise: on one IPU a
    checkpoint would make training recompute, which PopTorch does not do by default.
    """
    on = p["recompute_checkpoint_every_layer"]
    if on is None:
        layer_ipu, att_ffn = layer_ipus(p, num_layers), att_ffn_ipus(p, num_layers)
        on = (layer_ipu is not None and any(layer_ipu)) or (att_ffn is not None and any(att_ffn[0] + att_ffn[1]))
    else:
        on = p.flag("recompute_checkpoint_every_layer")
    return set(range(num_layers if last else num_layers - 1)) if on else set()


def layer_ipus(p: Params, num_layers: int, what: str | None = None,
               first: str = "the embeddings") -> list[int] | None:
    """The IPU of each layer from ``layers_per_ipu`` (e.g. [0, 4, 4, 4]), or None if unset;
    ``what`` says where the ``num_layers`` layers come from, for the error (default the parameter).

    Entry i is IPU i's layers, as PopTorch's ``poptorch.BeginBlock(ipu_id=...)`` and PopART's
    ``virtualGraph`` number IPUs: an IPU holds only what is placed on it. Only the first entry may be 0:
    IPU 0 then holds ``first`` (what the model puts on IPU 0 before its layers) and no layer, as
    Graphcore's configs put BERT's embeddings (and its MLM head) on IPU 0 without encoder layers
    (``layers_per_ipu: [0, 4, 4, 4]``, MLPerf's ``encoder_start_ipu: 1``), and as the planner's splits may.
    A 0 anywhere else is an IPU that would hold nothing at all, which no user means (``[2, 0]`` would run
    on one IPU of two, ``[0, 0, 2]`` on IPUs 0 and 2 of three): an error naming the entry."""
    counts = p.ints("layers_per_ipu", minimum=0, optional=True)
    if counts is None:
        return None
    if sum(counts) != num_layers:
        p.fail("layers_per_ipu", f"must sum to {what or f'num_layers={num_layers}'}, sums to {sum(counts)}")
    empty = [i for i, n in enumerate(counts) if i > 0 and n == 0]
    if empty:
        kept = [n for i, n in enumerate(counts) if i == 0 or n]
        p.fail("layers_per_ipu", f"entry {empty[0]} is 0, so IPU {empty[0]} would hold nothing at all; only the "
                                 f"first entry may be 0 (IPU 0 then holds {first} and no layer): leave out the empty "
                                 f"IPU (layers_per_ipu={kept}) or move layers onto it")
    return [ipu for ipu, n in enumerate(counts) for _ in range(n)]


def att_ffn_ipus(p: Params, num_layers: int) -> tuple[list[int], list[int]] | None:
    """The IPU of each layer's attention half and of its FFN half, from ``att_ffn_placement``.

    The option of Graphcore's MLPerf BERT (training_results v1.1 / v2.0, ``bert_model.py``
    ``Bert._setup_placement``): a list of ``[ipu, [attentions, ffns]]``, one entry per pipeline
    stage in order, after the embedding's stage (their ``encoder_start_pipeline_stage`` 1); the
    stage's IPU gets the next ``attentions`` attention halves and the next ``ffns`` FFN halves of
    the layers, so a stage boundary can fall between a layer's attention and its FFN. E.g. v1.1
    POD16's ``[[1, [7, 6]], [2, [6, 7]], [3, [7, 6]], [0, [4, 5]]]`` puts layer 6's attention on
    IPU 1 and its FFN on IPU 2, and the last 4 attentions and 5 FFNs back on IPU 0 with the heads.
    None if unset (models without the parameter, e.g. GPT-2, never have it). Exclusive with
    ``layers_per_ipu``. As there, no IPU may be left holding nothing: an entry of no attention and no
    FFN, or IPUs that skip one (``[[2, [12, 12]]]`` leaves IPU 1 empty), is an error.
    """
    entries = p.get("att_ffn_placement")
    if entries is None:
        return None
    if p.get("layers_per_ipu") is not None:
        p.fail("att_ffn_placement", "give it or layers_per_ipu, not both")
    ok = isinstance(entries, (list, tuple)) and entries and all(
        isinstance(e, (list, tuple)) and len(e) == 2 and _whole(e[0]) and isinstance(e[1], (list, tuple))
        and len(e[1]) == 2 and all(_whole(n) for n in e[1]) for e in entries)
    if not ok:
        p.fail("att_ffn_placement", "expected a list of [ipu, [attentions, ffns]] entries of integers >= 0, "
                                    "e.g. [[1, [7, 6]], [2, [6, 7]], [3, [7, 6]], [0, [4, 5]]]")
    att = [int(ipu) for ipu, (n, _) in entries for _ in range(n)]
    ffn = [int(ipu) for ipu, (_, n) in entries for _ in range(n)]
    if len(att) != num_layers or len(ffn) != num_layers:
        p.fail("att_ffn_placement", f"the attentions and the FFNs must each sum to num_layers={num_layers} "
                                    f"(they sum to {len(att)} and {len(ffn)})")
    for i in range(1, len(entries)):
        if int(entries[i][0]) == int(entries[i - 1][0]):
            p.fail("att_ffn_placement", f"entries {i - 1} and {i} are both on IPU {entries[i][0]}: one stage "
                                        "per entry, merge them")
    done_att = done_ffn = 0
    for i, (ipu, (n_att, n_ffn)) in enumerate(entries):
        if n_att == n_ffn == 0:
            p.fail("att_ffn_placement", f"entry {i} puts no attention and no FFN on IPU {ipu}, a stage holding "
                                        "nothing: leave the entry out")
        done_att, done_ffn = done_att + n_att, done_ffn + n_ffn
        if done_ffn > done_att:
            p.fail("att_ffn_placement", f"entry {i} places the FFN of layer {done_att} before its attention: "
                                        "after each entry the attentions placed must be >= the FFNs placed")
    empty = sorted(set(range(max(att + ffn) + 1)) - {0, *att, *ffn})  # IPU 0 holds the embeddings
    if empty:
        p.fail("att_ffn_placement", f"no entry is on IPU {empty[0]}, so it would hold nothing at all while IPU "
                                    f"{max(att + ffn)} is used: put the entries on IPUs 1, 2, ... without gaps (IPU 0 "
                                    "holds the embeddings and may hold entries too)")
    return att, ffn


def _whole(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0
