"""Run pipeline stages in subprocesses, record them in ``state.json``, and skip the ones already done."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from domainbert.core.files import atomic_write_text
from domainbert.errors import DomainBertError


class Runner:
    """Runs each stage once; a rerun skips a finished stage unless its inputs (its command line) changed."""

    def __init__(self, out: Path) -> None:
        """Use (and create) ``out``."""
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.state_file = out / "state.json"
        self.state: dict[str, Any] = json.loads(self.state_file.read_text()) if self.state_file.exists() else {}
        self.called: list[str] = []
        """The stages of this invocation, in order (the report shows these, not older ones in ``state.json``)."""

    def _save(self) -> None:
        atomic_write_text(self.state_file, json.dumps(self.state, indent=2, sort_keys=True) + "\n")

    def fingerprint(self, config: str | None, after: tuple[str, ...] = ()) -> str:
        """What a stage depends on beyond its command line.

        That is its config file's contents, and when each upstream stage in ``after`` last finished (an upstream
        that wrote to the same path again makes this stage rerun).
        """
        h = hashlib.sha256()
        if config and Path(config).is_file():
            h.update(Path(config).read_bytes())
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

    def _run(self, stage: str, cmd: list[str]) -> float:
        folder = self.out / stage
        folder.mkdir(parents=True, exist_ok=True)
        log = folder / "log.txt"
        print(f"[{stage}] running: {' '.join(cmd[2:])}\n[{stage}] log: {log}", flush=True)
        t0 = time.time()
        with open(log, "w", encoding="utf-8") as fh:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        seconds = time.time() - t0
        if proc.returncode != 0:
            self.state[stage] = {"status": "failed", "log": str(log), "seconds": round(seconds, 1)}
            self._save()
            tail = "".join(log.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)[-25:])
            raise DomainBertError(
                f"stage {stage!r} failed (exit {proc.returncode}); its log is {log}. Last lines:\n{tail}\n"
                "Fix the cause and run the same command again: finished stages are skipped."
            )
        return seconds

    def _finish(self, stage: str, record: dict, seconds: float, inputs: list[str], fingerprint: str = "") -> dict:
        record.update(status="done", seconds=round(seconds, 1), inputs=inputs, finished=time.time())
        if fingerprint:
            record["fingerprint"] = fingerprint
        self.state[stage] = record
        self._save()
        print(f"[{stage}] done in {seconds:.0f} s: {record.get('hf') or record.get('result')}", flush=True)
        return record

    def fit(self, stage: str, config: str, args: list[str], test: bool = False, after: tuple[str, ...] = ()) -> dict:
        """Run ``domainbert fit`` (then ``test`` on the best weights); return its record.

        The record holds ``run`` (the run folder), ``hf`` (the export), ``metrics`` (the best checkpoint's
        validation metrics and, with ``test``, its test metrics) and ``predictions`` (a JSON file of the test
        rows' gold and predicted label ids, for paired comparisons).
        """
        return self._worker(stage, config, args, "--test" if test else None, after)

    def evaluate(self, stage: str, config: str, args: list[str], after: tuple[str, ...] = ()) -> dict:
        """Validate and test a model without training it (``args`` name it: ``--model.init_from <folder>``).

        The record is a fine-tuning run's, with ``test``: ``run``, ``metrics`` (``val/...`` and ``test/...``),
        ``predictions`` and ``hf``, which is the evaluated folder itself.
        """
        return self._worker(stage, config, args, "--evaluate", after)

    def _worker(self, stage: str, config: str, args: list[str], mode: str | None, after: tuple[str, ...]) -> dict:
        """Run the stage worker (``python -m domainbert.pipeline --worker``) in ``mode``, unless done; its record."""
        inputs = [config, *args, *([mode] if mode else [])]
        fingerprint = self.fingerprint(config, after)
        if (done := self._done(stage, inputs, fingerprint)) is not None:
            return done
        result = self.out / stage / "result.json"
        worker = ["--worker", str(result), *([mode] if mode else [])]
        cmd = [sys.executable, "-m", "domainbert.pipeline", *worker, "--config", config, *args]
        cmd += ["--trainer.default_root_dir", str(self.out / stage), "--run_name", "run"]
        seconds = self._run(stage, cmd)
        return self._finish(stage, json.loads(result.read_text()), seconds, inputs, fingerprint)

    def tool(self, stage: str, args: list[str], result: str, after: tuple[str, ...] = ()) -> dict:
        """Run a ``domainbert`` tool subcommand for ``stage``; its record's ``result`` is ``result``.

        A tool that writes ``<result>/result.json`` (or ``result`` itself when it is a ``.json`` file) has that
        JSON merged into the record. With ``after``, the stage also reruns when one of those upstream stages
        finished again since (see :meth:`fingerprint`).
        """
        fingerprint = self.fingerprint(None, after) if after else None
        if (done := self._done(stage, args, fingerprint)) is not None:
            return done
        seconds = self._run(stage, [sys.executable, "-m", "domainbert", *args])
        record: dict[str, Any] = {"result": result}
        for candidate in (Path(result), Path(result) / "result.json"):
            if candidate.suffix == ".json" and candidate.is_file():
                record.update(json.loads(candidate.read_text()))
        return self._finish(stage, record, seconds, args, fingerprint or "")

    def seconds(self, stage: str) -> float:
        """The measured wall-clock seconds of a finished stage (0 when unknown)."""
        return float(self.state.get(stage, {}).get("seconds") or 0.0)
