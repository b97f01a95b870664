"""BERT (Devlin et al. 2018) for masked-LM pre-training or SQuAD fine-tuning, as Graphcore's BERT
examples build it.

Inputs, in order: ``input_ids``, ``attention_mask``, ``token_type_ids`` (int32, (B, S)) and,
with the head and its loss, ``labels`` (MLM: int32, (B, S) or (B, mask_tokens)) or ``positions``
(SQuAD: int32, (B, 2), the answer's start and end). Outputs: with the MLM head, the loss (as
Graphcore's PopART and PyTorch BERT training return it, not the masked tokens' logits; their
on-device accuracy is not modelled), or, with ``with_loss=False`` (an inference deployment: no
labels streamed in, no loss), the MLM logits; with the SQuAD head, ``start_logits`` and
``end_logits`` (B, S), then the loss unless ``with_loss=False``; without the head, the encoder
output.

- Post-layernorm encoder layers: fused QKV attention, residual add, layernorm, FFN (GELU),
  residual add, layernorm (``models.transformer``). ``split_qkv`` (the PopART BERT config's key)
  keeps the QKV weight and bias as three tensors each, concatenated before the one matmul
  (``bert_model.py qkv_weights``): the same work forward, three weights to update.
  ``hf_attention``: Hugging Face's ``BertSelfAttention`` as transformers 4.x writes it, unfused: three
  Q, K, V projections, each its own matmul, and the scores divided by sqrt(head size), as Graphcore's
  PopTorch BERT tutorial runs it; Graphcore's PyTorch BERT and optimum-graphcore replace it with one
  QKV matmul and a reciprocal multiply (``bert_fused_attention.py``), the default here.
- ``vocab`` defaults to BERT's 30522; Graphcore's examples pad it to 30528 (a multiple of 16
  for the AMP units) — pass ``vocab=30528`` to match them exactly.
- The MLM head is the dense + GELU + layernorm transform, then the projection onto the vocab
  as a matmul with the word-embedding table transposed (tied weights) plus a bias.
  By default (``mask_tokens="auto"``) it follows Graphcore's pre-training examples, which put
  the masked tokens first and project only those (20 at S=128, 76 at S=384, 80 at S=512,
  otherwise 15 % of S rounded up); ``mask_tokens=None`` projects every position (Hugging
  Face's ``BertForMaskedLM``). ``embedding_serialization`` (PopART's
  ``embedding_serialization_vocab_steps``, PyTorch's ``embedding_serialization_factor``) serialises
  the projection over the vocabulary (``models.transformer.tied_projection``); it must divide ``vocab``.
- ``dropout`` (0.1, BERT's ``hidden_dropout_prob``) after the embeddings, the attention output and
  the FFN; ``attention_dropout`` (Hugging Face's ``attention_probs_dropout_prob``) on the attention
  probabilities, None: the same as ``dropout``. Graphcore's PyTorch pre-training configs set it to 0
  (``configs_pretraining.yml``), its SQuAD config to 0.15 (``configs_squad.yml``).
- No pooler or next-sentence-prediction head (the loss is MLM only).
- Packed sequences (``max_sequences_per_pack``, e.g. 3 as MLPerf and Graphcore's packed BERT: Krell
  et al. 2021, "Efficient Sequence Packing without Cross-contamination"): each row of the micro-batch
  is a pack of up to that many sequences. The inputs are then ``input_ids``, ``input_mask`` (each
  token's sequence index in its pack, 0 for padding), ``token_type_ids``, ``position_ids`` (restarting
  at 0 for each sequence) and ``labels``; every layer makes the block-diagonal attention mask from
  ``input_mask`` (:func:`pack_mask`); the MLM head projects ``mask_tokens`` positions per pack ("auto":
  PopART's ``mask_tokens + max_sequences_per_pack - 1``, from the packed configs' 20 / 56 / 76 at
  S = 128 / 384 / 512). ``packing_factor`` is the dataset's average sequences per pack ("auto":
  :data:`PACKING_FACTOR`, the PyTorch config's); the graph's ``samples_per_row`` carries it, so a
  run's samples are packs x factor (sequences, as Graphcore counts them).
- ``att_ffn_placement`` (MLPerf v1.1/v2.0 BERT's option, ``models.transformer.att_ffn_ipus``):
  ``[[ipu, [attentions, ffns]], ...]`` per pipeline stage, so a layer's attention and FFN can sit on
  different IPUs; instead of ``layers_per_ipu``. Checkpoints stay one per layer (its FFN output).
- ``head="mean_pool"`` (``with_loss=False``): a sentence-embedding model's output (E5, sentence-transformers):
  the encoder output's mean over the tokens the attention mask keeps, L2-normalised, (B, H), on the last
  encoder layer's IPU.
- ``head="squad"``: the span head of Graphcore's SQuAD fine-tuning (``PipelinedBertForQuestionAnswering``
  in graphcore/examples ``nlp/bert/pytorch/modeling.py``, Hugging Face's ``BertForQuestionAnswering``):
  a linear layer hidden -> 2 per token, and the loss the mean of two softmax cross-entropies over the
  sequence positions (start and end). It sits on the last encoder layer's IPU ("QA Outputs --> IPU
  {ipu}" there; the PopART example does the same with ``squad_wrap_final_layer: false``), so it adds
  no pipeline stage. Inference with ``with_loss=False`` streams back only the 2 logits per token.
- ``recompute_checkpoint_every_layer``: each layer's output but the last is a recomputation
  checkpoint, as in Graphcore's configs; by default (None) on when ``layers_per_ipu`` pipelines
  the layers over several IPUs (``models.transformer.checkpointed_layers``).
  ``checkpoint_last_layer`` puts one on the last layer too, as Graphcore's PyTorch pre-training
  model does (``PipelinedBertForPretraining.parallelize`` in graphcore/examples
  ``nlp/bert/pytorch/modeling.py``: every layer; its SQuAD model and the PopART BERT leave out the
  last, ``bert_model.py`` ``should_checkpoint``). In the final pipeline stage PopART recomputes the
  forward ops before the stage's last checkpoint (``Pipeline::setFinalFwdStageRecomputation``), so
  with it that stage recomputes all its layers.
- ``checkpoint_dtype="float8"``: MLPerf v2.0 BERT's ``activation_checkpoint_dtype: FLOAT8``
  (training_results_v2.0 Graphcore ``bert_model.py`` ``Bert.checkpoint``): each checkpoint but those
  of the last pipeline stage (which are not stashed) is cast to an 8-bit float before it is
  checkpointed and cast back after, so the pipeline stashes it in 1 byte per element; the
  backward pass recomputes from the 8-bit copy. None (the default) checkpoints in ``dtype``.
- ``fp32_ops`` (e.g. ``["layernorm", "gelu"]``): those ops run in float32 in a float16 model, cast
  in and out, their weights in float32, as PopRT's Converter keeps the op types of its
  ``fp16_skip_op_types`` (Graphcore's PopRT BERT examples: "Gelu,GroupNormalization").
- ``gelu``: the GELU's form, ``"tanh"`` (default: popnn's tanh approximation, PopART's Gelu, what PopTorch
  lowers torch's GELU to) or ``"erf"`` (the exact GELU as PopART's GeluErf runs it, popops' GELU_ERF vertex,
  about 8 x the tanh form's cycles in fp16: what PopRT makes of an exported model's erf GELU with its
  ``erf_gelu_pattern`` pass or ``enable_erf_gelu``; ``models._common.gelu_form``).
- ``layers_per_ipu`` (e.g. ``[0, 4, 4, 4]``) places the encoder layers on consecutive IPUs. As in
  Graphcore's PyTorch BERT (``Embedding --> IPU 0``, ``Encoder i --> IPU k``, ``Classifier -->
  IPU 0``), the embeddings go on IPU 0 and the MLM head and loss go back on IPU 0, where the
  tied embedding table lives, as the last pipeline stage; the SQuAD head stays on the last IPU.
"""

from __future__ import annotations

import math

from sim.errors import GraphError
from sim.graph import Graph, GraphBuilder
from sim.graph.ir import canonical_dtype

from ._common import Params, Placement, l2_normalised
from .transformer import attention, ffn, tied_projection, transformer_params

_COMMON = dict(micro_batch=8, seq_len=128, intermediate=None, vocab=30522, max_positions=512,
               type_vocab=2, mask_tokens="auto", dropout=0.1, attention_dropout=None, layers_per_ipu=None,
               att_ffn_placement=None,
               max_sequences_per_pack=None, packing_factor="auto", with_head=True, embedding_serialization=1,
               head="mlm", with_loss=True, recompute_checkpoint_every_layer=None, checkpoint_last_layer=False,
               checkpoint_dtype=None,
               dtype="float16", fp32_ops=(), gelu="tanh", split_qkv=False, hf_attention=False)
MODELS = {
    "bert-base": dict(_COMMON, num_layers=12, hidden=768, heads=12),
    "bert-large": dict(_COMMON, num_layers=24, hidden=1024, heads=16),
}
EPS = 1e-12  # BERT's layer_norm_eps
GRAPHCORE_MASK_TOKENS = {128: 20, 384: 76, 512: 80}  # masked positions per sequence in their configs
#: masked tokens of a packed run by sequence length, before PopART's + (max_sequences_per_pack - 1):
#: graphcore/examples (SDK 3.1 c0239af) nlp/bert/popart/configs/packed/packed_pretrain_large_{128,384,512}.json
PACKED_MASK_TOKENS = {128: 20, 384: 56, 512: 76}
#: average sequences per pack by sequence length (the packing factor, a property of the packed
#: Wikipedia dataset): graphcore/examples nlp/bert/pytorch/configs_pretraining.yml
#: ``packing_factor: {128: 1.17, 384: 1.7, 512: 2.0}``; MLPerf's SL512 configs say ``avg_seq_per_pack: 2``
#: and Krell et al. 2021 report about 2 sequences per pack at 512
PACKING_FACTOR = {128: 1.17, 384: 1.7, 512: 2.0}


def build(name: str, p: Params) -> Graph:
    c = transformer_params(p, "max_positions", checkpoint_last=p.flag("checkpoint_last_layer"))
    B, S, H, V = c["micro_batch"], c["seq_len"], c["hidden"], c["vocab"]
    head, with_loss = _head(p)
    if not c["with_head"]:
        for key in ("head", "mask_tokens", "embedding_serialization"):
            p.unused(key, "without the head (with_head=False: the output is the encoder's)")
    elif head != "mlm":
        p.unused("mask_tokens", f"with head={head!r}: only the MLM head projects the masked tokens")
        p.unused("embedding_serialization", f"with head={head!r}: it serialises the MLM head's tied projection")
    packs, factor = _packing(p, S)
    if p["mask_tokens"] == "auto":
        p["mask_tokens"] = (GRAPHCORE_MASK_TOKENS.get(S, math.ceil(0.15 * S)) if packs is None
                            else PACKED_MASK_TOKENS.get(S, math.ceil(0.15 * S)) + packs - 1)
    mask_tokens = p.int("mask_tokens", optional=True)
    if mask_tokens is not None and mask_tokens > S:
        p.fail("mask_tokens", f"must be <= seq_len={S}")
    drop, att_ffn = c["dropout"], c["att_ffn"]
    split_qkv, hf_attention = p.flag("split_qkv"), p.flag("hf_attention")
    if split_qkv and hf_attention:
        p.fail("hf_attention", "runs three Q, K, V matmuls, while split_qkv concatenates their weights into one: "
                               "give one of them")
    att_drop = None if p["attention_dropout"] is None else p.prob("attention_dropout")
    layer_ipu = c["layer_ipu"] or (att_ffn[1] if att_ffn else None)  # the IPU each layer ends on
    eight_bit = _checkpoint_dtype(p) == "float8"
    last_stage = _last_stage_layers(layer_ipu, c["num_layers"], head if c["with_head"] else None)
    if not c["checkpoints"]:
        why = ("without recomputation checkpoints (a model pipelined over several IPUs by layers_per_ipu or "
               "att_ffn_placement has them, or recompute_checkpoint_every_layer=True)")
        p.unused("checkpoint_last_layer", why)
        p.unused("checkpoint_dtype", why)
    elif c["checkpoints"] <= last_stage:
        p.unused("checkpoint_dtype", "when every checkpoint is in the last pipeline stage, which stashes nothing "
                                     "(its checkpoints stay in the model's dtype)")

    b = GraphBuilder(name, c["dtype"], fp32_kinds=c["fp32_ops"], gelu=c["gelu"])
    place = Placement(b, layer_ipu is not None)
    ids = b.input("input_ids", (B, S), "int32")
    # packed: each token's sequence index in its pack (0: padding), the source's input_mask
    attn_mask = b.input("attention_mask" if packs is None else "input_mask", (B, S), "int32")
    types = b.input("token_type_ids", (B, S), "int32")
    if packs is not None:
        position_ids = b.input("position_ids", (B, S), "int32")  # restart at 0 for each sequence
        b.graph.samples_per_row = factor
    labels = (b.input("labels", (B, mask_tokens or S), "int32")
              if c["with_head"] and head == "mlm" and with_loss else None)

    with place.on(0, "embedding"), b.scope("embeddings"):
        word_table = b.weight("word_embeddings", (V, H))
        positions = b.constant("position_ids", (S,), "int32") if packs is None else position_ids
        x = b.embedding(ids, word_table, name="word")
        x = b.add(x, b.embedding(positions, b.weight("position_embeddings", (p.int("max_positions"), H)),
                                 name="position"))
        x = b.add(x, b.embedding(types, b.weight("token_type_embeddings", (p.int("type_vocab"), H)),
                                 name="token_type"))
        x = b.layernorm(x, EPS)
        if drop:
            x = b.dropout(x, drop)
        # The extended mask (1 - mask) * -10000, broadcast over heads and query positions.
        mask = (b.reshape(b.scale(b.cast(attn_mask, c["dtype"]), -10000.0), (B, 1, 1, S))
                if packs is None else None)

    for i in range(c["num_layers"]):
        att_ipu, ffn_ipu = (att_ffn[0][i], att_ffn[1][i]) if att_ffn else (layer_ipu[i] if layer_ipu else 0,) * 2
        with b.scope(f"encoder/layer{i}"):
            with place.on(att_ipu, f"layer{i}"):
                layer_mask = mask if packs is None else pack_mask(b, attn_mask, c["dtype"])
                x = b.layernorm(b.add(x, attention(b, x, c["heads"], layer_mask, drop, probs_dropout=att_drop,
                                                   split_qkv=hf_attention, split_qkv_weights=split_qkv,
                                                   divide_scores=hf_attention)), EPS, name="attention_norm")
            with place.on(ffn_ipu, f"layer{i}"):
                x = b.layernorm(b.add(x, ffn(b, x, c["intermediate"], drop)), EPS, name="ffn_norm")
                if i in c["checkpoints"]:
                    x = _checkpoint(b, x, eight_bit and i not in last_stage, c["dtype"])

    if not c["with_head"]:
        b.output(x)
        return b.graph
    if head == "mean_pool":
        # sentence embeddings (E5, sentence-transformers): the tokens' mean under the attention mask,
        # L2-normalised, on the last encoder layer's IPU; an embedding model has no loss
        if with_loss:
            p.fail("with_loss", "the mean_pool head has no loss: give with_loss=False")
        with place.on(layer_ipu[-1] if layer_ipu else 0, "head"), b.scope("mean_pool"):
            weights = b.cast(attn_mask, c["dtype"])
            summed = b.reduce(b.mul(x, b.reshape(weights, (B, S, 1))), [1], name="masked_sum")
            pooled = b.div(summed, b.reduce(weights, [1], keepdims=True, name="tokens"))
            b.output(l2_normalised(b, pooled))
        return b.graph
    if head == "squad":
        positions = b.input("positions", (B, 2), "int32") if with_loss else None
        # Graphcore's PipelinedBertForQuestionAnswering: "QA Outputs" on the last encoder layer's IPU
        with place.on(layer_ipu[-1] if layer_ipu else 0, "head"), b.scope("squad_head"):
            squad_head(b, x, positions)
        return b.graph
    with place.on(0, "head"), b.scope("mlm_head"):
        if mask_tokens is not None:
            x = b.slice(x, 1, 0, mask_tokens, name="masked_tokens")
        x = b.layernorm(b.gelu(b.linear(x, H, name="transform")), EPS)
        logits = b.add(tied_projection(b, x, word_table, serial=c["embedding_serialization"]),
                       b.weight("decoder_bias", (V,)))
        if not with_loss:
            b.output(logits)
            return b.graph
        loss = b.softmax_cross_entropy(logits, labels)
    b.output(loss)  # Graphcore's scripts anchor the loss (and an on-device accuracy), not the logits
    return b.graph


HEADS = ("mlm", "squad", "mean_pool")


def _head(p: Params) -> tuple[str, bool]:
    """The ``head`` and ``with_loss`` parameters, checked."""
    if p["head"] not in HEADS:
        p.fail("head", f"expected one of {', '.join(map(repr, HEADS))}")
    return p["head"], p.flag("with_loss")


def squad_head(b: GraphBuilder, x: str, positions: str | None) -> None:
    """The SQuAD span head on the encoder output ``x`` (B, S, H), as Hugging Face's
    ``BertForQuestionAnswering``: one linear layer H -> 2 (``qa_outputs``), whose two columns
    are each token's start and end logits. Outputs ``start_logits`` and ``end_logits`` (B, S)
    and, given ``positions`` (the int32 (B, 2) input of start and end positions), the loss: the
    mean of the two softmax cross-entropies over the sequence positions, computed as one
    cross-entropy over the (B, 2) rows of S positions (the same value)."""
    B, S, _ = b.shape(x)
    logits = b.linear(x, 2, name="qa_outputs")  # (B, S, 2)
    start = b.reshape(b.slice(logits, 2, 0, 1, name="start"), (B, S), name="start_logits")
    end = b.reshape(b.slice(logits, 2, 1, 2, name="end"), (B, S), name="end_logits")
    if positions is None:
        b.output(start, end)
        return
    per_row = b.transpose(logits, (0, 2, 1), name="span_logits")  # (B, 2, S): start row, end row
    loss = b.softmax_cross_entropy(per_row, positions)
    b.output(start, end, loss)


def _checkpoint_dtype(p: Params) -> str | None:
    value = p["checkpoint_dtype"]
    if value is None:
        return None
    try:
        dtype = canonical_dtype(str(value).lower())  # also the config's spelling, FLOAT8
    except GraphError:
        dtype = None
    if dtype != "float8":
        p.fail("checkpoint_dtype", "expected None (the model's dtype) or 'float8' (MLPerf v2.0's "
                                   "activation_checkpoint_dtype FLOAT8)")
    return dtype


def _last_stage_layers(layer_ipu: list[int] | None, num_layers: int, head: str | None) -> set[int]:
    """The layers whose FFN output is in the last pipeline stage: the trailing layers on the IPU of
    the last stage (the MLM head's IPU 0; else the last layer's IPU, where the SQuAD head sits)."""
    if layer_ipu is None:
        return set(range(num_layers))
    last_ipu = 0 if head == "mlm" else layer_ipu[-1]
    layers = set()
    for i in reversed(range(num_layers)):
        if layer_ipu[i] != last_ipu:
            break
        layers.add(i)
    return layers


def _checkpoint(b: GraphBuilder, x: str, eight_bit: bool, dtype: str) -> str:
    """Make ``x`` a recomputation checkpoint; ``eight_bit``: through an 8-bit float copy, the
    tensor the pipeline stashes (``bert_model.py`` ``Bert.checkpoint``: CastToFp8, checkpointOutput,
    CastFromFp8)."""
    if not eight_bit:
        b.checkpoint(x)
        return x
    x8 = b.cast(x, "float8", name="checkpoint_to_fp8")
    b.checkpoint(x8)
    return b.cast(x8, dtype, name="checkpoint_from_fp8")


def _packing(p: Params, seq_len: int) -> tuple[int | None, float]:
    """``max_sequences_per_pack`` (None: unpacked) and the packing factor, checked."""
    packs = p.int("max_sequences_per_pack", optional=True)
    if packs is None:
        p.unused("packing_factor", "without packed sequences: give max_sequences_per_pack too")
        return None, 1.0
    if p["packing_factor"] == "auto":
        if seq_len not in PACKING_FACTOR:
            p.fail("packing_factor", f"no published packing factor for seq_len={seq_len} (known: "
                                     f"{sorted(PACKING_FACTOR)}): give the dataset's average sequences per pack")
        p["packing_factor"] = PACKING_FACTOR[seq_len]
    factor = p["packing_factor"]
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 1 <= factor <= packs:
        p.fail("packing_factor", f"expected the average sequences per pack, a number from 1 to "
                                 f"max_sequences_per_pack={packs}")
    return packs, float(factor)


def pack_mask(b: GraphBuilder, seq_ids: str, dtype: str) -> str:
    """The block-diagonal attention mask of packed sequences, (B, 1, S, S) in ``dtype``: 0 where
    query and key tokens belong to the same sequence of the pack, -10000 elsewhere, from each
    token's sequence index ``seq_ids`` (B, S). One fused element-wise compare and select
    (popops::map), made in each layer from the streamed indices as Graphcore's packed BERT does
    (the ``AttentionMask`` custom op inside every attention of the MLPerf PopART code; PyTorch's
    ``attention_mask == attention_mask.transpose(1, 2)``), so only the (B, S) indices move between IPUs."""
    B, S = b.shape(seq_ids)
    rows = b.reshape(seq_ids, (B, 1, S, 1), name="pack_rows")
    cols = b.reshape(seq_ids, (B, 1, 1, S), name="pack_cols")
    return b.op("map", [rows, cols], [(B, 1, S, S)], {"steps": ["compare", "select"]}, name="pack_mask",
                out_dtypes=[dtype])[0]
