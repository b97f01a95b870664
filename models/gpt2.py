"""GPT-2 (Radford et al. 2019) language model, as Graphcore's GPT-2 examples build it.

Inputs, in order: ``input_ids`` and, with the head and ``with_loss``, ``labels`` (int32, (B, S);
the labels are the ids shifted by one, prepared by the data loader). Outputs: the logits of the
last position (what generation reads: (B, 1, vocab); all positions' logits stay on the IPU for the
loss) and the loss (with the head and ``with_loss``) and, with ``remap_logits``, the accuracy, else the
final hidden states.
``with_loss=False`` is inference as Graphcore's ``inference_gpt2.py`` runs it: ``input_ids`` in,
no labels and no cross-entropy.

- Pre-layernorm blocks: x + attention(ln_1(x)), then x + FFN(ln_2(x)), and ``ln_f`` at the end.
- Causal attention: a constant (1, 1, S, S) mask (0 / -10000) added to the scores.
- The LM head is tied to ``wte``: logits = ln_f(x) @ wteᵀ, no bias.
- ``vocab`` is GPT-2's 50257 (Graphcore pads it for serialised embeddings; pass e.g. 50264).
  ``embedding_serialization`` (the examples' ``--embedding-serialization-factor``, a
  ``SerializedLinear`` LM head) serialises the projection over the vocabulary
  (``models.transformer.tied_projection``); it must divide ``vocab``.
- ``loss_chunk`` (positions; 0, the default: one loss over all of them): the loss as Graphcore's
  ``train_gpt2.py`` computes it with ``--enable-sequence-serialized`` (``--serialized-seq-len``, 128):
  the logits' rows (all positions of the micro-batch, flattened) cut into slices of ``loss_chunk``
  rows, a cross-entropy of each (``torch.nn.CrossEntropyLoss(reduction="sum")`` as PopTorch lowers it),
  the losses summed. A slice lives on the LM head's tiles that hold those rows
  (``sim.compiler.row_layouts``), so its cross-entropy runs there. ``remap_logits``
  (``--remap-logit``) adds the script's accuracy: each slice copied onto every tile (its ``RemapCE``
  custom op), then an argmax of each row (priced as a max reduction, as ``sim.poptorch`` prices
  ``torch.argmax``), compared with the labels and summed; it takes no gradient.
- ``layers_per_ipu`` places the blocks on consecutive IPUs; as in Graphcore's GPT-2
  (``Embedding --> IPU 0``, ``Layer i --> IPU k``, ``LM_head --> IPU 0``) the embeddings are on
  IPU 0, ``ln_f`` stays with the last block, and the LM head and loss go back to IPU 0 (where
  ``wte`` lives) as the last pipeline stage.
- ``recompute_checkpoint_every_layer``: each block's output is a recomputation checkpoint, the
  last block's too, as Graphcore's ``train_gpt2.py`` marks them; by default (None) on when
  ``layers_per_ipu`` pipelines the blocks over several IPUs (``models.transformer.checkpointed_layers``).
- ``fp32_ops`` (e.g. ``["layernorm", "gelu"]``): those ops run in float32 in a float16 model, cast in
  and out (``models.transformer.fp32_ops``).
- ``decode_cache`` (a length L; 0, the default: off): one step of greedy generation with a KV cache, as
  Graphcore's PopTransformer runs GPT-2 (``poptransformer/models/gpt2``, b5a7569): the whole generation is
  one ``session.run`` of a device-side ONNX Loop of L iterations (run it with L device iterations and
  synthetic data: the next token stays on the IPU; split over IPUs, sharded, as PopTransformer runs it: each
  iteration reads the one before's token, so a pipeline is refused, ``Graph.carries_iterations``), each
  taking one token of every sequence (prompt tokens too, one an iteration) through all the blocks. Per
  iteration: the token's and the step's embedding rows; in each block its K and V written into a persistent
  (2, B, heads, L, head_dim) cache by PopTransformer's KVCache custom op (the whole cache copied into a
  clone, then shifted one position with the new entry at the front and copied back: two on-tile copies),
  then remapped (its Remap custom op, a copy across tiles); the scores over all L cached positions, an (B,
  1, 1, L) mask added, the custom non-stable softmax (its input first copied to a linear layout); no scale
  op (the query's weights carry 1/sqrt(head_dim)); after ``ln_f`` the tied LM head and a top-1 (ONNX TopK,
  popops' bitonic top-k) on IPU 0; then the loop's own work there (the exit flag, the next token written
  into the id container and the mask, the carried tensors copied back). ``seq_len`` is not used (giving it
  is an error).
"""

from __future__ import annotations

from sim.graph import Graph, GraphBuilder

from ._common import Params, Placement
from .transformer import attention, ffn, tied_projection, transformer_params

_COMMON = dict(micro_batch=1, seq_len=1024, intermediate=None, vocab=50257, n_positions=1024,
               dropout=0.1, layers_per_ipu=None, with_head=True, with_loss=True, embedding_serialization=1,
               recompute_checkpoint_every_layer=None, loss_chunk=0, remap_logits=False,
               dtype="float16", fp32_ops=(), gelu="tanh", decode_cache=0)
MODELS = {
    "gpt2-small": dict(_COMMON, num_layers=12, hidden=768, heads=12),
    "gpt2-medium": dict(_COMMON, num_layers=24, hidden=1024, heads=16),
    "gpt2-large": dict(_COMMON, num_layers=36, hidden=1280, heads=20),
    "gpt2-xl": dict(_COMMON, num_layers=48, hidden=1600, heads=25),
}
EPS = 1e-5  # GPT-2's layer_norm_epsilon
#: ``torch.nn.CrossEntropyLoss(reduction="sum")`` as PopTorch lowers it (a LogSoftmaxOp, then NllOp on the
#: log-probabilities, ignore_index -100: sim.cost.row_ops.loss_steps), what ``train_gpt2.py`` takes of each slice
_TORCH_SUM_LOSS = {"log_softmax": True, "ignore_index": -100, "reduction": "sum"}


def build(name: str, p: Params) -> Graph:
    if p.int("decode_cache", minimum=0):
        return _build_decode(name, p)
    c = transformer_params(p, "n_positions", checkpoint_last=True)
    B, S, H, V = c["micro_batch"], c["seq_len"], c["hidden"], c["vocab"]
    drop, layer_ipu = c["dropout"], c["layer_ipu"]

    b = GraphBuilder(name, c["dtype"], fp32_kinds=c["fp32_ops"], gelu=c["gelu"])
    place = Placement(b, layer_ipu is not None)
    ids = b.input("input_ids", (B, S), "int32")
    with_loss = p.flag("with_loss") and c["with_head"]
    labels = b.input("labels", (B, S), "int32") if with_loss else None
    causal_mask = b.constant("causal_mask", (1, 1, S, S))

    with place.on(0, "embedding"), b.scope("embeddings"):
        wte = b.weight("wte", (V, H))
        positions = b.constant("position_ids", (S,), "int32")
        x = b.add(b.embedding(ids, wte, name="wte_lookup"),
                  b.embedding(positions, b.weight("wpe", (p.int("n_positions"), H)), name="wpe_lookup"))
        if drop:
            x = b.dropout(x, drop)

    last = 0
    for i in range(c["num_layers"]):
        last = layer_ipu[i] if layer_ipu else 0
        with place.on(last, f"layer{i}"), b.scope(f"h{i}"):
            x = b.add(x, attention(b, b.layernorm(x, EPS, name="ln_1"), c["heads"], causal_mask, drop))
            x = b.add(x, ffn(b, b.layernorm(x, EPS, name="ln_2"), c["intermediate"], drop))
            if i in c["checkpoints"]:
                b.checkpoint(x)
    with place.on(last, f"layer{c['num_layers'] - 1}"):
        x = b.layernorm(x, EPS, name="ln_f")

    if not c["with_head"]:
        p.unused("embedding_serialization", "without the head (with_head=False): it serialises the LM head")
        b.output(x)
        return b.graph
    with place.on(0, "head"), b.scope("lm_head"):
        logits = tied_projection(b, x, wte, serial=c["embedding_serialization"])
        loss, accuracy = _loss(b, p, logits, labels) if with_loss else (None, None)
        next_token = b.slice(logits, 1, S - 1, S, name="next_token_logits")
    b.output(next_token, *([loss] if with_loss else []), *([accuracy] if accuracy else []))
    return b.graph


def _loss(b: GraphBuilder, p: Params, logits: str, labels: str) -> tuple[str, str | None]:
    """(the cross-entropy of ``logits`` (B, S, vocab) against ``labels`` (B, S): one loss, or with
    ``loss_chunk`` the sum of the losses of its row slices; with ``remap_logits`` the slices' summed
    accuracy, else None), as ``train_gpt2.py`` computes them."""
    chunk, remap = p.int("loss_chunk", minimum=0), p.flag("remap_logits")
    if not chunk:
        if remap:
            p.fail("remap_logits", "remaps the loss's slices: give loss_chunk too")
        return b.softmax_cross_entropy(logits, labels), None
    B, S, V = b.shape(logits)
    if (B * S) % chunk:
        p.fail("loss_chunk", f"must divide the micro-batch's {B * S} positions")
    rows, targets = b.reshape(logits, (B * S, V), name="rows"), b.reshape(labels, (B * S,), name="targets")
    total = accuracy = None
    for i, start in enumerate(range(0, B * S, chunk)):
        with b.scope(f"chunk{i}"):
            part = b.slice(rows, 0, start, start + chunk, name="logits")
            label = b.slice(targets, 0, start, start + chunk, name="labels")
            if remap:
                best = b.reduce(b.remap(part, name="remap"), [-1], "reduce_max", name="argmax")
                hits = b.op("compare", [best, b.cast(label, b.dtype_of(best))], [(chunk,)], name="hits")[0]
                hits = b.reduce(b.cast(hits, "float32"), [0], name="accuracy")
                accuracy = hits if accuracy is None else b.add(accuracy, hits, name="accuracy_sum")
            loss = b.op("softmax_cross_entropy", [part, label], [(1,)], dict(_TORCH_SUM_LOSS), "loss", ["float32"])[0]
            total = loss if total is None else b.add(total, loss, name="sum")
    b.graph.loss = total
    return total, accuracy


def _build_decode(name: str, p: Params) -> Graph:
    """One iteration of PopTransformer's generation loop (the module docstring's ``decode_cache``)."""
    p.unused("seq_len", "with decode_cache: each iteration takes one token, over a cache of decode_cache positions")
    p.unused("recompute_checkpoint_every_layer", "with decode_cache: generation is inference, nothing is recomputed")
    p["seq_len"] = 1  # one token an iteration (not the default 1024, which n_positions may be below)
    c = transformer_params(p, "n_positions")
    B, H, V, heads, L = c["micro_batch"], c["hidden"], c["vocab"], c["heads"], p.int("decode_cache")
    layer_ipu = c["layer_ipu"]
    if L > p.int("n_positions"):
        p.fail("decode_cache", f"must be <= n_positions={p['n_positions']} (the position table's rows)")
    if p.flag("with_loss") or not c["with_head"] or c["embedding_serialization"] > 1 or c["dropout"]:
        p.fail("decode_cache", "is greedy generation: give with_loss=False, dropout=0 and no "
               "embedding_serialization (PopTransformer's LM head is one matmul)")
    b = GraphBuilder(name, c["dtype"], fp32_kinds=c["fp32_ops"], gelu=c["gelu"])
    place = Placement(b, layer_ipu is not None)
    with place.on(0, "embedding"), b.scope("loop"):
        container = b.constant("input_ids_container", (B, L), "int32")  # the prompts, then the tokens made
        step = b.constant("step", (1,), "int32")
        mask = b.constant("attention_mask", (B, 1, 1, L))  # 0 where a cached position is valid, -10000 else
        b.op("logical", [b.constant("exit", (1,), "bool"), step], [()], {"loop_control": "exit_update"},
             name="exit_update", out_dtypes=["bool"])
        ids = b.op("copy", [container, step], [(B, 1)], {"dynamic_slice": True, "axis": 1}, name="input_ids",
                   out_dtypes=["int32"])[0]
    with place.on(0, "embedding"), b.scope("embeddings"):
        wte = b.weight("wte", (V, H))
        position = b.embedding(step, b.weight("wpe", (p.int("n_positions"), H)), name="wpe_lookup")
        x = b.remap(b.add(b.embedding(ids, wte, name="wte_lookup"), b.reshape(position, (1, 1, H))))
    last = 0
    for i in range(c["num_layers"]):
        last = layer_ipu[i] if layer_ipu else 0
        with place.on(last, f"layer{i}"), b.scope(f"h{i}"):
            x = b.add(x, _cached_attention(b, b.layernorm(x, EPS, name="ln_1"), heads, L, mask))
            x = b.add(x, ffn(b, b.layernorm(x, EPS, name="ln_2"), c["intermediate"]))
    with place.on(last, f"layer{c['num_layers'] - 1}"):
        x = b.layernorm(x, EPS, name="ln_f")
    with place.on(0, "head"), b.scope("lm_head"):
        logits = tied_projection(b, x, wte)
        token = b.op("sort", [logits], [(B, 1, 1)], {"axis": 2, "k": 1, "op": "topk"}, name="top1")[0]
    with place.on(0, "head"), b.scope("loop"):  # step_containers: the step, the mask, the ids written
        b.add(step, b.constant("one", (1,), "int32"), name="next_step")
        mask = b.op("copy", [mask, step], [b.shape(mask)], {"dynamic_update": True}, name="mask_update")[0]
        keep = b.op("logical", [ids, token], [(B, 1)], name="is_prompt", out_dtypes=["bool"])[0]
        container = b.op("copy", [container, keep, step], [(B, L)], {"dynamic_update": True},
                         name="ids_update", out_dtypes=["int32"])[0]
        for t in (container, mask):  # LoopOpx copies each carried output back to the body's input
            b.unary("copy", t, name="carry", loop_carried=True)
    b.output(token)
    b.graph.carries_iterations = True  # the next iteration reads the token, the ids and the mask this one wrote
    return b.graph


def _cached_attention(b: GraphBuilder, x: str, heads: int, L: int, mask: str) -> str:
    """PopTransformer's GPT-2 attention of one new position over a KV cache of ``L`` (attention.py)."""
    B, _, H = b.shape(x)
    d = H // heads
    with b.scope("attn"):
        qkv = b.linear(x, 3 * H, name="c_attn")
        q = b.transpose(b.reshape(b.slice(qkv, 2, 0, H, name="q"), (B, 1, heads, d)), (0, 2, 1, 3))
        kv = b.transpose(b.reshape(b.slice(qkv, 2, H, 3 * H, name="kv"), (B, 1, 2, heads, d)), (2, 0, 3, 1, 4))
        cache = b.constant("kv_cache", (2, B, heads, L, d))  # always live, not a parameter
        clone = b.unary("copy", cache, name="kv_cache/clone")
        shifted = kv if L == 1 else b.concat([kv, b.slice(clone, 3, 0, L - 1, name="kv_cache/older")], axis=3,
                                             name="kv_cache/shift")  # a cache of 1 keeps only the new entry
        cache = b.remap(b.unary("copy", shifted, name="kv_cache/write"), name="kv_cache/remap")
        k = b.reshape(b.slice(cache, 0, 0, 1, name="k"), (B, heads, L, d))
        v = b.reshape(b.slice(cache, 0, 1, 2, name="v"), (B, heads, L, d))
        scores = b.add(b.matmul(q, b.transpose(k, (0, 1, 3, 2)), name="scores"), mask, name="mask")
        probs = b.softmax(b.remap(scores, name="softmax/layout"))
        ctx = b.matmul(probs, v, name="context")  # (B, heads, 1, d)
        out = b.linear(b.reshape(b.transpose(ctx, (0, 2, 1, 3)), (B, 1, H)), H, name="c_proj")
    return out
