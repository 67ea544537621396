"""The pipeline's deployment choice: the export's options, and what the report and the last lines say of it.

The export stage measures the student's variants, the teacher (with its own int8 and ONNX int8 when the student
gets them) and the frozen-embedding probe classifier; its ``report.json`` holds the recommendation
(:func:`domainbert.deploy.recommend.recommend`) under the ``deploy`` settings (:class:`~.specs.DeploySpec`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from domainbert.pipeline.specs import DeploySpec, TaskFiles
from domainbert.pipeline.strategies.base import Run

#: The trade-off plot of the export folder (:data:`domainbert.deploy.plot.PLOT_FILE`).
PLOT_FILE = "tradeoff.png"


def export_options(
    student: dict,
    teacher: str,
    task: TaskFiles,
    deploy: DeploySpec | None,
    teacher_predictions: str | None = None,
    probe: Run | None = None,
) -> dict[str, Any]:
    """The options of ``domainbert export`` for the distilled ``student`` (everything but ``out``), by name.

    Args:
        student: the distillation stage's record (``hf``, ``predictions``).
        teacher: the shipped fine-tuned model's folder.
        task: the task's files (``data`` is the test split; ``val`` the validation split when
            ``deploy.validation``).
        deploy: the deployment choice's settings (None: the defaults).
        teacher_predictions: the teacher's test predictions (its row's metric without a pass of its own).
        probe: the frozen probe's run (``hf``: its classifier; ``predictions``); measured as row ``probe``
            unless it is the teacher itself or ``deploy.probe`` is off.
    """
    deploy = deploy or DeploySpec()
    options: dict[str, Any] = {"model": student["hf"], "teacher": teacher, "data": str(task.test), "role": "student"}
    if deploy.validation and task.val:
        options["val"] = task.val
    probe_hf = probe.hf if probe is not None else None
    if deploy.probe and probe_hf and Path(probe_hf).resolve() != Path(teacher).resolve():
        options["probe"] = probe_hf
        if probe.predictions:
            options["probe_predictions"] = str(probe.predictions)
    known = {"predictions": student.get("predictions"), "teacher_predictions": teacher_predictions}
    options.update({name: str(path) for name, path in known.items() if path})
    options.update(max_drop=_number(deploy.max_drop), max_ms=_number(deploy.max_ms))
    return {**options, "text_column": task.text_column, "label_column": task.label_column}


def _number(value: float | None) -> float | None:
    return None if value is None else float(value)


def recommendation(folder: str | None) -> dict | None:
    """The export's recommendation (its ``report.json``), or None when there is no readable one."""
    if folder is None:
        return None
    try:
        return json.loads((Path(folder) / "report.json").read_text(encoding="utf-8")).get("recommendation")
    except (OSError, ValueError, AttributeError):
        return None


def report_lines(folder: str | None, out: Path) -> list[str]:
    """The report's section on the deployment choice: the recommendation, its rule, the plot (relative to ``out``)."""
    from domainbert.deploy.report import recommendation_lines

    rec = recommendation(folder)
    if rec is None:
        return []
    lines = ["## The variant to deploy", "", *recommendation_lines(rec)]
    lines.append(
        f"Rule (`deploy.max_drop`, `deploy.max_ms`): the fastest at batch 32 among the variants {rec['rule']}."
    )
    plot = Path(folder) / PLOT_FILE
    if plot.is_file():
        rel = plot.resolve().relative_to(out.resolve()) if plot.resolve().is_relative_to(out.resolve()) else plot
        lines += ["", f"![latency against macro-F1]({rel.as_posix()})"]
    return [*lines, ""]


def final_lines(folder: str | None) -> list[str]:
    """The pipeline's last lines on deployment: the recommended variant, and the warning when below the probe."""
    from domainbert.deploy.recommend import below_probe_line

    rec = recommendation(folder)
    if rec is None:
        return []
    if rec.get("variant") is None:
        return [f"Deploy: no variant recommended: {rec['why']}."]
    lines = [f"Deploy: {rec['label']} ({rec.get('path')}): {rec['why']}."]
    warning = below_probe_line(rec)
    return [*lines, warning] if warning else lines
