"""``python -m domainbert.pipeline --worker RESULT.json [--test | --evaluate] <fit args>``: one pipeline stage."""

import logging
import sys

from domainbert.errors import DomainBertError
from domainbert.pipeline.worker import worker

argv = sys.argv[1:]
if argv[:1] != ["--worker"] or len(argv) < 2:
    raise SystemExit("usage: python -m domainbert.pipeline --worker RESULT.json [--test | --evaluate] <fit args>")
result_path, rest = argv[1], argv[2:]
mode = rest[0] if rest[:1] in (["--test"], ["--evaluate"]) else None
logging.basicConfig(level="INFO", format="%(levelname)s %(name)s: %(message)s")
try:
    worker(result_path, rest[1:] if mode else rest, test=mode == "--test", evaluate=mode == "--evaluate")
except DomainBertError as err:
    print(f"domainbert: error: {err}", file=sys.stderr)
    sys.exit(2)
