"""Validation: the simulator against published hardware figures.

Each :class:`Check` names a figure of ``../shared/calibration/hardware.csv`` (its published
value is copied here, with the source, so the checks run without that file), how the simulator
reproduces it, the tolerance and why, and whether a constant was fitted to it (then the check
only guards the fit) or the model predicts it. ``tests/test_calibration.py`` holds the model to
the tolerances; ``python -m sim.validation`` writes the table to ``reports/validation.md``.

End to end: :data:`END_TO_END` (published throughputs held at 30 %) and the held-out rows of
``docs/reference/published-results.md`` (:data:`PUBLISHED_ROWS`, :data:`SCALING`): each a zoo model
configured as the row's source configures the run; those within 30 % when added (or within 25 %
since, :data:`PROMOTED`) are asserted at 30 %, the others are tracked in the report;
:data:`NOT_EXPRESSIBLE` lists the rows the zoo cannot run yet, and why.

Memory: :data:`MEMORY_ROWS` (poplibs' published IPUModel2 memory of single fully connected layers;
:data:`LAYER_MEMORY_ROWS`, of its convolution and gemm layers; :data:`MK1_MEMORY_ROWS`, both on Mk1; :data:`EMBEDDING_MEMORY_ROWS`, of its
embedding layers; :data:`POOLING_MEMORY_ROWS`, of its pooling layers;
:data:`RECURRENT_MEMORY_ROWS`, of its LSTM, GRU and CTC-loss layers; :func:`fullest_tile_rows`, its fullest tile
against its mean where that measures bytes: reported, not asserted),
:data:`KERAS_DENSE_ROWS` (a published PopVision profile of one Keras Dense layer, category by
category: the program-memory code constants are fitted to it) and :data:`MEMORY_FITS`
(configurations Graphcore publishes as fitting); asserted only once within their tolerance.

The modules, from the bottom up (each imports only those above it; this package re-exports
their names):

* ``setups``: :class:`Setup` and the workload builders per model family (``_resnet_train``,
  ``_bert_train``, ``_packed_bert``, ``_vit_train``, ``_swin_train``, ``_gpt2_train``, ...).
* ``runner``: each setup simulated once (``_simulated``), and what the report reads from the run.
* ``calibration``: :class:`Check`, the microbenchmarks that reproduce each figure, :data:`CHECKS`;
  :data:`VERTEX_CHECKS`, one compute set's hardware cycle counts (tessellate-ipu); :data:`KERNEL_CHECKS`, matmul
  and softmax kernels' cycles from a C600's PopVision profiles (ipu-stack); :data:`MICROBENCH_CHECKS`,
  dense matmuls and streaming-memory reads timed on a Bow IPU (PopSparse, SparQ); :data:`CONV_HW_CHECKS`, a
  4-channel convolution timed on Mk1 (lbm-graphcore), and :func:`conv_budget_rows`, where its sweep of
  availableMemoryProportion leaves no plan within the budget (:data:`CONV_BUDGET_SWEEP`).
* ``gather_scatter``: Graphcore's gather / scatter-add cycle sweep on a Bow IPU against sim.poptorch.
* ``schnet_block``: the same harness's SchNet interaction-block sweep, and the sweeps at availableMemoryProportion 0.1.
* ``schnet_training``: hydronet-gnn's SchNet training on QM9 over 1-16 Bow replicas (epoch times) against sim.poptorch.
* ``published``: the held-out rows (:class:`Row`, :data:`PUBLISHED_ROWS`, :data:`PUBLISHED_BY_ID`),
  their notes (:data:`DEPARTURES`), :data:`MEMORY_POINTS`, :data:`NOT_EXPRESSIBLE`.
* ``end_to_end``: :data:`END_TO_END`; ``scaling``: :class:`Ratio`, :data:`SCALING`.
* ``step_times``: time per step of the MLPerf packed BERT and ResNet-50 rows, and of the Pod16 / Pod64 pairs.
* ``gcl_crossovers``: GCL's methods against poplibs' measured crossovers.
* ``mk2_to_bow``: the Mk2/Bow pairs and which breakdown lines scale with the clock.
* ``memory``: poplibs' single-layer TotalMemory and fullest-tile rows; ``keras_dense``: the Keras Dense PopVision
  profile; ``memory_fits``: :data:`MEMORY_FITS`; ``memory_statements``: Graphcore's statements
  about tile memory, checked.
* ``held_out``: each held-out row's error, stored (held_out.csv) for runs to quote about workloads like theirs.
* ``report``: reports/validation.md's markdown (:func:`report`), one writer per section.
* ``__main__``: ``python -m sim.validation``.
"""

from .setups import (IMAGENET_TRAIN_IMAGES, POPRT_BENCHMARK_POPLIN_OPTIONS, Setup, TF1_MLPERF_LOGS_PER_EPOCH,
                     TF1_PREFETCH_DEPTH, TF1_RESNET_CHECKPOINTS, _HALF_FIRST_MOMENT, _bert_train,
                     _conformer_train, _effnet_train, _gpt2_infer, _gpt2_train, _packed_bert, _params,
                     _pytorch_bert_groups, _resnet_e2e, _resnet_infer, _resnet_train, _resnext_train, _show,
                     _squad_infer, _squad_train, _swin_infer, _swin_train, _unet_train, _vit_infer, _vit_train,
                     pytorch_bert_groups, tf1_steps_per_call)
from .runner import _outcome, _simulated, _simulated_or_raise, step_seconds, update_collective_seconds
from . import gather_scatter, schnet_block, schnet_training
from .calibration import (CHECKS, CONV_BUDGET_SWEEP, CONV_HW_CHECKS, KERNEL_CHECKS, MICROBENCH_CHECKS,
                          MICROBENCH_SOURCES, PROFILE_KERNELS, Check, conv_budget_rows,
                          TESSELLATE_BASICS, VERTEX_CHECKS, profile_kernel_cycles,
                          _AMP_WHY, _stream, add_compute_set_cycles, amp_tile_tflops, dense_matmul_tflops,
                          streaming_read_rate, host_syncs, io_bound_cycles, m2000_gateway_to_host,
                          m2000_host_link_shared, m2000_ipu_pair, tut6, tut6_host_exchange)
from .published import (DEPARTURES, MEMORY_POINTS, NOT_EXPRESSIBLE, PROMOTED, PUBLISHED, PUBLISHED_BY_ID,
                        PUBLISHED_ROWS, PUBLISHED_TOLERANCE, PUBLISHED_WHY, Row, _ASSERTED_I12,
                        _ASSERTED_PACKED, _ATT_FFN_V11_POD16, _ATT_FFN_V11_POD64, _ATT_FFN_V20_POD16,
                        _ATT_FFN_V20_POD64, _I1, _I11, _I12, _I13, _I2, _I3, _I4, _LARGE_AMP, _MLPERF,
                        _SQUAD_POPART_AMP, _SQUAD_PYTORCH_AMP)
from .end_to_end import END_TO_END, PERFORMANCE_RESULTS, _E2E_WHY, _END_TO_END_BY_ID, resnet50_training
from .scaling import Ratio, SCALING
from .step_times import (PACKED_STEP_FIT_ROWS, PACKED_STEP_ROWS, POD_PAIRS, RESNET_CLEAN_STEP_MS, RESNET_STEP_ROWS,
                         packed_step_line, packed_step_seconds)
from .gcl_crossovers import GCL_CROSSOVERS, gcl_crossover, gcl_implied_step_seconds
from .mk2_to_bow import CLOCK_LINES, MK2_TO_BOW, SECONDS_LINES, _E2E_SETUPS, _pair_published, _pair_setup
from .memory import (COMPILED_TOOLS, EMBEDDING_MEMORY_ROWS, EmbeddingMemoryRow, FULLEST_TILE_MIN_MEAN, FullestTileRow,
                     LAYER_MEMORY_ROWS, LAYER_MEMORY_TRACKED, LayerMemoryRow, MEMORY_ROWS, MEMORY_TOLERANCE,
                     MK1_MEMORY_ROWS, MK1_MEMORY_TRACKED, Mk1MemoryRow, POOLING_MEMORY_ROWS, POOLING_MEMORY_TRACKED,
                     PoolingMemoryRow, RECURRENT_MEMORY_ROWS, RECURRENT_MEMORY_TRACKED, RecurrentMemoryRow,
                     MEMORY_WHY, MemoryRow, POPLIBS_MEMORY, UNCOMPILED_CODE, counted_code_bytes, fc_layer_memory,
                     fullest_tile_rows)
from .keras_dense import (DenseRow, KERAS_DENSE, KERAS_DENSE_FITTED_TOLERANCE, KERAS_DENSE_ROWS,
                          KERAS_DENSE_TOLERANCE, _role, keras_dense_control_code, keras_dense_cycles,
                          keras_dense_executable, keras_dense_graph, keras_dense_max_live)
from .memory_fits import MEMORY_FITS, _EXAMPLES_BERT, _EXAMPLES_GPT2, _PT_B10, _fits, _squad_large_384, fullest_share
from .memory_statements import _statement_rows
from .report import (REPORT, _embedding_memory_section, _fullest_tile_section, _gcl_section, _generation_section,
                     _layer_memory_section, _mk1_memory_section,
                     _fit_line, _keras_dense_section, _mb, _memory_rows, _memory_section, _oom_text,
                     _packed_step_section,
                     _published_section, _resnet_step_section, _rows, _status, report)

__all__ = [
    "IMAGENET_TRAIN_IMAGES", "POPRT_BENCHMARK_POPLIN_OPTIONS", "Setup", "TF1_MLPERF_LOGS_PER_EPOCH",
    "TF1_PREFETCH_DEPTH", "TF1_RESNET_CHECKPOINTS", "_HALF_FIRST_MOMENT", "_bert_train", "_conformer_train",
    "_effnet_train", "_gpt2_infer", "_gpt2_train", "_packed_bert", "_params", "_pytorch_bert_groups",
    "_resnet_e2e", "_resnet_infer", "_resnet_train", "_resnext_train", "_show", "_squad_infer",
    "_squad_train", "_swin_infer", "_swin_train", "_unet_train", "_vit_infer", "_vit_train", "pytorch_bert_groups",
    "tf1_steps_per_call", "_outcome", "_simulated", "_simulated_or_raise", "step_seconds",
    "update_collective_seconds", "CHECKS", "KERNEL_CHECKS", "PROFILE_KERNELS", "profile_kernel_cycles",
    "MICROBENCH_CHECKS", "MICROBENCH_SOURCES", "CONV_HW_CHECKS", "CONV_BUDGET_SWEEP", "conv_budget_rows",
    "dense_matmul_tflops",
    "streaming_read_rate", "Check", "TESSELLATE_BASICS", "VERTEX_CHECKS", "_AMP_WHY", "_stream",
    "add_compute_set_cycles", "amp_tile_tflops", "host_syncs",
    "io_bound_cycles", "m2000_gateway_to_host", "m2000_host_link_shared", "m2000_ipu_pair", "tut6",
    "tut6_host_exchange", "DEPARTURES", "MEMORY_POINTS", "NOT_EXPRESSIBLE", "PROMOTED", "PUBLISHED",
    "PUBLISHED_BY_ID", "PUBLISHED_ROWS", "PUBLISHED_TOLERANCE", "PUBLISHED_WHY", "Row", "_ASSERTED_I12",
    "_ASSERTED_PACKED", "_ATT_FFN_V11_POD16", "_ATT_FFN_V11_POD64", "_ATT_FFN_V20_POD16",
    "_ATT_FFN_V20_POD64", "_I1", "_I11", "_I12", "_I13", "_I2", "_I3", "_I4", "_LARGE_AMP", "_MLPERF",
    "_SQUAD_POPART_AMP", "_SQUAD_PYTORCH_AMP", "END_TO_END", "PERFORMANCE_RESULTS", "_E2E_WHY",
    "_END_TO_END_BY_ID", "resnet50_training", "Ratio", "SCALING", "PACKED_STEP_FIT_ROWS", "PACKED_STEP_ROWS",
    "POD_PAIRS",
    "RESNET_CLEAN_STEP_MS", "RESNET_STEP_ROWS", "packed_step_line", "packed_step_seconds", "GCL_CROSSOVERS",
    "gcl_crossover", "gcl_implied_step_seconds", "CLOCK_LINES", "MK2_TO_BOW", "SECONDS_LINES", "_E2E_SETUPS",
    "_pair_published", "_pair_setup", "EMBEDDING_MEMORY_ROWS", "EmbeddingMemoryRow", "POOLING_MEMORY_ROWS",
    "POOLING_MEMORY_TRACKED", "PoolingMemoryRow", "RECURRENT_MEMORY_ROWS", "RECURRENT_MEMORY_TRACKED",
    "RecurrentMemoryRow", "MEMORY_ROWS",
    "MEMORY_TOLERANCE", "MEMORY_WHY", "MemoryRow", "POPLIBS_MEMORY", "UNCOMPILED_CODE", "fc_layer_memory",
    "FULLEST_TILE_MIN_MEAN", "FullestTileRow", "fullest_tile_rows", "fullest_share", "_fullest_tile_section",
    "COMPILED_TOOLS", "LAYER_MEMORY_ROWS", "LAYER_MEMORY_TRACKED", "LayerMemoryRow", "counted_code_bytes",
    "_layer_memory_section", "MK1_MEMORY_ROWS", "MK1_MEMORY_TRACKED", "Mk1MemoryRow", "_mk1_memory_section",
    "DenseRow", "KERAS_DENSE", "KERAS_DENSE_FITTED_TOLERANCE", "KERAS_DENSE_ROWS", "KERAS_DENSE_TOLERANCE",
    "_role", "keras_dense_control_code", "keras_dense_cycles", "keras_dense_executable", "keras_dense_graph",
    "keras_dense_max_live", "MEMORY_FITS", "_EXAMPLES_BERT", "_EXAMPLES_GPT2", "_PT_B10", "_fits",
    "_squad_large_384", "_statement_rows", "REPORT", "_embedding_memory_section", "_gcl_section",
    "_generation_section", "_keras_dense_section", "_mb", "_fit_line", "_memory_rows", "_memory_section", "_oom_text",
    "_packed_step_section", "_published_section", "_resnet_step_section", "_rows", "_status", "report"
]
