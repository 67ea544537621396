"""The recipe: domain corpus and labelled task to a chosen, distilled, exported model, every stage a process.

Order: frozen-embedding probe (the cheapest baseline) → corpus curation (optional) → vocabulary (optional) →
DAPT → TAPT (optional) → fine-tuning from the base model and from each adapted model over the seeds → self-training
(optional) → seed soups (the weight average of each starting model's seeds) → the choice, by validation only →
distillation of the chosen model → export → report.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from domainbert.adapt.stats import mean_std
from domainbert.errors import DomainBertError
from domainbert.pipeline.runner import Runner
from domainbert.pipeline.specs import ExportSpec, ProbeSpec, SelfTrainSpec, SoupSpec, StageSpec, TaskFiles

BASELINE = "baseline"
SELF_TRAINING = "self-training"
SOUP = " soup"
"""The suffix of a seed soup's name in the results: ``baseline soup`` is the weight average of the baseline's seeds."""
PROBE = "frozen probe"
"""The frozen-embedding probe's name among the candidates: it ships (as a classifier) when it validates best."""


def stage_config(spec: StageSpec, default: str) -> str:
    """The stage's config file: the one the spec names, else the built-in ``stages/<default>.yaml``."""
    if spec.config:
        return spec.config
    return str(resources.files("domainbert.pipeline") / "stages" / f"{default}.yaml")


def _pooling_args(base_model: str) -> list[str]:
    """``--model.pooling mean|cls`` for every fine-tuning run: mean when the base model was trained mean-pooled.

    Adapted models (MLM exports) no longer carry the sentence-transformers files that say so, so the pooling is
    decided once, from the base model, and the baseline and the adapted runs use the same head (a stage's own
    ``finetune.args`` come later on the command line and can still override it).
    """
    from domainbert.adapt.embed import native_pooling
    from domainbert.core.models_local import resolve_local_alias

    return ["--model.pooling", "mean" if native_pooling(resolve_local_alias(base_model)) == "mean" else "cls"]


def run_probe(runner: Runner, base_model: str, task: TaskFiles, spec: ProbeSpec) -> dict | None:
    """Logistic regression on the base model's frozen mean-pooled embeddings (a row of the report, and a candidate).

    A probe stage done by an older domainbert, which kept no weights (``probe.safetensors``), runs again: the
    probe competes with the fine-tuned models (:func:`add_probe`) and ships as a classifier when it wins.
    """
    if not spec.enabled:
        return None
    folder = runner.out / "probe"
    args = ["probe", "--model", base_model, "--train", task.train, "--val", task.val or "null"]
    args += ["--test", task.test or "null", "--text_column", task.text_column, "--label_column", task.label_column]
    args += ["--text_pair_column", task.text_pair_column or "null", "--max_length", str(spec.max_length)]
    record = runner.tool("probe", [*args, "--out", str(folder)], result=str(folder))
    if not record.get("weights") and isinstance(runner.state.get("probe"), dict):  # done by an older domainbert
        runner.state["probe"]["status"] = "outdated"
        record = runner.tool("probe", [*args, "--out", str(folder)], result=str(folder))
    return record


def probe_export(base_model: str, record: dict) -> dict:
    """``{"hf": folder}``: the probe as a classifier in ``<probe folder>/hf`` (written once per probe run).

    The base encoder with the probe's linear layer as a mean-pooling head; it loads like any fine-tuned
    classifier (``domainbert predict``, ``export``, distillation). ``{"hf_error": message}`` when it cannot be
    built: the pipeline then cannot ship the probe, and says so if the probe wins.
    """
    from domainbert.modules.probe_init import export_probe_classifier

    folder = Path(record["result"])
    out, weights = folder / "hf", Path(record.get("weights") or folder / "probe.safetensors")
    if (out / "config.json").is_file() and weights.is_file():
        if (out / "config.json").stat().st_mtime >= weights.stat().st_mtime:
            return {"hf": str(out)}
    try:
        return {"hf": export_probe_classifier(base_model, str(folder), str(out))}
    except DomainBertError as err:
        print(f"[probe] the probe could not be exported as a classifier: {err}", flush=True)
        return {"hf_error": str(err)}


def check_stages(corpus: str | None, stages: dict) -> None:
    """Refuse stage combinations that read a missing corpus or whose output nothing would use."""
    select, vocab, dapt, tapt = stages["select"], stages["vocab"], stages["dapt"], stages["tapt"]
    if (dapt.enabled or vocab.enabled or select.enabled) and not corpus:
        raise DomainBertError("pipeline: dapt, vocab and select read the domain corpus: set `corpus`")
    if select.enabled and not dapt.enabled:
        raise DomainBertError("pipeline: select curates the DAPT data: enable dapt too (or disable select)")
    if vocab.enabled and not (dapt.enabled or tapt.enabled):
        raise DomainBertError("pipeline: new vocabulary rows need pretraining: enable dapt or tapt with vocab")


def adapted_models(
    runner: Runner, base_model: str, corpus: str | None, task: TaskFiles, stages: dict
) -> dict[str, str]:
    """Run curation, vocabulary, DAPT and TAPT as enabled; return ``{name: starting model}``, baseline first."""
    select, vocab, dapt, tapt = stages["select"], stages["vocab"], stages["dapt"], stages["tapt"]
    check_stages(corpus, stages)
    column = stages.get("corpus_text_column", "text")
    starts, start, dapt_data, name = {BASELINE: base_model}, base_model, corpus, "dapt"
    if select.enabled:
        folder = runner.out / "select"
        args = ["select", "--model", base_model, "--corpus", corpus, "--task", task.train, "--k", str(select.k)]
        args += ["--text_column", task.text_column, "--corpus_text_column", column, "--out", str(folder)]
        if select.max_documents:
            args += ["--max_documents", str(select.max_documents)]
        dapt_data, name = runner.tool("select", args, result=str(folder))["corpus"], "knn-dapt"
        column = "text"  # select writes {"text": ...}
    if vocab.enabled:
        folder = str(runner.out / "vocab" / "hf")
        args = ["vocab", "extend", "--model", base_model, "--corpus", corpus, "--top_k", str(vocab.top_k)]
        args += ["--min_freq", str(vocab.min_freq), "--text_column", stages.get("corpus_text_column", "text")]
        args += ["--out", folder, "--overwrite", "true"]
        start = runner.tool("vocab", args, result=folder)["result"]
    if dapt.enabled:
        args = ["--model.init_from", start, "--data.train", dapt_data, "--data.text_column", column, *dapt.args]
        starts[name] = start = runner.fit("dapt", stage_config(dapt, "dapt"), args, after=("select", "vocab"))["hf"]
    if tapt.enabled:
        args = ["--model.init_from", start, "--data.train", task.train, "--data.text_column", task.text_column]
        name = f"{name}+tapt" if dapt.enabled else "tapt"
        starts[name] = runner.fit("tapt", stage_config(tapt, "dapt"), [*args, *tapt.args], after=("vocab",))["hf"]
    return starts


def finetune_stage(name: str, seed: int | str) -> str:
    """The stage name of starting model ``name``'s fine-tuning run with ``seed`` (``soup``: its seed soup's)."""
    return f"finetune-{name.replace('+', '-')}-" + ("soup" if seed == "soup" else f"seed{seed}")


def soup_stage(name: str) -> str:
    """The stage name of ``domainbert soup`` over starting model ``name``'s seed runs."""
    return f"soup-{name.replace('+', '-')}"


def finetune_all(runner: Runner, starts: dict[str, str], task: TaskFiles, spec: StageSpec, seeds: list[int], base: str):
    """Fine-tune from every starting model with every seed; ``{name: [record per seed]}``, the probe's last."""
    config, pooling = stage_config(spec, "finetune"), _pooling_args(base)
    results: dict[str, list[dict]] = {}
    for name, init in starts.items():
        for seed in seeds:
            stage = finetune_stage(name, seed)
            args = ["--model.init_from", init, "--seed_everything", str(seed), *pooling, *task.data_args()]
            run = runner.fit(stage, config, [*args, *spec.args], test=bool(task.test))
            results.setdefault(name, []).append({**run, "seed": seed})
    add_probe(runner, results, base)
    return results


def add_probe(runner: Runner, results: dict[str, list[dict]], base_model: str) -> None:
    """Enter this run's frozen-embedding probe among the candidates, as ``results["frozen probe"]`` (one record).

    The record looks like a fine-tuning run's: ``metrics`` (``val/<metric>``, ``test/<metric>``), ``predictions``
    and ``hf`` (the probe as a classifier, or ``hf_error``). Nothing is added when the probe did not run.
    """
    entry = runner.state.get("probe")
    if "probe" not in runner.called or not isinstance(entry, dict) or entry.get("status") != "done":
        return
    metrics = {f"{split}/{m}": v for split in ("val", "test") for m, v in (entry.get(split) or {}).items()}
    record = {"seed": "probe", "metrics": metrics, "predictions": entry.get("predictions")}
    results[PROBE] = [{**record, **probe_export(base_model, entry)}]


def self_train(runner: Runner, results: dict, corpus: dict, task: TaskFiles, spec: SelfTrainSpec, finetune: StageSpec):
    """Self-training: the baselines label the corpus, and a fresh model learns from the task plus those labels.

    ``corpus`` holds ``path``, ``column`` and ``base`` (the base model). Adds ``results["self-training"]``, one
    record per seed: a model fine-tuned from the base model (or, with ``spec.start == "baseline"``, from the
    seed's baseline) on the task's rows plus pseudo-labelled documents (with the fine-tuning stage's config and
    options, then ``spec.args``; soft targets with ``spec.soft``), then, with ``spec.then_task``, on the task's
    rows alone.
    The labels come from every seed's baseline averaged (``spec.teachers == "ensemble"``, labelled once) or from
    each seed's own baseline.
    """
    if not spec.enabled:
        return
    if not corpus.get("path"):
        raise DomainBertError("pipeline: self_train labels the domain corpus: set `corpus`")
    if task.text_pair_column:
        raise DomainBertError("pipeline: self_train labels single corpus documents; it cannot serve a pair task")
    config, base, baselines = stage_config(finetune, "finetune"), corpus["base"], results[BASELINE]
    if spec.teachers == "ensemble":
        shared = _pseudolabel(runner, "pseudo-ensemble", baselines, corpus, task, spec)
    for record in baselines:
        seed, name = record["seed"], f"finetune-{SELF_TRAINING}-seed{record['seed']}"
        if spec.teachers == "ensemble":
            labels, train = "pseudo-ensemble", shared
        else:
            labels = f"pseudo-seed{seed}"
            train = _pseudolabel(runner, labels, [record], corpus, task, spec)
        fit = ["--seed_everything", str(seed), *_pooling_args(base), *task.data_args(), *finetune.args]
        start = base if spec.start == "base" else record["hf"]
        soft = ["--data.soft_label_column", "probabilities"] if spec.soft else []
        run = runner.fit(
            f"{name}-mixed" if spec.then_task else name,
            config,
            ["--model.init_from", start, *fit, "--data.train", train, *soft, *spec.args],
            test=not spec.then_task and bool(task.test),
            after=(labels,) if spec.start == "base" else (labels, f"finetune-{BASELINE}-seed{seed}"),
        )
        if spec.then_task:
            after = (f"{name}-mixed",)
            run = runner.fit(name, config, ["--model.init_from", run["hf"], *fit], test=bool(task.test), after=after)
        results.setdefault(SELF_TRAINING, []).append({**run, "seed": seed})


def _pseudolabel(runner: Runner, stage: str, teachers: list[dict], corpus: dict, task: TaskFiles, spec) -> str:
    """Run ``domainbert pseudolabel`` with the teachers' exports; the path of the task + pseudo-labelled rows."""
    folder = runner.out / stage
    args = ["pseudolabel", "--model", json.dumps([t["hf"] for t in teachers])]
    args += ["--corpus", corpus["path"], "--task", task.train]
    args += ["--text_column", task.text_column, "--label_column", task.label_column, "--seed", str(teachers[0]["seed"])]
    args += ["--corpus_text_column", corpus["column"], "--ratio", str(spec.ratio), "--out", str(folder)]
    args += ["--max_documents", str(spec.max_documents) if spec.max_documents else "null"]
    args += ["--soft", "true"] if spec.soft else []
    return runner.tool(stage, args, result=str(folder))["train"]


def soups(runner: Runner, results: dict, task: TaskFiles, finetune: StageSpec, spec: SoupSpec, base: str) -> None:
    """Seed soups: for every starting model with two or more exported seed runs, their weight average, evaluated.

    Stage ``soup-<name>`` runs ``domainbert soup`` on the seeds' exports; stage ``finetune-<name>-soup`` validates
    and tests the soup as it is, with the fine-tuning stage's config and options (its pooling, its data), and no
    head refit (``--model.head_init null``: the soup's head is the average of the seeds' heads). Adds
    ``results["<name> soup"] = [record]``, the record's ``seed`` being ``"soup"``.
    """
    if not spec.enabled:
        return
    config = stage_config(finetune, "finetune")
    for name, runs in list(results.items()):
        exported = [r for r in runs if r.get("hf")]
        if name.endswith(SOUP) or len(exported) < 2:
            continue
        stage = soup_stage(name)
        folder = runner.out / stage / "hf"  # beside the stage's log.txt
        upstream = tuple(finetune_stage(name, r["seed"]) for r in exported)
        args = ["soup", "--models", json.dumps([r["hf"] for r in exported]), "--out", str(folder)]
        made = runner.tool(stage, args, result=str(folder), after=upstream)["result"]
        evaluate = ["--model.init_from", made, *_pooling_args(base), *task.data_args(), *finetune.args]
        run = runner.evaluate(
            finetune_stage(name, "soup"), config, [*evaluate, "--model.head_init", "null"], after=(stage,)
        )
        results[name + SOUP] = [{**run, "seed": "soup"}]


def choose(results: dict[str, list[dict]], metric: str) -> tuple[str, str]:
    """The model to ship: the starting model whose fine-tuned runs score best on **validation**, and why.

    Scores are the mean over seeds. An adapted model (or a seed soup) is chosen only when it beats the baseline on
    validation; on a tie the baseline stays, so the pipeline never ships a model that validated worse than plain
    fine-tuning. The frozen-embedding probe (``results["frozen probe"]``, see :func:`add_probe`) ships instead
    when it validates strictly better than that choice: fine-tuning that lost to a linear probe on frozen
    embeddings failed, and ``why`` says so; a fine-tuned model below the probe ships only when the probe cannot
    (it could not be exported), and ``why`` says that too. The test split is not read. A soup, one model, is
    compared with the seeds' mean, not with the best seed: the best of several seeds' validation scores is biased
    upwards by the choice itself.
    """
    key = f"val/{metric}"
    scores = validation_scores(results, metric)
    probe = scores.pop(PROBE, None)
    base = scores.get(BASELINE)
    if base is None:
        raise DomainBertError(f"pipeline: the baseline runs recorded no {key}; give the task a validation split")
    best = max((n for n in scores if scores[n] is not None), key=lambda n: (scores[n], n == BASELINE))
    if len(scores) == 1:
        why = f"the only starting model (no adaptation stage enabled); validation {key} {base:.4f}"
    elif best == BASELINE:
        others = ", ".join(f"{n} {s:.4f}" for n, s in scores.items() if n != BASELINE and s is not None)
        why = f"no adapted model beat it on validation {key} (baseline {base:.4f}" + (f"; {others})" if others else ")")
    else:
        why = f"best validation {key}: {scores[best]:.4f} against the baseline's {base:.4f}"
    if probe is None or probe <= scores[best]:
        return best, why + (f"; the frozen probe scored {probe:.4f}" if probe is not None else "")
    if results[PROBE][0].get("hf"):
        return PROBE, (
            f"fine-tuning failed to beat the frozen-embedding probe: the probe scored {probe:.4f} validation "
            f"{metric}, every fine-tuned model less (best: {best} {scores[best]:.4f}), so the probe ships as a "
            "classifier (the base encoder, frozen, with the probe as its mean-pooling head); check the fine-tuning "
            "settings (learning rate, epochs, data)"
        )
    return best, (
        f"{why}. WARNING: it validates BELOW the frozen-embedding probe ({scores[best]:.4f} against {probe:.4f}), "
        f"which could not be exported as a classifier ({results[PROBE][0].get('hf_error', 'no export')})"
    )


def validation_scores(results: dict[str, list[dict]], metric: str) -> dict[str, float | None]:
    """``{name: mean validation metric over its runs}`` (None where no run recorded it)."""
    key = f"val/{metric}"
    scores = {}
    for name, runs in results.items():
        vals = [r["metrics"][key] for r in runs if r.get("metrics", {}).get(key) is not None]
        scores[name] = mean_std(vals)[0] if vals else None
    return scores


def below_probe(results: dict[str, list[dict]], metric: str) -> tuple[str, float, float] | None:
    """``(best fine-tuned candidate, its validation score, the probe's)`` when that best is below the probe.

    None when the probe did not run or a fine-tuned model validates at least as well.
    """
    scores = validation_scores(results, metric)
    probe = scores.pop(PROBE, None)
    tuned = {n: v for n, v in scores.items() if v is not None}
    if probe is None or not tuned:
        return None
    best = max(tuned, key=lambda n: (tuned[n], n == BASELINE))
    return (best, tuned[best], probe) if tuned[best] < probe else None


def best_run(runs: list[dict], metric: str) -> dict:
    """The seed whose run scored best on validation."""
    return max(runs, key=lambda r: r["metrics"].get(f"val/{metric}") or float("-inf"))


def distill_and_export(runner: Runner, teacher: str, task: TaskFiles, distill: StageSpec, export: ExportSpec):
    """Distil ``teacher`` into a student and export its deployment variants; ``(student record, export folder)``.

    When the export does not run, the pipeline's output says why, and so does the student record's
    ``export_skipped`` (for the report).
    """
    if not distill.enabled:
        return None, None
    args = ["--model.teacher", teacher, *task.data_args(), *distill.args]
    student = runner.fit("distill", stage_config(distill, "distill"), args, test=bool(task.test))
    skipped = export_skipped(export, student, task)
    if skipped:
        print(f"[export] skipped: {skipped}", flush=True)
        return {**student, "export_skipped": skipped}, None
    folder = runner.out / "export"
    args = ["export", "--model", student["hf"], "--teacher", teacher, "--data", task.test, "--out", str(folder)]
    runner.tool(
        "export",
        [*args, "--text_column", task.text_column, "--label_column", task.label_column, *export.args],
        result=str(folder),
    )
    return student, str(folder)


def export_skipped(export: ExportSpec, student: dict, task: TaskFiles) -> str | None:
    """Why the export stage does not run for ``student``; None when it runs."""
    if not export.enabled:
        return "export is disabled (export: {enabled: false})"
    if not student.get("hf"):
        return "the distillation run exported no model (no hf/ folder) to export"
    if not task.test:
        return (
            "no test split (task_test), which the export measures its variants' metric on; give task_test, or "
            f"run `domainbert export --model {student['hf']} --data <labelled file> --out <folder>` yourself"
        )
    return None
