"""The first view of a token after a run, at the pace of a click (issue 54): the reader takes
the run's keys and values from the decode session's own cache (engine.internals.handoff)
instead of reading the path again, on tiny models of every family, through the fast path's
cache and through transformers' ``DynamicCache``. The step is one one-token pass; every figure
equals the full pass's (``inspect_step``) to float rounding, and the rollout, which needs the
attention rows of the positions before the token, follows from ``read_rows`` in short passes
that a click can stop between."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from test_internals import Bundle
from test_internals_reader import DECODERS, positions_read, same_step

from engine.decode.session import GenerationSession
from engine.errors import InternalsUnavailable
from engine.internals import reader as reader_module
from engine.internals.handoff import handed_keys
from engine.internals.inspect import inspect_step
from engine.internals.reader import PathReader
from engine.internals.trace import TokenPath
from engine.sampling.settings import SamplerSettings
from engine.step.fastpath import FastStepper
from family_models import tiny

CONTEXT = (2, 17, 99, 250, 31)
GREEDY = SamplerSettings(temperature=0, max_new_tokens=12, min_new_tokens=12)


def session_path(model: torch.nn.Module, fast: bool) -> tuple[GenerationSession, TokenPath]:
    """A greedy run of 12 tokens, as the window's worker leaves it: the session kept."""
    session = GenerationSession(model, CONTEXT, GREEDY, eos_token_ids=[], fast=fast)
    tokens = tuple(s.token_id for s in session.stream())
    return session, TokenPath(CONTEXT, tokens)


def without_rollout(inside, full) -> None:  # noqa: ANN001
    """Every figure of the step but its rollout, which is said to follow."""
    assert inside.attention.rollout is None and inside.attention.rollout_pending
    rolled = replace(inside.attention, rollout=full.attention.rollout, rollout_pending=False)
    same_step(replace(inside, attention=rolled), full)


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "model-forward"])
@pytest.mark.parametrize("family", DECODERS)
def test_the_first_view_after_a_run_is_one_pass_and_equals_the_full_pass(
    family: str, fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reader_module, "ROWS_CHUNK", 4)
    model = tiny(family, 0)
    session, path = session_path(model, fast)
    assert isinstance(session.stepper, FastStepper) == fast or not fast
    bundle = Bundle(model)
    handed = handed_keys(session, model, path.ids)
    if fast:  # the fast path's cache holds every layer's every position
        assert handed is not None and handed[0] == len(path.ids) - 1
    reader = PathReader.open(bundle, path)
    seen = positions_read(model)
    last = len(path.tokens) - 1
    first = reader.inspect(bundle, path, last, session=session, rollout=False)
    full = inspect_step(bundle, path, last)
    if handed is None:  # a window past a sliding layer's length: read as before
        same_step(first, full)
        return
    assert seen[0] == 1  # the clicked position only: nothing read again
    without_rollout(first, full)
    seen.clear()
    reader.read_rows(path.query(last))
    assert seen and max(seen) <= 4 and sum(seen) == path.query(last)  # short passes
    same_step(reader.inspect(bundle, path, last), full)
    for step in (0, 6):  # earlier tokens: their keys were handed, their rows read
        up_to = TokenPath(path.context, path.tokens[: step + 1])
        same_step(reader.inspect(bundle, up_to, step), inspect_step(bundle, up_to, step))


def test_a_rewound_session_hands_only_what_it_still_holds_and_another_model_nothing() -> None:
    model = tiny("llama", 0)
    session, path = session_path(model, fast=True)
    session.rewind(4)  # a branch or an undo at token 5: the cache forgets what followed
    kept = len(session.stepper.cache)
    assert kept < len(path.ids) - 1
    handed = handed_keys(session, model, path.ids)
    assert handed is not None and handed[0] == kept
    assert handed[1][0][0].shape[2] == kept
    assert handed_keys(session, tiny("llama", 1), path.ids) is None  # another model
    other = (*CONTEXT[:2], 7, *path.ids[3:])
    assert handed_keys(session, model, other)[0] == 2  # another path: its common prefix
    assert handed_keys(None, model, path.ids) is None
    bundle = Bundle(model)
    reader = PathReader.open(bundle, path)
    last = len(path.tokens) - 1
    inside = reader.inspect(bundle, path, last, session=session, rollout=False)
    without_rollout(inside, inspect_step(bundle, path, last))  # the rest read after the handed


def test_the_handed_keys_are_a_copy_the_session_can_overwrite() -> None:
    model = tiny("qwen2", 0)
    session, path = session_path(model, fast=True)
    bundle = Bundle(model)
    reader = PathReader.open(bundle, path)
    reader.take(session, len(path.ids))
    with torch.inference_mode():  # a branch writes its own keys over the old ones
        session.stepper.cache.k.zero_()
        session.stepper.cache.v.zero_()
    last = len(path.tokens) - 1
    inside = reader.inspect(bundle, path, last, session=session, rollout=False)
    without_rollout(inside, inspect_step(bundle, path, last))


def test_reading_rows_stops_within_a_pass_and_goes_on_where_it_stopped(monkeypatch) -> None:
    """A click stops the rows' reading before the next block of the model (a pass over 256
    positions took 0.4 s at 512 tokens): the passes done are kept, the one stopped is read
    again, the model is left without hooks."""
    monkeypatch.setattr(reader_module, "ROWS_CHUNK", 3)
    model = tiny("llama", 0)
    session, path = session_path(model, fast=True)
    bundle = Bundle(model)
    reader = PathReader.open(bundle, path)
    last = len(path.tokens) - 1
    reader.inspect(bundle, path, last, session=session, rollout=False)
    asked = iter(range(100))
    blocks = model.config.num_hidden_layers
    stop_at = 1 + blocks + 1 + blocks // 2  # the second pass, halfway through its blocks
    with pytest.raises(InternalsUnavailable, match="Stopped"):
        reader.read_rows(path.query(last), cancelled=lambda: next(asked) >= stop_at)
    assert reader.rowed == 3 and next(asked) == stop_at + 1  # no block ran after the stop
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    reader.read_rows(path.query(last))
    same_step(reader.inspect(bundle, path, last), inspect_step(bundle, path, last))


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_a_quantised_runs_keys_are_handed_too(kind: str) -> None:
    """The lab's quantised step (its fused CPU decoder where built) writes the cache the
    reader takes; the figures agree with the full pass to bfloat16 rounding."""
    from test_quant import quant_sized

    from engine.quant.apply import quantize_model

    model = quant_sized("qwen2", seed=2)
    quantize_model(model, kind)
    session, path = session_path(model, fast=True)
    bundle = Bundle(model)
    reader = PathReader.open(bundle, path)
    seen = positions_read(model)
    last = len(path.tokens) - 1
    inside = reader.inspect(bundle, path, last, session=session, rollout=False)
    assert seen == [1]
    full = inspect_step(bundle, path, last)
    a, b = inside.lens, full.lens
    assert a.candidates[a.chosen] == b.candidates[b.chosen]
    np.testing.assert_allclose(a.logprobs[:, a.chosen], b.logprobs[:, b.chosen], atol=5e-2)
    assert inside.attribution.total == pytest.approx(full.attribution.total, abs=5e-2)
