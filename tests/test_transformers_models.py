"""Hugging Face Transformers models through sim.poptorch, as a user brings them (transformers 5, torch 2.13).

Small configurations (two layers of width 64) of the architectures whose capture broke on something torch or
Transformers do that PopTorch's torch 2.0 did not: the KV cache that starts as ``torch.tensor([])``
(GPT-2, LLaMA), grouped-query attention and RMSNorm (LLaMA, Qwen2), a slice of nothing (Phi-3); and the
README's LLaMA-2-7B example, built on the meta device.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import sim.poptorch as poptorch  # noqa: E402
from sim.cli.main import main  # noqa: E402

README = Path(__file__).resolve().parent.parent / "README.md"
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=256,
             max_position_embeddings=64)

CONFIGS = {
    "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=64, bos_token_id=0, eos_token_id=0)),
    "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL, num_key_value_heads=2)),
    "qwen2": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**SMALL, num_key_value_heads=2)),
    "phi3": lambda: transformers.Phi3ForCausalLM(transformers.Phi3Config(**SMALL, num_key_value_heads=2,
                                                                        pad_token_id=0)),
}


class CausalLM(torch.nn.Module):
    """The model's logits (inference, its KV cache on as Transformers defaults it), or its loss on the
    input ids as labels (training)."""

    def __init__(self, model, training: bool, use_cache: bool | None = None):
        super().__init__()
        self.model, self.training_loss, self.use_cache = model, training, use_cache

    def forward(self, ids):
        kwargs = {} if self.use_cache is None else {"use_cache": self.use_cache}
        out = self.model(input_ids=ids, labels=ids if self.training_loss else None, **kwargs)
        return out.loss if self.training_loss else out.logits


def ids():
    return torch.randint(1, 256, (2, 16), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_small_model_runs_as_torch_and_trains(name):
    torch.manual_seed(0)
    net = CausalLM(CONFIGS[name](), training=False).eval()
    model = poptorch.inferenceModel(net)
    torch.testing.assert_close(model(ids()), net(ids()))
    assert model.simulation.cycle_count > 0

    torch.manual_seed(0)
    net = CausalLM(CONFIGS[name](), training=True)
    trained = poptorch.trainingModel(net, optimizer=torch.optim.AdamW(net.parameters(), lr=1e-3))
    assert float(trained(ids())) > 0
    assert any(o.pass_ == "backward" for o in trained.executable.graph.ops)


def test_the_kv_cache_of_a_prompt_costs_nothing():
    """Transformers' DynamicCache concatenates each layer's keys and values onto an empty tensor: the run with
    it is the run without it, cycle for cycle."""
    cycles = []
    for use_cache in (True, False):
        torch.manual_seed(0)
        model = poptorch.inferenceModel(CausalLM(CONFIGS["llama"](), training=False, use_cache=use_cache).eval())
        model(ids())
        cycles.append(model.simulation.cycle_count)
    assert cycles[0] == cycles[1] > 0


def readme_example() -> str:
    section = README.read_text().split("## PopTorch scripts", 1)[1]
    return re.findall(r"```python\n(.*?)```", section, re.S)[1]


def test_the_readme_llama_2_7b_example_fits_sharded_over_32_ipus(capsys):
    """The README's LLaMA-2-7B, built on the meta device (no weights in the host's memory): it fits, one layer
    on each of 32 Bow IPUs, and each IPU idles most of the call (over 80 %), as sharded execution runs one at
    a time."""
    code = readme_example()
    assert 'torch.device("meta")' in code
    exec(compile(code, str(README), "exec"), {"__name__": "__main__"})  # noqa: S102
    out = capsys.readouterr().out
    assert "on bow-pod64" in out and "strategy sharded (32 stages on 32 IPUs)" in out
    assert "meta device" in out
    breakdown = out.split("\nbreakdown", 1)[1].split("\nby pass", 1)[0]  # each IPU's shares end in idle, total
    idle = [float(share) for share in re.findall(r"\s([\d.]+)%\s+100\.0%", breakdown)]
    assert len(idle) == 32 and all(share > 80 for share in idle)


def test_the_readme_tinyllama_plans_best_command_runs_as_its_table_says(tmp_path, capsys):
    """The README's TinyLlama-1.1B file for `ipusim plan --torch` (its third Python block): the plan's best
    configuration, 5, 6, 6, 5 layers over a Bow-2000's four IPUs at micro-batch 4, fits and runs at the
    188 prompts/s its table shows. (The plan itself takes about 35 s; its machinery is tested on a small model
    in tests/test_torch_model_file.py.)"""
    section = README.read_text().split("## PopTorch scripts", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[2]
    assert code.startswith("# tinyllama.py") and 'torch.device("meta")' in code
    (tmp_path / "tinyllama.py").write_text(code)
    table = section.split("$ ipusim plan --torch tinyllama.py:next_token", 1)[1].split("```", 1)[0]
    best = re.search(r"\n\s+1\s+(\d+)\s+([\d.]+) bow-2000\s+4\s+1 x 4 5,6,6,5\s+4 0.2\s+(\d+)", table)
    assert best, table
    argv = ["run", "--system", "bow-2000", "--torch", f"{tmp_path / 'tinyllama.py'}:next_token", "--micro-batch",
            "4", "--layers-per-ipu", "5,6,6,5", "--available-memory-proportion", "0.2", "--device-iterations", "32",
            "--memory-margin", "0.05", "--json", "-q"]
    capsys.readouterr()
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert round(summary["samples_per_second"]) == int(best.group(1))
    assert summary["latency"]["avg"] * 1e3 == pytest.approx(float(best.group(2)), abs=0.001)


def test_t5_in_fp16_runs_its_clamp_of_infinite_activations():
    """T5 in fp16 clamps its activations by a bound chosen on torch.isinf(...).any(): isinf is ATen's composite
    abs(x) == inf (PopTorch has no handler of its own, the dispatcher runs the composite's ops), and the clamp's
    dtype under PopTorch's implicit casts may differ from the one torch.export checked (its metadata assertions
    are not run)."""
    torch.manual_seed(0)
    t5 = transformers.T5ForConditionalGeneration(transformers.T5Config(
        d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, vocab_size=256)).half().eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.t5 = t5

        def forward(self, ids):
            return self.t5(input_ids=ids, decoder_input_ids=ids).logits

    model = poptorch.inferenceModel(Logits())
    assert model(ids()).shape == (2, 16, 256)
    kinds = [op.kind for op in model.simulation.executable.graph.ops]
    assert {"abs", "compare", "reduce_max", "select", "maximum", "minimum"} <= set(kinds)  # clampHandler: max, min
