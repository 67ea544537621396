"""Run pipeline stages, record them in ``state.json``, and skip the ones already done.

A stage runs in a process of its own or in the pipeline's own process, as ``isolate`` says:

- ``training`` (the default): the training stages (``fit``, ``evaluate``: the stage worker) each get a process of
  their own, for crash isolation and memory handed back in full, forked on Linux from a server that imported the
  libraries once (:mod:`domainbert.pipeline.forks`); the tool stages (probe, select, vocab, pseudolabel, soup,
  export) run in the pipeline's process, each sparing the 11-15 s a new interpreter takes to start;
- ``all``: every stage gets a process of its own;
- ``none``: every stage runs in the pipeline's process (tests, small data; single-device training only).

Either way a stage's output goes to ``<out>/<stage>/log.txt``, and a failing stage is recorded and reported the
same way (see :mod:`domainbert.pipeline.inprocess`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from domainbert.core.files import MARKER, atomic_write_text, claim_folder
from domainbert.errors import DomainBertError
from domainbert.pipeline.records import Run, ToolResult
from domainbert.pipeline.stage import StageConfig

if TYPE_CHECKING:
    from domainbert.cli.lightning_cli import ResolvedConfig
    from domainbert.pipeline.stopping import Stopped

Isolate = Literal["training", "all", "none"]
#: The values of ``isolate``: which stages get a process of their own.
ISOLATE: tuple[str, ...] = ("training", "all", "none")


#: The pipeline's own ``state.json`` says what it is: ``{"format": STATE_FORMAT, "version": STATE_VERSION,
#: "stages": {stage: record}}``. A folder is taken for a pipeline's only by this mark or by :data:`MARKER`.
STATE_FORMAT = "domainbert-pipeline"
#: The version of ``state.json``'s layout that this domainbert writes (it reads this one and older ones).
STATE_VERSION = 1
#: The pipeline's state file, in ``out``.
STATE = "state.json"


def read_state(path: Path) -> dict[str, dict]:
    """The stage records in the pipeline's ``state.json`` (``{}`` when there is none yet): its one reader.

    The file is ``{"format": "domainbert-pipeline", "version": 1, "stages": {...}}``; the form an older domainbert
    wrote (the stage records themselves, in a folder holding :data:`MARKER`) is translated here, so every reader of
    the file (the runner, the report's benchmarks, ``examples/benchmarks``) sees the records alone.

    Raises:
        DomainBertError: naming the file, when it is not JSON, names another format or a newer version, or its
            stages are not an object of stage records.
    """
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DomainBertError(
            f"{path}: not a state file the pipeline wrote ({err}); expected JSON: delete it to run every stage "
            "again, or choose another out"
        ) from None
    stages = _stages(data, path) if is_marked(data) else data  # unmarked: an older pipeline's stage records
    if not isinstance(stages, dict) or not all(isinstance(v, dict) for v in stages.values()):
        raise DomainBertError(
            f"{path}: expected a JSON object of stage records ({{stage: {{status: ...}}}}); delete it to run every "
            "stage again, or choose another out"
        )
    return stages


def is_marked(data: Any) -> bool:
    """Whether ``data`` (a parsed ``state.json``) carries a format mark (``"format"``: a string)."""
    return isinstance(data, dict) and isinstance(data.get("format"), str)


def _stages(data: dict, path: Path) -> Any:
    """The ``stages`` of a marked ``state.json``, once its format and version are this pipeline's."""
    if data["format"] != STATE_FORMAT:
        raise DomainBertError(
            f"{path}: format {data['format']!r}, not {STATE_FORMAT!r}: not a domainbert pipeline's state; "
            "choose another out"
        )
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= STATE_VERSION:
        raise DomainBertError(
            f"{path}: version {version!r}; this domainbert reads versions 1 to {STATE_VERSION} (a newer domainbert "
            "wrote it?): run that one, or choose another out"
        )
    return data.get("stages")


def write_state(path: Path, stages: dict[str, dict]) -> None:
    """Write the stage records to ``path`` (atomically), marked with :data:`STATE_FORMAT` and :data:`STATE_VERSION`."""
    state = {"format": STATE_FORMAT, "version": STATE_VERSION, "stages": stages}
    atomic_write_text(path, json.dumps(state, indent=2, sort_keys=True) + "\n")


def claim_out(out: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = ()) -> Path:
    """The pipeline's folder ``out``, created or reused (see :func:`~domainbert.core.files.claim_folder`).

    A folder is the pipeline's when it holds :data:`MARKER` (every released pipeline marked its folder) or a
    ``state.json`` marked as the pipeline's (:data:`STATE_FORMAT`; the marker is then written again). A non-empty
    folder with neither is the user's, and is refused, whatever ``state.json`` it holds (``{}``, say).

    Raises:
        DomainBertError: one line, when ``out`` is not the pipeline's to write (or is empty, null, an input...).
    """
    return claim_folder(out, inputs=inputs, what="out", recognise=_marked_state)


def _marked_state(folder: Path) -> bool:
    """Whether ``folder`` holds a ``state.json`` marked as the pipeline's (:data:`STATE_FORMAT`, any version)."""
    try:
        data = json.loads((folder / STATE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return is_marked(data) and data["format"] == STATE_FORMAT


#: The lock file in ``out`` that one pipeline holds while it runs (see :func:`lock_out`).
LOCK = ".pipeline.lock"

_HELD: dict[str, int] = {}
"""The locks this process holds: ``{lock file: its descriptor}``."""


def lock_out(out: Path) -> int:
    """Take the pipeline's lock on ``out`` (``<out>/.pipeline.lock``): the open file's descriptor, held till exit.

    The lock is ``flock``'s: the kernel releases it when the process ends, however it ends, so a killed pipeline
    leaves no stale lock; the file keeps the holder's pid for the message.

    Raises:
        DomainBertError: another pipeline, alive, holds ``out`` (one line naming it and its pid).
    """
    import fcntl

    path = out / LOCK
    key = str(path.resolve())
    if key in _HELD:  # this process holds it already (a Runner made again on the same folder)
        return _HELD[key]
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as err:
        raise DomainBertError(f"out: cannot create the lock {path}: {err.strerror or err}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise DomainBertError(
            f"out: {out} is in use by another pipeline (pid {holder}); two pipelines never write one folder: wait "
            "for it to end, or choose another out"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _HELD[key] = fd
    return fd


def unlock_out(out: Path) -> None:
    """Release the lock this process holds on ``out``, if any."""
    fd = _HELD.pop(str((out / LOCK).resolve()), None)
    if fd is not None:
        os.close(fd)


class Runner:
    """Runs each stage once; a rerun skips a finished stage unless its inputs changed.

    A training stage's inputs are its resolved config (:meth:`resolve`), a tool stage's its command line; both
    also rerun after an upstream stage named in ``after`` ran again.
    """

    def __init__(
        self, out: str | os.PathLike, isolate: Isolate = "training", inputs: Iterable[str | None] = ()
    ) -> None:
        """Use (and create) ``out``, refusing a folder of the user's or one holding ``inputs``.

        Args:
            out: the pipeline's folder (null or empty text is refused).
            isolate: which stages get a process of their own (see the module's docstring).
            inputs: the pipeline's input files and folders (``out`` may hold none of them).
        """
        if isolate not in ISOLATE:
            raise DomainBertError(f"pipeline: isolate={isolate!r}; expected one of {list(ISOLATE)}")
        self.out = claim_out(out, inputs)
        lock_out(self.out)  # one pipeline at a time in a folder
        self.isolate = isolate
        self.state_file = self.out / STATE
        self.state: dict[str, Any] = read_state(self.state_file)
        self.called: list[str] = []
        """The stages of this invocation, in order (the report shows these, not older ones in ``state.json``)."""
        self._started: dict[str, float] = {}
        """When each stage of this invocation was launched (``time.time()``): the start of its parts."""

    def close(self) -> None:
        """Release ``out`` (the pipeline's lock) for another process; the process's end does too."""
        unlock_out(self.out)

    def _save(self) -> None:
        write_state(self.state_file, self.state)

    def fingerprint(self, resolved: str | None, after: tuple[str, ...] = ()) -> str:
        """What a stage depends on: its resolved config and its upstream stages.

        That is its resolved config (the YAML a training stage's worker reads, its values as loaded: comments and
        layout do not count), and when each upstream stage in ``after`` last finished (an upstream that wrote to
        the same path again makes this stage rerun).
        """
        h = hashlib.sha256()
        if resolved:
            import yaml

            h.update(json.dumps(yaml.safe_load(resolved), sort_keys=True, default=str).encode())
        for name in after:
            h.update(f"{name}:{self.state.get(name, {}).get('finished', '')}".encode())
        return h.hexdigest()[:16]

    def _done(self, stage: str, inputs: list[str], fingerprint: str | None = None) -> dict | None:
        """The stage's record if it finished earlier with the same inputs (command line, config, upstream)."""
        self.called.append(stage)
        entry = self.state.get(stage)
        if entry and entry.get("status") == "done":
            changed = fingerprint is not None and entry.get("fingerprint", fingerprint) != fingerprint
            if entry.get("inputs", inputs) != inputs or changed:
                print(f"[{stage}] done earlier with other inputs (config, options or upstream output): running again")
                return None
            print(f"[{stage}] done earlier: skipped ({entry.get('hf') or entry.get('result')})")
            return entry
        return None

    def _run(
        self,
        stage: str,
        module: str,
        argv: list[str],
        inline: Callable[[], Any] | None = None,
        shown: list[str] | None = None,
    ) -> float:
        """Run ``stage``: ``python -m <module> <argv>`` in a process of its own, or ``inline`` in this one; its seconds.

        The process of its own is forked from the pipeline's server or started as a new interpreter, behind one call
        (:func:`domainbert.pipeline.forks.run_stage`). ``shown`` is the command line the output names (and
        ``sys.argv`` of an inline run); default ``python -m <module> <argv>``.
        The stage's marks (``<out>/<stage>/marks.json``, which its run writes) become its record's ``parts`` in
        :meth:`_finish`.
        """
        from domainbert.pipeline.stopping import Stopped, received
        from domainbert.pipeline.timing import MARKS

        folder = self.out / stage
        folder.mkdir(parents=True, exist_ok=True)
        (folder / MARKER).touch()  # the pipeline's own folder: the stage's tool (probe, select...) may write here
        (folder / MARKS).unlink(missing_ok=True)  # an earlier run's
        log = folder / "log.txt"
        shown = ["python", "-m", module, *argv] if shown is None else shown
        where = "" if inline is None else " (the stage runs in the pipeline's process)"
        print(f"[{stage}] running: {' '.join(shown)}\n[{stage}] log: {log}{where}", flush=True)
        t0 = time.time()
        try:
            code = self._launch(module, argv, log, inline, shown)
        except KeyboardInterrupt as err:  # Ctrl-C, SIGTERM, SIGHUP: the stage was ended; the record says so
            stopped = err if isinstance(err, Stopped) else Stopped(signal.SIGINT)
            self._stopped(stage, stopped, log, time.time() - t0)
            if stopped is err:
                raise
            raise stopped from err
        if received() is not None:  # the stage (an inline one: Lightning turns Ctrl-C into an exit) saw it first
            err = Stopped(received())
            self._stopped(stage, err, log, time.time() - t0)
            raise err
        seconds = time.time() - t0
        self._started[stage] = t0
        if code != 0:
            self.state[stage] = {"status": "failed", "log": str(log), "seconds": round(seconds, 1)}
            self._save()
            tail = "".join(log.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)[-25:])
            raise DomainBertError(
                f"stage {stage!r} failed (exit {code}); its log is {log}. Last lines:\n{tail}\n"
                "Fix the cause and run the same command again: finished stages are skipped."
            )
        return seconds

    @staticmethod
    def _launch(module: str, argv: list[str], log: Path, inline: Callable[[], Any] | None, shown: list[str]) -> int:
        """Run the stage as :meth:`_run` says; its exit status."""
        if inline is not None:
            from domainbert.pipeline.inprocess import run_in_process

            return run_in_process(inline, log, shown)
        from domainbert.pipeline.forks import run_stage

        return run_stage(module, argv, log)

    def _stopped(self, stage: str, err: Stopped, log: Path, seconds: float) -> None:
        """Record ``stage`` as stopped by the signal of ``err`` (which learns the stage's name)."""
        name = signal.Signals(err.signum).name
        err.stage = stage
        self.state[stage] = {"status": "stopped", "signal": name, "log": str(log), "seconds": round(seconds, 1)}
        with contextlib.suppress(DomainBertError):
            self._save()

    def parts(self, stage: str, seconds: float) -> dict[str, float] | None:
        """The seconds of each part of ``stage``, which just ran for ``seconds``, from its marks (None: no marks).

        See :mod:`domainbert.pipeline.timing`; the parts sum to ``seconds`` (to one decimal).
        """
        from domainbert.pipeline.timing import MARKS, record_parts

        started, path = self._started.get(stage), self.out / stage / MARKS
        if started is None or not path.is_file():
            return None
        try:
            marks = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return None
        return record_parts(marks if isinstance(marks, dict) else None, started, started + seconds)

    def _finish(self, stage: str, record: dict, seconds: float, inputs: list[str], fingerprint: str = "") -> dict:
        record.update(status="done", seconds=round(seconds, 1), inputs=inputs, finished=time.time())
        parts = self.parts(stage, seconds)
        if parts is not None:
            record["parts"] = parts
        if fingerprint:
            record["fingerprint"] = fingerprint
        self.state[stage] = record
        self._save()
        print(f"[{stage}] done in {seconds:.0f} s: {record.get('hf') or record.get('result')}", flush=True)
        return record

    def fit(
        self,
        stage: str,
        config: StageConfig | ResolvedConfig | str,
        args: list[str] | None = None,
        test: bool = False,
        after: tuple[str, ...] = (),
    ) -> Run:
        """Run ``domainbert fit`` (then ``test`` on the best weights) on the stage's config; the run it made.

        Args:
            stage: the stage's name: its folder ``<out>/<stage>`` and its record in ``state.json``.
            config: the stage's :class:`~domainbert.pipeline.stage.StageConfig` (or a fit config file's path), or
                the config :meth:`resolve` made of it for this stage.
            args: more overrides, after the config's own (a list of options, as on ``domainbert fit``'s command
                line); jsonargparse parses them.
            test: test the best weights too.
            after: upstream stages whose finishing again makes this one rerun.

        The :class:`~domainbert.pipeline.records.Run` holds ``run`` (the run folder), ``hf`` (the export),
        ``metrics`` (the best checkpoint's validation metrics and, with ``test``, its test metrics), ``predictions``
        (a JSON file of the test rows' gold and predicted label ids, for paired comparisons), ``config`` (the
        resolved config it ran) and ``seconds``; its ``seed`` is None (a candidate's run names it).
        """
        record = self._worker(stage, _stage_config(config, args), "--test" if test else None, after)
        return stage_run(stage, record, self.state_file)

    def evaluate(
        self, stage: str, config: StageConfig | str, args: list[str] | None = None, after: tuple[str, ...] = ()
    ) -> Run:
        """Validate and test a model without training it (the config names it: ``model.init_args.init_from``).

        The run is a fine-tuning run's, with ``test``: ``run``, ``metrics`` (``val/...`` and ``test/...``),
        ``predictions``, ``config`` and ``hf``, which is the evaluated folder itself.
        """
        return stage_run(stage, self._worker(stage, _stage_config(config, args), "--evaluate", after), self.state_file)

    def resolve(self, stage: str, config: StageConfig) -> ResolvedConfig:
        """The stage's resolved config, with its run folder ``<out>/<stage>/run``: its YAML is what its worker reads."""
        from domainbert.cli.lightning_cli import resolve_config

        rooted = config.then({"trainer": {"default_root_dir": str(self.out / stage)}, "run_name": "run"})
        return resolve_config(rooted.sources(), where=f"stage {stage!r}")

    def _worker(
        self, stage: str, config: StageConfig | ResolvedConfig, mode: str | None, after: tuple[str, ...]
    ) -> dict:
        """Run the stage worker on the stage's resolved config in ``mode``, unless done; its record."""
        resolved = (self.resolve(stage, config) if isinstance(config, StageConfig) else config).text()
        path = self.out / stage / "config.yaml"
        inputs = [str(path), *([mode] if mode else [])]
        fingerprint = self.fingerprint(resolved, after)
        if (done := self._done(stage, inputs, fingerprint)) is not None:
            return done
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, resolved)
        result = self.out / stage / "result.json"
        argv = ["--worker", str(result), *([mode] if mode else []), "--config", str(path)]
        inline = None
        if self.isolate == "none":
            from domainbert.pipeline.worker import worker

            run = functools.partial(worker, str(result), ["--config", str(path)])
            inline = functools.partial(run, test=mode == "--test", evaluate=mode == "--evaluate")
        seconds = self._run(stage, "domainbert.pipeline", argv, inline)
        record = {**json.loads(result.read_text()), "config": str(path)}
        return self._finish(stage, record, seconds, inputs, fingerprint)

    def tool(
        self,
        stage: str,
        command: str | list[str],
        options: dict[str, Any] | None = None,
        result: str = "",
        after: tuple[str, ...] = (),
        args: list[str] | tuple[str, ...] = (),
    ) -> ToolResult:
        """Run a ``domainbert`` tool subcommand for ``stage``; its :class:`ToolResult` (``result``: ``result``).

        Args:
            stage: the stage's name.
            command: the subcommand (``"select"``, ``"vocab extend"``), or its whole command line as a list.
            options: its options by name (``{"k": 20, "out": folder}``; None is ``null``, a list or dict is JSON).
            result: the stage's result (its output folder or file).
            after: upstream stages whose finishing again makes this one rerun (see :meth:`fingerprint`).
            args: the user's own options of the tool (``export.args``), last, so they win.

        A tool that writes ``<result>/result.json`` (or ``result`` itself when it is a ``.json`` file) has that
        JSON merged into the stage's record, and it is the result's ``output``.
        """
        args = tool_argv(command, options, args)
        fingerprint = self.fingerprint(None, after) if after else None
        if (done := self._done(stage, args, fingerprint)) is not None:
            return ToolResult.of(stage, done)
        from domainbert.pipeline.timing import MARKS
        from domainbert.pipeline.toolstage import run_tool

        marks = self.out / stage / MARKS
        inline = functools.partial(run_tool, list(args), marks) if self.isolate != "all" else None
        argv = [str(marks), *args]
        seconds = self._run(stage, "domainbert.pipeline.toolstage", argv, inline, shown=["domainbert", *args])
        record: dict[str, Any] = {"result": result}
        for candidate in (Path(result), Path(result) / "result.json"):
            if candidate.suffix == ".json" and candidate.is_file():
                record.update(json.loads(candidate.read_text()))
        return ToolResult.of(stage, self._finish(stage, record, seconds, args, fingerprint or ""))

    def seconds(self, stage: str) -> float:
        """The measured wall-clock seconds of a finished stage (0 when unknown)."""
        return float(self.state.get(stage, {}).get("seconds") or 0.0)


#: The keys of a training stage's record that its :class:`~domainbert.pipeline.records.Run` holds.
_RUN_KEYS = ("hf", "predictions", "run", "config", "seconds")


def stage_run(stage: str, record: Mapping[str, Any], where: Path | str = STATE) -> Run:
    """The run a training stage's record (``state.json``'s, a fresh one or one done earlier) holds: its one reader.

    Raises:
        DomainBertError: naming the file (``where``) and the stage, when its ``metrics`` are no object of numbers.
    """
    metrics = record.get("metrics") or {}
    if not isinstance(metrics, Mapping) or not all(_number(v) for v in metrics.values()):
        raise DomainBertError(
            f"{where}: stage {stage!r}: metrics={metrics!r}; expected an object of numbers by name (delete the "
            "stage's record to run it again)"
        )
    return Run(stage=stage, metrics=dict(metrics), **{key: record.get(key) for key in _RUN_KEYS})


def _number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _stage_config(config: StageConfig | ResolvedConfig | str, args: list[str] | None) -> StageConfig | ResolvedConfig:
    """``config`` as a :class:`StageConfig` (a file's path: that file), with ``args`` as its last overrides.

    A config :meth:`Runner.resolve` made is run as it is; ``args`` cannot be added to it.
    """
    from domainbert.cli.lightning_cli import ResolvedConfig

    if isinstance(config, ResolvedConfig):
        if args:
            raise ValueError(f"args={args!r} given with a resolved config; add them to its StageConfig")
        return config
    spec = config if isinstance(config, StageConfig) else StageConfig(str(config))
    return spec.then(list(args)) if args else spec


def tool_argv(
    command: str | list[str], options: dict[str, Any] | None, args: list[str] | tuple[str, ...] = ()
) -> list[str]:
    """A tool's command line: ``command``, then ``--<name> <value>`` for each option, then ``args``.

    >>> tool_argv("select", {"k": 20, "max_documents": None, "model": "m"})
    ['select', '--k', '20', '--max_documents', 'null', '--model', 'm']
    >>> tool_argv("soup", {"models": ["a", "b"], "soft": True}, ["--x", "1"])
    ['soup', '--models', '["a", "b"]', '--soft', 'true', '--x', '1']
    """
    argv = command.split() if isinstance(command, str) else list(command)
    for name, value in (options or {}).items():
        argv += [f"--{name}", _option(value)]
    return [*argv, *args]


def _option(value: Any) -> str:
    """An option's value as the tool's parser reads it: ``null``, ``true``/``false``, JSON for a list or dict."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | dict):
        return json.dumps(value)
    return repr(value) if isinstance(value, float) else str(value)
