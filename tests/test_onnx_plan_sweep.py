"""What a sweep of the ONNX front end and ``ipusim plan`` found: the planner weighed a pipelined layer as
twice its forward pass plus its backward, where PopART recomputes only what the gradients read (and
nothing of the final forward stage), so it split BERT away from its fastest layout; and a Softmax
before opset 13 was priced on the rows of its axis alone, not ONNX's 2-D coercion at the axis."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import sim  # noqa: E402
import sim.onnx  # noqa: E402
from sim import planner  # noqa: E402

BERT = {"num_layers": 4, "seq_len": 64}


def _pipeline_split(ipus: int) -> tuple[int, ...]:
    pl = planner.Planner(planner.Model("bert-base", dict(BERT)), planner.Space(
        ["ipu-pod16"], (256, 256), training=True, optimizer="adam", micro_batches=[4], pipelines=[ipus],
        replicas=[4], proportions=[0.4]))
    return next(c.split for c in pl.candidates if c.pipeline == ipus)


def test_recomputation_weighs_only_what_the_gradients_read():
    """BERT-base's embedding and tied head stay on IPU 0, the head in the final forward stage, which
    recomputes nothing: they weigh less than a layer, so IPU 0 takes a layer (simulated: 14,459 samples/s
    at [1, 1, 1, 1] against 12,879 at [0, 1, 1, 2], and 10,042 at [2, 2] against 9,525 at [1, 3])."""
    pl = planner.Planner(planner.Model("bert-base", dict(BERT)), planner.Space(
        ["ipu-pod16"], (256, 256), training=True, optimizer="adam", micro_batches=[4]))
    prof = pl.profile("ipu-pod16", 4, 0.4, True)
    assert 0 < prof.recompute["layer0"] < prof.forward["layer0"]  # the ops whose outputs the backward reads
    assert _pipeline_split(4) == (1, 1, 1, 1)
    assert _pipeline_split(2) == (2, 2)


def _softmax_model(opset: int, shape=(8, 64, 128), axis: int = 1):
    node = helper.make_node("Softmax", ["x"], ["y"], name="softmax", axis=axis)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _cycles(model, tmp_path) -> int:
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return sim.simulate(sim.onnx.load(str(path)), "ipu-mk2", sim.Options()).cycle_count


def test_softmax_before_opset_13_runs_over_the_coerced_rows(tmp_path):
    """Opset 11's Softmax(axis=1) of (8, 64, 128) is a softmax over 8 rows of 8,192, as on a (8, 8192) input."""
    coerced = _cycles(_softmax_model(11), tmp_path)
    assert coerced == _cycles(_softmax_model(13, (8, 8192), axis=-1), tmp_path)
    assert coerced != _cycles(_softmax_model(13), tmp_path)  # opset 13: rows of the axis alone
    assert _cycles(_softmax_model(11, axis=2), tmp_path) == _cycles(_softmax_model(13, axis=2), tmp_path)
    g = sim.onnx.load(str(tmp_path / "m.onnx"))
    assert [op.kind for op in g.ops] == ["softmax"]  # the last axis: nothing to coerce


def test_an_unreachable_global_batch_says_what_each_axis_reaches(capsys):
    from sim.cli.main import main
    assert main(["plan", "--model", "mlp", "--system", "ipu-m2000", "--global-batch", "32", "--training",
                 "--gradient-accumulation", "3"]) == 2
    assert ("plan: no configuration makes a global batch of 32: with the micro-batches [1, 2, 4, 8, 16, 32], the "
            "replicas [1, 2, 4] and the accumulation counts [3], micro-batch x replicas x accumulation reaches "
            "[3, 6, 12, 24, 48, 96, 192, 384]; give a global batch it reaches, a range LOW-HIGH, --micro-batch values "
            "that reach it, --gradient-accumulation counts that reach it or --replicas counts (or a larger --system)"
            ) in capsys.readouterr().err


def test_plan_refuses_a_loss_without_training_up_front(capsys, tmp_path):
    from sim.cli.main import main
    path = tmp_path / "m.onnx"
    onnx.save(_softmax_model(13), path)
    assert main(["plan", "--onnx", str(path), "--system", "ipu-m2000", "--global-batch", "8", "--loss", "y"]) == 2
    assert "--loss names the tensor to train on: it applies with --training" in capsys.readouterr().err
    assert main(["run", "--onnx", str(tmp_path)]) == 2
    assert f"--onnx {str(tmp_path)!r}: a folder; give the .onnx file in it" in capsys.readouterr().err


def test_an_unsupported_op_says_how_to_cost_it_from_the_command_line(tmp_path):
    node = helper.make_node("Einsum", ["x", "x"], ["y"], name="my_einsum", equation="ij,ij->ij")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])])
    path = tmp_path / "e.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    with pytest.raises(sim.errors.UnsupportedOpError) as e:
        sim.onnx.load(str(path))
    assert ("then load and simulate the model from Python (sim.onnx.load, sim.simulate; the command line has no way "
            "to register one), or replace the node in the file with ops PopART has") in str(e.value)


def test_a_full_disk_names_the_output_folder_and_the_file(tmp_path, monkeypatch):
    import errno
    from sim.results import chrome_trace, report
    run = sim.simulate(sim.onnx.load(_saved(tmp_path)), "ipu-mk2", sim.Options())

    def full(run):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(chrome_trace, "chrome_trace_json", full)
    out = tmp_path / "out"
    with pytest.raises(OSError) as e:
        report.write_outputs(run, out)
    assert str(e.value) == (f"[Errno 28] cannot write the output folder {str(out)!r} (its trace.json): No space left "
                            "on device; nothing was written (an earlier run there is as it was)")
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # no temporary folder left


def _saved(tmp_path) -> str:
    path = tmp_path / "m.onnx"
    onnx.save(_softmax_model(13), path)
    return str(path)


def test_an_onnx_models_out_of_memory_advice_names_its_placement(tmp_path, capsys):
    """An ONNX model is placed by its nodes' __ipu_number attributes, not the zoo's layers_per_ipu."""
    from sim.cli.main import main
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16384, 8192]),
                                            helper.make_tensor_value_info("w", TensorProto.FLOAT, [8192, 8192])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16384, 8192])])
    path = tmp_path / "big.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    assert main(["run", "--onnx", str(path)]) == 3
    assert ("Try: fewer of the model's nodes on this IPU (their __ipu_number attributes), a smaller micro-batch or a "
            "lower availableMemoryProportion.") in capsys.readouterr().err


def test_a_misspelt_attribute_is_refused_as_onnxs_checker_does(tmp_path):
    """PopART runs ONNX's checker on the models it loads: an attribute its operator does not define is an
    error there, not a default (a Conv's "stride" for "strides"); PopART's "__" annotations pass."""
    def conv(**attrs):
        node = helper.make_node("Conv", ["x", "w"], ["y"], name="c", kernel_shape=[3, 3], **attrs)
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [onnx.numpy_helper.from_array(np.zeros((4, 4, 3, 3), np.float32), "w")])
        path = tmp_path / "c.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        return str(path)
    with pytest.raises(sim.GraphError) as e:
        sim.onnx.load(conv(stride=[2, 2]))
    assert str(e.value) == (
        "ONNX op Conv (node 'c'): attribute 'stride' is not an attribute of Conv at opset 17 (its attributes: "
        "auto_pad, dilations, group, kernel_shape, pads, strides); ONNX's checker, which PopART runs on the models "
        "it loads, refuses the model: correct the attribute's name")
    assert [op.kind for op in sim.onnx.load(conv(strides=[2, 2], __ipu_number=0)).ops] == ["conv2d"]
