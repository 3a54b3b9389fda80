"""A toy env family that lives outside ``agentgym_envs``: it shows that a family is one folder.

``agentgym_envs.register_family("toy_family")`` registers ``AgentGym/Toy-v0`` and
``AgentGym/Toy-Short-v0``; ``tests/test_toy_family.py`` then gets ``check_env``, the server, the
hostile checks and the listing for it without touching any module of ``agentgym_envs``.
"""
