"""popxl-addons' ``seed_variable``: a random seed held per replica group.

popxl-addons keeps the seed in a remote buffer, loads it in the program that writes the weights to the
device (PopART's WeightsFromHost fragment) and stores it back in the one that reads them, so no
training step moves it. Here the seed is a variable on the tiles, which costs a step nothing either:
the variable (to read or write with the session) and the tensor the program's random ops take are the
same."""

from __future__ import annotations

from .. import popxl

__all__ = ["seed_variable"]


def seed_variable(seed: int, replica_grouping=None) -> tuple:
    """(the seed variable, the tensor to give the random ops): ``popxl.create_seeds(seed)``, one value a
    group of ``replica_grouping`` (by default a group a replica)."""
    grouping = replica_grouping or popxl.gcg().ir.replica_grouping(group_size=1)
    variable = popxl.variable(popxl.create_seeds(seed, replicas=grouping.num_groups), popxl.uint32,
                              name="random_seed", replica_grouping=grouping)
    return variable, variable
