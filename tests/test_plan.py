"""ipusim plan: the pruned search finds what an exhaustive search of the same space finds, its
bounds hold, its rows and commands are those of ``ipusim run``, and it runs on Dask and resumes."""

import argparse
import dataclasses
import itertools
import json
import random
import re
import shlex

import pandas as pd
import pytest

from sim import planner
from sim.errors import OptionsError
from sim.cli import main as cli
from sim.cli import plan as plan_cli
from sim.cli import run as run_cli
from sim.results import held_out

#: a BERT small enough to simulate in milliseconds, with an embedding table large enough that
#: Adam's on-chip state decides whether it fits
TINY = dict(num_layers=2, hidden=64, heads=4, seq_len=16, vocab=8000)
TINY_FLAGS = ["--model", "bert-base", "--num-layers", "2", "--hidden", "64", "--heads", "4", "--seq-len", "16",
              "--param", "vocab=8000"]


def _small_m2000(tmp_path_factory, sram: int) -> str:
    """An IPU-M2000 whose tiles have ``sram`` bytes, so that the tiny model does not always fit."""
    path = tmp_path_factory.mktemp("systems") / f"m2000-{sram}.toml"
    path.write_text(f'extends = "ipu-m2000"\nname = "m2000-{sram}"\ndescription = "IPU-M2000, {sram} B per tile"\n'
                    f"\n[ipu]\nsram_bytes_per_tile = {sram}\n"
                    # a flat 32 KiB of program memory per tile, as the SRAM sizes here were chosen for
                    "reserved_bytes_per_tile = 32768\nvertex_state_bytes_per_vertex = 0\ncontrol_code_bytes_per_step = 0\n"
                    "vertex_code_bytes_per_codelet = 0\nexchange_code_bytes_per_phase = 0\nstack_bytes_per_tile = 0\n")
    return str(path)


def _planner(system: str, **space) -> planner.Planner:
    args = dict(global_batch=(16, 16), training=True, optimizer="adam", micro_batches=[2, 4, 8],
                proportions=[0.2, 0.6])
    args.update(space)
    return planner.Planner(planner.Model("bert-base", dict(TINY)), planner.Space([system], **args))


def _compare_with_exhaustive(pl: planner.Planner, top: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    pruned = plan_cli.plan(pl, top=top, workers=1, bar=False, batch=4)
    every_row = plan_cli.plan(pl, top=top, workers=1, bar=False, exhaustive=True)
    # a step's round trip is never shorter than the latency bound (the pruned search drops on it)
    timed = every_row["latency_avg_s"].notna()
    least = pd.Series([pl.latency_bound(c) for c in pl.candidates], index=every_row.index)
    assert timed.any() and (every_row.loc[timed, "latency_avg_s"] >= least[timed]).all()
    n = pl.enumerated  # then the reliefs of what did not fit, as each search brought them in
    assert list(pruned["command"].head(n)) == list(every_row["command"].head(n))
    # the reliefs the pruned search brought in, the exhaustive one did too; those it did not
    # descend from pruned configurations, so they could not have made the top either
    assert set(pruned["command"]) <= set(every_row["command"])
    best, every = plan_cli.rank(pruned), plan_cli.rank(every_row)
    cut = every["samples_per_second"].iloc[top - 1]
    missing = ~every_row["command"].isin(pruned["command"])
    assert (every_row.loc[missing, "bound_samples_per_second"] < cut).all()
    # the plan's best is at least as fast as every configuration of the exhaustive search,
    # and its top `top` are the exhaustive search's, in the same order
    assert best["samples_per_second"].iloc[0] >= every_row.loc[every_row["status"] == "ok", "samples_per_second"].max()
    assert list(best["command"].head(top)) == list(every["command"].head(top))
    assert list(best["samples_per_second"].head(top)) == list(every["samples_per_second"].head(top))
    full = every_row.set_index("command").loc[pruned["command"]].reset_index()[list(pruned.columns)]
    ok = pruned["status"] == "ok"  # what the plan simulated is what the exhaustive search got
    assert pruned.loc[ok, "samples_per_second"].tolist() == full.loc[ok, "samples_per_second"].tolist()
    for status in ("oom", "invalid", "latency"):  # dropped without simulating, and rightly so
        assert set(full.loc[pruned["status"] == status, "status"]) <= {status}
    # the bound holds for every configuration that fits
    fits = full["status"] == "ok"
    assert (full.loc[fits, "samples_per_second"] <= pruned.loc[fits, "bound_samples_per_second"]).all()
    # pruned ones could not have entered the top
    assert (pruned.loc[pruned["status"] == "pruned", "bound_samples_per_second"] < cut).all()
    assert (pruned["reason"] != "").equals(pruned["status"] != "ok")
    return pruned, full


def _heaviest(w: list, first: int, last: int, counts) -> int:
    """The heaviest IPU's load when consecutive layers of weights ``w`` go ``counts`` per IPU, the
    first IPU also carrying ``first`` and the last ``last``."""
    starts = [sum(counts[:i]) for i in range(len(counts))]
    loads = [sum(w[s:s + c]) for s, c in zip(starts, counts)]
    loads[0] += first
    loads[-1] += last
    return max(loads)


def test_balanced_split_minimises_the_heaviest_ipu():
    rng = random.Random(7)
    for _ in range(40):
        n, parts = rng.randint(1, 7), rng.randint(1, 4)
        if parts > n + 1:
            continue
        w = [rng.randint(1, 9) for _ in range(n)]
        first, last = rng.randint(0, 9), rng.randint(0, 9)
        split = planner.balanced_split(w, first, last, parts)
        every = [c for c in itertools.product(range(n + 1), repeat=parts)
                 if sum(c) == n and all(x >= 1 for x in c[1:])]
        assert sum(split) == n and all(x >= 1 for x in split[1:])
        assert _heaviest(w, first, last, split) == min(_heaviest(w, first, last, c) for c in every)
    # equal maxima: the later IPUs take as many layers as they can
    assert planner.balanced_split([1] * 6, 0, 0, 3) == (2, 2, 2)
    assert planner.balanced_split([1] * 5, 3, 0, 3) == (0, 2, 3)


def test_plan_finds_the_exhaustive_searchs_best(tmp_path_factory):
    """Pruning by the throughput bound, inferring out-of-memory from a simulated one, and the
    pipeline's accumulation check all drop configurations; the top 2 are still exact."""
    pruned, full = _compare_with_exhaustive(_planner(_small_m2000(tmp_path_factory, 39000)), top=2)
    counts = pruned["status"].value_counts()
    assert counts["pruned"] > 0 and counts["invalid"] > 0 and counts["ok"] >= 2
    assert pruned["reason"].str.contains("[inferred", regex=False).any()
    assert pruned["reason"].str.contains("short by").any()
    assert (pruned["status"] == "ok").sum() < (full["status"] == "ok").sum()  # it simulated fewer


def test_always_live_bytes_drop_only_what_cannot_fit(tmp_path_factory):
    pruned, full = _compare_with_exhaustive(_planner(_small_m2000(tmp_path_factory, 38000)), top=2)
    unsimulated = pruned["reason"].str.contains("(not simulated)", regex=False)
    assert unsimulated.sum() > 0 and (full.loc[unsimulated, "status"] == "oom").all()


def test_always_live_bound_is_the_compilers_always_live_memory():
    """Without a pipeline there is no stash: the planner's per-tile always-live bytes are the
    compiler's, exactly, for every optimizer-state placement."""
    pl = _planner("ipu-m2000", global_batch=(32, 32), micro_batches=[4], proportions=[0.6], pipelines=[1])
    seen = set()
    for c in pl.candidates:
        parser = run_cli.configure(argparse.ArgumentParser())
        run = run_cli.simulate_args(parser.parse_args(plan_cli.command(pl, c)), parser)
        m = run.executable.memory[0]
        # the bound holds the fixed program memory; what the ops add (vertex state, code, exchange
        # code, stacks, control per step) is known only once compiled, so the bound is below by it
        extra = sum(m.by_role[k] for k in ("vertex_code", "vertex_state", "exchange_code", "stack"))
        extra += m.by_role["control_code"] - run.executable.system.ipu.reserved_bytes_per_tile * len(m.peak)
        assert pl.always_live_per_tile(c) == pytest.approx(
            [m.always_live.mean() - extra / len(m.peak)], abs=0.01)  # by_role: whole bytes over the tiles
        assert run.samples_per_second <= pl.bound(c)
        seen.add(c.optimizer_state)
    assert seen == {"on-chip", "off-chip", "rts", "off-chip-rts"}


def test_a_one_ipu_candidate_with_recomputation_asks_popart_for_it():
    """On one IPU, recomputation checkpoints recompute only with autoRecomputation set (PopTorch's default there
    is None): a candidate with recomputation on runs with --auto-recomputation recompute-all, and recomputes."""
    pl = _planner("ipu-m2000", global_batch=(16, 16), micro_batches=[4], proportions=[0.6], pipelines=[1],
                  optimizer_states=["on-chip"])
    assert {c.recompute for c in pl.candidates} == {False, True}
    for c in pl.candidates:
        argv = plan_cli.command(pl, c)
        assert ("--auto-recomputation" in argv) == c.recompute
        parser = run_cli.configure(argparse.ArgumentParser())
        run = run_cli.simulate_args(parser.parse_args(argv), parser)
        assert any(s.recomputed for s in run.executable.stages) == c.recompute


def test_candidates_run_with_a_host_process_every_few_replicas():
    """A candidate's command gives its host processes (PopRun instances): the fewest that feed at most N
    replicas each and divide the replicas, N the space's replicas_per_process (2 by default): 8 for 16
    replicas at N 2, and at N 3 too (6 would not divide them); one replica needs no flag."""
    def flags(per_process=None):
        space = {} if per_process is None else {"replicas_per_process": per_process}
        pl = _planner("ipu-pod16", global_batch=(64, 64), micro_batches=[4], proportions=[0.6], pipelines=[1],
                      replicas=[1, 16], **space)
        out = {}
        for c in pl.candidates:
            argv = plan_cli.command(pl, c)
            out[c.replicas] = argv[argv.index("--host-processes") + 1] if "--host-processes" in argv else None
        return out

    assert flags() == {1: None, 16: "8"}
    assert flags(3) == {1: None, 16: "8"}
    assert flags(5) == {1: None, 16: "4"}
    assert flags(16) == {1: None, 16: None}
    with pytest.raises(OptionsError, match="replicas per process 0"):
        planner.Space(["ipu-pod16"], (64, 64), replicas_per_process=0)


def test_candidates_carry_the_memory_margin():
    """A plan's memory margin (the CLI's default: 5 %, the largest that keeps every configuration Graphcore
    publishes as running, tests/test_memory.py) is every candidate's --memory-margin; 0 gives no flag; out
    of range is refused."""
    def margins(**space):
        pl = _planner("ipu-m2000", global_batch=(8, 8), micro_batches=[8], proportions=[0.6], pipelines=[1],
                      replicas=[1], **space)
        return {shlex.join(plan_cli.command(pl, c)).partition("--memory-margin")[2] for c in pl.candidates}

    assert margins() == {""} and margins(memory_margin=0.08) == {" 0.08"}
    args = plan_cli.configure(argparse.ArgumentParser()).parse_args(["--model", "bert-base"])
    assert args.memory_margin == planner.DEFAULT_MEMORY_MARGIN == 0.05
    with pytest.raises(OptionsError, match="memory margin 1.5"):
        planner.Space(["ipu-m2000"], (8, 8), memory_margin=1.5)


def test_tied_gather_plans_price_and_run_the_patterns(tmp_path_factory):
    """--tied-gather puts PopART's TiedGather patterns on every candidate: its command, and the profile its
    bounds come from (the tied embedding's gradient added into its accumulator, no dense table), so the
    pruned search still finds the exhaustive one's best; without training it is refused."""
    system = _small_m2000(tmp_path_factory, 39000)
    pl = _planner(system, tied_gather=True, micro_batches=[2, 4], proportions=[0.6])
    assert all("--tied-gather" in plan_cli.command(pl, c) for c in pl.candidates)
    plain = _planner(system, micro_batches=[2, 4], proportions=[0.6])
    assert not any("--tied-gather" in plan_cli.command(plain, c) for c in plain.candidates)
    # the embedding's backward pass is what the patterns change, and only with accumulation
    tied, dense = pl.profile(system, 4, 0.6, True), plain.profile(system, 4, 0.6, True)
    assert tied.backward != dense.backward
    assert pl.profile(system, 4, 0.6, False).backward == plain.profile(system, 4, 0.6, False).backward
    _compare_with_exhaustive(pl, top=2)
    with pytest.raises(OptionsError, match="TiedGather patterns change only a training graph"):
        planner.Space([system], (16, 16), training=False, tied_gather=True)


def test_cli_plan_table_csv_and_runnable_commands(capsys, tmp_path):
    out_csv = tmp_path / "plan.csv"
    code = cli.main(["plan", *TINY_FLAGS, "--system", "ipu-m2000", "--training", "--optimizer", "adam",
                     "--global-batch", "32", "--micro-batch", "4,8", "--available-memory-proportion", "0.6",
                     "--workers", "1", "--top", "3", "--commands", "2", "--csv", str(out_csv)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.startswith("plan: bert-base on ipu-m2000, training (adam), global batch 32")
    table = pd.read_csv(out_csv)
    table["reason"] = table["reason"].fillna("")
    assert list(table.columns) == plan_cli.COLUMNS
    assert set(table["status"]) <= set(planner.STATUSES)
    assert (table["global_batch"] == 32).all()
    assert ((table["reason"] == "") == (table["status"] == "ok")).all()
    best = table[table["status"] == "ok"].sort_values("samples_per_second", ascending=False, kind="stable")
    commands = [line.split(". ", 1)[1] for line in out.splitlines() if line.startswith("  1. ")]
    assert commands == [best["command"].iloc[0]]
    # a pipelined training best says what the per-call time of published pipelines would add to its call
    pipelined = [line for line in out.splitlines() if line.startswith("note: the best is a pipelined training")]
    assert len(pipelined) == (best["pipeline"].iloc[0] > 1)
    # the printed command is a real `ipusim run` and gives the same throughput
    assert cli.main(shlex.split(commands[0])[1:] + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["samples_per_second"] == best["samples_per_second"].iloc[0]


def test_a_pipelined_training_best_states_the_per_call_time_published_pipelines_have(capsys):
    code = cli.main(["plan", *TINY_FLAGS, "--system", "ipu-m2000", "--training", "--optimizer", "sgd",
                     "--global-batch", "32", "--micro-batch", "4", "--pipeline", "2", "--replicas", "1",
                     "--available-memory-proportion", "0.6", "--workers", "1", "--top", "1", "--commands", "0"])
    out = capsys.readouterr().out
    assert code == 0, out
    [line] = [line for line in out.splitlines() if line.startswith("note: the best is a pipelined training")]
    assert "take 120-580 ms more per call than the simulator gives them" in line
    assert re.search(r"so a call of [\d,.]+ ms may take (\d+%-\d+% longer on hardware|120-580 ms longer on hardware, "
                     r"[\d,.]+ to [\d,.]+ times as long)$", line)
    # and what the held-out published measurements of transformer training on 2-4 IPUs say of the simulator
    [line] = [line for line in out.splitlines() if line.startswith("note: validation: ")]
    assert line == "note: validation: " + held_out.describe(held_out.like("transformer", True, 2, "bert-base"))


def test_resume_keeps_the_rows_and_simulates_only_the_rest(tmp_path, monkeypatch):
    pl = _planner("ipu-m2000", global_batch=(32, 32), micro_batches=[4, 8], proportions=[0.6])
    out_csv = tmp_path / "plan.csv"
    first = plan_cli.plan(pl, top=3, workers=1, bar=False, csv_path=out_csv)
    simulated = first[first["status"].isin(["ok", "oom"]) & ~first["reason"].str.contains("inferred|not simulated")]
    lines = out_csv.read_text().splitlines(keepends=True)
    rows = pd.read_csv(out_csv)  # in the order the points finished: cut in the middle of the second simulated one
    done = rows[rows["status"].isin(["ok", "oom"]) & ~rows["reason"].fillna("").str.contains("inferred|not simulated")]
    cut = int(done.index[1]) + 1  # its line (after the header)
    out_csv.write_text("".join(lines[:cut]) + lines[cut][:10])  # cut mid-row
    calls = []
    real = plan_cli.plan_point
    monkeypatch.setattr(plan_cli, "plan_point", lambda argv: calls.append(argv) or real(argv))
    again = plan_cli.plan(pl, top=3, workers=1, bar=False, csv_path=out_csv, resume=True)
    pd.testing.assert_frame_equal(again, first)
    assert 0 < len(calls) < len(simulated)
    assert len(pd.read_csv(out_csv)) == len(first)
    calls.clear()
    plan_cli.plan(pl, top=3, workers=1, bar=False, csv_path=out_csv, resume=True)
    assert calls == []


def test_resume_refuses_the_csv_of_another_plan(tmp_path, capsys):
    out_csv = tmp_path / "plan.csv"
    base = ["plan", "--model", "mlp", "--system", "ipu-mk2", "--global-batch", "16", "--workers", "1",
            "--csv", str(out_csv)]
    assert cli.main(base) == 0
    rows = len(pd.read_csv(out_csv))
    assert cli.main(base + ["--resume"]) == 0 and len(pd.read_csv(out_csv)) == rows
    capsys.readouterr()
    for other in (["--param", "hidden=[128,128]"], ["--micro-batch", "4,16"]):
        assert cli.main(base + other + ["--resume"]) == 2
        assert "holds the rows of another plan" in capsys.readouterr().err
    assert len(pd.read_csv(out_csv)) == rows and pd.read_csv(out_csv)["plan"].nunique() == 1


def test_plan_on_a_dask_cluster_equals_the_local_pool():
    distributed = pytest.importorskip("distributed")
    pl = _planner("ipu-m2000", global_batch=(32, 32), micro_batches=[4, 8], proportions=[0.6])
    local = plan_cli.plan(pl, top=3, workers=2, bar=False)
    with distributed.LocalCluster(n_workers=1, processes=False, threads_per_worker=2,
                                  dashboard_address=None) as cluster:
        remote = plan_cli.plan(pl, top=3, bar=False, dask=cluster.scheduler_address)
    pd.testing.assert_frame_equal(remote, local)


def test_inference_plan_has_no_training_axes(capsys):
    code = cli.main(["plan", *TINY_FLAGS, "--system", "ipu-m2000", "--global-batch", "8-16",
                     "--available-memory-proportion", "0.6", "--workers", "1", "--top", "2", "--commands", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "inference, global batch 8-16, device iterations 32" in out
    command = next(line for line in out.splitlines() if line.startswith("  1. "))
    assert "--training" not in command and "--device-iterations 32" in command
    assert "--gradient-accumulation" not in command and "--optimizer-state" not in command


def test_no_configuration_fits_says_why(capsys):
    """Every candidate invalid (8 replicas on a 4-IPU machine): the error gives one with its reason."""
    code = cli.main(["plan", "--model", "mlp", "--system", "ipu-m2000", "--global-batch", "64", "--replicas", "8",
                     "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert "no valid configuration (every one is invalid); e.g. ipusim run" in err
    assert "needs 1 x 8 = 8 IPUs; ipu-m2000 has 4" in err
    # so is a pipeline longer than the system (it has no replicas to try, not a global batch it cannot make)
    code = cli.main(["plan", *TINY_FLAGS, "--system", "ipu-m2000", "--global-batch", "64", "--pipeline", "8",
                     "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "needs 8 x 1 = 8 IPUs; ipu-m2000 has 4" in err, err


def test_commands_are_printed_for_the_exact_top_only(capsys):
    """--top 2 with the default --commands 3: only the 2 ranked rows, exact under pruning, as commands."""
    code = cli.main(["plan", "--model", "mlp", "--system", "ipu-m2000", "--global-batch", "16", "--workers", "1",
                     "--top", "2"])
    out = capsys.readouterr().out
    assert code == 0 and "the best 2 as commands:" in out
    assert [line[:5] for line in out.splitlines() if line.startswith("  ") and ". ipusim run" in line] == \
        ["  1. ", "  2. "]


def test_an_onnx_model_with_a_fixed_batch_is_planned_at_that_batch(capsys, tmp_path):
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh
    graph = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "fixed",
                         [h.make_tensor_value_info("x", T.FLOAT, [4, 64])], [h.make_tensor_value_info("y", T.FLOAT, [4, 64])],
                         [nh.from_array(np.zeros((64, 64), np.float32), "w")])
    path = tmp_path / "fixed.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))
    code = cli.main(["plan", "--onnx", str(path), "--system", "ipu-m2000", "--global-batch", "16", "--workers", "1",
                     "--commands", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    command = next(line for line in out.splitlines() if line.startswith("  1. "))
    assert "--micro-batch 4" in command
    assert cli.main(["plan", "--onnx", str(path), "--system", "ipu-m2000", "--global-batch", "16",
                     "--micro-batch", "8"]) == 2
    assert "fixes its batch at 4" in capsys.readouterr().err


def test_an_onnx_model_with_a_named_dimension_is_planned_with_dim(capsys, tmp_path):
    """--dim sizes a symbolic dimension other than the batch; every candidate's command carries it."""
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh
    graph = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "named",
                         [h.make_tensor_value_info("x", T.FLOAT, ["batch", "seq", 64])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["batch", "seq", 64])],
                         [nh.from_array(np.zeros((64, 64), np.float32), "w")])
    path = tmp_path / "named.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))
    argv = ["plan", "--onnx", str(path), "--system", "ipu-m2000", "--global-batch", "16", "--workers", "1",
            "--commands", "1", "--micro-batch", "4"]
    assert cli.main(argv + ["--dim", "seq=32"]) == 0
    command = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("  1. "))
    assert "--dim seq=32" in command
    assert cli.main(["run", *shlex.split(command.split("ipusim ", 1)[1])[1:], "-q"]) == 0
    assert cli.main(["plan", "--model", "mlp", "--system", "ipu-mk2", "--global-batch", "16", "--dim", "seq=32"]) == 2
    assert "--dim applies to an ONNX model (--onnx PATH)" in capsys.readouterr().err
    # the batch dimension is the plan's axis, not a --dim
    assert cli.main(argv + ["--dim", "seq=32", "--dim", "batch=4"]) == 2
    assert "--dim batch=4 sizes the model's batch" in capsys.readouterr().err


def test_an_onnx_model_with_two_losses_is_planned_for_training_with_loss(capsys, tmp_path):
    """--loss names the ONNX tensor to train on, as in ipusim run; every candidate's command carries it."""
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh
    nodes = [h.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
             h.make_node("ReduceMean", ["y"], ["l1"], name="mean1", keepdims=0),
             h.make_node("Mul", ["y", "y"], ["sq"], name="square"),
             h.make_node("ReduceMean", ["sq"], ["l2"], name="mean2", keepdims=0)]
    graph = h.make_graph(nodes, "two", [h.make_tensor_value_info("x", T.FLOAT, ["batch", 64])],
                         [h.make_tensor_value_info("l1", T.FLOAT, []), h.make_tensor_value_info("l2", T.FLOAT, [])],
                         [nh.from_array(np.zeros((64, 64), np.float32), "w")])
    path = tmp_path / "two.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))
    argv = ["plan", "--onnx", str(path), "--system", "ipu-mk2", "--global-batch", "16", "--training", "--workers", "1",
            "--commands", "1", "--micro-batch", "4"]
    assert cli.main(argv) == 2
    assert "--loss NAME" in capsys.readouterr().err
    assert cli.main(argv + ["--loss", "l1"]) == 0
    command = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("  1. "))
    assert "--loss l1" in command
    assert cli.main(["run", *shlex.split(command.split("ipusim ", 1)[1])[1:], "-q"]) == 0


def test_config_file_and_overrides(capsys, tmp_path):
    config = tmp_path / "plan.toml"
    config.write_text('model = "bert-base"\nsystem = "ipu-m2000"\nglobal_batch = 64\ntraining = true\n'
                      'optimizer = "adam"\nmicro_batch = [8]\navailable_memory_proportion = [0.6]\n'
                      'optimizer_state = ["on-chip"]\n'
                      "[params]\nnum_layers = 2\nhidden = 64\nheads = 4\nseq_len = 16\nvocab = 8000\n")
    assert cli.main(["plan", "--config", str(config), "--global-batch", "32", "--workers", "1", "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "training (adam), global batch 32" in out and "--micro-batch 8" in out
    # a parameter on the command line replaces the file's, as --num-layers or as --param
    for flags in (["--num-layers", "1"], ["--param", "num_layers=1"]):
        assert cli.main(["plan", "--config", str(config), "--workers", "1", "--top", "1", *flags]) == 0
        assert "--num-layers 1 " in capsys.readouterr().out
    config.write_text('model = "bert-base"\nbatch_size = 4\n')
    assert cli.main(["plan", "--config", str(config)]) == 2
    assert "unknown key 'batch_size'; valid keys:" in capsys.readouterr().err


def test_a_config_true_false_key_given_a_string_names_the_file_and_key(capsys, tmp_path):
    config = tmp_path / "plan.toml"
    config.write_text('model = "mlp"\nsystem = "ipu-m2000"\nglobal_batch = 64\ntraining = "yes"\n')
    assert cli.main(["plan", "--config", str(config)]) == 2
    assert "training = 'yes': expected true or false" in capsys.readouterr().err


def test_a_flag_typed_at_its_default_overrides_the_config_file(capsys, tmp_path):
    """--partials float is the default, yet typed on the command line it replaces the file's half, as
    --top 10 replaces its 2: the command line wins wherever a flag is typed."""
    config = tmp_path / "plan.toml"
    config.write_text('model = "mlp"\nsystem = "ipu-m2000"\nglobal_batch = 64\ntop = 2\npartials = "half"\n')
    assert cli.main(["plan", "--config", str(config), "--workers", "1", "--commands", "1"]) == 0
    assert "--partials half" in capsys.readouterr().out
    assert cli.main(["plan", "--config", str(config), "--workers", "1", "--commands", "1", "--top", "10",
                     "--partials", "float"]) == 0
    out = capsys.readouterr().out
    assert "--partials half" not in out and sum(line.strip()[:2] == "3 " for line in out.splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    (["--param", "micro_batch=4"], "give --micro-batch values instead"),
    (["--param", "layers_per_ipu=[1,1]"], "give --pipeline values instead"),
    (["--global-batch", "3", "--micro-batch", "2,4"], "no configuration makes a global batch of 3"),
    (["--optimizer-state", "rts"], "optimizer 'sgd' keeps no state"),
    (["--recompute", "on", "--no-training"], "inference has no gradient accumulation"),
    (["--tied-gather", "--no-training"], "TiedGather patterns change only a training graph"),
    (["--optimizer", "adam", "--optimizer-state", "rts,off-chip-rts", "--replicas", "1"],
     "optimizer state rts and off-chip-rts is sharded over the replicas, and every configuration"),
    (["--system", ","], "no system to plan for"),
])
def test_bad_plans_are_one_line_errors(capsys, argv, message):
    base = ["plan", "--model", "bert-base", "--system", "ipu-m2000", "--global-batch", "16", "--training"]
    if "--no-training" in argv:
        argv = [a for a in argv if a != "--no-training"]
        base.remove("--training")
    assert cli.main(base + argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_negative_commands_count_is_a_usage_error(capsys):
    assert cli.main(["plan", "--model", "mlp", "--system", "ipu-mk2", "--global-batch", "4", "--commands", "-1"]) == 2
    assert "argument --commands: expected a whole number >= 0 (0: no commands), got '-1'" in capsys.readouterr().err


def test_plan_needs_a_system_and_a_global_batch(capsys):
    assert cli.main(["plan", "--model", "bert-base"]) == 2
    assert "give --system and --global-batch" in capsys.readouterr().err
    assert cli.main(["plan", "--model", "amp-tile", "--system", "ipu-mk2", "--global-batch", "4"]) == 2
    assert "has no micro_batch parameter" in capsys.readouterr().err


#: a BERT whose IPU 0 (embedding and tied MLM head, 8,000 x 256) is fuller than its layers are
RELIEF = dict(num_layers=6, hidden=256, heads=4, seq_len=16, vocab=8000)


def test_relief_moves_layers_off_the_ipu_short_of_memory(tmp_path_factory):
    """The balanced 3,3 is out of memory on IPU 0 (the embedding's), and so is 2,4: the planner
    moves a layer off IPU 0 at a time and finds 1,5, which fits; without relief nothing does."""
    system = _small_m2000(tmp_path_factory, 50000)
    space = dict(global_batch=(32, 32), training=True, optimizer="sgd", pipelines=[2], replicas=[1],
                 micro_batches=[2], proportions=[0.6], recompute=[False])
    pl = planner.Planner(planner.Model("bert-base", dict(RELIEF)), planner.Space([system], **space))
    assert [c.split for c in pl.candidates] == [(3, 3)]
    table = plan_cli.plan(pl, top=1, workers=1, bar=False)
    assert list(zip(table["split"], table["status"])) == [("3,3", "oom"), ("2,4", "oom"), ("1,5", "ok")]
    assert table["reason"].iloc[0].startswith("out of memory on IPU 0: short by")
    best = plan_cli.rank(table)
    assert best["split"].iloc[0] == "1,5" and "--layers-per-ipu 1,5" in best["command"].iloc[0]
    assert pl.enumerated == 1 and len(pl.candidates) == 3
    assert pl.bounds[2] <= pl.bounds[1] <= pl.bounds[0]  # a relief never outranks its parent
    no_relief = planner.Planner(planner.Model("bert-base", dict(RELIEF)),
                                planner.Space([system], relief=0, **space))
    assert plan_cli.rank(plan_cli.plan(no_relief, top=1, workers=1, bar=False)).empty
    assert planner.constrained_split([1.0] * 24, 2.5, 0.0, 4, 0, 3) == (3, 7, 7, 7)


def test_a_relief_proportion_is_priced_on_the_relieved_ipu_alone():
    """The relieved IPU (IPU 0: the embedding) takes the lower proportion; the bound prices its
    blocks at it and the others at the candidate's own, and so does the simulated command."""
    model = dict(num_layers=2, hidden=256, heads=4, seq_len=128, vocab=2000)
    pl = planner.Planner(planner.Model("bert-base", model), planner.Space(
        ["ipu-m2000"], global_batch=(128, 128), training=True, optimizer="sgd", pipelines=[2], replicas=[1],
        micro_batches=[16], proportions=[0.6], recompute=[False], relief=0, relief_proportions=[0.01]))
    (parent,) = pl.candidates
    (child,) = [pl.candidates[j] for j in pl.reliefs(0)]
    assert child.proportions == (0.01, 0.6) and child.split == parent.split == (1, 1)
    low, high = (pl.profile("ipu-m2000", 16, a, True) for a in (0.01, 0.6))
    where = pl.ipu_of_blocks(child.split)
    busy = [0.0, 0.0]
    for b in low.forward:
        busy[where[b]] += ((low if where[b] == 0 else high).forward[b]
                           + (low if where[b] == 0 else high).backward.get(b, 0)) * child.gradient_accumulation
    for b, cycles in high.update.items():
        busy[where[b]] += (low if where[b] == 0 else high).update[b]
    assert low.forward["layer0"] > high.forward["layer0"]  # the proportion matters for these layers
    assert pl.bound(child) == pytest.approx(16 * 8 * pl.systems["ipu-m2000"].ipu.clock_hz / max(busy), rel=1e-12)
    assert pl.bound(child) < pl.bound(parent)
    argv = plan_cli.command(pl, child)
    assert argv[argv.index("--available-memory-proportion") + 1] == "0.01,0.6"

    def op_cycles(flags):
        parser = run_cli.configure(argparse.ArgumentParser())
        trace = run_cli.simulate_args(parser.parse_args(flags), parser).op_trace()
        trace = trace[trace["task"].str.contains("forward|backward")]
        return {(r.ipu, r.name): r.compute for r in trace.itertuples()}

    amp = argv.index("--available-memory-proportion") + 1
    mixed, lowest, highest = (op_cycles(argv[:amp] + [a] + argv[amp + 1:]) for a in ("0.01,0.6", "0.01", "0.6"))
    assert mixed == {k: (lowest if k[0] == 0 else highest)[k] for k in mixed}
    assert any(lowest[k] != highest[k] for k in mixed if k[0] == 0)


def test_constrained_split_is_the_best_with_that_count():
    rng = random.Random(11)
    for _ in range(60):
        n, parts = rng.randint(1, 7), rng.randint(2, 4)
        part, count = rng.randrange(parts), rng.randint(0, n)
        w = [rng.randint(1, 9) for _ in range(n)]
        first, last = rng.randint(0, 9), rng.randint(0, 9)
        every = [c for c in itertools.product(range(n + 1), repeat=parts)
                 if sum(c) == n and all(x >= 1 for x in c[1:]) and c[part] == count]
        split = planner.constrained_split(w, first, last, parts, part, count)
        if not every:
            assert split is None
            continue
        assert split in every and _heaviest(w, first, last, split) == min(
            _heaviest(w, first, last, c) for c in every)


def test_resume_with_a_larger_top_simulates_what_the_first_run_pruned(tmp_path):
    """A row the first run pruned (its bound below that run's --top best) is not a result: resumed with a larger
    --top, or --exhaustive, the plan simulates it, and the CSV gets its row, as a plan never stopped."""
    pl = _planner("ipu-m2000", global_batch=(32, 32), micro_batches=[4, 8], proportions=[0.6])
    out_csv = tmp_path / "plan.csv"
    first = plan_cli.plan(pl, top=1, workers=1, bar=False, csv_path=out_csv)
    assert (first["status"] == "pruned").any()
    fresh = plan_cli.plan(pl, top=len(pl.candidates), workers=1, bar=False)
    assert not (fresh["status"] == "pruned").any()
    for again in (plan_cli.plan(pl, top=len(pl.candidates), workers=1, bar=False, csv_path=out_csv, resume=True),
                  plan_cli.plan(pl, workers=1, bar=False, csv_path=out_csv, resume=True, exhaustive=True)):
        pd.testing.assert_frame_equal(again, fresh)
    kept = plan_cli._known_rows(out_csv, plan_cli.plan_key(pl))  # the last row of each candidate
    assert {cmd: row["status"] for cmd, row in kept.items()} == dict(zip(fresh["command"], fresh["status"]))


def test_a_value_given_twice_on_an_axis_is_one_configuration():
    """--micro-batch 4,4 (or a system, proportion, replica count, ... twice) plans each configuration once: no
    copies simulated, and none filling the table's --top rows."""
    once = _planner("ipu-m2000", micro_batches=[4], proportions=[0.6], replicas=[2], recompute=[False])
    twice = _planner("ipu-m2000", micro_batches=[4, 4], proportions=[0.6, 0.6], replicas=[2, 2],
                     recompute=[False, False], optimizer_states=["on-chip", "rts", "on-chip"])
    assert len(set(twice.candidates)) == len(twice.candidates)
    assert twice.candidates == [c for c in once.candidates if c.optimizer_state in ("on-chip", "rts")]


def test_a_count_of_ipus_not_a_power_of_two_is_refused_before_simulating(capsys, tmp_path):
    """3 replicas of one IPU: Poplar attaches power-of-two partitions, so every candidate is invalid, and the
    planner says so without simulating it (the simulated run's refusal reads otherwise)."""
    csv = tmp_path / "plan.csv"
    code = cli.main(["plan", "--model", "mlp", "--system", "ipu-m2000", "--global-batch", "12", "--micro-batch", "4",
                     "--replicas", "3", "--workers", "1", "--csv", str(csv)])
    assert code == 2
    rows = pd.read_csv(csv)
    assert list(rows["status"]) == ["invalid"] * len(rows) and len(rows) >= 1
    assert all("needs 1 x 3 = 3 IPUs, which is not a power of two (Poplar attaches" in r for r in rows["reason"])
    assert "every one is invalid" in capsys.readouterr().err


#: TINY with matmuls large enough that their partials type sets their pace
TINY_WIDE = dict(TINY, hidden=256, seq_len=128)


def test_partials_are_an_axis_each_candidate_priced_and_run_at_its_own():
    """--partials float,half doubles the candidates; a half-partials candidate is priced (bound) and
    simulated with half partials, so on fp16 matmuls it is faster than its float twin, its command says
    --partials half, and the top of the pruned search is still the exhaustive one's."""
    space = planner.Space(["ipu-m2000"], global_batch=(16, 16), optimizer="adam", micro_batches=[4],
                          proportions=[0.6], partials=["float", "half", "float"])
    pl = planner.Planner(planner.Model("bert-base", dict(TINY_WIDE)), space)
    assert pl.space.partials == ("float", "half")
    by_partials = {p: [c for c in pl.candidates if c.partials == p] for p in ("float", "half")}
    assert [dataclasses.replace(c, partials="half") for c in by_partials["float"]] == by_partials["half"]
    assert all(pl.bound(h) > pl.bound(f) for f, h in zip(by_partials["float"], by_partials["half"]))
    pruned, full = _compare_with_exhaustive(pl, top=2)
    fits = full[full["status"] == "ok"].set_index("command")
    assert set(fits["partials"]) == {"float", "half"}
    for command, row in fits[fits["partials"] == "half"].iterrows():
        twin = command.replace(" --partials half", "")
        assert twin != command and fits.loc[twin, "partials"] == "float"
        assert row["samples_per_second"] > fits.loc[twin, "samples_per_second"]
    assert not fits[fits["partials"] == "float"].index.str.contains("--partials").any()


def test_a_plan_of_float_partials_says_half_partials_exist_and_a_plan_of_both_shows_them(capsys):
    base = ["plan", "--model", "bert-base", "--num-layers", "2", "--hidden", "256", "--heads", "4", "--seq-len",
            "128", "--param", "vocab=8000", "--system", "ipu-m2000", "--training", "--optimizer", "sgd",
            "--global-batch", "32", "--micro-batch", "8", "--available-memory-proportion", "0.6", "--pipeline", "1",
            "--replicas", "1", "--workers", "1", "--top", "2", "--commands", "2"]

    def table(out: str) -> list[list[str]]:
        lines = out.splitlines()
        start = next(n for n, line in enumerate(lines) if line.split()[:2] == ["rank", "samples/s"])
        return [line.split() for line in lines[start:start + 3]]

    assert cli.main(base) == 0
    out = capsys.readouterr().out
    assert ("note: every configuration keeps float partials (PopTorch's default); half partials hold the model's "
            "fp16 matmuls' and convolutions' partials in less tile memory and run them faster on ipu-m2000, as "
            "Graphcore's published BERT, ViT and ResNet-50 configurations set them: --partials float,half searches "
            "both") in out
    assert "partials" not in table(out)[0] and "--partials" not in out.split("as commands:")[1]
    assert cli.main(base + ["--partials", "float,half"]) == 0
    out = capsys.readouterr().out
    assert "keeps float partials" not in out
    header, first, second = table(out)
    assert header[-6:] == ["state", "partials", "peak", "tile", "KiB", "balance"]
    assert (first[-3], second[-3]) == ("half", "half")  # the faster, recomputing or not
    assert [line.endswith("--partials half --memory-margin 0.05") for line in out.splitlines()
            if line.startswith(("  1. ", "  2. "))] == [True, True]
    assert cli.main(base + ["--partials", "double"]) == 2
    assert "'double' is not one of float, half" in capsys.readouterr().err


def test_a_global_batch_with_odd_factors_is_made_by_the_micro_batches_that_divide_it():
    """By default every divisor (up to 64) of a replica's share of a global batch of one size is a micro-batch, beside
    the powers of two: 48 over 1, 2 and 4 replicas gives 3 x 16, 6 x 8, 12 x 4 ... not only powers of two; given
    micro-batches or a range of global batches keep the axis as it was."""
    def micro_batches(**space) -> dict[int, set[int]]:
        args = dict(global_batch=(48, 48), optimizer="sgd", proportions=[0.6], pipelines=[1])
        pl = planner.Planner(planner.Model("bert-base", dict(TINY)), planner.Space(["ipu-m2000"], **{**args, **space}))
        by_replicas: dict[int, set[int]] = {}
        for c in pl.candidates:
            by_replicas.setdefault(c.replicas, set()).add(c.micro_batch)
            assert c.micro_batch * c.gradient_accumulation * c.replicas == 48 or space
        return by_replicas
    assert micro_batches() == {1: {1, 2, 3, 4, 6, 8, 12, 16, 24, 48}, 2: {1, 2, 3, 4, 6, 8, 12, 24},
                               4: {1, 2, 3, 4, 6, 12}}
    assert micro_batches(micro_batches=[4, 8]) == {1: {4, 8}, 2: {4, 8}, 4: {4}}
    assert micro_batches(global_batch=(33, 64)) == {1: {1, 2, 4, 8, 16, 32, 64}, 2: {1, 2, 4, 8, 16, 32},
                                                    4: {1, 2, 4, 8, 16}}


def test_the_conformer_is_split_over_its_encoder_blocks_without_a_recomputation_axis(capsys):
    """conformer-medium places its encoder blocks with layers_per_ipu (the front end on IPU 0, the heads on the
    last) and has no recomputation checkpoints: its splits are planned with no recompute axis, the pruned search
    finds the exhaustive one's top, and a split configuration's command runs as planned."""
    model = planner.Model("conformer-medium", {"encoder_blocks": 4, "decoder_blocks": 2})
    assert (model.family, model.recomputes) == ("layers", False)
    space = planner.Space(["ipu-m2000"], global_batch=(64, 64), optimizer="adam", micro_batches=[2],
                          proportions=[0.4], partials="half", optimizer_states=["on-chip"])
    pl = planner.Planner(model, space)
    assert pl.units == ["encoder0", "encoder1", "encoder2", "encoder3"]
    assert {c.recompute for c in pl.candidates} == {None} and {c.pipeline for c in pl.candidates} == {1, 2, 4}
    pruned, full = _compare_with_exhaustive(pl, top=2)
    split = full[(full["status"] == "ok") & (full["pipeline"] == 2)].iloc[0]
    assert "--layers-per-ipu 2,2" in split["command"] and "recompute" not in split["command"]
    assert cli.main(shlex.split(split["command"])[1:] + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["samples_per_second"] == split["samples_per_second"]
    with pytest.raises(OptionsError, match="has no recomputation axis"):
        planner.Planner(model, planner.Space(["ipu-m2000"], global_batch=(64, 64), recompute=[True]))


def test_efficientnet_is_split_over_its_mbconv_blocks(capsys):
    """efficientnet-b0 places its 16 MBConv blocks with split_points (the stem on IPU 0, the top on the last) and has
    no recomputation checkpoints; a split configuration's command runs as planned."""
    model = planner.Model("efficientnet-b0")
    assert (model.family, model.recomputes) == ("blocks", False)
    space = planner.Space(["ipu-m2000"], global_batch=(16, 16), micro_batches=[2], proportions=[0.4], partials="half",
                          pipelines=[1, 2], replicas=[1])
    pl = planner.Planner(model, space)
    assert pl.units == ["block1a", "block2a", "block2b", "block3a", "block3b", "block4a", "block4b", "block4c",
                        "block5a", "block5b", "block5c", "block6a", "block6b", "block6c", "block6d", "block7a"]
    assert {c.recompute for c in pl.candidates} == {None}
    [split] = [c for c in pl.candidates if c.pipeline == 2]
    assert sum(split.split) == 16 and "split_points=" in " ".join(plan_cli.command(pl, split))
    rows = plan_cli.plan(pl, top=2, workers=1, bar=False, exhaustive=True)
    row = rows[(rows["status"] == "ok") & (rows["pipeline"] == 2)].iloc[0]
    assert cli.main(shlex.split(row["command"])[1:] + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["samples_per_second"] == row["samples_per_second"]
    with pytest.raises(OptionsError, match="'mlp' is not split by the planner"):
        planner.Planner(planner.Model("mlp"), planner.Space(["ipu-m2000"], global_batch=(4, 4), pipelines=[2]))


def test_unet_is_split_over_its_encoder_and_decoder_blocks_close_to_graphcores_split(capsys):
    """UNet's blocks from encoder_block_1 to decoder_block_3 (each decoder step's transposed convolution, /up, a unit
    of its own) move between IPUs, the first encoder block staying on IPU 0 and the 1x1 head on the last, the skip
    connections crossing to whichever IPU reads them. The balanced 4-IPU split at proportion 0.2 is 1,3,5,3 (new
    stages at encoder_block_2, decoder_block_0/up and decoder_block_2); the one Graphcore's example pipelines
    (model_utils.set_pipeline_stages: new stages at encoder_block_2, decoder_block_0 and decoder_block_2), 1,4,4,3,
    has its busiest IPU within 2 % of it (the two were even before convolutions were serialised along their
    channels only, as poplin does); its command runs as planned."""
    model = planner.Model("unet")
    assert (model.family, model.recomputes) == ("blocks", False)
    space = planner.Space(["bow-2000"], global_batch=(24, 24), optimizer="sgd_momentum", micro_batches=[1],
                          proportions=[0.2], partials="half", pipelines=[1, 2, 4], replicas=[1],
                          optimizer_states=["on-chip"], optimizer_state_dtype="float16")
    pl = planner.Planner(model, space)
    assert pl.units == ["encoder_block_1", "encoder_block_2", "encoder_block_3", "encoder_block_4",
                        "decoder_block_0/up", "decoder_block_0", "decoder_block_1/up", "decoder_block_1",
                        "decoder_block_2/up", "decoder_block_2", "decoder_block_3/up", "decoder_block_3"]
    assert {c.recompute for c in pl.candidates} == {None}
    [four] = [c for c in pl.candidates if c.pipeline == 4]
    assert four.split == (1, 3, 5, 3)
    weights, first, last = pl._weights[pl._split_key(four)]

    def busiest(split):
        ends = [sum(split[:i]) for i in range(len(split) + 1)]
        return max(sum(weights[a:b]) + first * (i == 0) + last * (i == len(split) - 1)
                   for i, (a, b) in enumerate(zip(ends, ends[1:])))
    assert busiest((1, 3, 5, 3)) < busiest((1, 4, 4, 3)) < 1.02 * busiest((1, 3, 5, 3))
    argv = plan_cli.command(pl, four)
    assert argv[argv.index("--param", argv.index("--micro-batch")) + 1] == \
        'split_points=["encoder_block_2","decoder_block_0/up","decoder_block_2"]'
    rows = plan_cli.plan(pl, top=1, workers=1, bar=False)
    best = plan_cli.rank(rows, pl).iloc[0]
    assert best["split"] == "1,3,5,3"
    assert cli.main(shlex.split(best["command"])[1:] + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["samples_per_second"] == best["samples_per_second"]


def _tiny_inference(**space) -> planner.Planner:
    """An inference plan of a 4-layer tiny BERT on an IPU-M2000: global batch 8 as 1, 2 or 4 replicas of 1, 2 or 4
    IPUs."""
    args = dict(global_batch=(8, 8), training=False, micro_batches=[1, 2, 4, 8], proportions=[0.6],
                device_iterations=8)
    args.update(space)
    return planner.Planner(planner.Model("bert-base", dict(TINY, num_layers=4)), planner.Space(["ipu-m2000"], **args))


def test_a_latency_limit_keeps_the_fastest_configurations_within_it():
    """--max-latency: the plan's top are the configurations of an unlimited exhaustive search whose average round
    trip (getLatency()) is within the limit, fastest first, the pruned search finding the same; the others are
    "latency" rows, dropped on their latency bound where it is over the limit, which no simulation undercuts."""
    every = plan_cli.rank(plan_cli.plan(_tiny_inference(), top=6, workers=1, bar=False, exhaustive=True))
    assert len(every) == 6 and every["latency_avg_s"].notna().all()
    # here the fastest (a 4-IPU pipeline) is not the quickest to answer (one IPU at micro-batch 8)
    quickest, fastest = every["latency_avg_s"].min(), every["latency_avg_s"].iloc[0]
    assert quickest < fastest
    limit = (quickest + fastest) / 2
    within = every[every["latency_avg_s"] <= limit]
    pl = _tiny_inference(max_latency=limit)
    pruned, full = _compare_with_exhaustive(pl, top=1)
    best = plan_cli.rank(pruned, pl)
    assert best["command"].iloc[0] == within["command"].iloc[0]
    assert list(plan_cli.rank(full)["command"]) == list(within["command"])
    over = full[full["status"] == "latency"]
    assert set(over["command"]) == set(every["command"]) - set(within["command"])
    assert over["reason"].str.fullmatch(r"its step's round trip takes [\d.]+ ms on average \(getLatency\(\)\), "
                                        r"above --max-latency [\d.]+ ms").all()
    # below every configuration's bound: all dropped without simulating
    pl = _tiny_inference(max_latency=min(pl.latency_bound(c) for c in pl.candidates) / 2)
    rows = plan_cli.plan(pl, top=1, workers=1, bar=False)
    assert set(rows["status"]) == {"latency"} and rows["latency_avg_s"].isna().all()
    assert rows["reason"].str.startswith("(not simulated) a step's round trip takes at least ").all()
    # --resume replays such a row, but for an exhaustive search, which simulates it
    dropped = rows.iloc[0].to_dict()
    assert plan_cli._replayable(dropped, exhaustive=False) and not plan_cli._replayable(dropped, exhaustive=True)


def test_an_inference_plan_shows_latency_and_a_limit_nothing_meets_says_so(capsys, tmp_path):
    base = ["plan", *TINY_FLAGS, "--system", "ipu-m2000", "--global-batch", "8", "--micro-batch", "2,8",
            "--available-memory-proportion", "0.6", "--workers", "1", "--top", "2", "--commands", "1"]
    assert cli.main(base) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.split()[:2] == ["rank", "samples/s"])
    assert header.split()[2:4] == ["latency", "ms"]
    assert not {"accumulation", "recompute", "optimizer"} & set(header.split())  # no training axes
    assert "over --max-latency" not in out
    config = tmp_path / "plan.toml"
    config.write_text("max_latency = 0.01\n")
    assert cli.main(base + ["--config", str(config)]) == 2
    captured = capsys.readouterr()
    assert re.search(r": 0 fit, \d+ over --max-latency \(\d+ by their latency bound\)", captured.out)
    assert captured.err.startswith("ipusim: no configuration meets --max-latency 0.01 ms; none was simulated; the "
                                   "shortest by its bound: ipusim run ")
    assert len(captured.err.splitlines()) == 1
    assert cli.main(base + ["--training", "--max-latency", "1"]) == 2
    assert "a latency limit applies to inference" in capsys.readouterr().err
    assert cli.main(base + ["--max-latency", "-1"]) == 2
    assert "expected milliseconds above 0" in capsys.readouterr().err


def test_a_target_throughput_ranks_the_configurations_reaching_it_by_their_ipus():
    """--target-throughput: the configurations reaching it rank by the IPUs they use, fewest first, then the
    fastest, exactly as an exhaustive search of the same space ranks them; the others are "slow" rows, those whose
    throughput bound is below the target dropped without simulating; the pruned search stops at the IPU count of
    its top-th configuration."""
    every = plan_cli.plan(_tiny_inference(), top=6, workers=1, bar=False, exhaustive=True)
    fits = every[every["status"] == "ok"]
    target = float(fits["samples_per_second"].median())
    reaching = fits[fits["samples_per_second"] >= target].copy()
    # the fastest here is not the smallest: the target's ranking differs from the throughput's
    assert reaching["samples_per_second"].idxmax() != reaching.sort_values(["ipus"]).index[0]
    expected = reaching.sort_values(["ipus", "samples_per_second"], ascending=[True, False], kind="stable")["command"]
    for top in (1, len(expected)):
        pl = _tiny_inference(target_throughput=target)
        assert any("ranked by the IPUs each configuration uses" in n for n in pl.notes)
        rows = plan_cli.plan(pl, top=top, workers=1, bar=False, batch=1)
        best = plan_cli.rank(rows, pl)
        assert list(best["command"]) == list(expected)[:len(best)] and len(best) >= top
        full = plan_cli.plan(pl, top=top, workers=1, bar=False, exhaustive=True)
        assert list(plan_cli.rank(full, pl)["command"]) == list(expected)
        slow = full[full["status"] == "slow"]
        assert set(slow["command"]) == set(every["command"]) - set(expected)
        assert slow["reason"].str.fullmatch(r"[\d,]+ samples/s, below --target-throughput [\d,]+").all()
        dropped = rows[rows["status"] == "slow"]
        unsimulated = dropped[dropped["reason"].str.startswith("(not simulated)")]
        assert (unsimulated["bound_samples_per_second"] < target).all()
        if top == 1:  # nothing with more IPUs than the best was simulated
            pruned = rows[rows["status"] == "pruned"]
            assert len(pruned) and (pruned["ipus"] > best["ipus"].iloc[0]).all()
            assert pruned["reason"].str.contains("IPUs, more than the 1st best configuration reaching").all()
    # above every bound: all dropped without simulating, rows --resume replays but for an exhaustive search
    pl = _tiny_inference(target_throughput=2 * max(every["bound_samples_per_second"]))
    rows = plan_cli.plan(pl, top=1, workers=1, bar=False)
    assert set(rows["status"]) == {"slow"} and rows["reason"].str.startswith("(not simulated) at most ").all()
    dropped = rows.iloc[0].to_dict()
    assert plan_cli._replayable(dropped, exhaustive=False) and not plan_cli._replayable(dropped, exhaustive=True)


def test_a_target_nothing_reaches_says_how_far_off_the_fastest_is(capsys):
    base = ["plan", *TINY_FLAGS, "--system", "ipu-m2000", "--global-batch", "8", "--micro-batch", "2,8",
            "--available-memory-proportion", "0.6", "--workers", "1", "--top", "2", "--commands", "1"]
    assert cli.main(base + ["--target-throughput", "1e12"]) == 2
    captured = capsys.readouterr()
    assert re.search(r": 0 fit, \d+ below --target-throughput \(\d+ by their throughput bound\), .*, \d+ pruned by "
                     r"their IPUs or throughput bound\n", captured.out)
    assert captured.err.startswith("ipusim: no configuration reaches --target-throughput 1,000,000,000,000 "
                                   "samples/s; none was simulated; the highest bound: ipusim run ")
    assert cli.main(base + ["--target-throughput", "0"]) == 2
    assert "expected samples per second above 0" in capsys.readouterr().err
