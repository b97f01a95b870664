"""Replica-grouped weights: ``poptorch_model.W.replicaGrouping(comm_group_type, shards, retrieval_mode)``.

PopTorch (``python/_poplar_executor.py``, ``ReplicaGroupingWrapper``) lets a parameter of the wrapped model
take a different value on each group of replicas: the groups are PopART's ``CommGroup(comm_group_type,
shards)`` (``sim.options.comm_group``: Orthogonal groups of ``shards`` replicas ``replicas / shards`` apart,
Consecutive ones of ``shards`` neighbours, All one group, NoGrouping every replica alone), and the host tensor
holds one value per group stacked on a leading dimension (``VariableRetrievalMode.OnePerGroup``), or one per
replica (``AllReplicas``). PopTorch traces the model with the first of them (``param.narrow(0, 0, 1)``) and
passes the rest as the variable's initial values (PopART's ``VariableSettings``).

Here:

* the capture sees the first value too (:func:`first_values`), so every replica's weight, its memory and its
  operations have the per-replica shape;
* in training, the weight's gradient is all-reduced within its group only (``Tensor.grad_collectives``, one
  all-reduce over the group: none for groups of one), the other replicas' values being other variables;
* the outputs computed on the CPU run each replica with its own value (:meth:`Grouping.values_for`), and a
  training step gives each value the gradient of its group's replicas (a mean still over all the replicas, as
  PopTorch's own test has it: :meth:`Grouping.reduce_gradients`), so reading the weight back gives every
  group's.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from ..errors import OptionsError
from ..options import comm_group
from . import enums
from ._errors import error


@dataclass(frozen=True)
class Grouping:
    """One parameter's replica grouping over ``replicas`` replicas."""

    name: str
    group_type: enums.CommGroupType
    shards: int
    retrieval: enums.VariableRetrievalMode
    replicas: int

    @property
    def stride_and_size(self) -> tuple[int, int]:
        """(replica numbers between two members of a group, members of a group) (``sim.options.comm_group``)."""
        return comm_group(self.replicas, self.group_type, self.shards)

    @property
    def rows(self) -> int:
        """The host tensor's values: one per group, or one per replica (``AllReplicas``)."""
        if self.retrieval == enums.VariableRetrievalMode.AllReplicas:
            return self.replicas
        return self.replicas // self.stride_and_size[1]

    def row_of(self, replica: int) -> int:
        """The host tensor's value replica ``replica`` runs with."""
        if self.retrieval == enums.VariableRetrievalMode.AllReplicas:
            return replica
        stride, size = self.stride_and_size
        return replica % stride if stride > 1 else replica // size

    def members(self, replica: int) -> list[int]:
        """The replicas of ``replica``'s group."""
        stride, size = self.stride_and_size
        first = replica % stride if stride > 1 else replica - replica % size
        return [first + k * stride for k in range(size)]

    def check(self, value: torch.Tensor) -> None:
        """PopTorch's and PopART's checks of the host tensor (a scalar; a leading dimension of another size)."""
        if value.dim() == 0:
            raise error("Scalars cannot be passed as per-replica weight tensor values")
        if value.shape[0] != self.rows:
            what = (f"replica, {self.replicas} replicas (VariableRetrievalMode.AllReplicas)"
                    if self.retrieval == enums.VariableRetrievalMode.AllReplicas else
                    f"group, {self.rows} groups of {self.stride_and_size[1]} replicas ({self.group_type.name} over "
                    f"{self.replicas})")
            raise error(f"replicaGrouping of {self.name!r}: its first dimension must hold one value per {what}, but "
                        f"the tensor's shape is {tuple(value.shape)}")

    def gradient_collectives(self, nbytes: int) -> tuple:
        """The weight's gradient collectives (``sim.graph.Tensor.grad_collectives``): an all-reduce within the
        group, none for a group of one."""
        stride, size = self.stride_and_size
        return (("all_reduce", stride, size, nbytes),) if size > 1 else ()

    def values_for(self, value: torch.Tensor, replica: int) -> torch.Tensor:
        """Replica ``replica``'s value: a view of its row, so a backward pass reaches the host tensor."""
        return value[self.row_of(replica)]

    def reduce_gradients(self, grad: torch.Tensor) -> None:
        """Each row's gradient as its group's replicas reduce it, in place. The CPU steps sum every replica's
        gradient into the row it ran with, so a value per group has its group's sum already; a value per replica
        (``AllReplicas``) gets its whole group's. A mean stays over all the replicas, as the executor divides it:
        PopTorch's own test of grouped weights (tests/replicated_graph_test.py ``test_per_replica_variables``)
        matches the whole problem's SGD steps on the CPU so."""
        if self.retrieval != enums.VariableRetrievalMode.AllReplicas or self.stride_and_size[1] == 1:
            return
        summed = {}
        for r in range(self.replicas):
            group = tuple(self.members(r))
            if group not in summed:
                summed[group] = sum(grad[m] for m in group)
        for group, total in summed.items():
            for m in group:
                grad[m] = total


def wrapper(executor, name: str, parameter: torch.nn.Parameter):
    """What ``executor.<name>`` gives for a parameter of the wrapped model: the parameter's attributes, and
    ``replicaGrouping``, which records the grouping for the next compile (PopTorch's ReplicaGroupingWrapper)."""

    class ReplicaGroupingWrapper:
        def replicaGrouping(self, comm_group_type: enums.CommGroupType, shards: int,
                            variable_retrieval_mode: enums.VariableRetrievalMode):
            executor._per_replica_params[name] = (comm_group_type, shards, variable_retrieval_mode)

        def __getattr__(self, attr):
            return getattr(parameter, attr)

    return ReplicaGroupingWrapper()


def groupings(model: torch.nn.Module, requested: dict, replicas: int) -> dict[str, Grouping]:
    """The recorded groupings of ``model``'s parameters, checked against their host tensors."""
    params = dict(model.named_parameters())
    out = {}
    for name, (group_type, shards, retrieval) in requested.items():
        try:
            group_type = enums.CommGroupType(group_type)
            retrieval = enums.VariableRetrievalMode(retrieval)
        except ValueError as e:
            raise error(f"replicaGrouping of {name!r}: {e}") from None
        grouping = Grouping(name, group_type, shards, retrieval, replicas)
        try:
            grouping.stride_and_size
        except OptionsError as e:  # a group size that does not divide the replicas
            raise error(f"replicaGrouping of {name!r}: {e}") from None
        grouping.check(params[name])
        out[name] = grouping
    return out


@contextlib.contextmanager
def first_values(model: torch.nn.Module, grouped: dict[str, Grouping]):
    """The model with each grouped parameter replaced by its first value (as PopTorch traces it), then restored."""
    saved = {}
    for name in grouped:
        owner, attr = _owner(model, name)
        saved[name] = (owner, attr, getattr(owner, attr))
        value = saved[name][2]
        setattr(owner, attr, torch.nn.Parameter(value.detach()[0].clone(), requires_grad=value.requires_grad))
    try:
        yield
    finally:
        for owner, attr, value in saved.values():
            setattr(owner, attr, value)


def _owner(model: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
    path, _, attr = name.rpartition(".")
    return (model.get_submodule(path) if path else model), attr
