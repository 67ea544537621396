"""Every shipped config file's header and the pipeline configs, read without building a model.

Each config begins with the command that runs it (torchtune's rule) and describes what it does; measured figures
(scores, minutes) go stale there and live on the docs/benchmarks/ pages only. Instantiating every fit config is
tests/integration/test_configs.py.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").rglob("*.yaml"))

#: what a measured figure looks like in prose: a score, a duration, a speed-up
MEASURED = re.compile(
    r"(macro-F1|F1|accuracy|acc)\s*(of\s*)?[0-9]\.[0-9]|\b[0-9.,]+\s*(min|mins|minutes|h|hours|s|seconds)\b"
    r"|\b[0-9.]+\s*[x×]\s*(faster|slower)",
    re.IGNORECASE,
)


def header(path: Path) -> list[str]:
    """The comment lines before the first setting."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


def test_every_config_names_its_command():
    assert CONFIGS
    for path in CONFIGS:
        first = path.read_text().splitlines()[0]
        assert first.startswith("# domainbert "), f"{path} must begin with the command that runs it"


def test_pipeline_config_parses():
    from domainbert.pipeline import build_parser

    parser = build_parser([])  # the pipeline's own options and one group per installed strategy, as `main` builds it
    paths = sorted((ROOT / "configs/pipeline").glob("*.yaml"))
    assert paths
    for path in paths:
        cfg = parser.instantiate_classes(parser.parse_args(["--config", str(path)]))
        for name in ("base_model", "task_train", "task_val"):
            assert cfg[name], f"{path}: {name} is required"
        for stage in ("dapt", "tapt", "finetune", "distill"):
            spec = cfg.get(stage)
            assert spec is None or spec.config is None or (ROOT / spec.config).exists(), f"{path}: {stage}.config"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_config_headers_hold_no_measured_figures(path):
    figures = [line for line in header(path) if MEASURED.search(line)]
    assert not figures, f"{path}: measured figures belong on the docs/benchmarks/ pages, not the header: {figures}"
    assert len(header(path)) >= 2, f"{path}: the command, then a line on what the config does"


def test_the_figure_pattern_catches_what_went_stale_before():
    stale = [
        "# majority class). Measured: test macro-F1 0.778, accuracy 0.780 after 3 epochs",
        "# (val macro-F1 0.65 / 0.77 / 0.80 per epoch; 1 h 40 min on 2 busy CPU cores).",
        "# in short stages that fit in 15 minutes on 2 CPU cores",
        "# bf16-mixed autocast ran about 7x slower here",
    ]
    assert all(MEASURED.search(line) for line in stale)
    fine = ["# A seconds-long smoke run", "# 15 archive sections (1,483 / 383 / 742 rows)", "# layers 2, 4 and 6"]
    assert not any(MEASURED.search(line) for line in fine)


@pytest.mark.parametrize(
    ("path", "grouped"),
    [
        ("domainbert/pipeline/stages/distill.yaml", False),
        ("configs/distill/minilm_debian-sections_L3.yaml", False),
        ("domainbert/pipeline/stages/finetune.yaml", True),
        ("configs/finetune/minilm_debian-sections.yaml", True),
    ],
)
def test_training_batches_follow_the_measured_choice(path, grouped):
    """Distillation trains on random batches, fine-tuning on batches grouped by length: each chosen on validation
    macro-F1 over several seeds (docs/benchmarks/distillation.md)."""
    import yaml

    data = yaml.safe_load((ROOT / path).read_text(encoding="utf-8"))["data"]["init_args"]
    assert data.get("group_by_length", False) is grouped, path
