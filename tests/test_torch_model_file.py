"""``ipusim run --torch`` and ``ipusim plan --torch``: a PyTorch model from a Python file (sim.poptorch.model_file).

The model is tests/data/torch_model.py: four transformer layers in an ``nn.ModuleList``. ``--torch`` with
``--layers-per-ipu`` and ``recompute_checkpoint_every_layer`` must simulate exactly what the same model run
through ``sim.poptorch`` with ``BeginBlock`` on every layer and ``recomputationCheckpoint`` on their outputs
simulates (the same capture, placement and options): the cycle counts are compared exactly.
"""

import argparse
import contextlib
import importlib.util
import io
import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

import sim.poptorch as poptorch  # noqa: E402
from sim import planner  # noqa: E402
from sim.cli import plan as plan_cli  # noqa: E402
from sim.cli.main import main  # noqa: E402
from sim.errors import GraphError  # noqa: E402
from sim.poptorch.model_file import TorchModel  # noqa: E402

FILE = Path(__file__).parent / "data" / "torch_model.py"


def _module():
    spec = importlib.util.spec_from_file_location("torch_model_for_tests", FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*argv, function="model") -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["run", "--torch", f"{FILE}:{function}", "--json", "-q", *argv]) == 0
    return json.loads(out.getvalue())


def test_inference_is_the_same_run_as_sim_poptorch():
    run = _run("--micro-batch", "2", function="inference")
    net, ids = _module().inference(2)
    net.blocks([0] * 4)
    model = poptorch.inferenceModel(net, poptorch.Options())
    model(ids)
    assert run["cycle_count"] == model.simulation.cycle_count
    assert run["notes"][0] == f"graph captured from {FILE}:inference with torch.fx"


@pytest.mark.parametrize("recompute", [False, True])
def test_pipelined_training_is_the_same_run_as_beginblock_on_every_layer(recompute):
    run = _run("--micro-batch", "2", "--training", "--layers-per-ipu", "1,3", "--gradient-accumulation", "4",
               "--system", "ipu-m2000", "--param", f"recompute_checkpoint_every_layer={str(recompute).lower()}")
    net, (ids, labels) = _module().model(8)
    net.blocks([0, 1, 1, 1])
    net.checkpoint = recompute
    options = poptorch.Options()
    options.Training.gradientAccumulation(4)
    # SGD, the run's default: PopTorch's Adam has no weight decay by default, `--optimizer adam` has
    model = poptorch.trainingModel(net, options, poptorch.optim.SGD(net.parameters(), lr=0.01))
    model(ids, labels)
    assert run["cycle_count"] == model.simulation.cycle_count
    assert sorted(run["breakdown"]) == ["0", "1"]


def test_layers_are_blocks_placed_as_beginblock_places_them():
    g = TorchModel(str(FILE)).graph(2, True, layers_per_ipu=[0, 2, 2], recompute=True)
    where = Counter((op.block, op.ipu) for op in g.ops)
    assert set(where) == {("before_layers", 0), ("layer0", 1), ("layer1", 1), ("layer2", 2), ("layer3", 2),
                          ("after_layers", 2)}
    # a checkpoint on what each of the first three layers hands on: its output, the second residual add
    checkpoints = [op.name for op in g.ops if op.attrs.get("recomputation_checkpoint")]
    assert [name.split("/")[:2] for name in checkpoints] == [["layers", "0"], ["layers", "1"], ["layers", "2"]]
    assert all(op.kind == "add" for op in g.ops if op.name in checkpoints)
    unplaced = TorchModel(str(FILE)).graph(2, True)
    assert {op.ipu for op in unplaced.ops} == {None}
    assert not any(op.attrs.get("recomputation_checkpoint") for op in unplaced.ops)


def test_a_tied_head_goes_back_to_the_embeddings_ipu_as_a_stage_of_its_own():
    g = TorchModel(f"{FILE}:tied").graph(2, True, layers_per_ipu=[2, 2])
    # the final norm stays with the last layer (as Graphcore's GPT-2 keeps ln_f), the head and its loss go to IPU 0
    assert sorted({(op.block, op.ipu, op.stage) for op in g.ops}) == [
        ("after_layers", 1, 1), ("after_layers_tied", 0, 2), ("before_layers", 0, 0), ("layer0", 0, 0),
        ("layer1", 0, 0), ("layer2", 1, 1), ("layer3", 1, 1)]
    assert {op.name.split("/")[0] for op in g.ops if op.block == "after_layers"} == {"norm"}
    # PopART's pipelining cannot copy a weight between IPUs: the same model with its head on the last IPU fails
    net, (ids, labels) = _module().tied(8)
    net.blocks([0, 0, 1, 1])
    options = poptorch.Options()
    options.Training.gradientAccumulation(4)
    model = poptorch.trainingModel(net, options)
    # the weight known by its first name, as named_parameters() gives it (not the head's, its last)
    with pytest.raises(poptorch.Error, match="weight 'embed.weight' is read by ops on 2 IPUs of a pipeline"):
        model(ids, labels)
    # ... which the plan therefore weighs on the first IPU, and its candidates run
    args = ["--torch", f"{FILE}:tied", "--system", "ipu-m2000", "--global-batch", "16", "--training",
            "--micro-batch", "2", "--replicas", "1", "--pipeline", "2", "--available-memory-proportion", "0.6"]
    parser = plan_cli.configure(argparse.ArgumentParser())
    pl = plan_cli.build_planner(parser.parse_args(args), parser)
    assert pl._ends == {"before_layers": "first", "after_layers": "last", "after_layers_tied": "first"}
    table = plan_cli.plan(pl, top=2, workers=1, bar=False)
    assert set(table.status) == {"ok"}, list(table.reason)


def test_a_weight_read_on_two_ipus_of_a_sharded_model_is_copied_there_each_run():
    # outside a pipeline PopART copies it from the first IPU to the other each run (InterIpuCopy)
    net, (ids, labels) = _module().tied(4)
    net.blocks([0, 0, 1, 1])
    options = poptorch.Options().deviceIterations(2)
    options.setExecutionStrategy(poptorch.ShardedExecution())
    model = poptorch.inferenceModel(net, options)
    model(ids, labels)
    copies = model.simulation.inter_ipu_transfers()
    # each micro-batch of 2: the activations (2 x 32 x 64 float32) and the 512 x 64 float32 weight
    assert set(zip(copies.src, copies.dst, copies.bytes)) == {(0, 1, 2 * 32 * 64 * 4 + 512 * 64 * 4)}
    assert [n for n in model.executable.notes if "read on several IPUs" in n] == [
        "1 weight(s) read on several IPUs ('embed.weight': 'embed/gather' on IPU 0, 'head/embed.weight/transpose' on "
        "IPU 1): PopART copies each from the first IPU to the others every run, 131,072 bytes a run, simulated as "
        "copies after the first reader's stage, each IPU holding its copy; putting the ops reading a weight on one "
        "IPU (a tied LM head on the embedding's) saves both"]
    # ... and both IPUs hold it: the weights' bytes over the two IPUs are the model's and one more embed.weight
    held = sum(memory.by_role["weight"] for memory in model.executable.memory.values())
    assert held == sum(p.numel() * 4 for p in net.parameters()) + 512 * 64 * 4


def test_the_layers_of_two_stacks_are_numbered_in_the_order_they_run():
    g = TorchModel(f"{FILE}:encoder_decoder").graph(2, True, layers_per_ipu=[4, 3])
    first = {}
    for op in g.ops:
        first.setdefault(op.block, (op.name.split("/")[:2], op.ipu))
    assert first == {"before_layers": (["embed", "gather"], 0),
                     "layer0": (["encoder", "0"], 0), "layer1": (["encoder", "1"], 0), "layer2": (["encoder", "2"], 0),
                     "layer3": (["layers", "0"], 0), "layer4": (["layers", "1"], 1), "layer5": (["layers", "2"], 1),
                     "layer6": (["layers", "3"], 1), "after_layers": (["norm", "layernorm"], 1)}
    # what a plan says it splits, and of a model without layers that it splits nothing
    space = planner.Space(systems=["ipu-m2000"], global_batch=(8, 8), training=True, micro_batches=[2],
                          replicas=[1], proportions=[0.6])
    notes = planner.Planner(planner.Model(torch=f"{FILE}:encoder_decoder"), space).notes
    assert f"{FILE}:encoder_decoder: its 7 layers (3 of encoder, 4 of layers) are what a pipeline splits" in notes
    space = planner.Space(systems=["ipu-m2000"], global_batch=(2, 2), training=False, micro_batches=[2], replicas=[1])
    notes = planner.Planner(planner.Model(torch=f"{FILE}:mlp"), space).notes
    assert any(n.startswith(f"{FILE}:mlp: no list of layers") for n in notes)


def test_only_the_layers_the_model_calls_are_placed():
    g = TorchModel(f"{FILE}:three_layers").graph(2, True, layers_per_ipu=[1, 2], recompute=True)
    assert sorted({(op.block, op.ipu) for op in g.ops}) == [
        ("after_layers", 1), ("before_layers", 0), ("layer0", 0), ("layer1", 1), ("layer2", 1)]
    assert [op.name.split("/")[1] for op in g.ops if op.attrs.get("recomputation_checkpoint")] == ["0", "1"]
    with pytest.raises(GraphError, match="summing to the model's 3 layers"):
        TorchModel(f"{FILE}:three_layers").graph(2, True, layers_per_ipu=[2, 2])


@pytest.mark.parametrize("spec, layers, message", [
    ("torch_model.py", None, "no such file"),
    (f"{FILE}:missing", None, "defines no function 'missing'"),
    (f"{FILE}:broken", None, "broken(2) raised ValueError: no such checkpoint"),
    (f"{FILE}:not_a_module", None, "returned Tensor; return (module, inputs)"),
    (f"{FILE}", [2, 0, 2], "IPU 1 would hold nothing"),
    (f"{FILE}", [2, 1], "must be whole numbers summing to the model's 4 layers"),
    (f"{FILE}:mlp", [1, 1], "the model has no list of layers"),
])
def test_bad_models_and_placements_say_what_is_wrong(spec, layers, message):
    with pytest.raises(GraphError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TorchModel(spec).graph(2, False, layers_per_ipu=layers)


def test_training_a_model_without_a_loss_is_refused(capsys):
    assert main(["run", "--torch", f"{FILE}:inference", "--training"]) != 0
    assert "returned no loss the simulator can find" in capsys.readouterr().err


def test_zoo_flags_are_refused_with_torch(capsys):
    assert main(["run", "--torch", str(FILE), "--seq-len", "64"]) == 2
    assert "--seq-len sets a zoo model's parameter; a --torch model's sizes are its file's" in capsys.readouterr().err
    assert main(["run", "--torch", str(FILE), "--model", "bert-base"]) == 2
    assert "give either --torch or --model, not both" in capsys.readouterr().err


def test_plan_splits_the_layers_and_its_best_command_runs_as_planned(capsys):
    args = ["--torch", str(FILE), "--system", "ipu-m2000", "--global-batch", "16", "--training",
            "--optimizer", "adam", "--micro-batch", "2", "--replicas", "1", "--pipeline", "1,2",
            "--available-memory-proportion", "0.6", "--optimizer-state", "on-chip"]
    parser = plan_cli.configure(argparse.ArgumentParser())
    pl = plan_cli.build_planner(parser.parse_args(args), parser)
    assert pl.units == ["layer0", "layer1", "layer2", "layer3"]
    assert f"{FILE}: its 4 layers (4 of layers) are what a pipeline splits" in pl.notes
    table = plan_cli.plan(pl, top=4, workers=1, bar=False)
    done = table[table.status == "ok"]
    # one IPU and two, with recomputation checkpoints and without; on two the last IPU's head (the norm, the
    # 512-word projection and its loss) weighs more than the first's embedding: two layers each balance them
    assert sorted(zip(done.pipeline, done.recompute)) == [(1, "off"), (1, "on"), (2, "off"), (2, "on")]
    assert set(done[done.pipeline == 2].split) == {"2,2"}
    best = done.sort_values("samples_per_second").iloc[-1]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["run", *best["command"].split()[2:], "--json", "-q"]) == 0
    assert json.loads(out.getvalue())["samples_per_second"] == pytest.approx(best["samples_per_second"], rel=1e-12)


def test_a_plan_captures_the_model_as_it_plans_to_run_it(tmp_path):
    # a Model built without saying training is captured for the space's training (a loss, dropout on)
    space = planner.Space(systems=["ipu-m2000"], global_batch=(8, 8), training=True, micro_batches=[2],
                          pipelines=[2], replicas=[1], proportions=[0.6])
    pl = planner.Planner(planner.Model(torch=str(FILE)), space)
    assert pl.model.training and pl.model.build(2).loss is not None
    # a profile at half partials prices the model captured with half partials, as `ipusim run --partials half`
    from sim.poptorch import model_file
    captured = set(model_file._captures)
    pl.profile("ipu-m2000", 2, 0.6, True, "half")
    assert [key[3:] for key in set(model_file._captures) - captured] == [(2, True, "half")]
    # a --config file's torch path is relative to the file, as its onnx path is
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "plan.toml").write_text(f'torch = "../{FILE.name}"\nsystem = "ipu-m2000"\n'
                                                  'global_batch = 8\ntraining = true\n')
    (tmp_path / FILE.name).write_text(FILE.read_text())
    parser = plan_cli.configure(argparse.ArgumentParser())
    args = plan_cli.merge_config(parser.parse_args(["--config", str(tmp_path / "plans" / "plan.toml")]), parser)
    assert Path(args.torch).resolve() == (tmp_path / FILE.name).resolve()


def test_a_torch_plan_resumes_from_its_csv_and_a_sweep_takes_torch_points(tmp_path, monkeypatch):
    space = planner.Space(systems=["ipu-m2000"], global_batch=(8, 8), training=True, micro_batches=[2],
                          pipelines=[1, 2], replicas=[1], proportions=[0.6])
    pl = planner.Planner(planner.Model(torch=str(FILE)), space)
    out_csv = tmp_path / "plan.csv"
    first = plan_cli.plan(pl, top=2, workers=1, bar=False, csv_path=out_csv)
    assert json.loads(plan_cli.plan_key(pl))["torch"] == str(FILE)  # another file is another plan
    calls = []
    monkeypatch.setattr(plan_cli, "plan_point", lambda argv: calls.append(argv) or {})
    again = plan_cli.plan(pl, top=2, workers=1, bar=False, csv_path=out_csv, resume=True)
    pd.testing.assert_frame_equal(again, first)
    assert calls == []  # every row replayed from the CSV
    from sim.cli import sweep
    table = sweep.sweep(["micro-batch=1,2"], ["--torch", str(FILE), "--system", "ipu-m2000"], workers=1)
    assert list(table["micro-batch"]) == ["1", "2"] and (table["error"] == "").all()
    assert table["samples_per_second"].iloc[1] > table["samples_per_second"].iloc[0]
