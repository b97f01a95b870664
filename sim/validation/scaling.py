"""Scaling ratios: :class:`Ratio` and :data:`SCALING`, how throughput scales between two published
runs of one workload (replicas, batch size, Mk2 to Bow), simulated against published."""

from __future__ import annotations

from dataclasses import dataclass

from .end_to_end import _END_TO_END_BY_ID
from .published import PUBLISHED_BY_ID


@dataclass(frozen=True)
class Ratio:
    """How throughput scales between two published runs of one workload: the ratio of the
    simulated throughputs against the ratio of the published ones."""

    name: str
    what: str
    source: str
    numerator: str  # row ids (PUBLISHED_ROWS, or "B1"/"B2" of END_TO_END)
    denominator: str
    asserted: bool

    @staticmethod
    def _row(row_id: str):
        return _END_TO_END_BY_ID.get(row_id) or PUBLISHED_BY_ID[row_id]

    @property
    def published(self) -> float:
        return self._row(self.numerator).published / self._row(self.denominator).published

    def simulated(self) -> float:
        return self._row(self.numerator).simulated() / self._row(self.denominator).simulated()


def _batch_ratio(name: str, what: str, tag: str, row: str, small: int, large: int, asserted: bool = True) -> Ratio:
    """The throughput of held-out row ``row`` (the doc's ``tag``) at batch ``large`` over batch ``small``."""
    return Ratio(name, what, f"{tag} {row} bs{small} → bs{large}", f"{row} bs{large}", f"{row} bs{small}", asserted)


SCALING = [
    Ratio("resnet50_mk2_v10_16_64", "ResNet-50 training, Mk2 POD16 → POD64 (GBS 1,920 → 2,560)",
          "MLP v1.0 M5 → M6", "M6", "M5", True),
    Ratio("resnet50_mk2_v11_16_64", "ResNet-50 training, Mk2 POD16 → POD64", "MLP v1.1 M13 → M14", "M14", "M13", True),
    Ratio("resnet50_mk2_v11_64_128", "ResNet-50 training, Mk2 POD64 → POD128",
          "MLP v1.1 M14 → M15", "M15", "M14", True),
    Ratio("resnet50_mk2_v11_128_256", "ResNet-50 training, Mk2 POD128 → POD256 (same GA 2, over GW-Links)",
          "MLP v1.1 M15 → M16", "M16", "M15", True),
    Ratio("resnet50_bow_v20_16_64", "ResNet-50 training, Bow Pod16 → Pod64", "MLP v2.0 M23 → M24", "M24", "M23", True),
    Ratio("resnet50_bow_v20_64_128", "ResNet-50 training, Bow Pod64 → Pod128",
          "MLP v2.0 M24 → M25", "M25", "M24", True),
    Ratio("resnet50_bow_v20_128_256", "ResNet-50 training, Bow Pod128 → Pod256 (same GA 2, over GW-Links)",
          "MLP v2.0 M25 → M26", "M26", "M25", True),
    Ratio("resnet50_bow_p_16_64", "ResNet-50 training, Bow Pod16 → Pod64 (end-to-end rows)",
          "GCN-P B1 → B2", "B2", "B1", True),
    Ratio("resnet50_bow_p_64_256", "ResNet-50 training, Bow Pod64 → Pod256", "GCN-P B2 → B3", "B3", "B2", True),
    Ratio("resnet50_bow_s30_16_64", "ResNet-50 training, Bow Pod16 → Pod64", "GCN-S30 B13 → B15", "B15", "B13", True),
    Ratio("resnet50_bow_s30_64_256", "ResNet-50 training, Bow Pod64 → Pod256", "GCN-S30 B15 → B16", "B16", "B15", True),
    *(Ratio(f"resnet50_pytorch_bow_alcf_{a}_{b}", f"ResNet-50 PyTorch training, {a} → {b} Bow IPUs (a replica each)",
            f"ALCF {lo} → {hi}", hi, lo, True)
      for a, b, lo, hi in ((2, 4, "A3", "A4"), (4, 8, "A4", "A5"), (8, 16, "A5", "A6"))),
    Ratio("resnet50_pytorch_bow_alcf_processes_4_1", "ResNet-50 PyTorch training, 4 Bow IPUs: an instance a replica → "
          "one instance for the 4 (SDK 3.0 → 3.3; the host's data pipeline, not modelled)", "ALCF A4 → A7", "A7", "A4",
          False),
    Ratio("bert_large_ph1_p_16_64", "BERT-Large Ph1 PopART, Bow Pod16 → Pod64 (mbs 8)", "GCN-P B10 → B12",
          "B12", "B10", True),
    # the same global batch and replica on 4 x the IPUs at a quarter of the GA (BERT-Large packed, GCN-S31)
    *(Ratio(f"bert_large_{name}_s31_16_64", f"BERT-Large {what}, Bow Pod16 → Pod64 (GA ÷ 4)", f"GCN-S31 {lo} → {hi}",
            hi, lo, True)
      for name, what, lo, hi in (("ph1_popart", "Ph1 packed PopART", "B32", "B35"),
                                 ("ph1_pytorch", "Ph1 packed PyTorch", "B34", "B37"),
                                 ("ph2_popart", "Ph2 packed PopART", "B38", "B40"),
                                 ("ph2_pytorch", "Ph2 packed PyTorch", "B39", "B41"))),
    # MLPerf's packed BERT-Large: the same 8-IPU replica, more replicas at a smaller GA
    *(Ratio(f"bert_large_mlperf_{name}", f"BERT-Large MLPerf {what}", f"MLP {src} {lo} → {hi}", hi, lo, True)
      for name, what, src, lo, hi in (("mk2_v11_64_128", "v1.1 closed, Mk2 POD64 → POD128 (GA 96)", "v1.1", "M9", "M11"),
                                      ("mk2_v11_open_64_128", "v1.1 open, Mk2 POD64 → POD128 (GA 96)", "v1.1", "M10",
                                       "M12"),
                                      ("bow_v20_64_128", "v2.0, Bow Pod64 → Pod128 (GA 96 → 64)", "v2.0", "M18", "M19"),
                                      ("bow_v20_128_256", "v2.0, Bow Pod128 → Pod256 (GA 64 → 36)", "v2.0", "M19",
                                       "M20"))),
    Ratio("vit_base_pretrain_s30_16_64", "ViT-B/16 pre-training, Bow Pod16 → Pod64 (GA 2,048 → 512)",
          "GCN-S30 B22 → B23", "B23", "B22", True),
    *(Ratio(f"conformer_{gen}_{a}_{b}", f"Conformer-medium training, {what} (GBS 16,128)", f"EX-CF C{i} → C{i + 1}",
            f"C{i + 1}", f"C{i}", True)
      for gen, i, a, b, what in (("mk2", 1, 4, 16, "IPU-M2000 → Mk2 POD16"), ("mk2", 2, 16, 64, "Mk2 POD16 → POD64"),
                                 ("bow", 4, 4, 16, "Bow-2000 → Bow Pod16"), ("bow", 5, 16, 64, "Bow Pod16 → Pod64"))),
    Ratio("efficientnet_b4_bow_s30_16_64", "EfficientNet-B4 G16 training, Bow Pod16 → Pod64 (GBS 6,144)",
          "GCN-S30 B17 → B19", "B19", "B17", True),
    Ratio("efficientnet_b4_bow_s30_64_256", "EfficientNet-B4 G16 training, Bow Pod64 → Pod256 (GBS 6,144)",
          "GCN-S30 B19 → B20", "B20", "B19", True),
    Ratio("resnet50_mk2_to_bow", "ResNet-50 training, GBS 1,920 on POD16: Mk2 → Bow", "MLP v1.0 M5 → GCN-P B1",
          "B1", "M5", True),
    # the Conformer README gives each configuration on Mk2 and on Bow: what the simulator misses in these rows
    # (+41-51 %) is the same share on both, as a cost in tile cycles would be
    *(Ratio(f"conformer_mk2_to_bow_{size.lower()}", f"Conformer-medium training, {size}: Mk2 → Bow (GBS 16,128)",
            f"EX-CF C{i} → C{i + 3}", f"C{i + 3}", f"C{i}", True)
      for i, size in ((1, "POD4"), (2, "POD16"), (3, "POD64"))),
    *(_batch_ratio(f"resnet50_infer_{tag}_1_90", f"ResNet-50 inference {what}, batch 1 → 90", "RT", row, 1, 90)
      for tag, what, row in (("fp16_synth", "fp16 synthetic", "I1"), ("fp16_real", "fp16 real data", "I2"),
                             ("fp8_synth", "FP8 synthetic", "I4"))),
    Ratio("resnet50_infer_fp16_to_fp8_synth_90", "ResNet-50 inference synthetic, batch 90: fp16 → FP8",
          "RT I1 bs90 → I4 bs90", "I4 bs90", "I1 bs90", True),
    _batch_ratio("resnet50_infer_fp32_synth_1_16", "ResNet-50 inference fp32 synthetic, batch 1 → 16",
                 "RT", "I3", 1, 16),
    Ratio("resnet50_infer_latency_to_throughput", "ResNet-50 inference: batch 1, 1 per step → batch 80, 128 per step",
          "RT I6 → I5", "I5", "I6", True),
    _batch_ratio("vit_base_infer_8_32", "ViT-B/16 inference fp16, batch 8 → 32", "RT", "I13", 8, 32),
    _batch_ratio("gpt2_xl_decode_1_8", "GPT2-XL greedy decode, 8 Mk2 IPUs sharded, batch 1 → 8",
                 "PT", "I16", 1, 8, asserted=False),
    _batch_ratio("gpt2_xl_decode_8_24", "GPT2-XL greedy decode, 8 Mk2 IPUs sharded, batch 8 → 24",
                 "PT", "I16", 8, 24),
    Ratio("gpt2_xl_decode_mk2_to_c600_8", "GPT2-XL greedy decode, batch 8: 8 Mk2 IPUs → 8 C600 cards",
          "PT I16 bs8 → I16c bs8", "I16c bs8", "I16 bs8", True),
    Ratio("resnet50_infer_fp16_to_fp8_bytemlperf_4", "ResNet-50 inference, batch 4, 4 client threads: fp16 → FP8",
          "BM I17 bs4 → I18 bs4", "I18 bs4", "I17 bs4", True),
    _batch_ratio("clip_vit_b32_infer_32_56", "CLIP ViT-B/32 inference, batch 32 → 56 (100 texts a call)",
                 "RT", "I22", 32, 56),
    _batch_ratio("roformer_v2_infer_1_64", "RoFormer-V2 small inference, batch 1 → 64 (1 batch per step)",
                 "RT", "I23", 1, 64, asserted=False),
    _batch_ratio("roformer_v2_infer_64_356", "RoFormer-V2 small inference, batch 64 → 356 (1 batch per step)",
                 "RT", "I23", 64, 356),
    _batch_ratio("clip_text_l14_infer_4_40", "CLIP ViT-L/14 text encoder inference, batch 4 → 40 (3 client threads)",
                 "BM", "I24", 4, 40),
    Ratio("swin_large_infer_fp16_to_fp8", "Swin-L inference at 384 x 384: fp16 batch 2 → FP8 batch 4",
          "BM I19 → I19 fp8", "I19 fp8", "I19", True),
]
