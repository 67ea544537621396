"""What is shipped is trusted only as far as it holds: a checkpoint's saved settings, a model folder's weights, the
length an export was scored at.

The rows of "Trust what is shipped": a distillation checkpoint whose loss entry names a model module built from a
folder of planted ``auto_map`` code with ``trust_remote_code: true`` (``validate --ckpt_path`` and
``DistillationModule.load_from_checkpoint``), or a class of the path that leaves a mark when built, refused in one
line with no code run; a classifier folder whose weights lack the head, or hold no tensor at all, refused by
``export`` naming the missing weights with nothing exported; ``predict`` and ``classify`` on an export scored at 8
tokens given a longer row, which must answer as the row cut at 8 tokens (as it was scored), not as the whole row,
even where the export's tokenizer files are the base model's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from examples.redteam import fixtures
from examples.redteam.attacks_safety import _code
from examples.redteam.verdict import Attack, Result

#: the distillation module's hyper-parameter that lists its loss terms, where the crafted checkpoints plant an entry
LOSSES = "losses"
#: the same list in a 0.1.0 checkpoint, read as ``losses`` (``domainbert.distill.objective.from_released``)
RELEASED_LOSSES = "extra_losses"
#: the class the crafted entry names: a model module, no loss term, whose ``init_from`` is the planted folder
NOT_A_TERM = "domainbert.modules.mlm.MaskedLMModule"
#: ``site/evil_loss.py`` (on the command's ``PYTHONPATH``): a class that leaves its mark when built, at ``MARKER``
RECORDER = """
import pathlib
from torch import nn


class Recorder(nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        pathlib.Path(MARKER).touch()
"""
#: the length the export records it was scored at, below the long row's token count
SCORED = 8
#: what a fit writes in its ``hf/config.json`` (``domainbert.core.scoring``): scored at ``SCORED`` tokens in float32
SCORING = {"domainbert_scoring": {"max_length": SCORED, "precision": "32-true"}}
#: a row of about 30 tokens: the export must read its first ``SCORED`` only
LONG_ROW = (
    "the server exports network packets over a socket while the renderer draws textures with shaders and the api "
    "returns json to every client"
)
#: the export's head scaled by this: a tiny random head answers near 1/3 whatever it reads, a sharp one shows it
SHARPEN = 300.0
#: probabilities are written to 6 decimals
TOLERANCE = 2e-6

#: ``DistillationModule.load_from_checkpoint`` on ``argv[1]``: a refusal is one ``domainbert: error:`` line, rc 2
LOAD = """
import sys
from domainbert.distill.module import DistillationModule
from domainbert.errors import DomainBertError
try:
    DistillationModule.load_from_checkpoint(sys.argv[1])
except DomainBertError as err:
    said = str(err)
    print(("domainbert: error: " if "\\n" not in said else "a refusal of several lines: ") + said)
    sys.exit(2)
print("loaded the crafted checkpoint")
"""

#: ``classify`` on the export ``argv[1]`` as served (no length given), each row's probabilities to ``argv[3]``
CLASSIFY = """
import json, sys
from domainbert.deploy.classifier import classify
from domainbert.deploy.load import load_variant
model, tokenizer, _ = load_variant(sys.argv[1])
rows = [json.loads(line)["text"] for line in open(sys.argv[2], encoding="utf-8")]
with open(sys.argv[3], "w", encoding="utf-8") as fh:
    for row in classify(model, tokenizer, rows):
        fh.write(json.dumps(row) + "\\n")
"""


def _crafted(class_path: str, trust: bool, key: str = LOSSES):
    """A setup: ``crafted.ckpt``, a distillation checkpoint with no weights whose loss entry builds ``class_path``
    from ``planted/`` (the tiny BERT with ``auto_map`` code that creates ``CODE-RAN`` when imported), and
    ``site/evil_loss.py``, whose ``Recorder`` (an ``nn.Module``, no loss term) creates ``CODE-RAN`` when built. The
    entry is the checkpoint's ``key`` list (:data:`LOSSES`, or a 0.1.0 checkpoint's :data:`RELEASED_LOSSES`)."""

    def setup(work: Path, values: dict) -> None:
        import lightning
        import torch

        if not (work / "planted").exists():
            fixtures.plant_auto_map(Path(values["bert"]), work / "planted", work / "CODE-RAN")
        (work / "site").mkdir(exist_ok=True)
        (work / "site" / "evil_loss.py").write_text(RECORDER.replace("MARKER", repr(str(work / "CODE-RAN"))))
        init_args = {"init_from": str(work / "planted"), "trust_remote_code": trust}
        entry = {"class_path": class_path, "init_args": init_args}
        hparams = {"_class_path": "domainbert.distill.module.DistillationModule", "teacher": values["clsA"]}
        hparams |= {"student_layers": 1, key: [entry]}
        version = {"pytorch-lightning_version": lightning.__version__}
        torch.save({"state_dict": {}, "hyper_parameters": hparams, **version}, work / "crafted.ckpt")

    return setup


def _weights(keep):
    """A setup: ``model/``, a copy of classifier A whose ``model.safetensors`` holds only the tensors ``keep`` keeps."""

    def setup(work: Path, values: dict) -> None:
        from safetensors.torch import load_file, save_file

        shutil.copytree(values["clsA"], work / "model", dirs_exist_ok=True)
        weights = str(work / "model" / "model.safetensors")
        tensors = {k: v for k, v in load_file(weights).items() if keep(k)}
        save_file(tensors, weights, metadata={"format": "pt"})

    return setup


def _refused_exporting_nothing(*names: str):
    """A check: refused (rc 2) in one line naming each of ``names``, and ``dep/`` holds nothing but hidden marks."""

    def check(res: Result) -> tuple[bool, str]:
        lines = res.error_lines()
        line = lines[-1] if lines else (res.out.strip().splitlines() or ["(no output)"])[-1]
        out = res.work / "dep"
        made = [p.name for p in out.rglob("*") if not p.name.startswith(".")] if out.is_dir() else []
        fine = res.rc == 2 and len(lines) == 1 and all(n in line for n in names) and not made
        return fine, f"rc {res.rc}: {line}" + (f"; EXPORTED {sorted(made)[:4]}" if made else "; nothing exported")

    return check


def _scored_export(base_tokenizer: bool):
    """A setup: ``export/``, classifier A, its head sharpened, recording (as a fit's ``hf/`` does) that it was scored
    at ``SCORED`` tokens in float32, in its ``config.json`` and, unless ``base_tokenizer`` (its tokenizer files
    copied from the base model), its tokenizer's ``model_max_length``; ``rows.jsonl``: the long row and a short one."""

    def setup(work: Path, values: dict) -> None:
        from safetensors.torch import load_file, save_file

        export = work / "export"
        shutil.copytree(values["clsA"], export, dirs_exist_ok=True)
        weights = str(export / "model.safetensors")
        tensors = load_file(weights)
        tensors["classifier.weight"] = tensors["classifier.weight"] * SHARPEN
        save_file(tensors, weights, metadata={"format": "pt"})
        records = {"config.json": SCORING, "tokenizer_config.json": {"model_max_length": SCORED}}
        for name, update in list(records.items())[: 1 if base_tokenizer else 2]:
            config = json.loads((export / name).read_text())
            (export / name).write_text(json.dumps({**config, **update}, indent=2))
        if base_tokenizer:
            for name in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(Path(values["bert"]) / name, export / name)
        fixtures.jsonl(work / "rows.jsonl", [{"text": LONG_ROW}, {"text": "a socket"}])

    return setup


def _reference(export: Path, texts: list[str]) -> dict[int, list[list[float]]]:
    """Each text's probabilities by plain transformers, cut at ``SCORED`` tokens and at the model's 128."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(export).eval()
    tokenizer = AutoTokenizer.from_pretrained(export)
    found = {}
    for length in (SCORED, model.config.max_position_embeddings):
        enc = tokenizer(texts, truncation=True, max_length=length, padding=True, return_tensors="pt")
        with torch.no_grad():
            found[length] = torch.softmax(model(**enc).logits.float(), -1).tolist()
    return found


def _as_scored(written: str):
    """A check: the probabilities in ``written`` (JSON lines, ``probabilities`` by label) are those of each row cut at
    ``SCORED`` tokens, and the long row cut there answers otherwise than whole (else the row proves nothing)."""

    def check(res: Result) -> tuple[bool, str]:
        path = res.work / written
        if res.rc != 0 or not path.is_file():
            return False, f"rc {res.rc}: no {written}: {(res.out.strip().splitlines() or ['(no output)'])[-1]}"
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        got = [list(r["probabilities"].values()) for r in rows]
        texts = [json.loads(line)["text"] for line in (res.work / "rows.jsonl").read_text().splitlines()]
        ref = _reference(res.work / "export", texts)
        whole = ref[max(ref)]

        def gap(a: list[list[float]], b: list[list[float]]) -> float:
            return max(abs(x - y) for u, v in zip(a, b, strict=True) for x, y in zip(u, v, strict=True))

        if len(got) != len(texts) or gap(ref[SCORED], whole) < 100 * TOLERANCE:
            return False, f"{len(got)} rows of {len(texts)}; cut and whole differ by {gap(ref[SCORED], whole):.1e}"
        off = gap(got, ref[SCORED])
        note = f"long row {got[0]}: {off:.0e} off its {SCORED}-token answer, {gap(got, whole):.0e} off the whole row's"
        return off <= TOLERANCE, note

    return check


def shipped() -> list[Attack]:
    """Items 1, 2 and 5 of "Trust what is shipped": code from a checkpoint, weights that do not fit, the length."""
    distill = ["validate", "--config", "{cfg_distill}", "--model.teacher", "{clsA}", "--data.train", "{train}",
               "--data.val", "{val}", "--data.test", "{test}", "--trainer.default_root_dir", "runs"]  # fmt: skip
    export = ["export", "--model", "model", "--out", "dep", "--data", "{test}", "--onnx", "false",
              "--latency_examples", "4", "--repeats", "1"]  # fmt: skip
    predict = ["predict", "--model", "classification", "--model.init_from", "export", "--data", "classification",
               "--data.predict", "rows.jsonl", "--trainer.default_root_dir", "runs", "--run_name", "p",
               "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false"]  # fmt: skip
    return [
        Attack("ckpt-planted-loss-validate", "T1", [*distill, "--ckpt_path", "crafted.ckpt"],
               f"refused in one line: {LOSSES}[0] names a model module with trust_remote_code; its code never runs",
               names=["crafted.ckpt", "trust_remote_code"], setup=_crafted(NOT_A_TERM, True),
               absent=["{work}/CODE-RAN"]),
        Attack("ckpt-planted-loss-load", "T1", ["-c", _code(LOAD), "crafted.ckpt"],
               "DistillationModule.load_from_checkpoint refuses in one line; the code never runs",
               names=["crafted.ckpt", "trust_remote_code"], python=True, setup=_crafted(NOT_A_TERM, True),
               absent=["{work}/CODE-RAN"]),
        Attack("ckpt-loss-any-class", "T1", [*distill, "--ckpt_path", "crafted.ckpt"],
               f"refused in one line: {LOSSES}[0] names a class of the path that is no LossTerm; it is never built",
               names=[f"model.{LOSSES}[0]", "evil_loss.Recorder is not a class derived from", "LossTerm"],
               setup=_crafted("evil_loss.Recorder", False), path=["{work}/site"], absent=["{work}/CODE-RAN"]),
        Attack("ckpt-released-loss-any-class", "T1", [*distill, "--ckpt_path", "crafted.ckpt"],
               f"the same in a 0.1.0 checkpoint's {RELEASED_LOSSES}: refused in one line; the class never built",
               names=["evil_loss.Recorder is not a class derived from", "LossTerm"],
               setup=_crafted("evil_loss.Recorder", False, RELEASED_LOSSES), path=["{work}/site"],
               absent=["{work}/CODE-RAN"]),
        Attack("export-headless-classifier", "T2", export,
               "refused in one line naming the missing head; nothing exported", expect="custom",
               check=_refused_exporting_nothing("model", "missing classifier.bias, classifier.weight"),
               setup=_weights(lambda name: not name.startswith("classifier."))),
        Attack("export-empty-safetensors", "T2", export,
               "refused in one line naming the missing weights; nothing exported", expect="custom",
               check=_refused_exporting_nothing("model", "missing bert.embeddings"),
               setup=_weights(lambda name: False)),
        Attack("predict-longer-than-scored", "T5", predict,
               f"rc 0; the long row answered as cut at the {SCORED} tokens it was scored at", expect="ok",
               check=_as_scored("runs/p/version_0/predictions.jsonl"), setup=_scored_export(False)),
        Attack("classify-longer-than-scored", "T5", ["-c", _code(CLASSIFY), "export", "rows.jsonl", "classified.jsonl"],
               f"rc 0; its tokenizer the base model's: classify still cuts the long row at the {SCORED} tokens "
               "config.json records", expect="ok", check=_as_scored("classified.jsonl"), python=True,
               setup=_scored_export(True)),
    ]  # fmt: skip
