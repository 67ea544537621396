"""The pipeline's stage worker: one ``fit`` (and ``test``), or one evaluation, in this process; its record as JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from lightning.pytorch import Callback

from domainbert.core.files import atomic_write_text
from domainbert.core.prediction import in_file_order, sampler_order


def _floats(metrics) -> dict[str, float]:
    out = {}
    for k, v in metrics.items():
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            continue
    return out


@torch.no_grad()
def test_predictions(trainer, model, datamodule) -> dict:
    """Gold and predicted label ids of the test rows, in file order, from a pass of their own (single-label only).

    Only for what the test pass itself cannot give (see :class:`TestPredictions`): a multi-device run, whose ranks
    each see a part of the rows, or a module whose test step the callback cannot read.
    """
    gold, pred = [], []
    model.eval()
    loader = datamodule.test_dataloader()
    with trainer.precision_plugin.forward_context():
        for batch in loader:
            batch = {k: v.to(model.device) if torch.is_tensor(v) else v for k, v in batch.items()}
            pred += model(batch).argmax(-1).tolist()
            gold += batch["labels"].long().tolist()
    order = sampler_order(loader)
    return {
        "gold": in_file_order(gold, order),
        "pred": in_file_order(pred, order),
        "labels": list(getattr(model, "label_names", []) or []),
    }


class TestPredictions(Callback):
    """The test pass's own predictions: each test batch's gold and predicted label ids, put back in file order.

    A forward hook on the module's model (its ``model`` attribute: the classifier, or a distillation's student)
    keeps the logits of the batch's forward pass, and ``on_test_batch_end`` pairs their argmax with the batch's
    ``labels``; the test rows are read once, not again for the predictions. ``complete`` turns False when a batch
    gave no such logits (another task, a step that bypasses the model): then the predictions are not to be used.
    """

    def __init__(self) -> None:
        self.gold: list[int] = []
        self.pred: list[int] = []
        self.complete = True
        self.order: list[int] | None = None
        self._logits = None
        self._hook = None

    def _keep(self, module, args, output) -> None:
        self._logits = getattr(output, "logits", output)

    def on_test_start(self, trainer, pl_module) -> None:
        target = getattr(pl_module, "model", None)
        target = target if isinstance(target, torch.nn.Module) else pl_module
        self._hook = target.register_forward_hook(self._keep)
        loaders = trainer.test_dataloaders
        self.order = sampler_order(loaders[0] if isinstance(loaders, list | tuple) and len(loaders) == 1 else loaders)

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        self._logits = None

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        logits, labels = self._logits, batch.get("labels") if isinstance(batch, dict) else None
        if not (torch.is_tensor(logits) and torch.is_tensor(labels) and logits.dim() == 2 and labels.dim() == 1):
            self.complete = False
        elif logits.shape[0] != labels.shape[0]:
            self.complete = False
        else:
            self.pred += logits.argmax(-1).tolist()
            self.gold += labels.long().tolist()
        self._logits = None

    def on_test_end(self, trainer, pl_module) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def record(self, model) -> dict | None:
        """``{"gold", "pred", "labels"}`` (the format of :func:`test_predictions`), or None when incomplete."""
        if not self.complete or not self.gold or (self.order is not None and len(self.order) != len(self.gold)):
            return None
        return {
            "gold": in_file_order(self.gold, self.order),
            "pred": in_file_order(self.pred, self.order),
            "labels": list(getattr(model, "label_names", []) or []),
        }


class Validations(Callback):
    """The validation metrics (``val/...``) of every validation pass of a ``fit`` (not the sanity check's).

    Kept so that the record can give the validation metrics of the weights the model holds after ``fit`` without a
    pass of its own over the validation rows: the best checkpoint's (restored by ``HFExport``) were seen when
    ``ModelCheckpoint`` chose it, the final weights' at the last validation, when it came after the last step.
    """

    def __init__(self) -> None:
        self.passes: list[tuple[int, dict[str, float]]] = []

    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            metrics = {k: v for k, v in _floats(trainer.callback_metrics).items() if k.startswith("val/")}
            self.passes.append((trainer.global_step, metrics))

    def of_model(self, trainer, export) -> dict[str, float] | None:
        """The ``val/`` metrics of the weights the model holds after ``fit``; None when no pass saw them.

        Args:
            trainer: the trainer that ran ``fit``.
            export: the run's ``HFExport`` (it restores the best monitored checkpoint), or None.
        """
        best = export.best_path(trainer) if export is not None and export.enabled and export.restore_best else None
        if best and Path(best).exists():
            saver = next(cb for cb in trainer.checkpoint_callbacks if getattr(cb, "best_model_path", "") == best)
            score = float(saver.best_model_score)
            # ModelCheckpoint keeps a checkpoint only when it beats the best so far: the first pass with its score
            return next((m for _, m in self.passes if m.get(saver.monitor) == score), None)
        if self.passes and self.passes[-1][0] == trainer.global_step:
            return self.passes[-1][1]
        return None


class StageClock(Callback):
    """The timestamps of a stage's training, evaluation and export (see :mod:`domainbert.pipeline.timing`).

    Training runs from the first training batch (what comes before it, from ``ready``, is data preparation: the
    data module's ``prepare_data`` and ``setup``, the data loaders, the first batch) to ``on_train_end``; every
    validation (the sanity check's too) and test pass from its ``on_*_start`` to its ``on_*_end`` is evaluation;
    what follows training in ``fit`` (the best checkpoint restored, the Hugging Face export) is export, up to
    :meth:`fit_returned`. Put it first among the trainer's callbacks, so that its ``on_train_end`` comes before the
    others' work there.
    """

    def __init__(self, ready: float | None = None) -> None:
        self.marks: dict = {"ready": ready if ready is not None else time.time(), "work": "data"}
        for name in ("train", "eval", "export"):
            self.marks[name] = []
        self._train: float | None = None
        self._eval: float | None = None
        self._export: float | None = None

    def span(self, name: str, start: float, end: float | None = None) -> None:
        """Add the interval ``[start, end]`` (``end``: now) to the marks' ``name`` (``train``, ``eval``, ``export``)."""
        self.marks[name].append([start, time.time() if end is None else end])

    def on_train_start(self, trainer, pl_module) -> None:
        self._train = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._train is None:
            self._train = time.time()

    def on_train_end(self, trainer, pl_module) -> None:
        device = getattr(pl_module, "device", None)
        if getattr(device, "type", None) == "cuda":  # training ends when its last step has run, not been queued
            torch.cuda.synchronize(device)
        now = time.time()
        self.span("train", self._train if self._train is not None else now, now)
        self._export = now

    def fit_returned(self) -> None:
        """``fit`` returned: what followed the end of training was the export."""
        if self._export is not None:
            self.span("export", self._export)
        self._export = None

    def _eval_start(self) -> None:
        self._eval = time.time()

    def _eval_end(self) -> None:
        if self._eval is not None:
            self.span("eval", self._eval)
        self._eval = None

    def on_validation_start(self, trainer, pl_module) -> None:
        self._eval_start()

    def on_validation_end(self, trainer, pl_module) -> None:
        self._eval_end()

    def on_test_start(self, trainer, pl_module) -> None:
        self._eval_start()

    def on_test_end(self, trainer, pl_module) -> None:
        self._eval_end()

    def write(self, path: Path) -> None:
        """Write the marks, ``end`` now, to ``path``."""
        atomic_write_text(path, json.dumps({**self.marks, "end": time.time()}) + "\n")


def worker(result_path: str, args: list[str], test: bool, evaluate: bool = False) -> None:
    """Fit (and test the best weights of) one config, or only evaluate a model; write the record to ``result_path``.

    The record's metrics are those of the best checkpoint, which ``HFExport`` restored at the end of ``fit``:
    its validation metrics are the ones of the validation pass that made ``ModelCheckpoint`` keep it
    (:class:`Validations`), so the choice between runs never reads the last epoch's and the validation rows are
    not read again; a fresh ``validate`` pass only where no pass of the fit saw the weights the model holds.

    With ``evaluate`` nothing is trained: the model ``--model.init_from`` names is validated and tested as it is,
    and the record's ``hf`` is that folder.

    Beside the record, ``marks.json`` holds the timestamps of the stage's parts (:class:`StageClock`): start-up
    ends when the command line is parsed and the model built.
    """
    from domainbert.cli import cli_main
    from domainbert.core.callbacks import HFExport
    from domainbert.pipeline.timing import MARKS

    test = test or evaluate
    marks = Path(result_path).with_name(MARKS).absolute()
    # sys.argv stays this worker's own command line: Lightning relaunches it for each DDP rank
    cli = cli_main(args, run=False)
    trainer, model, dm = cli.trainer, cli.model, cli.datamodule
    clock = StageClock()
    trainer.callbacks.insert(0, clock)
    validations = Validations()
    trainer.callbacks.append(validations)
    export = next((cb for cb in trainer.callbacks if isinstance(cb, HFExport)), None)
    metrics, seen = {}, None
    if not evaluate:
        trainer.fit(model, datamodule=dm)
        clock.fit_returned()
        metrics = _floats(trainer.callback_metrics)
        seen = validations.of_model(trainer, export)
    if seen is not None:
        metrics.update(seen)
    elif evaluate or (trainer.num_val_batches and sum(trainer.num_val_batches)):
        trainer.validate(model, datamodule=dm, ckpt_path=None, verbose=False)
        metrics.update(_floats(trainer.callback_metrics))
    record = {"run": str(trainer.log_dir), "metrics": metrics}
    if test:
        _test(trainer, model, dm, metrics, record, Path(result_path).with_name("test_predictions.json"), clock)
    if not trainer.is_global_zero:
        return
    if evaluate:
        record["hf"] = str(model.hparams.init_from)
    else:
        if test and export and export.path:  # the export's model card now carries the test metrics too
            start = time.time()
            atomic_write_text(Path(export.path) / "README.md", model.model_card())
            clock.span("export", start)
        record["hf"] = str(export.path) if export and export.path else None
    atomic_write_text(result_path, json.dumps(record, indent=2) + "\n")
    clock.write(marks)


def _test(trainer, model, dm, metrics: dict, record: dict, predictions: Path, clock: StageClock) -> None:
    """Test the model as it is; its test metrics into ``metrics``, and (single-label) its test predictions.

    The predictions come from the test pass itself (:class:`TestPredictions`); a second pass over the test rows
    only where that pass cannot give them (several devices, or a module the callback cannot read).
    """
    single = hasattr(model, "label_names") and not model.hparams.get("multi_label", False)
    collect = TestPredictions() if single and trainer.world_size == 1 else None
    if collect is not None:
        trainer.callbacks.append(collect)
    try:
        trainer.test(model, datamodule=dm, ckpt_path=None, verbose=False)
    finally:
        if collect is not None:
            trainer.callbacks.remove(collect)
    metrics.update(_floats(trainer.callback_metrics))
    if trainer.is_global_zero and single:
        rows = collect.record(model) if collect is not None else None
        if rows is None:
            start = time.time()
            rows = test_predictions(trainer, model, dm)
            clock.span("eval", start)
        atomic_write_text(predictions, json.dumps(rows) + "\n")
        record["predictions"] = str(predictions)


#: how ``python -m domainbert.pipeline`` is called
USAGE = "usage: python -m domainbert.pipeline --worker RESULT.json [--test | --evaluate] <fit args>"


def main(argv: list[str]) -> int:
    """``python -m domainbert.pipeline <argv>``: run :func:`worker` with logging set up; the exit status.

    A user error (:class:`~domainbert.errors.DomainBertError`) prints ``domainbert: error: ...`` and gives 2, any
    other exception its traceback and 1 (:func:`domainbert.pipeline.inprocess.exit_status`). The stage's process is
    a new interpreter or one forked from the pipeline's server (:mod:`domainbert.pipeline.forks`).
    """
    import logging
    import sys

    from domainbert.pipeline.inprocess import LOG_FORMAT, exit_status

    if argv[:1] != ["--worker"] or len(argv) < 2:
        print(USAGE, file=sys.stderr)
        return 1
    result_path, rest = argv[1], argv[2:]
    mode = rest[0] if rest[:1] in (["--test"], ["--evaluate"]) else None
    logging.basicConfig(level="INFO", format=LOG_FORMAT)
    args = rest[1:] if mode else rest
    return exit_status(lambda: worker(result_path, args, test=mode == "--test", evaluate=mode == "--evaluate"))
