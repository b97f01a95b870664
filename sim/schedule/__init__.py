"""Schedules: how a compiled model's stages become a :class:`~sim.program.Sequence`.

``context`` holds what every schedule shares; ``stages`` splits a placed graph into stages;
``pipeline`` (single IPU and pipelined), ``sharded`` and ``phased`` build the program of one
call; ``hostio`` adds host stream copies with their syncs; ``collectives`` plans GCL-style
collectives over replicas (and replica groupings); ``replicated_ops`` prices collective ops
written inside a model.
"""
