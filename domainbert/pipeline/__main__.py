"""``python -m domainbert.pipeline --worker RESULT.json [--test | --evaluate] <fit args>``: one pipeline stage."""

import os
import sys

from domainbert.cli import _quick_exit
from domainbert.pipeline.worker import main

code = main(sys.argv[1:])
if code == 0 and os.environ.get("DOMAINBERT_QUICK_EXIT", "1") != "0":
    _quick_exit()  # the stage's record is written: skip the second of collections at exit
sys.exit(code)
