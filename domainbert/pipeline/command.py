"""``domainbert pipeline``: a domain corpus and a labelled task in, the best model that validation supports out.

The command's options (the pipeline's own, then one group per installed strategy), :func:`pipeline` (the recipe,
called from Python), the checks made before any stage runs, and :func:`main` (the command line). The stages and
what each writes: :mod:`domainbert.pipeline`. The first paragraph above opens ``domainbert pipeline --help``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal

from domainbert.errors import DomainBertError
from domainbert.pipeline.specs import (
    DaptSpec,
    DeploySpec,
    DistillSpec,
    ExportSpec,
    FinetuneSpec,
    PretrainSpec,
    ProbeSpec,
    SelectSpec,
    SelfTrainSpec,
    SoupSpec,
    StageSpec,
    TaskFiles,
    TransferSpec,
    VocabSpec,
)
from domainbert.pipeline.strategies.base import NEEDS, Context, Plan

__all__ = ["build_parser", "check", "main", "pipeline"]

#: What ``domainbert pipeline --help`` says runs when a config names only the paths.
RUNS_BY_DEFAULT = (
    "What runs when the config gives only the paths: the probe; DAPT on the corpus when the base model ships a "
    "trained masked-LM head (dapt.enabled: auto; a sentence embedder without one, such as all-MiniLM-L6-v2, skips "
    "it): 400 masked-LM steps (domainbert/pipeline/stages/dapt.yaml), the task's probe checked every 25 steps; "
    "it stops after 3 checks "
    "without improvement and exports its best-probing step; fine-tuning of the base model (up to 4 epochs, "
    "stages/finetune.yaml) with seed 0 alone, and of the DAPT model only when its best probe beat the base model's "
    "(dapt.watch.margin; dapt.watch.gate: false fine-tunes it anyway); the choice by validation; distillation of "
    "the chosen model into a 3-layer student (stages/distill.yaml: with a corpus, 2 epochs over the task's rows "
    "and 8,000 corpus documents, distill.transfer; without one, 4 epochs); its int8 export (with task_test). "
    "With two or more seeds, a starting model whose first seed validates behind the baseline by more than the "
    "baseline seeds' std skips its other seeds (finetune.all_seeds: true runs them). Off unless enabled: select, "
    "vocab, tapt, contrastive, self_train; seed soups need two or more seeds. Each strategy's `enabled` below "
    "shows its default."
)

#: The one line for a config that still sets ``finetune.enabled`` (a field that was never read).
FINETUNE_ENABLED = (
    "pipeline: finetune.enabled is not an option (fine-tuning always runs: every model is compared with the "
    "fine-tuned baseline); remove `enabled` from `finetune`. To fine-tune the baseline alone, write "
    "`dapt: {enabled: false}` (tapt, select, vocab and self_train are off unless enabled)"
)

# The defaults, shared by every call: the pipeline reads them and never changes them.
_ONE_SEED = [0]
_PROBE, _FINETUNE, _DISTILL, _EXPORT = ProbeSpec(), FinetuneSpec(), DistillSpec(), ExportSpec()
_DEPLOY = DeploySpec()


def pipeline(
    base_model: str,
    task_train: str,
    task_val: str,
    task_test: str | None = None,
    corpus: str | None = None,
    corpus_text_column: str = "text",
    text_column: str = "text",
    text_pair_column: str | None = None,
    label_column: str = "label",
    out: str = "runs/pipeline",
    seeds: list[int] = _ONE_SEED,
    metric: str = "f1_macro",
    isolate: Literal["training", "all", "none"] = "training",
    probe: ProbeSpec = _PROBE,
    select: SelectSpec | None = None,
    vocab: VocabSpec | None = None,
    dapt: DaptSpec | None = None,
    tapt: PretrainSpec | None = None,
    finetune: FinetuneSpec = _FINETUNE,
    self_train: SelfTrainSpec | None = None,
    soup: SoupSpec | None = None,
    distill: DistillSpec = _DISTILL,
    export: ExportSpec = _EXPORT,
    deploy: DeploySpec = _DEPLOY,
    **strategies: Any,
) -> Path:
    """Run the domain-adaptation recipe and write ``<out>/report.md``.

    The body is the recipe's sequence: probe → start strategies → fine-tuning of every candidate over the seeds →
    after strategies → the choice → distillation and export → report.

    Args:
        base_model: the starting encoder (folder, ``pkg:<module>``, or hub name).
        task_train: the task's training rows; also TAPT's text and the anchor of the corpus curation.
        task_val: validation rows: early stopping, the probe's regularisation, and the choice of the shipped model.
        task_test: test rows, read once for the report (the choice never looks at them).
        corpus: the unlabelled domain corpus (DAPT, vocabulary, curation, self-training); None when no stage needs it.
        corpus_text_column: the corpus's text column (JSONL/CSV/Parquet; plain text files have ``text``).
        text_column: the text column of the task files.
        text_pair_column: the second text of pair tasks.
        label_column: the label column of the task files.
        out: the pipeline's folder: each stage's runs and logs, ``state.json`` and the report. A new or empty folder,
            or one this pipeline wrote (a rerun resumes it); never a folder of your own.
        seeds: fine-tuning seeds; starting models are compared as mean ± std over them. Default: seed 0 alone (no
            ± std, no seed soups); give at least one.
        metric: the metric that chooses (on validation) and that the report compares (``f1_macro`` or ``acc``).
        isolate: which stages run in a process of their own: ``training`` (fine-tuning, DAPT/TAPT, distillation
            and the soups' evaluations, forked on Linux from a server that imported the libraries once; the tool
            stages, probe, select, vocab, pseudolabel, soup and export, run in the pipeline's process, sparing a
            process start of 11-15 s each), ``all``, or ``none`` (tests and small data; single-device training
            only). Every stage's log is ``<out>/<stage>/log.txt`` either way.
        probe: the frozen-embedding logistic regression, a row of the report. Runs by default (``enabled: true``).
        select: the ``select`` strategy's settings (curated DAPT data); None: its defaults (off).
        vocab: the ``vocab`` strategy's settings (vocabulary extension); None: its defaults (off).
        dapt: the ``dapt`` strategy's settings (domain-adaptive pretraining); None: its defaults (on).
        tapt: the ``tapt`` strategy's settings (task-adaptive pretraining); None: its defaults (off).
        finetune: the fine-tuning stage, run for the baseline and for each adapted model, once per seed. Always runs
            (built-in ``stages/finetune.yaml``: up to 4 epochs, early stopping on validation macro-F1).
        self_train: the ``self_train`` strategy's settings (self-training on the corpus); None: its defaults (off).
        soup: the ``soup`` strategy's settings (seed soups); None: its defaults (on, with two or more seeds).
        distill: distillation of the chosen model into a smaller student. Runs by default: a 3-layer student,
            with the built-in ``stages/distill.yaml``: with a corpus, 2 epochs over the task's rows and 8,000
            corpus documents (``distill.transfer``); without one, 4 epochs; ``enabled: false`` to ship the chosen
            model as is.
        export: deployment variants of the student (int8 by default). Runs by default after distillation when
            ``task_test`` is given.
        deploy: the choice among the export's variants (the student's, the teacher's, the probe): the fastest at
            batch 32 shown to be at most ``max_drop`` macro-F1 points below the best (default 1.0; the paired
            bootstrap interval on validation) within ``max_ms`` ms/example; the report, ``report.json`` and
            the last line name that one folder, and warn when it scores below the frozen probe.
        **strategies: the settings of any other installed strategy, by its name (``contrastive=...``; a plugin's).
    """
    from domainbert.pipeline.forks import stop as stop_forks

    strategies.update(select=select, vocab=vocab, dapt=dapt, tapt=tapt, self_train=self_train, soup=soup)
    probe, export = probe or _PROBE, export or _EXPORT  # None (from Python): the default
    finetune, distill = _typed_finetune(finetune or _FINETUNE), _typed_distill(distill or _DISTILL)
    inputs = dict(base_model=base_model, corpus=corpus, corpus_text_column=corpus_text_column, seeds=seeds)
    task = TaskFiles(task_train, task_val, task_test, text_column, text_pair_column, label_column)
    ctx = _start(_plan({**inputs, "metric": metric}, task, finetune, strategies), distill, out, isolate)
    try:
        return _recipe(ctx, probe, distill, export, deploy or _DEPLOY)
    finally:
        stop_forks()  # the training stages' server (:mod:`domainbert.pipeline.forks`), if it runs
        ctx.runner.close()  # out is free for another pipeline


def _typed_finetune(spec: FinetuneSpec | StageSpec) -> FinetuneSpec:
    """``finetune`` as a :class:`FinetuneSpec` (a :class:`StageSpec` from Python: its config and args).

    Raises:
        DomainBertError: a stage spec that turns fine-tuning off (:data:`FINETUNE_ENABLED`).
    """
    if isinstance(spec, FinetuneSpec):
        return spec
    if spec.enabled is not True:
        raise DomainBertError(FINETUNE_ENABLED)
    return FinetuneSpec(spec.config, spec.args)


def _typed_distill(spec: DistillSpec | StageSpec) -> DistillSpec:
    """``distill`` as a :class:`DistillSpec` (a :class:`StageSpec` from Python: the chosen run teaches, no corpus)."""
    if isinstance(spec, DistillSpec):
        return spec
    return DistillSpec(spec.config, spec.args, spec.enabled, transfer=TransferSpec(enabled=False))


def _recipe(
    ctx: Context, probe: ProbeSpec, distill: DistillSpec, export: ExportSpec, deploy: DeploySpec = _DEPLOY
) -> Path:
    """Run the stages on the started context ``ctx``, in order; the report's path.

    The probe, the strategies' stages around fine-tuning, the choice on validation, distillation and export.
    """
    import domainbert.pipeline.recipe as recipe
    import domainbert.pipeline.strategies as registry
    from domainbert.pipeline.deployment import final_lines
    from domainbert.pipeline.report import write_report
    from domainbert.pipeline.stage import merge

    task = ctx.task
    probed = recipe.run_probe(ctx.runner, ctx.base_model, task, probe)
    registry.run(ctx, "start")
    recipe.finetune_candidates(ctx)
    recipe.add_probe(ctx, probed)
    registry.run(ctx, "after")
    stopped = tuple(c.name for c in ctx.candidates if c.stopped)  # behind after their first seed: never shipped
    gated = tuple(c.name for c in ctx.candidates if c.gated and not c.gate.skipped)
    choice = recipe.choose(ctx.results(), ctx.metric, exclude=stopped, gated=gated)
    best = choice.run
    teachers = recipe.distill_teachers(ctx.results(), choice.name, best, distill)
    extra = recipe.transfer_values(distill, ctx) if distill.enabled else {}
    if (taught := recipe.teaching(ctx, best)) is not None:  # a strategy's teacher in the chosen run's place
        teachers, extra = taught.teachers, merge(extra, taught.values)
    probe_run = (ctx.results().get(recipe.PROBE) or [None])[0]
    distilled = recipe.distill_and_export(
        ctx.runner,
        best.hf,
        task,
        distill,
        export,
        teacher_predictions=best.predictions,
        teachers=teachers,
        extra=extra,
        deploy=deploy,
        probe=probe_run,
        offered=recipe.deployables(ctx, choice.name),
    )
    report = write_report(ctx.runner, ctx.candidates, probed, choice, distilled, ctx.metric, ctx.seeds)
    print(f"\nPipeline done. Report: {report}")
    for line in final_lines(report.with_name("report.json")):  # the one folder to ship, as the report says
        print(line)
    return report


def _start(plan: Plan, distill: DistillSpec, out: str, isolate: str) -> Context:
    """Check the run (nothing is written when it cannot work), then claim ``out``: the context, with its runner."""
    from domainbert.pipeline.forks import enabled as fork_enabled
    from domainbert.pipeline.forks import start as start_forks
    from domainbert.pipeline.runner import Runner
    from domainbert.pipeline.strategies.base import BASELINE, Candidate

    check(plan, distill)
    plan.distill = distill  # a strategy's own distillation reads the distill settings too
    base, task = plan.base_model, plan.task
    inputs = [plan.corpus, task.train, task.val, task.test, base if Path(base).exists() else None]
    ctx = Context.start(plan, Runner(out, isolate=isolate, inputs=inputs))  # out: null or empty is refused
    if isolate != "none" and fork_enabled():
        start_forks()  # its server imports the training stages' libraries while the first stages run
    ctx.add(BASELINE, [Candidate(BASELINE, BASELINE, model=base, adapted=False)])
    return ctx


def check(ctx: Plan, distill: Any) -> None:
    """Refuse, before any stage runs, a pipeline that cannot work; it changes nothing.

    The plan comes as :func:`_plan` builds it (the metric's short name, the seeds a list). Checked, in
    order: the metric, the seeds, ``finetune.enabled`` (gone), what every enabled strategy needs and its own
    ``check`` (:class:`~domainbert.pipeline.strategies.base.Strategy`), every stage config a stage would read, and
    every data path a stage would read (the task's files; the corpus when a strategy reads it). Each refusal is one
    line naming the field and what was expected.

    Raises:
        DomainBertError: the first problem found.
    """
    from domainbert.core.stats import METRICS

    metric, seeds = ctx.metric, ctx.seeds
    if metric not in METRICS:
        raise DomainBertError(f"pipeline: metric={metric!r}; expected one of {sorted(METRICS)}")
    if not seeds:
        raise DomainBertError(
            "pipeline: seeds is empty; give at least one seed (e.g. [0, 1, 2]) or leave it out (seed 0)"
        )
    if len(set(seeds)) != len(seeds):
        raise DomainBertError(f"pipeline: seeds {seeds} repeats a seed; give each seed once")
    enabled = [n for n in ctx.strategies if ctx.enabled(n)]
    _check_needs(ctx, enabled)
    for name in enabled:
        ctx.strategies[name].check(ctx, ctx.settings[name])
    configs = {n: ctx.settings[n] for n in enabled}
    configs.update(finetune=ctx.finetune, **({"distill": distill} if distill.enabled else {}))
    for name, spec in configs.items():
        if isinstance(spec, StageSpec | FinetuneSpec) and spec.config and not Path(spec.config).is_file():
            raise DomainBertError(
                f"pipeline: {name}.config {spec.config}: no such file; name the stage's fit config (a path from the "
                f"working directory), or leave {name}.config out for the built-in one"
            )
    reads_corpus = any("corpus" in ctx.strategies[n].needs for n in enabled)
    transfer = distill.transfer if distill.enabled else None
    if transfer is not None and transfer.enabled is True and not ctx.corpus:
        raise DomainBertError(
            "pipeline: distill.transfer.enabled: true adds corpus documents to distillation, but no corpus is given; "
            "give corpus, or set distill.transfer.enabled: auto (on when a corpus is given)"
        )
    reads_corpus = reads_corpus or (transfer is not None and transfer.enabled is not False and bool(ctx.corpus))
    task = ctx.task
    _check_paths({"task_train": task.train, "task_val": task.val, "task_test": task.test})
    _check_paths({"corpus": ctx.corpus if reads_corpus else None})


def _check_needs(ctx: Plan, enabled: list[str]) -> None:
    """Refuse enabled strategies whose needs the run does not meet: one line per need, naming them all."""
    met = {"corpus": bool(ctx.corpus), "single_text": not ctx.task.text_pair_column}
    for need, line in NEEDS.items():
        lacking = [n for n in enabled if need in ctx.strategies[n].needs and not met[need]]
        if lacking:
            raise DomainBertError(line.format(names=", ".join(lacking)))
    for name in enabled:
        unknown = [n for n in ctx.strategies[name].needs if n not in NEEDS]
        if unknown:
            raise DomainBertError(f"pipeline: strategy {name!r} needs {unknown}; known needs: {sorted(NEEDS)}")


def _check_paths(paths: dict[str, str | None]) -> None:
    """Refuse a data path (file, folder or glob) that names nothing: ``{field: path}``; None entries are skipped."""
    from domainbert.data.readers import expand

    for name, path in paths.items():
        if path is None:
            continue
        try:
            expand(path)
        except DomainBertError as err:
            raise DomainBertError(f"pipeline: {name}: {err}") from None


def _plan(inputs: dict[str, Any], task: TaskFiles, finetune: FinetuneSpec, given: dict[str, Any]) -> Plan:
    """The run's plan, checked before its runner exists: the inputs, and every installed strategy with its settings.

    The metric is its short name (``val/f1_macro``: ``f1_macro``), the seeds a list (None: seed 0 alone); what
    :func:`check` then refuses is left as given.

    Args:
        inputs: ``base_model``, ``corpus``, ``corpus_text_column``, ``seeds`` and ``metric``.
        task: the task's files and columns.
        finetune: the fine-tuning stage's settings.
        given: the strategies' settings as the caller gave them (see :func:`settings_of`).
    """
    from domainbert.pipeline.strategies import load, settings_of

    installed = load()
    return Plan(
        base_model=inputs["base_model"],
        task=task,
        corpus=inputs["corpus"],
        corpus_text_column=inputs["corpus_text_column"],
        seeds=list(_ONE_SEED if inputs["seeds"] is None else inputs["seeds"]),
        metric=str(inputs["metric"]).split("/")[-1],
        finetune=finetune,
        strategies=installed,
        settings=settings_of(installed, given),
    )


def build_parser(argv: list[str]):
    """The ``domainbert pipeline`` parser: the pipeline's own options, then one group per installed strategy."""
    import argparse
    import textwrap

    from jsonargparse import ActionConfigFile, ArgumentParser, DefaultHelpFormatter, set_parsing_settings

    import domainbert.pipeline.strategies as strategies
    from domainbert.cli.tool_cli import wants_docs

    class _Help(argparse.RawDescriptionHelpFormatter, DefaultHelpFormatter):
        """Keeps the description's lines (the strategies' list) as written."""

    set_parsing_settings(docstring_parse_attribute_docstrings=wants_docs(argv))  # the specs' field docstrings
    installed = strategies.load()
    listed = "\n".join(
        textwrap.fill(line, 100, subsequent_indent="    ") for line in strategies.listing(installed).splitlines()
    )
    paragraphs = [__doc__.split(chr(10) * 2)[0], RUNS_BY_DEFAULT]
    description = "\n\n".join(textwrap.fill(" ".join(p.split()), 100) for p in paragraphs)
    description += f"\n\nStrategies (built-in, then those installed under the entry-point group {strategies.GROUP}):\n"
    parser = ArgumentParser(
        prog="domainbert pipeline", description=description + listed, allow_abbrev=False, formatter_class=_Help
    )
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_function_arguments(pipeline, as_positional=False, skip=set(installed))
    for name, strategy in installed.items():
        text = textwrap.fill(" ".join(strategy.option_help().split()), 100)
        parser.add_argument(f"--{name}", type=strategy.settings, default=strategy.default(), help=text)
    return parser


def main(argv: list[str] | None = None) -> None:
    """``domainbert pipeline --config configs/pipeline/<model>_<data>.yaml``; ``--help`` lists every option."""
    from argparse import ArgumentError
    from dataclasses import is_dataclass

    from jsonargparse import Namespace

    import domainbert.pipeline.strategies as strategies
    from domainbert.errors import DomainBertError

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    parser.exit_on_error = False
    try:
        cfg = parser.parse_args(argv)
    except ArgumentError as err:
        message = str(err)
        if "finetune" in message and "enabled" in message:
            raise DomainBertError(FINETUNE_ENABLED) from None
        first = " ".join(message.split())
        raise DomainBertError(f"pipeline: {first} (`domainbert pipeline --help` lists every option)") from None
    # the strategies' settings go over as dicts: ``settings_of`` makes them, naming a refused value as the option
    given = {name: cfg.pop(name) for name, s in strategies.load().items() if name in cfg and is_dataclass(s.settings)}
    kwargs = parser.instantiate_classes(cfg).as_dict()
    kwargs.pop("config", None)
    kwargs.update({name: v.as_dict() if isinstance(v, Namespace) else v for name, v in given.items()})
    from domainbert.pipeline.stopping import one_line, stopped_by_signals

    try:
        with stopped_by_signals():  # SIGTERM and SIGHUP stop it as Ctrl-C does: the stage ends with it
            pipeline(**kwargs)
    except KeyboardInterrupt as err:
        line, code = one_line(err, kwargs.get("out", ""))
        print(line, file=sys.stderr, flush=True)
        sys.exit(code)
