"""Configurations Graphcore publishes as fitting in memory (and one its notes say does not):
:data:`MEMORY_FITS`, each compiled by the simulator (:func:`_fits`) and asserted by
tests/test_memory.py."""

from __future__ import annotations

from dataclasses import replace

from .. import compile as compile_graph
from ..compiler.memory import IpuMemory
from ..errors import OutOfMemoryError
from .published import _SQUAD_PYTORCH_AMP, PUBLISHED_BY_ID
from .setups import (EFFNET_G16, Setup, _bert_train, _cnn_pytorch_infer, _effnet_pytorch_train, _gpt2_infer,
                     _gpt2_train, _params, _squad_infer, _squad_train)


# Configurations Graphcore publishes as fitting (compiled, not run; inference configurations among them): the
# simulator must fit them too; and one its own notes say does not fit. (row id, workload, source, setup,
# published to fit)
_EXAMPLES_BERT = "graphcore/examples `nlp/bert/pytorch/"


def _squad_large_384(replicas: int) -> Setup:
    """configs_squad.yml squad_large_384: 8-IPU pipeline, the SQuAD span head on the last IPU, AdamW
    with its state on chip and sharded, the first moment in fp16 and the second in fp32
    (``enable_half_first_order_momentum``; nlp/bert/pytorch/optimization.py), vocab 30522 (the
    config's default)."""
    return _squad_train(replicas, 30522, 2, _SQUAD_PYTORCH_AMP, "adamw", pytorch=True)


_EXAMPLES_GPT2 = "graphcore/examples `nlp/gpt2/pytorch/benchmarks.yml` "
_EXAMPLES_CNNS = "graphcore/examples `vision/cnns/pytorch/train/configs.yml` "
_FLASH_DEMO = ("graphcore-research/flash-attention-ipu `demo/flash-attention-ipu-demo.ipynb` and `demo/train.py` at "
               "its HEAD (SDK 3.3, the four IPUs of an IPU-M2000, gc-monitor in the notebook)")


def _nanogpt_char(seq_len: int) -> Setup:
    """nanoGPT's character-level Shakespeare model as flash-attention-ipu's demo trains it with PyTorch's
    own attention (``train.py``: nanoGPT's ``train_shakespeare_char`` config, 6 layers of width 384 with 6
    heads, biases, vocabulary 65, dropout 0, the head tied to the token embedding, fp32; micro-batch 2,
    4 replicas, gradient accumulation 8, availableMemoryProportion 0.08, poptorch.optim.AdamW with its
    state on chip), run as the zoo's GPT-2 at those sizes."""
    params = _params(micro_batch=2, seq_len=seq_len, num_layers=6, hidden=384, heads=6, vocab=65, n_positions=1024,
                     dropout=0.0, dtype="float32")
    return Setup("gpt2-small", params, "ipu-m2000", replicas=4, accumulation=8, amp=(0.08,), half_partials=False,
                 optimizer="adamw", output_mode="All")


#: B10's run as the PyTorch config builds it: one fused QKV weight (the PopART config splits it:
#: split_qkv), a checkpoint on every layer, the last included, and the PyTorch parameter groups
#: (``_bert_train``'s ``pytorch``)
_PT_B10 = replace(PUBLISHED_BY_ID["B10"].setup, pytorch_bert_groups=True,
                  params=tuple(kv for kv in PUBLISHED_BY_ID["B10"].setup.params if kv[0] != "split_qkv")
                  + (("checkpoint_last_layer", True),))
MEMORY_FITS = [
    ("GCN-P B10", "BERT-Large phase 1 (SL128), Bow Pod16, micro-batch 8, layers [3, 7, 7, 7]",
     _EXAMPLES_BERT + "configs_pretraining.yml` pretrain_large_128 (benchmark "
     "`pytorch_bert_large_pretrain_real_pod16`)", _PT_B10, True),
    ("L128 ALS", "the same with automatic loss scaling, AMP [0.13, 0.2, 0.2, 0.2]",
     _EXAMPLES_BERT + "configs_pretraining.yml` pretrain_large_128_ALS",
     replace(_PT_B10, amp=(0.13, 0.20, 0.20, 0.20), auto_loss_scaling=True), True),
    ("L512", "BERT-Large phase 2 (SL512), Bow Pod16, micro-batch 2, layers [3, 7, 7, 7]",
     _EXAMPLES_BERT + "configs_pretraining.yml` pretrain_large_512",
     _bert_train("bert-large", "bow-pod16", 4, 2, 2048, [3, 7, 7, 7], [0.10, 0.15, 0.15, 0.15], seq_len=512,
                 mask_tokens=76, embedding_serialization=2, pytorch=True), True),
    ("B128", "BERT-Base phase 1 (SL128), Bow Pod16, micro-batch 32, layers [0, 4, 4, 4]",
     _EXAMPLES_BERT + "configs_pretraining.yml` pretrain_base_128",
     _bert_train("bert-base", "bow-pod16", 4, 32, 512, [0, 4, 4, 4], [0.25] * 4, pytorch=True), True),
    ("B512", "BERT-Base phase 2 (SL512), Bow Pod16, micro-batch 8, layers [0, 4, 4, 4]",
     _EXAMPLES_BERT + "configs_pretraining.yml` pretrain_base_512",
     _bert_train("bert-base", "bow-pod16", 4, 8, 512, [0, 4, 4, 4], [0.25] * 4, seq_len=512, mask_tokens=76,
                 embedding_serialization=2, pytorch=True),
     True),
    *((rid, f"BERT-{size} phase {phase} (SL{seq}), {system}, micro-batch {mb}, layers {lpi}, {replicas} "
       f"replica{'s' if replicas > 1 else ''}{note}", _EXAMPLES_BERT + f"configs_pretraining.yml` {config}"
       + (" (benchmark `pytorch_bert_" + bench + "`)" if bench else ""),
       replace(_bert_train(f"bert-{size.lower()}", "bow-pod64" if replicas > 4 else "bow-2000", replicas, mb, ga, lpi,
                           amp, seq_len=seq, mask_tokens=20 if seq == 128 else 76, vocab=30522,
                           embedding_serialization=es, pytorch=True, attention_dropout=0.0, output_mode="Sum"),
               auto_loss_scaling=config.endswith("ALS")), True)
      for rid, size, phase, seq, system, mb, lpi, replicas, ga, amp, es, config, bench, note in (
          ("L128 R1", "Large", 1, 128, "Bow-2000", 8, [3, 7, 7, 7], 1, 8192, [0.15, 0.25, 0.25, 0.25], 2,
           "pretrain_large_128_pod4", "large_pretrain_real_pod4", " (optimizer state not sharded)"),
          ("L512 R1", "Large", 2, 512, "Bow-2000", 2, [3, 7, 7, 7], 1, 8192, [0.10, 0.15, 0.15, 0.15], 2,
           "pretrain_large_512_pod4", "large_pretrain_real_pod4", " (optimizer state not sharded)"),
          ("B128 R1", "Base", 1, 128, "Bow-2000", 32, [0, 4, 4, 4], 1, 2048, [0.25] * 4, 1,
           "pretrain_base_128_pod4", "base_pretrain_real_pod4", " (optimizer state not sharded)"),
          ("L128 P64", "Large", 1, 128, "Bow Pod64", 8, [3, 7, 7, 7], 16, 512, [0.14, 0.19, 0.19, 0.19], 2,
           "pretrain_large_128_POD64", "large_sl128_pretrain_real_pod64_conv", ""),
          ("L128 P64 ALS", "Large", 1, 128, "Bow Pod64", 8, [3, 7, 7, 7], 16, 512, [0.05, 0.13, 0.13, 0.13], 6,
           "pretrain_large_128_POD64_ALS", "", " with automatic loss scaling, AMP [0.05, 0.13, 0.13, 0.13], the LM "
           "head in 6 pieces"),
          ("L512 P64", "Large", 2, 512, "Bow Pod64", 2, [3, 7, 7, 7], 16, 512, [0.13, 0.19, 0.19, 0.19], 2,
           "pretrain_large_512_POD64", "large_sl512_pretrain_real_pod64_conv", ""))),
    ("SQ8", "BERT-Large SQuAD (SL384), Bow Pod16, 8-IPU pipeline, 2 replicas",
     _EXAMPLES_BERT + "configs_squad.yml` squad_large_384 (benchmark `pytorch_bert_squad_large_pretrain_real_pod16`)",
     _squad_large_384(2), True),
    ("SQ8 R1", "the same with 1 replica (optimizer state not sharded)",
     "the same config's note: \"NB This requires replication_factor=2 to fit\"", _squad_large_384(1), False),
    ("G-S", "GPT-2 small (SL1024), 4-IPU pipeline [0, 4, 4, 4], 4 replicas",
     _EXAMPLES_GPT2 + "`pytorch_gpt2_small_train_gen_pod16`",
     _gpt2_train("gpt2-small", [0, 4, 4, 4], [0.15] * 4, 4, 2048, rts=True), True),
    ("G-M", "GPT-2 medium (SL1024), 8-IPU pipeline [0, 3, 3, 3, 3, 4, 4, 4], 2 replicas",
     _EXAMPLES_GPT2 + "`pytorch_gpt2_medium_train_gen_pod16`",
     _gpt2_train("gpt2-medium", [0, 3, 3, 3, 3, 4, 4, 4], [0.30] + [0.15] * 7, 2, 4096, rts=True), True),
    ("G-L512", "GPT-2 large (SL512), 8-IPU pipeline [1, 5, 5, 5, 5, 5, 5, 5], 2 replicas",
     _EXAMPLES_GPT2 + "`pytorch_gpt2_large_sl512_train_gen_pod16`",
     _gpt2_train("gpt2-large", [1, 5, 5, 5, 5, 5, 5, 5], [0.15, 0.12] + [0.15] * 6, 2, 4096, rts=True, seq_len=512,
                 embedding_serialization=8), True),
    ("G-L", "GPT-2 large (SL1024), 16-IPU pipeline, 1 replica (optimizer state not sharded)",
     _EXAMPLES_GPT2 + "`pytorch_gpt2_large_train_gen_pod16`",
     _gpt2_train("gpt2-large", [0, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 2],
                 [0.15, 0.15, 0.2, 0.2, 0.2, 0.15, 0.15, 0.2, 0.2, 0.15, 0.15, 0.2, 0.2, 0.15, 0.15, 0.2], 1, 8192,
                 rts=False), True),
    ("G-XL I", "GPT-2 XL inference (SL1024), batch 1, 8 IPUs [1, 6, 6, 7, 7, 7, 7, 7], sharded",
     _EXAMPLES_GPT2 + "`pytorch_gpt2_xlarge_infer_gen_pod16`", _gpt2_infer("gpt2-xl", [1, 6, 6, 7, 7, 7, 7, 7], 2),
     True),
    ("G-M I", "GPT-2 medium inference (SL1024), batch 1, 4 IPUs [1, 7, 8, 8], sharded",
     _EXAMPLES_GPT2 + "`pytorch_gpt2_medium_infer_gen_pod16`", _gpt2_infer("gpt2-medium", [1, 7, 8, 8], 4), True),
    ("G-L I", "GPT-2 large inference (SL1024), batch 1, 8 IPUs [1, 5, 5, 5, 5, 5, 5, 5], sharded",
     _EXAMPLES_GPT2 + "`pytorch_gpt2_large_infer_gen_pod16`", _gpt2_infer("gpt2-large", [1, 5, 5, 5, 5, 5, 5, 5], 2),
     True),
    ("G-S I", "GPT-2 small inference (SL1024), batch 1, 2 IPUs [2, 10], sharded",
     _EXAMPLES_GPT2 + "`pytorch_gpt2_small_infer_gen_pod16`", _gpt2_infer("gpt2-small", [2, 10], 8), True),
    ("E-B0", "EfficientNet-B0 G16 training, Bow Pod16, micro-batch 20, 2-IPU pipeline split at block4a, 8 replicas",
     _EXAMPLES_CNNS + "`efficientnet-b0-g16-gn-pod16` (benchmark `pytorch_efficientnet_b0_g16_train_real_pod16`)",
     _effnet_pytorch_train("efficientnet-b0", 20, 5, 0.15, rts=False), True),
    ("E-B4", "EfficientNet-B4 G16 training, Bow Pod16, micro-batch 4, 2-IPU pipeline split at block4a, 8 replicas, "
     "optimizer state sharded", _EXAMPLES_CNNS + "`efficientnet-b4-g16-gn-pod16` (benchmark "
     "`pytorch_efficientnet_b4_g16_train_real_pod16`; the config splits after block4a's depthwise convolution "
     "(`blocks/3/0/bn2`) and adds the checkpoints `add_1`, `add_3`, which the zoo's EfficientNet cannot place [U])",
     _effnet_pytorch_train("efficientnet-b4", 4, 64, 0.1, rts=True), True),
    *((rid, f"{what} inference, batch {batch}, one Mk2 IPU a replica, {io} IO tiles",
       f"graphcore/examples `vision/cnns/pytorch/inference/benchmarks.yml` `{bench}` (the larger of its two batches)",
       _cnn_pytorch_infer(model, batch, io, **params), True)
      for rid, what, bench, model, batch, io, params in (
          ("CI R50", "ResNet-50", "pytorch_resnet50_infer_gen_pod4", "resnet50", 64, 64, dict(norm="batch")),
          ("CI E-B0", "EfficientNet-B0", "pytorch_efficientnet_b0_infer_gen_pod4", "efficientnet-b0", 48, 64,
           dict(norm="batch")),
          ("CI E-B0 G16", "EfficientNet-B0 G16 (group norm)", "pytorch_efficientnet_b0_gn_infer_gen_pod4",
           "efficientnet-b0", 100, 64, EFFNET_G16),
          ("CI E-B4", "EfficientNet-B4", "pytorch_efficientnet_b4_infer_gen_pod4", "efficientnet-b4", 12, 32,
           dict(norm="batch")),
          ("CI E-B4 G16", "EfficientNet-B4 G16 (group norm)", "pytorch_efficientnet_b4_gn_infer_gen_pod4",
           "efficientnet-b4", 21, 32, EFFNET_G16))),
    ("RT I11 fp32 bs2", "BERT-Base SQuAD inference fp32 (SL256, bertsquad-12), batch 2, one C600 IPU",
     "graphcore/PopRT `examples/bert/README.md` bert_fp32 (525 sequences/s at batch 2; out of memory at 4: "
     "\"Published out-of-memory points\")", _squad_infer("bert-base", 2, 256, 1, io_tiles=32, dtype="float32"),
     True),
    ("NG 256", "nanoGPT character model (6 x 384, fp32) training at context 256, micro-batch 2, 4 replicas, "
     "PyTorch's attention", _FLASH_DEMO + ": Appendix A trains it 2,000 steps (`standard-attn-train-blocksize256`)",
     _nanogpt_char(256), True),
    ("NG 1024", "the same at context 1,024", _FLASH_DEMO + ": \"Out of memory: Cannot fit all variable data onto one "
     "or more tiles\" (`standard-attn-train`; the profile's largest variables the six layers' fp32 softmax outputs, "
     "50.3 MB each)", _nanogpt_char(1024), False),
]


def fullest_share(memory: dict[int, IpuMemory] | OutOfMemoryError) -> float:
    """The fullest tile of the fullest IPU as a share of a tile's memory (infinite when out of memory)."""
    if isinstance(memory, OutOfMemoryError):
        return float("inf")
    return max(m.peak_tile_bytes / m.capacity_per_tile for m in memory.values())


def _fits(setup: Setup) -> dict[int, IpuMemory] | OutOfMemoryError:
    try:
        return compile_graph(setup.graph(), setup.system, setup.options(), training=setup.training,
                             optimizer=setup.sim_optimizer()).memory
    except OutOfMemoryError as e:
        return e
