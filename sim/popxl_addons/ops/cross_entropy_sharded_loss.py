"""popxl-addons' tensor-parallel cross-entropy (``popxl_addons.ops.cross_entropy_sharded_loss``, its C++
``CrossEntropyShardedOp``: logits sharded over a replica group along the classes). Not modelled: the
name imports (models import it for training whether or not they train), and a call raises
``NotModelledError``."""

from __future__ import annotations

from ...popxl.errors import NotModelledError

__all__ = ["cross_entropy_sharded_loss"]


def cross_entropy_sharded_loss(*args, **kwargs):
    raise NotModelledError("popxl_addons.ops.cross_entropy_sharded_loss is not modelled by the simulator "
                           "(popxl-addons' CrossEntropyShardedOp C++ op, the loss of logits sharded over replicas); "
                           "compute the loss with addons.ops.cross_entropy on whole logits")
