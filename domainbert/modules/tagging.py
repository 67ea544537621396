"""Fine-tuning for token tagging with BIO tags (``AutoModelForTokenClassification``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from domainbert.data.masking import IGNORE_INDEX
from domainbert.modules.finetune import FineTuneModule, label_config, labels_from
from domainbert.modules.metrics import EntityF1
from domainbert.modules.tasks import Task


class TokenClassificationModule(FineTuneModule):
    """Tag words with BIO labels; each word is predicted from its first sub-token.

    Logs ``train/loss``, ``val/loss`` and entity-level ``val/f1``, ``val/precision``, ``val/recall``
    (seqeval-style span matching), and the same under ``test/``. ``predict_step`` returns each row's
    fields plus ``tags``, one per word.
    """

    task = Task.TAGGING

    def __init__(
        self,
        init_from: str,
        num_labels: int | None = None,
        label_names: list[str] | None = None,
        learning_rate: float = 5e-5,
        **kwargs,
    ) -> None:
        """Load the checkpoint and put a token-classification head on it.

        ``learning_rate`` is named here only for tagging's own default; like ``init_from`` and the options in
        ``**kwargs``, it is documented in :class:`~domainbert.modules.finetune.FineTuneModule`.

        Args:
            num_labels: number of tags; linked from ``data.num_labels`` by the CLI.
            label_names: the tags in id order; linked from ``data.label_names``; saved as ``id2label``.
            **kwargs: the options every fine-tuning module takes (dropouts, LoRA...).
        """
        super().__init__(init_from, learning_rate=learning_rate, **kwargs)
        self.label_names = labels_from(num_labels, label_names, init_from)
        self.init_model(label_config(self.label_names))
        self.val_f1 = EntityF1()
        self.test_f1 = EntityF1()

    def setup(self, stage: str) -> None:
        self.check_datamodule()

    def forward(self, batch: dict) -> torch.Tensor:
        """Per-token logits of a batch."""
        return self.model(**self.model_inputs(batch)).logits

    @staticmethod
    def compute_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy over first sub-tokens (labels -100 elsewhere are ignored)."""
        return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)

    def word_tags(self, logits: torch.Tensor, labels: torch.Tensor) -> tuple[list[list[str]], list[list[str]]]:
        """Predicted and gold tag strings at the first sub-token of each word, per row."""
        pred = logits.argmax(-1).cpu()
        labels = labels.cpu()
        names = self.label_names
        preds, golds = [], []
        for p, g in zip(pred, labels):
            keep = g != IGNORE_INDEX
            preds.append([names[i] for i in p[keep].tolist()])
            golds.append([names[i] for i in g[keep].tolist()])
        return preds, golds

    def training_loss(self, batch: dict) -> torch.Tensor:
        """The tagging loss of a batch."""
        return self.compute_loss(self(batch), batch["labels"])

    def evaluate(self, batch: dict, stage: str) -> None:
        """Log the batch's loss; collect its word tags for the epoch's entity F1."""
        logits = self(batch)
        n = batch["input_ids"].shape[0]
        self.log(f"{stage}/loss", self.compute_loss(logits, batch["labels"]), batch_size=n, prog_bar=stage == "val")
        (self.val_f1 if stage == "val" else self.test_f1).update(*self.word_tags(logits, batch["labels"]))

    def end_evaluation(self, stage: str) -> None:
        """Log the epoch's entity-level F1, precision and recall."""
        metric = self.val_f1 if stage == "val" else self.test_f1
        for name, value in metric.scores().items():
            self.log(f"{stage}/{name}", value, prog_bar=stage == "val" and name == "f1")
        metric.reset()

    def predict_step(self, batch: dict, batch_idx: int, dataloader_idx: int = 0) -> list[dict]:
        """Per row: its fields plus ``tags``, one per word (``O`` for words cut off by ``max_length``)."""
        preds, _ = self.word_tags(self(batch), batch["labels"])
        metas = batch.get("meta") or [{} for _ in preds]
        out = []
        for meta, tags in zip(metas, preds):
            row = dict(meta)
            starts = row.pop("word_starts", list(range(len(tags))))
            full = ["O"] * max(row.pop("num_words", 0), len(starts))
            for w, tag in zip(starts, tags):
                full[w] = tag
            row["tags"] = full
            out.append(row)
        return out
