"""The zoo's Swin Transformer (models/swin.py): sizes, Graphcore's window padding and layout copies,
placement, errors, and training runs of Graphcore's configurations."""

import pytest

import models
from sim import load_system
from sim.cost import op_cost
from sim.errors import GraphError
from sim.graph import GraphBuilder, VIEW_KINDS
from sim.graph.training import expand_training
from sim.validation import PUBLISHED_BY_ID


def ops_in(graph, scope: str):
    return [op for op in graph.ops if op.name.startswith(scope)]


@pytest.mark.parametrize("name, parameters", [
    ("swin-tiny", 28_288_354), ("swin-base", 87_768_224), ("swin-large", 196_532_476)])
def test_parameters_are_the_published_models(name, parameters):
    """timm's swin_{tiny,base,large}_patch4_window7_224 (the paper's 28M, 88M and 197M): every weight,
    bias, norm and relative position bias table, exactly."""
    assert models.get(name).num_parameters() == parameters


def test_windows_are_padded_to_56_tokens_and_cut_back_to_49():
    g = models.get("swin-tiny", micro_batch=4)
    qkv = ops_in(g, "layers0/blocks0/attn/qkv/matmul")[0]
    assert g.tensors[qkv.outputs[0]].shape == (4 * 64, 56, 3 * 96)  # 64 windows of an image, 3C
    scores = ops_in(g, "layers0/blocks0/attn/scores")[0]
    assert g.tensors[scores.outputs[0]].shape == (256, 3, 56, 56)
    proj = [op for op in ops_in(g, "layers0/blocks0/attn/") if op.kind == "slice"][-1]
    assert g.tensors[proj.outputs[0]].shape == (256, 49, 96)
    last = ops_in(g, "layers3/blocks1/attn/qkv/matmul")[0]  # a 7 x 7 map: one window an image
    assert g.tensors[last.outputs[0]].shape == (4, 56, 3 * 768)


def test_odd_blocks_shift_except_where_the_map_is_one_window():
    g = models.get("swin-tiny")
    shifted = {op.name.split("/attn/")[0] for op in g.ops if "/attn/shift_mask/" in op.name}
    assert shifted == {"layers0/blocks1", "layers1/blocks1", "layers2/blocks1", "layers2/blocks3", "layers2/blocks5"}


def test_stochastic_depth_rises_linearly_over_the_blocks():
    g = models.get("swin-tiny", drop_path=0.2)
    scales = [op.attrs["factor"] for op in g.ops if op.name.endswith("drop_path_attn/scale")]
    assert len(scales) == 11  # the first block's rate is 0: no drop path
    assert scales[-1] == pytest.approx(1 / (1 - 0.2))  # the last block's rate is drop_path


def test_stochastic_depth_draws_one_mask_value_per_sample():
    """timm 0.4.5: floor(keep + rand((B, 1, 1))) multiplies the scaled branch; no gradient flows
    into the draw."""
    g = models.get("swin-tiny", micro_batch=4)
    draws = [op for op in g.ops if op.kind == "random_uniform"]
    assert len(draws) == 2 * 11 and all(g.tensors[op.outputs[0]].shape == (4, 1, 1) for op in draws)
    floor = next(op for op in g.ops if op.name == "layers3/blocks1/drop_path_mlp/floor")
    mul = next(op for op in g.ops if op.name == "layers3/blocks1/drop_path_mlp/mul")
    assert floor.outputs[0] in mul.inputs
    trained = expand_training(g)
    assert [op.name for op in trained.ops if op.kind == "random_uniform"] == [op.name for op in draws]
    assert not any(op.inputs and set(op.inputs) & {floor.outputs[0]} and op.pass_ == "backward"
                   and op.kind != "mul" for op in trained.ops)


def test_placement_follows_the_blocks_patch_merging_stays_with_its_stage():
    g = models.get("swin-tiny", layers_per_ipu=[2, 3, 5, 2])
    where = {op.name: (op.ipu, op.stage) for op in g.ops}
    assert where["patch_embed/proj/conv2d"] == (0, 0)
    assert where["layers0/downsample/reduction/matmul"] == (0, 0)  # after block 1, the stage's last, on IPU 0
    assert where["layers1/downsample/reduction/matmul"] == (1, 1)
    assert where["layers2/blocks0/attn/qkv/matmul"] == (1, 1)  # the fifth block: IPU 1's third
    assert where["head/head/matmul"] == (3, 3)


def test_remap_copies_through_the_exchange_and_its_in_place_form_only_in_the_backward_pass():
    b = GraphBuilder("remaps", "float32")
    x = b.input("x", (64, 96, 56))
    w = b.weight("w", (56, 56))
    y = b.remap(b.remap(b.matmul(x, w), inplace=True), name="copy")
    b.output(y, b.mse_loss(y, b.input("t", (64, 96, 56))))
    assert "remap_inplace" in VIEW_KINDS and "remap" not in VIEW_KINDS
    g = expand_training(b.graph)
    ipu = load_system("ipu-mk2").ipu
    cost = {op.name: op_cost(op, g, ipu, 1472) for op in g.ops if op.kind in ("remap", "remap_inplace")}
    copy = cost["copy"]
    nbytes = 64 * 96 * 56 * 4  # every element received once, in even shares (rounded up) over the tiles
    assert nbytes <= copy.exchange_bytes < 1.01 * nbytes and copy.exchange_cycles > 0 and copy.compute_cycles > 0
    grads = [op for op in g.ops if op.kind == "remap" and op.pass_ == "backward"]
    assert len(grads) == 2  # both remaps copy the gradient
    assert all(cost[op.name] == copy for op in grads)
    inplace = next(name for name in cost if name.startswith("remap_inplace"))
    assert cost[inplace].compute_cycles == cost[inplace].exchange_cycles == 0


@pytest.mark.parametrize("params, key", [
    (dict(heads=[3, 6, 12]), "heads"), (dict(heads=[3, 5, 12, 24]), "heads"), (dict(image_size=222), "patch"),
    (dict(image_size=192), "window"), (dict(layers_per_ipu=[2, 3, 5]), "layers_per_ipu"),
    (dict(drop_path=1.0), "drop_path")])
def test_bad_parameters_name_what_is_wrong(params, key):
    with pytest.raises(GraphError, match=key):
        models.get("swin-tiny", **params)


@pytest.mark.parametrize("rid, model", [("B28", "swin-tiny"), ("B29", "swin-large")])
def test_graphcore_configurations_train_on_a_bow_pod16(rid, model):
    """The rows run end to end; the held-out report tracks their error (reports/validation.md)."""
    row = PUBLISHED_BY_ID[rid]
    assert row.setup.model == model
    assert row.simulated() > 0


def test_the_planner_splits_the_blocks_and_its_commands_run():
    """ipusim plan treats a Swin block as a unit (``layer<k>``, the patch merging with its stage's last
    block), as BERT's layers; the configuration it proposes is one `ipusim run` can simulate."""
    from sim import planner
    from sim.cli import plan as plan_cli
    pl = planner.Planner(planner.Model("swin-tiny", {}), planner.Space(
        ["bow-pod16"], (64, 64), optimizer="adamw", pipelines=[4], replicas=[1], micro_batches=[4],
        proportions=[0.3], recompute=[False], optimizer_states=["on-chip"]))
    assert pl.units == [f"layer{k}" for k in range(12)]
    rows = plan_cli.plan(pl, top=1, workers=1, bar=False, batch=4)
    best = plan_cli.rank(rows).iloc[0]
    split = [int(n) for n in best["split"].split(",")]
    assert len(split) == 4 and sum(split) == 12 and best["samples_per_second"] > 0
    g = models.get("swin-tiny", recompute_checkpoint_every_layer=True)
    assert sum(bool(op.attrs.get("recomputation_checkpoint")) for op in g.ops) == 11
