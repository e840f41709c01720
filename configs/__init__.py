"""Launcher configs (``ml_collections``), installed as ``disco.configs``.

Each module's ``get_config()`` returns the defaults of one launcher:
``evaluate`` (``disco-eval``) and ``meta_train`` (``disco-meta-train``).
Copy a file to start your own config and pass it with ``--config=<file>``.
"""
