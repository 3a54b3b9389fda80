"""Training features: what a GRPO step does besides TRL's own work, one plug-in each.

| feature (module) | on with | what it does |
|---|---|---|
| ``item_draws`` | ``item_draws='learnability'``, or ``dynamic_sampling`` | the items a step plays; draws for refills |
| ``dynamic_sampling`` | ``dynamic_sampling`` | equal-reward groups replaced by fresh ones (DAPO) |
| ``oracle_prefix`` | ``oracle_prefix_schedule`` | episodes start after the oracle's first k actions (R³) |
| ``greedy_baseline`` | an estimator that needs it (``remax``) | a greedy episode per item, its return the baseline |
| ``critic`` | an estimator that needs it (``gae``) | the value head, its value loss, its checkpoint file |

A feature is a ``TrainingFeature`` (its hooks: draw or refill rows, observe the episodes played, log metrics, add a
loss, save and load its own state) and one ``Feature`` declaration (whether a config turns it on, how it is built),
added with ``register_feature``. ``AgentGRPOTrainer`` builds the active ones (``active_features``) and calls their
hooks in registration order; it names none of them. Adding a feature is one module and one ``register_feature``
(``tests/toy_feature.py`` shows one). The features' maths lives beside them in the trainer package (``item_draws``,
``dynamic_sampling``, ``reverse_curriculum``, ``value_head``); these modules are the glue.
"""

from __future__ import annotations

# the built-ins, registered in the order their hooks run
from agentgym_trl.features import item_draws  # noqa: F401
from agentgym_trl.features import dynamic_sampling  # noqa: F401
from agentgym_trl.features import oracle_prefix  # noqa: F401
from agentgym_trl.features import greedy_baseline  # noqa: F401
from agentgym_trl.features import critic  # noqa: F401
from agentgym_trl.features.base import (
    FEATURES,
    Feature,
    Row,
    TrainingFeature,
    TrainStep,
    active_features,
    register_feature,
)

__all__ = ["FEATURES", "Feature", "Row", "TrainStep", "TrainingFeature", "active_features", "register_feature"]
