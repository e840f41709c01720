"""Update rules: the interface (``base``), the built-in rules and the registry.

Rules: ``actor_critic``, ``policy_gradient``, ``ppo``, ``mirror_learning`` (DPO,
LPO, with ``drift``), ``mpo`` and ``spo`` (with ``mpo_common``), ``disco``,
``lpg``. Settings: ``registry``, ``agent_settings``, ``overrides``,
``migrations``, ``resolve``.
"""
