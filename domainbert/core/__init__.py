"""Shared infrastructure that every stage uses: files, models, hardware, checkpoints, runs.

- ``files``: atomic writes (files and folders), plain-name checks, and one-line errors for a full disk.
- ``hf`` and ``models_local``: loading and exporting Hugging Face models and tokenizers, offline first.
- ``hardware``: CPU/GPU feature detection and the precision chosen from it.
- ``seeding``: the one ``(seed, step)`` formula of every per-step random stream.
- ``settings``: settings given as a dataclass or a dict of its fields (``lora:``, ``augment:``).
- ``checkpoint_io``, ``runs``: checkpoint writing and finding runs, best and last checkpoints.
- ``optim``: optimizer and schedule construction.
- ``checks``: validation of user input shared by several stages.
- ``card``: model cards for exports.

The command line is :mod:`domainbert.cli`, above the stages; ``core`` imports neither it nor ``data``.
"""
