"""``python -m domainbert.pipeline --worker RESULT.json [--test | --evaluate] <fit args>``: one pipeline stage."""

import logging
import os
import sys

from domainbert.cli import _quick_exit, _user_error
from domainbert.pipeline.inprocess import LOG_FORMAT
from domainbert.pipeline.worker import worker

argv = sys.argv[1:]
if argv[:1] != ["--worker"] or len(argv) < 2:
    raise SystemExit("usage: python -m domainbert.pipeline --worker RESULT.json [--test | --evaluate] <fit args>")
result_path, rest = argv[1], argv[2:]
mode = rest[0] if rest[:1] in (["--test"], ["--evaluate"]) else None
logging.basicConfig(level="INFO", format=LOG_FORMAT)
try:
    worker(result_path, rest[1:] if mode else rest, test=mode == "--test", evaluate=mode == "--evaluate")
    if os.environ.get("DOMAINBERT_QUICK_EXIT", "1") != "0":
        _quick_exit()  # the stage's record is written: skip the second of collections at exit
except Exception as err:  # noqa: BLE001 - a user error is printed cleanly (as in the pipeline's process), the rest raised
    user = _user_error(err)
    if user is None:
        raise
    print(f"domainbert: error: {user}", file=sys.stderr)
    sys.exit(2)
