"""Shared infrastructure that every stage uses: files, models, hardware, checkpoints, runs, the Lightning CLI.

- ``files``: atomic writes and reading user files (JSONL, text, gzip) with errors that name the row.
- ``hf`` and ``models_local``: loading and exporting Hugging Face models and tokenizers, offline first.
- ``hardware``: CPU/GPU feature detection and the precision chosen from it.
- ``checkpoint_io``, ``runs``: checkpoint writing and finding runs, best and last checkpoints.
- ``optim``: optimizer and schedule construction.
- ``checks``: validation of user input shared by several stages.
- ``card``: model cards for exports.
- ``lightning_cli``: the ``fit``/``validate``/``test``/``predict`` commands.
"""
