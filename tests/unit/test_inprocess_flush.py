"""A logging handler made during an in-process stage with its ``flush`` bound to the stage's log (as transformers
makes its handler when first imported there) follows its stream back to the console: the next stage runs."""

import logging
import sys

from domainbert.pipeline.inprocess import run_in_process


def test_a_handler_whose_flush_is_bound_to_a_stages_log_follows_its_stream_back(tmp_path):
    logger = logging.getLogger("tests.bound_flush")
    made = []

    def first() -> None:  # transformers.utils.logging: StreamHandler(); handler.flush = sys.stderr.flush
        handler = logging.StreamHandler()
        handler.flush = sys.stderr.flush
        logger.addHandler(handler)
        made.append(handler)
        logger.warning("first: to the log")

    def second() -> None:
        logger.warning("second: to its own log")

    try:
        assert run_in_process(first, tmp_path / "first.txt", ["first"]) == 0
        handler = made[0]
        assert handler.stream is sys.stderr and handler.flush.__self__ is sys.stderr  # not the closed log's
        assert run_in_process(second, tmp_path / "second.txt", ["second"]) == 0
        assert handler.stream is sys.stderr and handler.flush.__self__ is sys.stderr
    finally:
        for handler in made:
            logger.removeHandler(handler)
    assert "first: to the log" in (tmp_path / "first.txt").read_text()
    assert "second: to its own log" in (tmp_path / "second.txt").read_text()
