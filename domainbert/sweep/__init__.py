"""``domainbert sweep``: Optuna searches over a fit config's hyper-parameters.

- ``space``: the search space file and how a trial samples it.
- ``trial``: one trial, a ``domainbert fit`` with per-step pruning.
- ``report``: the study's table and plots.
- ``command``: the command line, parallel local workers and resuming.
"""
