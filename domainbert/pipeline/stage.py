"""A training stage's config: its fit config file, the values the pipeline sets, and the user's overrides.

The pipeline never hands a stage a command line. It describes the stage as a :class:`StageConfig`, which
jsonargparse resolves once (:func:`domainbert.cli.lightning_cli.resolve_config`, into a
:class:`~domainbert.cli.lightning_cli.ResolvedConfig`) into the one config the stage's worker instantiates in one
step, whichever process runs it: ``<out>/<stage>/config.yaml``, the same config the run folder keeps. The resume
fingerprint hashes it, so a stage reruns exactly when its resolved config changed.

A stage's option, ``finetune.args`` say, reaches the Trainer in six hops:

1. ``pipeline.command.main``: jsonargparse reads the pipeline's YAML; the option is ``FinetuneSpec.args``, which
   ``pipeline`` keeps as ``Context.finetune``.
2. ``recipe.finetune_config``: ``StageConfig(file, values).then(ctx.finetune.args)``, the stage's last overrides.
3. ``Runner.fit`` → ``Runner.resolve``: :meth:`StageConfig.sources`, adjacent dicts merged as one, the run folder's
   values last.
4. ``resolve_config``: one parser applies the sources in order; ``Runner.fit`` writes the resolved YAML to
   ``<out>/<stage>/config.yaml``. (A watched pretraining stage reads ``trainer.max_steps`` from this same
   ``ResolvedConfig`` and adds its watch with ``ResolvedConfig.but``: it is resolved once too.)
5. ``worker.worker``, in the stage's process: ``cli_main(["--config", <that file>], run=False)``, where
   ``DomainBertCLI`` parses it.
6. ``DomainBertCLI.instantiate_trainer``: ``Trainer(**trainer)``.

Values are nested as in a config file; the helpers here build the common ones:

>>> from domainbert.pipeline.stage import StageConfig, callback, merge, model, trainer
>>> stage = StageConfig("finetune.yaml", merge(model(init_from="out/dapt/hf", pooling="mean"), trainer(max_epochs=2)))
>>> stage.values
{'model': {'init_args': {'init_from': 'out/dapt/hf', 'pooling': 'mean'}}, 'trainer': {'max_epochs': 2}}
>>> stage.but(trainer(max_epochs=3), callback("my.Callback", every=5)).values["trainer"]
{'max_epochs': 3, 'callbacks+': [{'class_path': 'my.Callback', 'init_args': {'every': 5}}]}
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Union

from domainbert.errors import DomainBertError

Overrides = Union[list[str], dict[str, Any]]  # noqa: UP007 - jsonargparse reads this alias in the settings types
"""A user's overrides of a stage: a config dict (``{"trainer": {"max_epochs": 2}}``), or command-line options
(``["--trainer.max_epochs=2"]``), which jsonargparse parses as it parses ``domainbert fit``'s."""


@dataclass
class StageConfig:
    """One training stage's config, before jsonargparse resolves it."""

    file: str
    """The fit config file: a stage's ``config``, else the built-in ``domainbert/pipeline/stages/<name>.yaml``."""
    values: dict[str, Any] = field(default_factory=dict)
    """What the pipeline sets, nested as in the file and merged over it (see :func:`merge`)."""
    overrides: list[Overrides] = field(default_factory=list)
    """The user's overrides, applied last, in order (a stage's ``args``). A dict is read as a config file is
    (class paths in full); a list of options as ``domainbert fit``'s command line (short names expanded)."""

    def but(self, *values: dict[str, Any]) -> StageConfig:
        """A copy with ``values`` merged over this one's (see :func:`merge`)."""
        return StageConfig(self.file, merge(self.values, *values), list(self.overrides))

    def then(self, *overrides: Overrides) -> StageConfig:
        """A copy with ``overrides`` (empty ones left out) applied after this one's."""
        more = [o for o in overrides if o]
        for given in more:
            options = isinstance(given, list) and all(isinstance(a, str) for a in given)
            if not (isinstance(given, dict) or options):
                raise DomainBertError(
                    f"pipeline: a stage's args={given!r}: expected a config dict ({{trainer: {{max_epochs: 2}}}}) "
                    "or a list of command-line options ([--trainer.max_epochs=2])"
                )
        return StageConfig(self.file, copy.deepcopy(self.values), [*self.overrides, *more])

    def sources(self) -> list[str | dict[str, Any] | list[str]]:
        """What jsonargparse reads, in order: the file, the values, then each override (a dict or options).

        Adjacent dicts are merged into one (see :func:`merge`), empty ones left out: each source is a parse.

        >>> StageConfig("f.yaml", trainer(max_steps=2)).then(seed(1), ["--seed_everything=3"], seed(2)).sources()
        ['f.yaml', {'trainer': {'max_steps': 2}, 'seed_everything': 1}, ['--seed_everything=3'], {'seed_everything': 2}]
        """
        out: list[str | dict[str, Any] | list[str]] = [self.file]
        for given in [self.values, *self.overrides]:
            if isinstance(given, dict) and isinstance(out[-1], dict):
                out[-1] = merge(out[-1], given)
            elif given:
                out.append(given)
        return out


def merge(*values: dict[str, Any]) -> dict[str, Any]:
    """``values`` merged into one nested dict, later ones winning; dicts merge key by key.

    A list under a key ending in ``+`` (``callbacks+``, jsonargparse's append) is appended to, not replaced.

    >>> merge({"model": {"init_args": {"a": 1}}}, {"model": {"init_args": {"b": 2}}, "seed_everything": 3})
    {'model': {'init_args': {'a': 1, 'b': 2}}, 'seed_everything': 3}
    """
    out: dict[str, Any] = {}
    for given in values:
        for key, value in given.items():
            appended = key.endswith("+") and isinstance(value, list)
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merge(out[key], value)
            elif appended and isinstance(out.get(key[:-1]), list):  # the list itself is here: append to it
                out[key[:-1]] = [*out[key[:-1]], *copy.deepcopy(value)]
            elif appended and isinstance(out.get(key), list):
                out[key] = [*out[key], *copy.deepcopy(value)]
            elif isinstance(value, list) and isinstance(out.get(f"{key}+"), list):  # a whole list replaces both
                out.pop(f"{key}+")
                out[key] = copy.deepcopy(value)
            else:
                out[key] = copy.deepcopy(value)
    return out


def model(**init_args: Any) -> dict[str, Any]:
    """``{"model": {"init_args": init_args}}``: the model's arguments, whatever its class."""
    return {"model": {"init_args": init_args}}


def data(**init_args: Any) -> dict[str, Any]:
    """``{"data": {"init_args": init_args}}``: the data module's arguments, whatever its class."""
    return {"data": {"init_args": init_args}}


def trainer(**values: Any) -> dict[str, Any]:
    """``{"trainer": values}``: the Trainer's arguments."""
    return {"trainer": values}


def callback(class_path: str, **init_args: Any) -> dict[str, Any]:
    """A callback appended to the Trainer's ``callbacks`` (after the config file's own)."""
    return {"trainer": {"callbacks+": [{"class_path": class_path, "init_args": init_args}]}}


def seed(value: int) -> dict[str, Any]:
    """``{"seed_everything": value}``."""
    return {"seed_everything": value}
