"""``python -m domainbert.pipeline --worker RESULT.json [--test] <fit args>``: one stage, run by the pipeline."""

import logging
import sys

from domainbert.errors import DomainBertError
from domainbert.pipeline.worker import worker

argv = sys.argv[1:]
if argv[:1] != ["--worker"] or len(argv) < 2:
    raise SystemExit("usage: python -m domainbert.pipeline --worker RESULT.json [--test] <fit args>")
result_path, rest = argv[1], argv[2:]
is_test = rest[:1] == ["--test"]
logging.basicConfig(level="INFO", format="%(levelname)s %(name)s: %(message)s")
try:
    worker(result_path, rest[1:] if is_test else rest, is_test)
except DomainBertError as err:
    print(f"domainbert: error: {err}", file=sys.stderr)
    sys.exit(2)
