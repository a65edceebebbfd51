"""Beam search equals transformers.generate(num_beams=N, do_sample=False)."""

import pytest
import torch

from engine.decode.beam import BeamSession, beam_search
from engine.records import FINISHED, PRUNED, RUNNING, BeamEvent, Rewind, Step
from engine.sampling.settings import SamplerSettings
from tiny_models import FACTORIES

PROMPT = [5, 17, 33, 90, 41, 7]


def hf_beam(model, n, max_new, eos, **kw):
    out = model.generate(
        torch.tensor([PROMPT]),
        num_beams=n,
        do_sample=False,
        max_new_tokens=max_new,
        eos_token_id=eos,
        pad_token_id=0,
        **kw,
    )[0].tolist()
    return out[1:] if model.config.is_encoder_decoder else out[len(PROMPT) :]


def eos_candidates(model):
    """Ids that the beams really produce mid-run, so hypotheses finish early."""
    free = hf_beam(model, 3, 12, eos=None)
    return [free[4], free[7]]


@pytest.mark.parametrize("name", list(FACTORIES))
@pytest.mark.parametrize("n", [2, 3, 4])
def test_best_beam_equals_transformers(name, n):
    model = FACTORIES[name]()
    for eos in (None, eos_candidates(model)):
        ref = hf_beam(model, n, 12, eos)
        ours = beam_search(model, PROMPT, num_beams=n, max_new_tokens=12, eos_token_ids=eos or [])
        assert ours.token_ids == ref, (name, n, eos)


@pytest.mark.parametrize("name", ["llama", "t5"])
@pytest.mark.parametrize(
    "kw",
    [
        {"length_penalty": 0.0},
        {"length_penalty": 2.0},
        {"early_stopping": True},
        {"early_stopping": "never"},
        {"no_repeat_ngram_size": 2},
    ],
)
def test_options_equal_transformers(name, kw):
    model = FACTORIES[name]()
    eos = eos_candidates(model)
    ref = hf_beam(model, 3, 14, eos, **kw)
    ours = beam_search(model, PROMPT, num_beams=3, max_new_tokens=14, eos_token_ids=eos, **kw)
    assert ours.token_ids == ref


def test_hypothesis_scores_and_tree_records():
    model = FACTORIES["llama"]()
    eos = eos_candidates(model)
    search = BeamSession(
        model, PROMPT, SamplerSettings(max_new_tokens=12), num_beams=3, eos_token_ids=eos
    )
    events = [r for r in search.stream() if isinstance(r, BeamEvent)]
    result = search.result
    scores = [h.score for h in result.hypotheses]
    assert scores == sorted(scores, reverse=True) and len(result.hypotheses) == 3
    nodes = {node.node_id: node for e in events for node in e.nodes}
    assert all(len(e.running) == 3 for e in events[:-1]) and events[-1].running == ()
    assert all(len(e.nodes) == max(2, 1 + len(eos)) * 3 for e in events)
    # every node's parent is the root or a node that was running at the previous step
    running_before = {0}
    for e in events:
        assert {n.parent for n in e.nodes} <= running_before
        assert {n.status for n in e.nodes} <= {RUNNING, FINISHED, PRUNED}
        assert all(nodes[i].status == RUNNING for i in e.running)
        running_before = set(e.running)
    assert events[-1].finished == tuple(h.node_id for h in result.hypotheses)
    # the best hypothesis is the path of finished node ids back to the root
    best = result.best
    path, node = [], nodes[best.node_id]
    while True:
        path.append(node.token_id)
        if node.parent == 0:
            break
        node = nodes[node.parent]
    assert list(reversed(path)) == list(best.token_ids)
    assert nodes[best.node_id].status == FINISHED
    logp = sum(nodes[i].logprob for i in _ancestors(nodes, best.node_id))
    assert best.score == pytest.approx(logp / len(best.token_ids), rel=1e-4)


def _ancestors(nodes, node_id):
    while node_id != 0:
        yield node_id
        node_id = nodes[node_id].parent


def test_cache_is_reordered_not_recomputed():
    model = FACTORIES["gpt2"]()
    result = beam_search(model, PROMPT, num_beams=4, max_new_tokens=10, eos_token_ids=[])
    # one prefill + one pass per further step, each pass a single token per beam
    assert result.forward_passes == result.steps


def test_one_beam_is_greedy():
    model = FACTORIES["llama"]()
    ref = model.generate(
        torch.tensor([PROMPT]), do_sample=False, max_new_tokens=10, eos_token_id=None
    )
    assert (
        beam_search(model, PROMPT, num_beams=1, max_new_tokens=10, eos_token_ids=[]).token_ids
        == ref[0, 6:].tolist()
    )


@pytest.mark.parametrize("name", ["llama", "t5"])
def test_best_beam_streams_as_steps_and_ends_on_the_best_hypothesis(name):
    """The output shows the best running beam at every step (replaced with a Rewind when
    another beam takes the lead), and at the end exactly the best hypothesis."""
    model = FACTORIES[name]()
    eos = eos_candidates(model)
    session = BeamSession(
        model, PROMPT, SamplerSettings(max_new_tokens=12), num_beams=3, eos_token_ids=eos,
        top_n=5,
    )  # fmt: skip
    shown: list[int] = []
    events = 0
    best_running = None

    def path_to(node_id):
        return [session.nodes[i].token_id for i in _ancestors(session.nodes, node_id)][::-1]

    for record in session.stream():
        if isinstance(record, Rewind):
            del shown[record.keep :]
        elif isinstance(record, Step):
            assert record.index == len(shown) and record.source == "beam"
            assert len(record.candidates) == 5 and 0 < record.raw_prob <= 1
            assert record.candidates[0].raw_prob >= record.candidates[-1].raw_prob
            shown.append(record.token_id)
        elif isinstance(record, BeamEvent):
            if best_running is not None:  # the last step's records showed its best beam
                assert shown == path_to(best_running)
            events += 1
            best_running = record.running[0] if record.running else None
    assert shown == list(session.result.best.token_ids) == session.generated_ids
    assert shown == hf_beam(model, 3, 12, eos)
    assert events == session.result.steps
    assert session.summary().tokens == events and session.stop_reason in ("eos", "max_new_tokens")


@pytest.mark.parametrize("kw", [{"early_stopping": True}, {"length_penalty": 0.0}])
def test_a_search_that_stops_early_carries_no_beam_on(kw):
    """``BeamEvent.running`` lists the beams that carry on: N until the last step, none then,
    also when the search ends before the limit."""
    model = FACTORIES["llama"]()
    session = BeamSession(
        model, PROMPT, SamplerSettings(max_new_tokens=30), num_beams=3,
        eos_token_ids=eos_candidates(model), **kw,
    )  # fmt: skip
    events = [r for r in session.stream() if isinstance(r, BeamEvent)]
    assert len(events) < 30  # ended by the rules, not the limit
    assert all(len(e.running) == 3 for e in events[:-1]) and events[-1].running == ()
