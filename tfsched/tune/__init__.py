"""Auto-tuning of ByteScheduler's two knobs, partition and credit (ByteScheduler §4.3), and
optionally a third, the window of the workers' pushes, for the straggler effect.

* ``search``: Gaussian-process Bayesian optimization with expected improvement (the
  ``bayesian-optimization`` library, exploration xi = 0.1 as in the paper) and random search on
  the same space, for comparison.
* ``coordinator``: one task decides; every worker applies the same setting at the same step
  (a small service over grpcio, bound to the cluster's own addresses). It maximizes the
  throughput, or the throughput times one minus the straggler effect (``"balanced"``).
* ``worker``: what runs in each worker's training loop: ``TunedSession`` (credit live, partition
  by a new session on the same graph: the variables live on the PS, so training carries on
  without a checkpoint) and ``CreditTuneHook`` for ``MonitoredTrainingSession`` (credit only).
* ``run``: ``tfsched tune`` on a built-in model or a user's graph.
"""

from tfsched.tune.search import BayesSearch, RandomSearch, Setting, Space

__all__ = ["BayesSearch", "RandomSearch", "Setting", "Space"]
