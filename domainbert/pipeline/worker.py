"""The pipeline's stage worker: one ``fit`` (and ``test``), or one evaluation, in this process; its record as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from domainbert.core.files import atomic_write_text


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
    """Gold and predicted label ids of the test rows, in file order (single-label classification only)."""
    gold, pred = [], []
    model.eval()
    with trainer.precision_plugin.forward_context():
        for batch in datamodule.test_dataloader():
            batch = {k: v.to(model.device) if torch.is_tensor(v) else v for k, v in batch.items()}
            pred += model(batch).argmax(-1).tolist()
            gold += batch["labels"].long().tolist()
    return {"gold": gold, "pred": pred, "labels": list(getattr(model, "label_names", []) or [])}


def worker(result_path: str, args: list[str], test: bool, evaluate: bool = False) -> None:
    """Fit (and test the best weights of) one config, or only evaluate a model; write the record to ``result_path``.

    The record's metrics are those of the best checkpoint, which ``HFExport`` restored at the end of ``fit``:
    validation metrics from a fresh ``validate`` pass, so the choice between runs never reads the last epoch's.

    With ``evaluate`` nothing is trained: the model ``--model.init_from`` names is validated and tested as it is,
    and the record's ``hf`` is that folder.
    """
    from domainbert.callbacks import HFExport
    from domainbert.cli import cli_main

    test = test or evaluate
    # sys.argv stays this worker's own command line: Lightning relaunches it for each DDP rank
    cli = cli_main(args, run=False)
    trainer, model, dm = cli.trainer, cli.model, cli.datamodule
    metrics = {}
    if not evaluate:
        trainer.fit(model, datamodule=dm)
        metrics = _floats(trainer.callback_metrics)
    if evaluate or (trainer.num_val_batches and sum(trainer.num_val_batches)):
        trainer.validate(model, datamodule=dm, ckpt_path=None, verbose=False)
        metrics.update(_floats(trainer.callback_metrics))
    record = {"run": str(trainer.log_dir), "metrics": metrics}
    if test:
        _test(trainer, model, dm, metrics, record, Path(result_path).with_name("test_predictions.json"))
    if not trainer.is_global_zero:
        return
    export = next((cb for cb in trainer.callbacks if isinstance(cb, HFExport)), None)
    if evaluate:
        record["hf"] = str(model.hparams.init_from)
    else:
        if test and export and export.path:  # the export's model card now carries the test metrics too
            atomic_write_text(Path(export.path) / "README.md", model.model_card())
        record["hf"] = str(export.path) if export and export.path else None
    atomic_write_text(result_path, json.dumps(record, indent=2) + "\n")


def _test(trainer, model, dm, metrics: dict, record: dict, predictions: Path) -> None:
    """Test the model as it is; its test metrics into ``metrics``, and (single-label) its test predictions."""
    trainer.test(model, datamodule=dm, ckpt_path=None, verbose=False)
    metrics.update(_floats(trainer.callback_metrics))
    if trainer.is_global_zero and hasattr(model, "label_names") and not model.hparams.get("multi_label", False):
        atomic_write_text(predictions, json.dumps(test_predictions(trainer, model, dm)) + "\n")
        record["predictions"] = str(predictions)
