"""Figures quoted on several pages agree with their one source: the shipped configs, the defaults, one table.

Each :class:`Quote` is a pattern on a page (or in ``domainbert pipeline --help``) whose groups are a figure, and the
values the source gives for them: the built-in stage configs (``domainbert/pipeline/stages/*.yaml``), the example
distillation config, the pipeline's defaults (``TransferSpec``), the layers ``select_layers`` copies, and the
distillation benchmark's table. A page that quotes another value, or no longer quotes the figure in the words the
pattern expects, fails here: change the source, then every page that quotes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import yaml

from domainbert.distill.student import select_layers
from domainbert.pipeline.specs import TransferSpec

ROOT = Path(__file__).resolve().parents[2]
STAGES = ROOT / "domainbert" / "pipeline" / "stages"
EXAMPLE = ROOT / "configs" / "distill" / "minilm_debian-sections_L3.yaml"
BENCHMARK = "docs/benchmarks/distillation.md"
GUIDE = "docs/guides/distillation-deployment.md"
PIPELINE = "docs/guides/pipeline.md"
#: the depth of the teachers the pages describe (all-MiniLM-L6-v2)
TEACHER_LAYERS = 6


@cache
def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _init(path: Path, key: str):
    return _yaml(path)["model"]["init_args"][key]


def _hidden_weight(path: Path) -> float:
    """The weight of the config's hidden-state term (γ): 0.0 when ``model.losses`` lists none."""
    terms = [t for t in _init(path, "losses") if t["class_path"].rsplit(".", 1)[-1] == "HiddenStateLoss"]
    return float(terms[0]["init_args"]["weight"]) if terms else 0.0


def _epochs(path: Path) -> int:
    return _yaml(path)["trainer"]["max_epochs"]


def _thousands(n: int) -> str:
    return f"{n:,}"


def _copied_layers() -> tuple[str, ...]:
    """The teacher layers, counted from 1, that the student of the shipped configs is copied from."""
    layers = select_layers(_init(STAGES / "distill.yaml", "student_layers"), TEACHER_LAYERS)
    assert layers == select_layers(_init(EXAMPLE, "student_layers"), TEACHER_LAYERS)
    return tuple(str(i + 1) for i in layers)


@cache
def _delta_vs_teacher() -> dict[tuple[str, str], str]:
    """``{(domain, "task" | "corpus"): Δ test vs teacher}`` from the benchmark's table of the pipeline's student."""
    text = (ROOT / BENCHMARK).read_text(encoding="utf-8")
    table = text[text.index("## The student with the pipeline's defaults") :]
    out, domain = {}, None
    for row in re.findall(r"^\|(.*)\|$", table.split("\n\n```")[0], re.M):
        cells = [c.strip() for c in row.split("|")]
        domain = cells[0].split(" (")[0] or domain
        arm = "task" if cells[1].startswith("task rows only") else "corpus" if "corpus documents" in cells[1] else None
        if arm:
            out[(domain, arm)] = cells[4].strip("*").split(" [")[0].strip("*")
    assert set(out) == {(d, a) for d in ("Debian", "python-docs") for a in ("task", "corpus")}, out
    return out


def _points(value: str) -> float:
    return float(value.replace("−", "-"))


def _task_rows_gap() -> tuple[str, str]:
    """The smallest and largest gap (points below the teacher) of the students distilled from the task rows alone."""
    gaps = sorted(-_points(v) for (_, arm), v in _delta_vs_teacher().items() if arm == "task")
    return f"{gaps[0]:.2f}", f"{gaps[-1]:.2f}"


@dataclass(frozen=True)
class Quote:
    """A figure as ``page`` quotes it: ``pattern``'s groups must equal ``source()`` wherever the pattern matches."""

    page: str
    pattern: str
    source: object  # a callable returning the tuple of strings the groups must equal

    def __str__(self) -> str:
        return f"{self.page}: {self.pattern[:50]}"


QUOTES = [
    # the layers the 3-layer student is copied from
    Quote(GUIDE, r"head and layers (\d+), (\d+) and (\d+) \(counted from 1\)", _copied_layers),
    Quote(BENCHMARK, r"its layers (\d+), (\d+) and (\d+) \(counted from 1\)", _copied_layers),
    # gamma: the example config's and the pipeline stage's
    Quote(
        BENCHMARK,
        r"minilm_debian-sections_L3\.yaml` sets it to (\d+(?:\.\d+)?)",
        lambda: (str(_hidden_weight(EXAMPLE)),),
    ),
    Quote(
        BENCHMARK,
        r"stages/distill\.yaml`, keeps gamma (\d+(?:\.\d+)?)",
        lambda: (str(_hidden_weight(STAGES / "distill.yaml")),),
    ),
    Quote(GUIDE, r"γ = (\d+(?:\.\d+)?), \d+ epochs over the task", lambda: (str(_hidden_weight(EXAMPLE)),)),
    Quote(GUIDE, r"differs in γ = (\d+(?:\.\d+)?)", lambda: (str(_hidden_weight(STAGES / "distill.yaml")),)),
    # the example config's epochs and transfer documents
    Quote(
        GUIDE,
        r"γ = [0-9.]+, (\d+) epochs over the task's rows and ([\d,]+) corpus documents",
        lambda: (str(_epochs(EXAMPLE)), _thousands(_yaml(EXAMPLE)["data"]["init_args"]["transfer"]["documents"])),
    ),
    # the pipeline's distillation: transfer epochs and documents with a corpus, the stage's epochs without
    Quote(
        PIPELINE,
        r"with a corpus, (\d+) epochs over the task's rows and ([\d,]+) corpus documents .*?without one, (\d+) epochs",
        lambda: (
            str(TransferSpec().epochs),
            _thousands(TransferSpec().documents),
            str(_epochs(STAGES / "distill.yaml")),
        ),
    ),
    Quote(PIPELINE, r"`stages/finetune\.yaml`: up to (\d+) epochs", lambda: (str(_epochs(STAGES / "finetune.yaml")),)),
    Quote(GUIDE, r"`distill\.transfer\.documents` \| (\d+) \|", lambda: (str(TransferSpec().documents),)),
    Quote(GUIDE, r"`distill\.transfer\.epochs` \| (\d+) \|", lambda: (str(TransferSpec().epochs),)),
    Quote(
        BENCHMARK,
        r"the defaults are `distill\.transfer\.documents: (\d+)` and\s+`distill\.transfer\.epochs: (\d+)`",
        lambda: (str(TransferSpec().documents), str(TransferSpec().epochs)),
    ),
    Quote(
        BENCHMARK,
        r"with the pipeline's defaults \(([\d,]+) documents of the domain corpus as transfer set beside the task's\s+"
        r"rows, (\d+) epochs\)",
        lambda: (_thousands(TransferSpec().documents), str(TransferSpec().epochs)),
    ),
    # the student against its teacher: the benchmark's table, quoted in its summary, the guide and the README
    Quote(
        BENCHMARK,
        r"(\S+) points of test macro-F1 on Debian and (\S+) on python-docs",
        lambda: (_delta_vs_teacher()[("Debian", "corpus")], _delta_vs_teacher()[("python-docs", "corpus")]),
    ),
    Quote(BENCHMARK, r"trailed by (\d+(?:\.\d+)?) points on Debian", lambda: (_task_rows_gap()[1],)),
    Quote(GUIDE, r"from (\d+(?:\.\d+)?)–(\d+(?:\.\d+)?) points below its teacher \(task rows only\)", _task_rows_gap),
    Quote(
        GUIDE,
        r"to (\S+) \(Debian\)\s+and (\S+) \(python-docs\) points of it",
        lambda: (_delta_vs_teacher()[("Debian", "corpus")], _delta_vs_teacher()[("python-docs", "corpus")]),
    ),
    *[
        Quote(
            page,
            r"within a point of its teacher on both bundled domains: (\S+) \(Debian\), (\S+) \(python-docs\)",
            lambda: (_delta_vs_teacher()[("Debian", "corpus")], _delta_vs_teacher()[("python-docs", "corpus")]),
        )
        for page in ("README.md", "docs/index.md")
    ],
]


@pytest.mark.parametrize("quote", QUOTES, ids=str)
def test_a_quoted_figure_is_its_sources(quote: Quote):
    text = " ".join((ROOT / quote.page).read_text(encoding="utf-8").split())  # one line: quotes cross line breaks
    found = [m.groups() for m in re.finditer(" ".join(quote.pattern.split()), text)]
    assert found, f"{quote.page} no longer quotes /{quote.pattern}/: quote the figure so, or change this test"
    expected = tuple(quote.source())
    for groups in found:
        assert groups == expected, f"{quote.page} quotes {groups}, its source gives {expected}"


def test_no_page_quotes_the_old_layer_numbering_or_gap():
    for page in (BENCHMARK, GUIDE):
        text = (ROOT / page).read_text(encoding="utf-8")
        assert "(1, 3, 5)" not in text and "3.8–6.2" not in text, page


def _measured(page: str) -> list[str]:
    """The rows of a page's "Measured" table, links made relative to ``docs/``."""
    text = (ROOT / page).read_text(encoding="utf-8")
    section = text[text.index("## Measured") :]
    rows = re.findall(r"^\|.*\|$", section.split("\n## ")[0], re.M)
    return [row.replace("](docs/", "](") for row in rows]


def test_the_readme_and_the_home_page_measure_the_same():
    assert _measured("README.md") == _measured("docs/index.md")


def _pipeline_help() -> str:
    from domainbert.pipeline.command import build_parser

    return " ".join(build_parser([]).format_help().split())


def test_the_pipeline_help_gives_the_fine_tuning_epochs_of_its_stage():
    found = re.findall(r"up to (\d+) epochs", _pipeline_help())
    assert found and set(found) == {str(_epochs(STAGES / "finetune.yaml"))}, found


def test_the_pipeline_help_sizes_distillation_as_its_stage_and_transfer_set_do():
    text = _pipeline_help()
    pattern = (
        r"with a corpus, (\d+) epochs over the task's rows and ([\d,]+) corpus documents.*?without one, (\d+) epochs"
    )
    found = re.findall(pattern, text)
    expected = (str(TransferSpec().epochs), _thousands(TransferSpec().documents), str(_epochs(STAGES / "distill.yaml")))
    assert found and all(f == expected for f in found), found
