"""``python -m domainbert.pipeline --worker RESULT.json [--test | --evaluate] <fit args>``: one pipeline stage.

A stage started as a new interpreter, and each DDP rank Lightning starts from it, ends with the process that started
it (:func:`domainbert.core.lifetime.die_with_parent`): a pipeline killed by any signal leaves no stage training on.
"""

import os
import sys

from domainbert.cli import _quick_exit
from domainbert.core.lifetime import die_with_parent
from domainbert.pipeline.worker import main

die_with_parent()
code = main(sys.argv[1:])
if code == 0 and os.environ.get("DOMAINBERT_QUICK_EXIT", "1") != "0":
    _quick_exit()  # the stage's record is written: skip the second of collections at exit
sys.exit(code)
