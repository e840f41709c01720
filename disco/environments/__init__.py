"""Environments: the batched interface, Catch (jittable and dm_env), registry."""
