"""The PyTorch BERT rows of sim.validation run as graphcore/examples' PyTorch BERT (SDK 3.1) configures
them: BERT's attention-probability dropout, and the validation Setup's outputMode."""

import pytest

import models
from sim import simulate
from sim.errors import GraphError
from sim.options import OutputMode
from sim.program import Repeat, Sequence, StreamCopy
from sim.validation import PUBLISHED_BY_ID, Setup

TINY = dict(micro_batch=1, seq_len=16, hidden=64, heads=4, num_layers=2, vocab=128, max_positions=16)


def _dropouts(g) -> list[str]:
    return [op.name for op in g.ops if op.kind == "dropout"]


def test_attention_dropout_zero_removes_exactly_the_attention_probability_dropouts():
    default = _dropouts(models.get("bert-base", **TINY))
    off = _dropouts(models.get("bert-base", attention_dropout=0.0, **TINY))
    assert len(default) - len(off) == TINY["num_layers"]  # one on the probabilities per layer
    # the hidden dropouts (embeddings, attention output, FFN) stay
    assert len(off) == 1 + 2 * TINY["num_layers"]


def test_attention_dropout_defaults_to_dropout():
    same = models.get("bert-base", attention_dropout=0.1, **TINY)
    default = models.get("bert-base", **TINY)
    assert [(o.name, o.kind, o.attrs) for o in same.ops] == [(o.name, o.kind, o.attrs) for o in default.ops]


def test_attention_dropout_rejects_a_non_probability():
    with pytest.raises(GraphError, match="attention_dropout=1.5: expected a probability"):
        models.get("bert-base", attention_dropout=1.5, **TINY)


def test_setup_output_mode_sets_the_option_and_is_described():
    setup = Setup("bert-base", (), "bow-2000", output_mode="All")
    assert setup.options().output_mode == OutputMode.All
    assert "outputMode All" in setup.describe()
    assert Setup("bert-base", (), "bow-2000").options().output_mode == OutputMode.Default


def _copies_run(item) -> int:
    """Stream copies to the host that one call runs (a Repeat's body counted once per repeat)."""
    if isinstance(item, Repeat):
        return item.count * _copies_run(item.body)
    if isinstance(item, Sequence):  # and Parallel
        return sum(_copies_run(i) for i in item.items)
    return int(isinstance(item, StreamCopy) and item.direction == "from_ipu")


def _outputs_copied(setup: Setup) -> int:
    run = simulate(setup.graph(), setup.system, setup.options(), training=True, optimizer=setup.sim_optimizer())
    return _copies_run(run.executable.program)


def test_output_mode_all_returns_the_outputs_of_every_micro_batch():
    params = tuple(dict(TINY, layers_per_ipu=[1, 1]).items())
    base = dict(model="bert-base", params=tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in params),
                system="bow-2000", accumulation=8)
    final, every = _outputs_copied(Setup(**base)), _outputs_copied(Setup(**base, output_mode="All"))
    summed = _outputs_copied(Setup(**base, output_mode="Sum"))
    # one output (the loss): Final and Sum once per call, All once per micro-batch (GA 8)
    assert (final, summed, every) == (1, 1, 8)


@pytest.mark.parametrize("row, mask_tokens", [("B34", 22), ("B37", 22), ("B39", 78), ("B41", 78)])
def test_pytorch_packed_rows_follow_run_pretraining(row, mask_tokens):
    """run_pretraining.py:61-62 adds max_sequences_per_pack - 1 to mask_tokens for packed data;
    ipu_options.py:61 sets outputMode Sum; configs_pretraining.yml:34 attention dropout 0."""
    setup = PUBLISHED_BY_ID[row].setup
    params = dict(setup.params)
    assert (params["mask_tokens"], params["attention_dropout"], setup.output_mode) == (mask_tokens, 0.0, "Sum")


def test_pytorch_squad_row_follows_run_squad():
    """run_squad.py:51 outputMode All; configs_squad.yml attention_probs_dropout_prob 0.15, device_iterations 2."""
    setup = PUBLISHED_BY_ID["B43"].setup
    assert (dict(setup.params)["attention_dropout"], setup.output_mode, setup.device_iterations) == (0.15, "All", 2)
