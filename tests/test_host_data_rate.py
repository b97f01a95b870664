"""The host's data pipeline at a given rate (``Options.hostDataRate``, ``--host-data-rate``): it runs
ahead of the IPUs, so a call's period is the longer of the call and the busiest host process's samples
over the rate; the throughput counts over that period, the call's cycles and latencies stay the IPUs'."""

import json
import math

import pytest

import models
import sim
from sim import Options, OptionsError, simulate

from cli_run import cli

DEVICE_ITERATIONS = 100


def _run(rate=None, replicas=1, processes=None, synthetic=False):
    o = Options().deviceIterations(DEVICE_ITERATIONS).replicationFactor(replicas)
    if rate is not None:
        o.hostDataRate(rate)
    if processes is not None:
        o.hostProcesses(processes)
    if synthetic:
        o.enableSyntheticData(True)
    return simulate(models.get("mlp", micro_batch=16), "ipu-m2000", o, training=True)


def _note(run):
    return next(n for n in run.all_notes if n.startswith("host data pipeline"))


def test_a_slower_pipeline_sets_the_throughput_and_leaves_the_call_alone():
    free = _run()
    rate = free.samples_per_second / 2
    slow = _run(rate)
    # the call is the IPUs' work, to the cycle; its period is its 1,600 samples at the pipeline's rate
    assert slow.cycle_count == free.cycle_count and slow.latency == free.latency
    assert slow.samples == free.samples == 16 * DEVICE_ITERATIONS
    assert slow.host_data_seconds == pytest.approx(1600 / rate, rel=1e-12)
    assert slow.call_period_seconds == slow.host_data_seconds > slow.seconds
    assert slow.samples_per_second == pytest.approx(rate, rel=1e-12)
    waited = slow.host_data_seconds - slow.seconds
    assert "it sets the throughput" in _note(slow) and f"waits {waited:.4g} s" in _note(slow)
    assert "the host data pipeline's pace" not in sim.results.report.format_summary(free)
    assert "the host data pipeline's pace" in sim.results.report.format_summary(slow)


def test_a_faster_pipeline_keeps_up():
    free = _run()
    fast = _run(free.samples_per_second * 10)
    assert fast.samples_per_second == free.samples_per_second
    assert fast.call_period_seconds == fast.seconds == free.seconds
    assert "keeps up, busy 10% of each call" in _note(fast)
    # without a rate the notes say what the pipeline must deliver, and how to give its rate
    assert any(n.startswith("not modelled: the host's data pipeline") and "--host-data-rate" in n
               for n in free.all_notes)


def test_each_process_makes_the_samples_of_the_replicas_it_feeds():
    one = _run(20_000.0, replicas=4)  # one process feeds 4 replicas: 6,400 samples a call
    four = _run(20_000.0, replicas=4, processes=4)  # each of 4 processes feeds one: 1,600
    assert one.host_data_seconds == pytest.approx(6400 / 20_000, rel=1e-12)
    assert four.host_data_seconds == pytest.approx(1600 / 20_000, rel=1e-12)
    assert one.samples_per_second == pytest.approx(20_000, rel=1e-12)
    assert four.samples_per_second == pytest.approx(80_000, rel=1e-12)
    assert "the 6,400 samples the busiest process feeds a call" in _note(one)


def test_synthetic_data_has_no_pipeline():
    run = _run(10.0, synthetic=True)
    assert run.host_data_seconds == 0 and run.call_period_seconds == run.seconds
    assert "synthetic data: no host transfers run, so hostDataRate has no effect" in run.all_notes


@pytest.mark.parametrize("bad", [0, -5.0, math.nan, math.inf, True, "fast", None])
def test_a_rate_that_is_not_above_zero_is_refused(bad):
    with pytest.raises(OptionsError, match=r"hostDataRate\(.*\): expected the samples per second"):
        Options().hostDataRate(bad)


def test_the_command_line_flag(capsys):
    base = ("run", "--model", "mlp", "--training", "--device-iterations", str(DEVICE_ITERATIONS), "--json")
    code, out, err = cli(capsys, *base, "--host-data-rate", "50000")
    assert code == 0, err
    d = json.loads(out)
    assert d["samples_per_second"] == pytest.approx(50_000, rel=1e-12)
    assert d["host_data_seconds"] == pytest.approx(1600 / 50_000, rel=1e-12) == d["call_period_seconds"]
    assert d["options"]["hostDataRate"] == 50_000
    code, _, err = cli(capsys, *base, "--host-data-rate", "0")
    assert code == 2 and "--host-data-rate" in err and "above 0" in err


def test_a_synchronous_pipeline_runs_between_the_calls(capsys):
    free = _run()
    rate = free.samples_per_second * 4
    o = Options().deviceIterations(DEVICE_ITERATIONS).hostDataRate(rate, asynchronous=False)
    sync = simulate(models.get("mlp", micro_batch=16), "ipu-m2000", o, training=True)
    # faster than the IPUs, yet its quarter of a call's time adds to every call
    assert sync.cycle_count == free.cycle_count
    assert sync.call_period_seconds == pytest.approx(free.seconds * 1.25, rel=1e-12)
    assert sync.samples_per_second == pytest.approx(free.samples_per_second / 1.25, rel=1e-12)
    assert "it runs between the calls (synchronous)" in _note(sync)
    with pytest.raises(OptionsError, match="asynchronous='no'"):
        Options().hostDataRate(1000.0, asynchronous="no")
    base = ("run", "--model", "mlp", "--training", "--device-iterations", str(DEVICE_ITERATIONS), "--json")
    code, out, err = cli(capsys, *base, "--host-data-rate", str(rate), "--host-data-sync")
    assert code == 0, err
    assert json.loads(out)["samples_per_second"] == pytest.approx(sync.samples_per_second, rel=1e-9)
    code, _, err = cli(capsys, *base, "--host-data-sync")
    assert code == 2 and "--host-data-sync needs the pipeline's rate" in err


def test_a_plan_gives_every_candidate_the_rate_and_bounds_by_it():
    """``ipusim plan --host-data-rate``: each candidate's command carries the rate, its bound is at most
    the rate times its host processes (ceil(replicas / replicas_per_process)), and a simulated candidate
    comes out at that rate when the pipeline is the slower."""
    from sim import planner
    from sim.cli import plan as plan_cli

    space = dict(global_batch=(64, 64), training=True, optimizer="sgd", micro_batches=[16], proportions=[0.6],
                 pipelines=[1], replicas=[1, 4])
    pl = planner.Planner(planner.Model("mlp", {}), planner.Space(["ipu-m2000"], host_data_rate=1000.0, **space))
    for c in pl.candidates:
        argv = plan_cli.command(pl, c)
        assert argv[argv.index("--host-data-rate") + 1] == "1000.0"
        assert pl.bound(c) == 1000.0 * -(-c.replicas // 2)
    rows = plan_cli.plan(pl, top=2, workers=1, bar=False)
    ok = rows[rows["status"] == "ok"]
    assert sorted(ok["samples_per_second"].round(6)) == [1000.0, 2000.0]
    with pytest.raises(OptionsError, match="host data rate 0"):
        planner.Space(["ipu-m2000"], (64, 64), host_data_rate=0)
