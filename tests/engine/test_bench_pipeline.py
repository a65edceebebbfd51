"""Bench section 11's GPU rows run one after another on a short GPU lease: a row that fails is
reported in one line and the rows after it still run (``_reported``); each pipelined row says
what its tokens ran on (``graph_line``). Checked on the CPU, where the rows' code runs too."""

from engine.decode.pipeline import PipelinedSession
from engine.decode.session import GenerationSession
from engine.drivers.bench_pipeline import GREEDY, _reported, graph_line
from tests.tiny_models import tiny_llama


def test_a_failing_row_is_one_line_and_the_next_row_runs():
    said: list[str] = []

    def bare() -> None:
        raise AssertionError  # no message at all

    def fine() -> int:
        return 7

    assert _reported(said.append, "first", bare) is None
    assert _reported(said.append, "second", fine) == 7
    assert len(said) == 1 and said[0].startswith("   11. first: failed, AssertionError: ")
    assert "test_bench_pipeline.py:" in said[0]


def test_the_graph_line_says_what_the_tokens_ran_on():
    model = tiny_llama(0)
    ids = [5, 17, 33, 90]
    settings = GREEDY.with_(max_new_tokens=4)
    piped = PipelinedSession(model, ids, settings, eos_token_ids=[], pipeline=True, fast=True)
    list(piped.stream())
    # on the CPU (the model here is): the pipeline ran, with no graph to replay
    assert piped.launched_ahead == 3
    assert graph_line(piped) == "no whole-token graph (the step is not captured here)"
    held = PipelinedSession(
        model, ids, settings.with_(mirostat=2), eos_token_ids=[], pipeline=True, fast=True
    )
    list(held.stream())
    assert graph_line(held).startswith("today's step (") and "mirostat" in graph_line(held)
    assert graph_line(GenerationSession(model, ids, settings)).startswith("no whole-token")
