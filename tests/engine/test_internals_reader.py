"""A step of the Inside view at the pace of a click (issue 54), on tiny models of every family:
the reader's step (the path's keys and values cached, one one-token pass per step) against the
full pass it replaces (``inspect_step``, itself tested against transformers' own hidden states
and attention in test_internals.py), clicked out of order and read in small chunks; a click on
a token whose positions were read costs one position; the machine's load sets the threads;
integrated gradients report their progress, stop within one block when asked, and leave the
model as they found it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_internals import ALL, Bundle, model_and_path

from engine.internals import reader as reader_module
from engine.internals.attribution import OLD_PLAN, Stopped, attribute_inputs
from engine.internals.inspect import inspect_step
from engine.internals.pace import LoadWatch
from engine.internals.reader import PathReader, reader_for
from engine.internals.trace import TokenPath

DECODERS = [f for f in ALL if not f.startswith("t5")]


def same_step(fast, full) -> None:  # noqa: ANN001
    """Every figure of two StepInside records, to float rounding."""
    assert (fast.step, fast.position, fast.token) == (full.step, full.position, full.token)
    a, b = fast.lens, full.lens
    assert a.candidates == b.candidates and a.chosen == b.chosen
    assert a.decision_layer == b.decision_layer
    assert [[t for t, _, _ in row] for row in a.layer_top] == [
        [t for t, _, _ in row] for row in b.layer_top
    ]
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)
    np.testing.assert_allclose(a.kl_bits, b.kl_bits, atol=1e-4)
    np.testing.assert_allclose(fast.attention.heads, full.attention.heads, atol=1e-5)
    np.testing.assert_allclose(fast.attention.rollout, full.attention.rollout, atol=1e-5)
    assert fast.attention.sources == full.attention.sources
    da, db = fast.attribution, full.attribution
    assert (da.token, da.rival) == (db.token, db.rival)
    np.testing.assert_allclose(da.blocks, db.blocks, atol=1e-4)
    assert da.total == pytest.approx(db.total, abs=1e-4)
    assert da.parts_sum == pytest.approx(da.total, abs=1e-3)


@pytest.mark.parametrize("family", DECODERS)
def test_the_readers_steps_equal_the_full_pass(family: str, monkeypatch) -> None:
    """Out of order (the last token first, then earlier and later ones), read 4 positions a
    pass: each step equals the full pass over the path up to its token."""
    monkeypatch.setattr(reader_module, "CHUNK", 4)
    model, path = model_and_path(family)
    bundle, before = Bundle(model), model.config._attn_implementation
    reader = PathReader.open(bundle, path)
    assert reader is not None
    for step in (6, 0, 11, 3, 9):
        up_to = TokenPath(path.context, path.tokens[: step + 1])
        same_step(reader.inspect(bundle, up_to, step), inspect_step(bundle, up_to, step))
    assert reader.read == len(path.ids) - 2  # the last token's position is read by its own pass
    assert model.config._attn_implementation == before
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def positions_read(model: torch.nn.Module) -> list[int]:
    """How many positions each forward pass of ``model`` reads (a hook on its embedding)."""
    seen: list[int] = []
    embed = model.get_input_embeddings()
    embed.register_forward_hook(lambda _m, args, _o: seen.append(int(args[0].shape[-1])))
    return seen


def test_a_step_whose_positions_were_read_costs_one_position() -> None:
    """Issue 54: each click ran the whole path through the model (0.8 s for token 512 of a
    512-token run of SmolLM2 on 2 cores). With the reader, the first click reads the positions
    up to its token; any token before it is then one one-token pass."""
    model, path = model_and_path("llama")
    bundle = Bundle(model)
    reader = PathReader.open(bundle, path)
    seen = positions_read(model)
    reader.inspect(bundle, path, 11)
    assert sum(seen[:-1]) == len(path.ids) - 2 and seen[-1] == 1  # read once, then the step
    seen.clear()
    for step in (0, 5, 10, 11):
        reader.inspect(bundle, path, step)
    assert seen == [1, 1, 1, 1]


def test_a_continued_run_keeps_what_was_read_and_a_changed_one_starts_again() -> None:
    model, path = model_and_path("qwen2")
    bundle = Bundle(model)
    short = TokenPath(path.context, path.tokens[:6])
    reader = reader_for(None, bundle, short)
    reader.inspect(bundle, short, 5)
    seen = positions_read(model)
    assert reader_for(reader, bundle, path) is reader  # continued: the same reader goes on
    fast = reader.inspect(bundle, path, 11)
    assert seen == [len(path.ids) - len(short.ids), 1]  # only the new positions, then the step
    same_step(fast, inspect_step(bundle, path, 11))
    other = TokenPath(path.context, (7, *path.tokens[1:]))
    assert reader_for(reader, bundle, other) is not reader  # another path: a new reader
    assert reader_for(reader, Bundle(model_and_path("qwen2", seed=1)[0]), path) is not reader


def test_an_encoder_decoder_reads_its_steps_by_the_full_pass() -> None:
    model, path = model_and_path("t5")
    assert PathReader.open(Bundle(model), path) is None


def test_the_threads_follow_the_machines_load() -> None:
    """Two threads on a busy 2-core machine collapse (engine.runtime.threads): a click's job
    runs on what the others leave free."""
    now, busy, ours = [0.0], [0.0], [0.0]
    watch = LoadWatch(load=lambda: (busy[0], ours[0]), clock=lambda: now[0], cores=2)
    assert watch.threads(2) == 2  # nothing read yet
    watch.read()
    now[0], busy[0], ours[0] = 1.0, 1.8, 0.1  # others used 1.7 cores over the second
    watch.read()
    assert watch.others == pytest.approx(1.7) and watch.threads(2) == 1
    with watch.fitting():
        assert torch.get_num_threads() == 1
    now[0], busy[0], ours[0] = 2.0, 2.0, 0.2  # quiet again: 0.1 cores
    watch.read()
    assert watch.threads(2) == 2
    now[0] = 30.0  # an old reading says nothing
    assert watch.threads(2) == 2


def test_integrated_gradients_say_how_far_they_got_and_stop_within_one_block() -> None:
    model, path = model_and_path("llama")
    fractions: list[float] = []
    lines: list[str] = []
    ig = attribute_inputs(Bundle(model), path, 6, progress=fractions.append, say=lines.append)
    assert fractions == sorted(fractions) and 0 < fractions[-1] <= 1.0
    assert lines and f"{ig.n_steps} of at most 256 steps" in lines[-1]
    # Stop while the gradient flows back through the first pass: no block runs after it
    blocks = list(model.model.layers)
    ran: list[str] = []
    for block in blocks:
        block.register_forward_pre_hook(lambda *_: ran.append("forward"))
    asked = [0]
    # asked before each block of the two end points' forwards, before the first gradient pass
    # and each of its blocks, then on the way back: the second block back says stop
    stop_at = 2 * len(blocks) + 1 + len(blocks) + 2

    def cancelled() -> bool:
        asked[0] += 1
        return asked[0] >= stop_at

    before = len(ran)
    with pytest.raises(Stopped):
        attribute_inputs(Bundle(model), path, 6, cancelled=cancelled)
    assert asked[0] == stop_at  # it stopped at the first yes
    assert len(ran) - before == 3 * len(blocks)  # no block ran forward after it
    assert all(len(b._forward_pre_hooks) == 1 and not b._forward_hooks for b in blocks)  # ours
    assert all(p.requires_grad for p in model.parameters())


def test_the_batched_plan_integrates_as_the_old_one() -> None:
    """The rounds of segments batched together (this plan) and one Captum call per segment
    (before issue 54) integrate the same path: their scores agree within the error each one
    reports."""
    model, path = model_and_path("gpt2")
    new = attribute_inputs(Bundle(model), path, 6)
    old = attribute_inputs(Bundle(model), path, 6, plan=OLD_PLAN)
    assert new.value == pytest.approx(old.value, abs=1e-5)
    assert new.baseline_value == pytest.approx(old.baseline_value, abs=1e-5)
    change = abs(new.value - new.baseline_value)
    assert float(np.abs(new.scores - old.scores).sum()) < 0.05 * change
    assert new.relative_delta < 0.05 and old.relative_delta < 0.05


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_a_quantised_models_steps_equal_the_full_pass(kind: str) -> None:
    """The lab's quantised linears (engine.quant) read through the reader's cache as well. They
    compute in bfloat16, where a one-token pass rounds otherwise than a pass over the whole
    path: the figures agree to that rounding (two low-ranked candidates at a near-tie may
    swap, so the chosen token's row is compared)."""
    from test_quant import quant_sized

    from engine.quant.apply import quantize_model

    model = quant_sized("qwen2", seed=2)
    quantize_model(model, kind)
    context = (2, 17, 99, 250, 31)
    with torch.no_grad():
        out = model.generate(torch.tensor([context]), max_new_tokens=10, min_new_tokens=10,
                             do_sample=False)  # fmt: skip
    path = TokenPath(context, tuple(out[0, len(context) :].tolist()))
    bundle = Bundle(model)
    reader = PathReader.open(bundle, path)
    for step in (9, 2):
        fast, full = reader.inspect(bundle, path, step), inspect_step(bundle, path, step)
        a, b = fast.lens, full.lens
        assert a.candidates[a.chosen] == b.candidates[b.chosen]
        assert a.decision_layer == b.decision_layer
        np.testing.assert_allclose(a.logprobs[:, a.chosen], b.logprobs[:, b.chosen], atol=5e-2)
        np.testing.assert_allclose(fast.attention.rollout, full.attention.rollout, atol=2e-3)
        assert fast.attribution.total == pytest.approx(full.attribution.total, abs=5e-2)


def test_a_reader_keeps_no_model_alive() -> None:
    """The window keeps its readers after a model is closed: they hold none of its weights."""
    import gc
    import weakref

    model, path = model_and_path("llama")
    reader = PathReader.open(Bundle(model), path)
    reader.inspect(Bundle(model), path, 4)
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None and reader.read > 0
