"""What a sweep of the PopXL, PopDist and script front ends found (each would mislead a user): the
reported micro-batch of a PopXL program with a seed stream, samples per second that leave out the
front end's own host work in a call, PopDist launches whose variables disagree, PopTorch's words in a
PopXL program's out-of-memory advice, and a note for a setting the Session made itself."""

from __future__ import annotations

import numpy as np
import pytest

import sim
import sim.popdist as popdist
import sim.popxl as popxl
import sim.popxl.ops as ops
from sim.compiler.executable import Executable


def _seed_first_session():
    """The PopXL user guide's pattern: a (2,) uint32 seed stream loaded before a (32, 128) data stream."""
    ir = popxl.Ir()
    with ir.main_graph:
        seed_h2d = popxl.h2d_stream((2,), popxl.uint32, name="seed")
        x_h2d = popxl.h2d_stream((32, 128), popxl.float16, name="x")
        seed, x = ops.host_load(seed_h2d), ops.host_load(x_h2d)
        w = popxl.variable(np.zeros((128, 128), np.float16), name="w")
        y = ops.dropout(x @ w, seed, p=0.1)
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, name="y"), y)
    session = popxl.Session(ir, "ipu_hw")
    session.run({seed_h2d: np.array([1, 2], np.uint32), x_h2d: np.zeros((32, 128), np.float16)})
    return session


def test_popxl_micro_batch_is_the_data_stream_not_the_seed():
    run = _seed_first_session()._run
    assert run.micro_batch == 32 and run.samples == 32
    assert ("the summary's micro-batch is the 32 rows of host stream 'x', the largest leading dimension of the "
            "streams of two or more dimensions") in " ".join(run.all_notes)


def test_samples_per_second_count_the_front_ends_host_work_in_a_call():
    run = _seed_first_session()._run
    host = run.executable.front_end_call_seconds
    assert host > 0 and run.call_seconds == run.seconds + host
    assert run.samples_per_second == pytest.approx(32 / (run.seconds + host), rel=1e-12)
    assert Executable.front_end_call_seconds == 0.0  # sim.simulate's runs: the device's time alone


def test_popxl_session_notes_no_auto_rounding_it_set_itself():
    assert not any("autoRoundNumIPUs" in n for n in _seed_first_session()._run.all_notes)


def test_popxl_out_of_memory_advice_in_popxl_words():
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.zeros((20000, 20000), np.float16), name="w")
        y = w @ w
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, name="y"), y)
    with pytest.raises(sim.OutOfMemoryError) as e:
        popxl.Session(ir, "ipu_hw").run()
    advice = str(e.value).split(" Try: ")[1]
    assert advice == ("fewer ops and variables on this IPU (place them with popxl.ipu(n)), fewer rows in the host "
                      "streams, a lower available_memory_proportion on the matmuls (ops.matmul) or the weights off "
                      "chip or sharded (popxl.remote_variable, popxl.replica_sharded_variable).")
    assert e.value.ipu == 0 and e.value.shortfall_bytes > 0


POPRUN = {"POPDIST_NUM_TOTAL_REPLICAS": "4", "POPDIST_NUM_LOCAL_REPLICAS": "2", "POPDIST_REPLICA_INDEX_OFFSET": "2"}


@pytest.mark.parametrize("env, message", [
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "3"},
     "the PopDist and mpirun variables disagree: 3 instance(s) (OMPI_COMM_WORLD_SIZE) of POPDIST_NUM_LOCAL_REPLICAS=2 "
     "replica(s) each are 6 replicas, against POPDIST_NUM_TOTAL_REPLICAS=4: set them as PopRun would"),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"},
     "the PopDist and mpirun variables disagree: instance 0 (OMPI_COMM_WORLD_RANK) starts at replica 0, against "
     "POPDIST_REPLICA_INDEX_OFFSET=2: set them as PopRun would"),
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "2"},
     "instance 5 of 2 (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, or as derived from the POPDIST_* replica counts): "
     "the rank must be from 0 to the size less 1"),
    ({"POPDIST_NUM_LOCAL_REPLICAS": "0"},
     "POPDIST_NUM_TOTAL_REPLICAS=4 and POPDIST_NUM_LOCAL_REPLICAS=0: each must be 1 or more"),
])
def test_popdist_launch_variables_must_agree(monkeypatch, env, message):
    for name in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {**POPRUN, **env}.items():
        monkeypatch.setenv(name, value)
    for ask in (popdist.getInstanceIndex, popdist.getNumInstances, popdist.mpirun_environment):
        with pytest.raises(ValueError) as e:
            ask()
        assert str(e.value).startswith(message)


def test_a_consistent_launch_with_mpiruns_variables(monkeypatch):
    for name, value in {**POPRUN, "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    assert (popdist.getInstanceIndex(), popdist.getNumInstances()) == (1, 2)
    assert popdist.mpirun_environment() == {}  # mpirun's variables are set already


def test_a_repeat_of_zero_says_why_nothing_runs():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((4,), np.float32), name="x")
        def add_one(t):
            return t + 1
        ops.repeat(ir.create_graph(add_one, x), 0, x)
    with pytest.raises(popxl.errors.PopXLError) as e:
        popxl.Session(ir, "ipu_hw")
    assert str(e.value).endswith(".add_one_0, 0) runs its body no times)")  # the graph named by its qualname
