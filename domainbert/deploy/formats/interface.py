"""The export-format interface: how one kind of variant is written, loaded back and run.

A format is a subclass of :class:`ExportFormat` with a ``name`` (the key of the table in
:mod:`domainbert.deploy.formats`, the folder's name under ``--out`` and the ``variant`` its
``domainbert_variant.json`` records) and three methods: :meth:`~ExportFormat.write`, :meth:`~ExportFormat.load` and
:meth:`~ExportFormat.runner`. ``domainbert export`` writes each enabled format's folder atomically, saves the
tokenizer and ``domainbert_variant.json`` in it, measures what :meth:`~ExportFormat.write` returned and writes its
report; :func:`domainbert.deploy.load.load_variant` reads any folder back through the same table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn


@dataclass
class WriteContext:
    """What a format's writer may use besides the model: the export's inputs and options.

    Args:
        example: two rows of input tensors (no labels): the example input of a traced export (ONNX).
        probe: a batch-32 batch of input tensors: what a writer may time alternatives on (int8's backends).
        check: a batch of a shape the example did not have: what an exported graph is checked against PyTorch on.
        options: the formats' options by name (each format declares its own in :attr:`ExportFormat.options`;
            ``domainbert export --format_options``), and ``threads``.
        made: files earlier formats wrote for the same model in this export, by format name (``onnx``: its
            ``model.onnx``), which a later format may start from.
    """

    example: dict
    probe: dict
    check: dict
    options: dict[str, Any] = field(default_factory=dict)
    made: dict[str, Path] = field(default_factory=dict)


@dataclass
class Written:
    """What a format's writer hands back.

    Args:
        model: what runs the written variant: a module whose ``model(**inputs).logits`` are the logits (an ONNX
            file behind :class:`~domainbert.deploy.onnx_export.OnnxModel`, a quantized copy...).
        info: the fields of the folder's ``domainbert_variant.json`` besides ``variant`` (``{}``: only the
            variant); None writes no such file (a plain Hugging Face folder that ``transformers`` loads as it is).
        extra: the variant's own report fields (its backend, its check...).
        measure: False when the variant cannot be timed here (an ONNX graph without onnxruntime): the row keeps
            ``extra`` without latency or task metrics.
        file: the file a later format may start from (``WriteContext.made``), if any.
    """

    model: nn.Module
    info: dict | None = None
    extra: dict = field(default_factory=dict)
    measure: bool = True
    file: str | None = None


def float32_activations(config):
    """A copy of ``config`` for a variant that runs float32 activations whatever its source was scored in.

    For int8 and ONNX: its scoring record (:mod:`domainbert.core.scoring`) keeps the length and names no precision, so
    that :func:`~domainbert.deploy.classifier.classify` runs it as the export measured it.
    """
    from domainbert.core.scoring import with_scoring

    return with_scoring(config, precision=None)


class ExportFormat:
    """One export format of ``domainbert export``: subclass it, name it, and write, load and run its folders.

    Class attributes, given in the class line (``class Half(ExportFormat, name="fp16", option="fp16")``):

    - ``name``: the table's key, the folder's name and the ``variant`` that ``domainbert_variant.json`` records;
    - ``option``: the ``domainbert export`` flag that turns it on (``int8``); None: only ``--formats [name]`` does;
    - ``order``: where it is written among the enabled formats (lower first; ``onnx`` before ``onnx_int8``, which
      quantizes its graph);
    - ``needs``: modules that must be importable (``onnxruntime``); without them the format is skipped with a
      warning that names them;
    - ``teacher``: also written for ``--teacher`` when written for the model (bf16 and the quantized formats: the
      teacher's conversion may beat a student that is no faster);
    - ``options``: the format's own options with their defaults, by name (``{"int8_backend": "auto"}``), which
      ``domainbert export`` takes as ``--format_options '{"int8_backend": "torch"}'`` or ``--int8_backend torch``; a
      writer reads them with :meth:`~ExportFormat.option`. Formats may share an option by its name.

    Loading must never run code from the folder: read safetensors, ONNX or ``torch.load(..., weights_only=True)``,
    and refuse anything else unless ``trust_pickle`` is set.

    Examples:
        A float16 format in a plugin package (registered under the entry-point group
        ``domainbert.export_formats`` as ``fp16 = "mypkg.fp16:Half"``, it is written by ``--formats [fp16]``):

        >>> import copy, tempfile
        >>> from pathlib import Path
        >>> import torch
        >>> from domainbert.deploy import load_variant
        >>> from domainbert.deploy.folders import hf_model
        >>> from domainbert.deploy.formats import ExportFormat, Written
        >>> from domainbert.deploy.sample import sample_classifier
        >>> class Half(ExportFormat, name="fp16", order=15):
        ...     '''float16 weights (for accelerators; most CPUs run them slowly).'''
        ...
        ...     def write(self, model, folder, ctx):
        ...         half = copy.deepcopy(model).half().eval()
        ...         half.save_pretrained(folder)
        ...         return Written(half, info={"dtype": "float16"})
        ...
        ...     def load(self, folder, config, info, trust_pickle=False):
        ...         return hf_model(folder, config, dtype=torch.float16)

        Written from a model and loaded back (here a tiny random classifier,
        :func:`~domainbert.deploy.sample.sample_classifier`; ``domainbert export`` also saves the tokenizer and
        ``domainbert_variant.json`` beside the weights):

        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     model, tokenizer, info = load_variant(sample_classifier(Path(tmp, "model")))
        ...     written = Half().write(model, Path(tmp, "fp16"), ctx=None)
        ...     loaded = Half().load(Path(tmp, "fp16"), model.config, {"variant": "fp16", **written.info})
        ...     next(model.parameters()).dtype, next(loaded.parameters()).dtype, written.info
        (torch.float32, torch.float16, {'dtype': 'float16'})
        >>> Half.name, Half.option, Half.order
        ('fp16', None, 15)
    """

    name: ClassVar[str] = ""
    option: ClassVar[str | None] = None
    order: ClassVar[int] = 50
    needs: ClassVar[tuple[str, ...]] = ()
    teacher: ClassVar[bool] = False
    options: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **declared: Any) -> None:
        """Let a subclass declare its attributes in its class line, ``class Int8(ExportFormat, name="int8")``."""
        super().__init_subclass__()
        unknown = sorted(set(declared) - {"name", "option", "order", "needs", "teacher", "options"})
        if unknown:
            raise TypeError(f"{cls.__name__}: {unknown} are not ExportFormat attributes")
        for key, value in declared.items():
            setattr(cls, key, value)

    def option_value(self, ctx: WriteContext, name: str) -> Any:
        """The value of this format's option ``name`` in ``ctx`` (given to the export), else its default."""
        return ctx.options.get(name, self.options[name])

    def write(self, model: nn.Module, folder: Path, ctx: WriteContext) -> Written:
        """Write ``model``'s variant into ``folder`` (a fresh folder, renamed into place once complete).

        Args:
            model: the float32 model in eval mode (never changed: work on a copy).
            folder: where to write the variant's files (the tokenizer and ``domainbert_variant.json`` are written
                by the export, from :attr:`Written.info`).
            ctx: the export's inputs and options.
        """
        raise NotImplementedError

    def load(self, folder: Path, config, info: dict, trust_pickle: bool = False) -> nn.Module:
        """The model of a folder this format wrote, for inference (``model(**inputs).logits``).

        Args:
            folder: the variant's folder.
            config: its config (a mean-pooling export as its family's config).
            info: its ``domainbert_variant.json`` (``{"variant": name}`` at least).
            trust_pickle: the caller allows a full (code-running) unpickling.
        """
        raise NotImplementedError

    def runner(self, model: nn.Module) -> Callable[[dict], torch.Tensor]:
        """What the export times and scores: a function of a batch (input tensors, maybe labels) to float logits."""
        from domainbert.deploy.bench import TorchRunner

        return TorchRunner(model)

    def available(self) -> list[str]:
        """The modules of ``needs`` that cannot be imported here (empty: the format can be written)."""
        import importlib.util

        return [m for m in self.needs if importlib.util.find_spec(m) is None]
