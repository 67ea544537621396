"""Library output silenced at its source (domainbert.core.quiet), for the commands and the Python API alike."""

from __future__ import annotations

import logging
import warnings

import pytest

from domainbert.core import quiet

#: what a library's load report, warning or tip looks like in output
NOISE = ("LOAD REPORT", "\x1b[", "seem corrupted", "Loading weights", "Writing model shards")


@pytest.fixture
def transformers_warns(monkeypatch):
    """transformers at its default verbosity (warning), as a user's process has it, restored afterwards."""
    import transformers.utils.logging as tf_logging

    monkeypatch.delenv("TRANSFORMERS_VERBOSITY", raising=False)
    monkeypatch.delenv("DOMAINBERT_LOG", raising=False)
    level, bars = tf_logging.get_verbosity(), tf_logging.is_progress_bar_enabled()
    tf_logging.set_verbosity_warning()
    tf_logging.enable_progress_bar()
    yield tf_logging
    tf_logging.set_verbosity(level)
    (tf_logging.enable_progress_bar if bars else tf_logging.disable_progress_bar)()


def _warned(message: str, category: type[Warning] = UserWarning) -> list[str]:
    """The warnings left of ``message`` after :func:`quiet.quiet_imports` (filters restored afterwards)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet.quiet_imports()
        warnings.warn(message, category, stacklevel=1)
    return [str(w.message) for w in caught]


@pytest.mark.parametrize(
    "message",
    [
        "Starting from v1.9.0, `tensorboardX` has been removed as a dependency of the `lightning.pytorch` package",
        "The dirpath has changed from '/a/checkpoints' to '/b/checkpoints', therefore `best_model_score`, "
        "`kth_best_model_path`, `kth_value`, `last_model_path` and `best_k_models` won't be reloaded. Only "
        "`best_model_path` will be reloaded.",
        "`ModelCheckpoint(monitor='val/f1_macro')` could not find the monitored key in the returned metrics: "
        "['train/loss', 'epoch', 'step']. HINT: Did you call `log('val/f1_macro', value)` in the `LightningModule`?",
    ],
)
def test_known_library_warnings_are_dropped(monkeypatch, message):
    monkeypatch.delenv("DOMAINBERT_LOG", raising=False)
    assert _warned(message) == []


def test_other_warnings_stay_and_debug_keeps_everything(monkeypatch):
    monkeypatch.delenv("DOMAINBERT_LOG", raising=False)
    assert _warned("your learning rate is odd") == ["your learning rate is odd"]
    monkeypatch.setenv("DOMAINBERT_LOG", "DEBUG")
    notice = "Starting from v1.9.0, `tensorboardX` has been removed"
    assert _warned(notice) == [notice]


def test_onnxruntimes_preprocessing_advice_on_the_root_logger_is_dropped(monkeypatch, caplog):
    monkeypatch.delenv("DOMAINBERT_LOG", raising=False)
    quiet.quiet_imports()
    with caplog.at_level(logging.WARNING):
        logging.warning("Please consider to run pre-processing before quantization. Refer to example: https://x")
        logging.warning("Please consider pre-processing before quantization. See https://x")
        logging.warning("the quantized model is larger than expected")
    assert [r.getMessage() for r in caplog.records] == ["the quantized model is larger than expected"]


def test_importing_domainbert_quiets_lightnings_tips():
    """The Python API: a user who builds a ``lightning.Trainer`` gets no tip once domainbert is imported."""
    import domainbert  # noqa: F401 - its import installs the filter

    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    assert quiet._FILTER in logger.filters
    assert quiet._ROOT_FILTER in logging.root.filters


@pytest.mark.parametrize(
    ("message", "kept"),
    [
        ("You are using a CUDA device ('NVIDIA H200') that has Tensor Cores. To properly utilize them, ...", False),
        ("`weights_only` was not set, defaulting to `False`.", False),
        ("GPU available: False, used: False", False),
        ("GPU available: True (cuda), used: True", True),
        ("`Trainer.fit` stopped: `max_steps=3` reached.", True),
    ],
)
def test_lightnings_records_are_dropped_only_where_they_say_nothing_about_the_run(message, kept):
    record = logging.LogRecord("lightning.pytorch.utilities.rank_zero", logging.INFO, __file__, 1, message, None, None)
    assert quiet._FILTER.filter(record) is kept


def test_a_frozen_teachers_eval_mode_warning_is_dropped_and_only_for_its_count(monkeypatch):
    import torch

    monkeypatch.delenv("DOMAINBERT_LOG", raising=False)
    teacher = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)).eval()  # 3 modules
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet.expect_frozen_modules(teacher)
        for n in (3, 4):
            warnings.warn(f"Found {n} module(s) in eval mode at the start of training. This may lead to", stacklevel=1)
    assert [str(w.message)[:8] for w in caught] == ["Found 4 "]


def test_domainberts_loads_print_no_load_report_and_restore_transformers(transformers_warns, tiny_bert, capfd):
    """A head missing from the checkpoint: transformers' table (with colour codes) is not printed; domainbert says
    what was initialised at random itself. Afterwards transformers' verbosity and bars are as they were."""
    from transformers import AutoModelForSequenceClassification

    from domainbert.core.hf import load_model

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("transformers").addHandler(handler)  # transformers' records do not reach the root logger
    capfd.readouterr()
    try:
        _, missing = load_model(AutoModelForSequenceClassification, str(tiny_bert))
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    out = "".join(capfd.readouterr()) + "".join(r.getMessage() for r in records)
    assert "classifier.weight" in missing
    assert not [n for n in NOISE if n in out], out
    assert transformers_warns.get_verbosity() == logging.WARNING
    assert transformers_warns.is_progress_bar_enabled()


def test_quiet_transformers_changes_nothing_under_debug(transformers_warns, monkeypatch):
    monkeypatch.setenv("DOMAINBERT_LOG", "DEBUG")
    with quiet.quiet_transformers():
        assert transformers_warns.get_verbosity() == logging.WARNING
        assert transformers_warns.is_progress_bar_enabled()


def test_quiet_transformers_keeps_a_verbosity_the_user_chose(transformers_warns, monkeypatch):
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "info")
    transformers_warns.set_verbosity_info()
    with quiet.quiet_transformers():
        assert transformers_warns.get_verbosity() == logging.INFO
        assert not transformers_warns.is_progress_bar_enabled()  # its own bars go whatever the verbosity
    assert transformers_warns.is_progress_bar_enabled()
