"""What several test files share: paths, the tiny configs, the fault marker, a connected corpus, CLI arguments.

Tests import these as ``from tests.helpers import ...`` (``tests`` is a package; pytest puts the project root on
``sys.path``). The package also holds ``tiny`` (tiny checkpoints), ``distill_tiny``, ``faults_summary`` (the
fault-injection plugin) and ``sweep_toy`` (a toy module for sweep trials).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
TINY_MLM = str(ROOT / "configs/pretrain/tiny_debug.yaml")
TINY_CLS = str(ROOT / "configs/finetune/tiny_classification.yaml")

#: one bad input in the fault-injection summary
bad_input = pytest.mark.faults(bad_inputs=1)


def corpus(tok, train, **kw):
    """A ``CorpusDataModule`` over ``train``, connected to ``tok`` and set up for fitting."""
    from domainbert.data.corpus import CorpusDataModule

    dm = CorpusDataModule(train=str(train), **kw)
    dm.connect(tok)
    dm.setup("fit")
    return dm


def tiny_mlm_args(sub: str, tiny_bert, corpus_file, root, config: str = TINY_MLM) -> list[str]:
    """``domainbert <sub>`` of the tiny pretraining config on ``corpus_file``, writing under ``root``."""
    args = [sub, "--config", config, "--model.init_from", str(tiny_bert), "--data.train", str(corpus_file)]
    return [*args, "--trainer.default_root_dir", str(root)]
