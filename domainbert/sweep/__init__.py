"""``domainbert sweep``: Optuna searches over a fit config's hyper-parameters.

- ``space``: the search space file and how a trial samples it.
- ``preflight``: what is checked before any trial runs (the config parses, takes every value, on one device).
- ``trial``: one trial, a ``domainbert fit`` with per-step pruning.
- ``storage``: where the study lives (SQLite or a server URL), with heartbeats.
- ``bookkeeping``: which trials count towards ``--n_trials``, and which run again.
- ``worker``: one worker's loop, which runs trials until the study has enough.
- ``report``: the study's table, ``best.yaml`` and plots, from a small :class:`~.report.ReportContext`.
- ``command``: the command line, parallel local workers and resuming.

Imports go one way (``tests/unit/test_sweep_command.py`` checks it): nothing imports ``command``; ``worker`` imports
the modules listed above it and ``report``; ``report`` and ``preflight`` import ``space`` and ``trial``; ``space``,
``trial``, ``storage`` and ``bookkeeping`` import nothing of the package.
"""
