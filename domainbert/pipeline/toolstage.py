"""``python -m domainbert.pipeline.toolstage MARKS.json <tool> <options>``: a tool stage, its timestamps kept.

The pipeline runs a tool stage (probe, select, vocab, pseudolabel, soup, export: ``domainbert <tool> ...``) through
:func:`run_tool`, in its own process or, as this module's ``__main__``, in a process of the stage's own. Its marks
(:mod:`domainbert.pipeline.timing`): ``ready`` once the command line's module and the tool's are imported, with
torch (every pipeline tool computes with it), and ``end`` when the tool returns; ``work`` names the part the rest
counts as.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path


def run_tool(args: list[str], marks: str | Path) -> None:
    """Run ``domainbert <args>``; write its marks to ``marks`` when it returns or fails.

    Raises:
        SystemExit: as ``domainbert`` exits (2 for a user error, its message printed).
    """
    from domainbert.cli import COMMANDS, main
    from domainbert.pipeline.timing import TOOL_PARTS

    marks = Path(marks).absolute()  # the tool may change the working directory
    tool = args[0] if args else ""
    command = COMMANDS.get(tool)
    if command is not None:
        importlib.import_module(command.module)
        import torch  # noqa: F401  (imports are start-up; the tool imports it itself when it starts working)
    record = {"ready": time.time(), "work": TOOL_PARTS.get(tool, "other")}
    try:
        main(list(args))
    finally:
        record["end"] = time.time()
        marks.write_text(json.dumps(record) + "\n", encoding="utf-8")


if __name__ == "__main__":
    from domainbert.core.lifetime import die_with_parent

    die_with_parent()  # a tool stage of its own ends with the pipeline, however it ends
    if len(sys.argv) < 3:
        raise SystemExit("usage: python -m domainbert.pipeline.toolstage MARKS.json <tool> <options>")
    run_tool(sys.argv[2:], sys.argv[1])
