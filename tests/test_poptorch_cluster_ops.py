"""``poptorch.fps`` and ``poptorch.nearest`` (sim/poptorch/cluster_ops.py): torch_cluster's values, and the ops
PopTorch's handlers (FpsOp.cpp, NearestOp.cpp) lower them to."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
import sim.poptorch as poptorch  # noqa: E402


def _farthest_points(src, ptr, ratio) -> list[int]:
    """torch_cluster's fps without a random start: each sample's first point, then repeatedly the point
    farthest from those chosen."""
    chosen = []
    for a, b in zip(ptr, ptr[1:]):
        points = src[a:b]
        picks = [0]
        nearest = torch.cdist(points, points)[0]
        for _ in range(math.ceil((b - a) * ratio) - 1):
            picks.append(int(torch.argmax(nearest)))
            nearest = torch.minimum(nearest, torch.cdist(points, points)[picks[-1]])
        chosen += [a + p for p in picks]
    return chosen


class _Sample(torch.nn.Module):
    def __init__(self, ptr, ratio, random_start=False):
        super().__init__()
        self.ptr, self.ratio, self.random_start = ptr, ratio, random_start

    def forward(self, x):
        return poptorch.fps(x, self.ptr, self.ratio, self.random_start)


def test_fps_picks_torch_clusters_points_with_the_handlers_ops():
    torch.manual_seed(1)
    x = torch.randn(50, 3)
    ptr = [0, 20, 50]
    model = poptorch.inferenceModel(_Sample(ptr, 0.25))
    assert model(x).tolist() == _farthest_points(x, ptr, 0.25)
    # per sample of k picks the handler makes k index updates, k - 1 column zeros and k - 2 row updates, and
    # 1 + 3 (k - 2) row slices (each pick's argmax row, the previous and the chosen rows): k = 5 and 8; the
    # first index update, of constants only (the zeros and the first start), is folded to a constant, as
    # PopART's constant folding folds it
    names = [op.name for op in model.executable.graph.ops]
    updates = sum(n.startswith("dynamic_update") for n in names)
    slices = sum(n.startswith("dynamic_slice") for n in names)
    assert (updates, slices) == (sum(k + k - 1 + k - 2 for k in (5, 8)) - 1, sum(1 + 3 * (k - 2) for k in (5, 8)))
    # one sample, every point
    y = torch.randn(6, 2)
    assert poptorch.inferenceModel(_Sample([0, 6], 1.0))(y).tolist() == _farthest_points(y, [0, 6], 1.0)


def test_fps_random_start_and_popTorchs_checks():
    torch.manual_seed(2)
    x = torch.randn(30, 3)
    picks = poptorch.inferenceModel(_Sample([0, 10, 30], 0.5, random_start=True))(x).tolist()
    assert len(picks) == 15 and all(0 <= p < 10 for p in picks[:5]) and all(10 <= p < 30 for p in picks[5:])
    assert 0 <= picks[0] < 9 and 10 <= picks[5] < 29  # the start: a draw in [ptr[b-1], ptr[b] - 1)
    assert len(set(picks)) == 15
    with pytest.raises(poptorch.Error, match="`ptr` must be a list of integers"):
        poptorch.fps(x, (0, 30))
    with pytest.raises(poptorch.Error, match="`ratio` must be of float type"):
        poptorch.fps(x, [0, 30], 1)
    with pytest.raises(poptorch.Error, match="`ptr` must containt at least 2 elements"):
        poptorch.fps(x, [0])


class _Nearest(torch.nn.Module):
    def __init__(self, batch_x, batch_y):
        super().__init__()
        self.batch_x, self.batch_y = batch_x, batch_y

    def forward(self, x, y, *batches):
        bx, by = batches if batches else (self.batch_x, self.batch_y)
        return poptorch.nearest(x, y, bx, by)


def _brute_force(x, y, batch_x, batch_y):
    d = torch.cdist(x, y)
    d[torch.tensor(batch_x)[:, None] != torch.tensor(batch_y)[None, :]] = float("inf")
    return d.argmin(1).tolist()


def test_nearest_finds_each_points_nearest_in_its_sample():
    torch.manual_seed(3)
    x, y = torch.randn(12, 2), torch.randn(6, 2)
    bx, by = [0] * 5 + [1] * 7, [0] * 2 + [1] * 4
    expected = _brute_force(x, y, bx, by)
    assert poptorch.inferenceModel(_Nearest(bx, by))(x, y).tolist() == expected
    as_tensors = poptorch.inferenceModel(_Nearest(None, None))
    assert as_tensors(x, y, torch.tensor(bx), torch.tensor(by)).tolist() == expected
    plain = poptorch.inferenceModel(_Nearest(None, None))(x, y).tolist()
    assert plain == torch.cdist(x, y).argmin(1).tolist()
    kinds = [op.kind for op in as_tensors.executable.graph.ops]
    assert kinds.count("concat") == 2  # each input's batch feature (concatFeatures)


def test_nearests_checks_are_popTorchs():
    x, y = torch.randn(4, 2), torch.randn(3, 2)
    with pytest.raises(poptorch.Error, match="'batch_x' is not sorted"):
        poptorch.nearest(x, y, [1, 0, 0, 0], [0, 0, 1])
    with pytest.raises(poptorch.Error, match="Some batch indices occur in 'batch_x' that do not occur in 'batch_y'"):
        poptorch.nearest(x, y, [0, 0, 1, 1], [0, 0, 0])
    with pytest.raises(poptorch.Error, match=r"x.size\(0\) == batch_x.size\(0\)"):
        poptorch.nearest(x, y, [0, 0, 1], [0, 0, 1])
    with pytest.raises(poptorch.Error, match=r"Inputs shapes inconsistent x.shape\[1\]=2 vs. y.shape\[1\]=3"):
        poptorch.nearest(x, torch.randn(3, 3))
    with pytest.raises(poptorch.Error, match="`batch_x` and `batch_y` must be torch.Tensors or lists"):
        poptorch.nearest(x, y, (0, 0, 1, 1), [0, 0, 1])
