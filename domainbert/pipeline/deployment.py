"""The pipeline's deployment choice: the export's options, and the one answer to ship.

The export stage measures the student's variants, the chosen model (the teacher, with its own int8, ONNX int8 and
bf16 when the student gets them), the frozen-embedding probe classifier and the models strategies offer
(:class:`~domainbert.pipeline.strategies.base.Deployable`: each exported first, stage ``export-<role>``, its rows
joined to the export's). Its ``report.json`` holds the recommendation (:func:`domainbert.deploy.recommend.recommend`)
under the ``deploy`` settings (:class:`~.specs.DeploySpec`), and :func:`answer` turns it into the one folder to
ship: the report's first section, ``ship`` in the pipeline's ``report.json`` and the pipeline's last line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from domainbert.pipeline.records import Choice, Run, Ship
from domainbert.pipeline.specs import DeploySpec, TaskFiles
from domainbert.pipeline.strategies.base import Deployable

if TYPE_CHECKING:
    from domainbert.deploy.recommend import Recommendation

#: The trade-off plot of the export folder (:data:`domainbert.deploy.plot.PLOT_FILE`).
PLOT_FILE = "tradeoff.png"


def export_options(
    student: Run,
    teacher: str,
    task: TaskFiles,
    deploy: DeploySpec | None,
    teacher_predictions: str | None = None,
    probe: Run | None = None,
) -> dict[str, Any]:
    """The options of ``domainbert export`` for the distilled ``student`` (everything but ``out``), by name.

    Args:
        student: the distillation stage's run (``hf``, ``predictions``).
        teacher: the chosen fine-tuned model's folder.
        task: the task's files (``data`` is the test split; ``val`` the validation split when
            ``deploy.validation``).
        deploy: the deployment choice's settings (None: the defaults).
        teacher_predictions: the teacher's test predictions (its row's metric without a pass of its own).
        probe: the frozen probe's run (``hf``: its classifier; ``predictions``); measured as row ``probe``
            unless it is the teacher itself or ``deploy.probe`` is off.
    """
    deploy = deploy or DeploySpec()
    options: dict[str, Any] = {"model": student.hf, "teacher": teacher, "data": str(task.test), "role": "student"}
    options.update(_validation(task, deploy))
    probe_hf = probe.hf if probe is not None else None
    if deploy.probe and probe_hf and Path(probe_hf).resolve() != Path(teacher).resolve():
        options["probe"] = probe_hf
        if probe.predictions:
            options["probe_predictions"] = str(probe.predictions)
    known = {"predictions": student.predictions, "teacher_predictions": teacher_predictions}
    options.update({name: str(path) for name, path in known.items() if path})
    options.update(max_drop=_number(deploy.max_drop), max_ms=_number(deploy.max_ms))
    return {**options, "text_column": task.text_column, "label_column": task.label_column}


def offered_options(made: Deployable, task: TaskFiles, deploy: DeploySpec | None) -> tuple[str, dict[str, Any]]:
    """``(stage, options)``: the export stage of a model a strategy offers, named by its role.

    Its rows (its fp32 folder and the conversions ``export.args`` asks for) are measured on the same data and
    validation rows as the student's, with its own tokenizer, and joined to the main export's summary (``--join``).
    """
    from domainbert.deploy.recommend import slug

    deploy = deploy or DeploySpec()
    options: dict[str, Any] = {"model": made.hf, "data": str(task.test), "role": made.role}
    options.update(_validation(task, deploy))
    if made.predictions:
        options["predictions"] = str(made.predictions)
    options.update(max_drop=_number(deploy.max_drop), max_ms=_number(deploy.max_ms))
    options.update(text_column=task.text_column, label_column=task.label_column)
    return f"export-{slug(made.role)}", options


def _validation(task: TaskFiles, deploy: DeploySpec) -> dict[str, str]:
    """``{"val": file}`` when the variants are measured (and chosen) on validation."""
    return {"val": task.val} if deploy.validation and task.val else {}


def _number(value: float | None) -> float | None:
    return None if value is None else float(value)


def export_summary(folder: str | None) -> dict | None:
    """The export's summary (its ``report.json``), its ``recommendation`` a record; None when there is no readable one.

    Raises:
        DomainBertError: a recommendation with a field of another type (one line naming the file and the field).
    """
    from domainbert.deploy.recommend import Recommendation

    if folder is None:
        return None
    path = Path(folder) / "report.json"
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(loaded, dict):
        return None
    rec = loaded.get("recommendation")
    return {
        **loaded,
        "recommendation": None if rec is None else Recommendation.from_json(rec, f"{path}: recommendation"),
    }


def recommendation(folder: str | None) -> Recommendation | None:
    """The export's recommendation (in its ``report.json``), or None when there is no readable one."""
    return (export_summary(folder) or {}).get("recommendation")


def answer(folder: str | None, choice: Choice, why: str, skipped: str | None) -> Ship:
    """The one folder to ship, and why.

    The export's recommendation when it made one (the fastest variant shown to be at most ``deploy.max_drop``
    below the best on validation); else the fine-tuned model the choice made (``choice``: its
    best run's folder and validation score; ``why``: the choice's reasons in words), with why no variant was
    recommended (``skipped``: why the export did not run).
    """
    from domainbert.deploy.recommend import below_probe_line

    rec = recommendation(folder)
    if rec is not None and rec.variant is not None:
        return Ship(
            rec.path,
            rec.label or rec.variant,
            rec.why,
            "export",
            score=rec.score,
            split=rec.split,
            latency_ms_b32=rec.latency_ms_b32,
            variant=rec.variant,
            rule=rec.rule,
            warning=below_probe_line(rec),
        )
    if rec is not None:
        unmeasured = f"no deployment variant meets the rule: {rec.why}"
    else:
        unmeasured = f"no deployment variant was measured ({skipped or 'the export did not run'})"
    why = f"the fine-tuned model chosen on validation ({why}); {unmeasured}"
    score = choice.run.metric(choice.key)
    return Ship(choice.run.hf, choice.name, why, "choice", score, "validation", metric=choice.metric)


def ship_line(ship: Ship) -> str:
    """The one line: ``Ship: <folder> (<label>): 7.7 ms/example at batch 32, validation macro-F1 0.8010: <why>.``."""
    measured = []
    if ship.latency_ms_b32 is not None:
        measured.append(f"{ship.latency_ms_b32} ms/example at batch 32")
    if ship.score is not None:
        metric = "macro-F1" if ship.source == "export" else ship.metric or ""
        measured.append(f"{ship.split} {metric} {ship.score:.4f}")
    what = f" ({ship.label})" + (f": {', '.join(measured)}" if measured else "")
    return f"Ship: {ship.folder}{what}: {ship.why}."


def final_lines(report_json: Path) -> list[str]:
    """The pipeline's last lines, read from its ``report.json``.

    What the run left on the table (``left_on_table``), the warning below the probe, then the one answer, last.

    Raises:
        DomainBertError: its ``ship`` is no answer (one line naming the file and the field).
    """
    try:
        record = json.loads(Path(report_json).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(record, dict) or "ship" not in record:
        return []
    ship = Ship.from_json(record["ship"], f"{report_json}: ship")
    left = [str(line) for line in record.get("left_on_table") or []]
    return [*left, *([ship.warning] if ship.warning else []), ship_line(ship)]


def report_lines(folder: str | None, out: Path) -> list[str]:
    """The report's section on the deployment rule and the trade-off plot (relative to ``out``)."""
    from domainbert.deploy.recommend import rule_text

    rec = recommendation(folder)
    if rec is None:
        return []
    on = "validation rows (`deploy.validation`)" if rec.split == "validation" else "test rows (no validation)"
    rule = rule_text(rec.max_drop, rec.max_ms)
    lines = [
        "Rule (`deploy.max_drop`, `deploy.max_ms`): among the variants at most `max_ms` ms/example at batch 32, the "
        "fastest whose macro-F1 is shown to be at most `max_drop` points below the best of them, that is whose 95% "
        f"paired bootstrap interval against the best over the {on} lies at or above `-max_drop`; here: {rule}.",
    ]
    plot = Path(folder) / PLOT_FILE
    if plot.is_file():
        rel = plot.resolve().relative_to(out.resolve()) if plot.resolve().is_relative_to(out.resolve()) else plot
        lines += ["", f"![latency against macro-F1]({rel.as_posix()})"]
    return [*lines, ""]
