"""Stages 1 and 3 (Omne-R1 paper): reinforcement learning with multi-turn tool rollouts on TRL's GRPOTrainer.

One concern per module:

* ``episodes``: an episode re-encoded as prompt / completion ids, with ``env_mask`` 0 on every token the
  environment wrote (tool responses, template wrappers, forced prefixes);
* ``rollouts``: ``ToolRollouts``, TRL's ``rollout_func`` (the policy and the KG tools through the same
  ``RolloutEngine`` as evaluation), and the rewards scored on its ``Trajectory`` objects;
* ``advantages``: credit assignment in plain torch (KG-R1 turn credit, GAE, whitening);
* ``micro_batches``: a step's rollouts in micro-batches cut to the width they need (memory, same result);
* ``resampling``: which questions keep being trained on (KG-Hopper history, KG-Reasoner hard cases);
* ``trainers``: the TRL subclasses, the only place that overrides TRL's private methods (imports TRL);
* ``validation``: the validation-EM callback (imports transformers);
* ``data``: the stage's questions and TRL's prompt dataset; ``history``: the manifest summary and curves;
* ``keep``: the exactly-correct training rollouts, saved in the model folder (the ``agent`` source of the SFT data);
* ``build``: ``train_rl``, one stage from its start model to a saved model folder with its manifest.

Importing the package stays cheap: torch, TRL and transformers load inside ``train_rl``.
"""

from pipelines.train.rl.build import train_rl

__all__ = ["train_rl"]
