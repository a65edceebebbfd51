"""The whole-token graph's body and bookkeeping (``engine.decode.token_graph.TokenGraph``) run
eagerly on CPU (``capture=False``: the same code between the buffers, without the CUDA graph):
fed from the host or from the device, the penalty window, a forced token, a grown cache, the
token launched ahead dropped. Records against today's session over the same static step."""

import pytest

from engine.decode.token_graph import PENDING, TokenGraph
from engine.step.static_step import StaticStepper
from tests.engine.test_pipeline_session import (
    GREEDY,
    MODEL,
    PENALISED,
    SEEDED,
    assert_same_steps,
    both,
    choices_in_the_middle,
    pair,
)

SETTINGS = [GREEDY, SEEDED, PENALISED]
IDS = ["greedy", "seeded", "penalised"]


def static_pair(settings, **options):
    today, piped = pair(settings, **options)
    for session in (today, piped):  # the static step both ways, so the logits are the same
        session.stepper = StaticStepper(MODEL, capacity=32, graphs=False, compile=False)
    piped._graph = TokenGraph(piped.stepper, piped._generator, capture=False)
    return today, piped


@pytest.mark.parametrize("settings", SETTINGS, ids=IDS)
def test_the_graph_body_gives_todays_records_across_a_grown_cache(settings):
    today, piped = static_pair(settings.with_(max_new_tokens=40), eos_token_ids=[])
    both(today, piped, lambda s: list(s.stream()))
    assert_same_steps(piped.history, today.history)
    assert piped.stepper.cache.capacity == 64  # grown past 32 on the way
    graph = piped._graph
    assert graph.broken is None and graph.launches >= 30  # the prompt and growth went eager
    assert PENDING not in piped.stepper.cache.ids and PENDING not in graph.mirror
    assert piped.stepper.cache.ids == piped.ids[:-1] or piped.stepper.cache.ids == piped.ids


@pytest.mark.parametrize("settings", SETTINGS, ids=IDS)
def test_choices_between_tokens_land_exactly_through_the_graph_body(settings):
    today, piped = static_pair(settings)
    choices_in_the_middle(today, piped, settings)
    assert piped._graph.launches > 10
