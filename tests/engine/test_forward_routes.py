"""The fast paths' model code is one set of plain Python functions (engine.step.forward) run
two ways: eagerly, and on the CPU compiled by TorchScript from the same functions' source
(engine.step.scripted). The two agree token for token in every family and for T5; without
TorchScript the steppers run the eager functions and still equal model.forward."""

import pytest
import torch

from engine.step import forward, scripted
from engine.step.fast_t5 import T5FastStepper
from engine.step.fastpath import FastStepper
from engine.step.stepper import ModelStepper
from family_models import FAMILIES, tiny
from tiny_models import tiny_t5

PROMPT = [5, 17, 33, 90, 41, 7]


def _lockstep(a, b, prompt, n):
    """Feed both steppers the same ids (b's greedy choice), comparing logits at every step and
    on a multi-token call after a rewind."""
    seq = list(prompt)
    for _ in range(n):
        got, want = a.logits(seq), b.logits(seq)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        seq.append(int(want.argmax(-1)[-1]))
    rewound = seq[: len(seq) - 4] + [3, 9]
    torch.testing.assert_close(a.logits(rewound, keep=3), b.logits(rewound, keep=3))
    return seq


@pytest.mark.parametrize("family", FAMILIES)
def test_torchscript_and_eager_steps_agree(family):
    model = tiny(family)
    ts, eager = FastStepper(model), FastStepper(model)
    assert isinstance(ts._forward, torch.jit.ScriptFunction)  # the CPU route: TorchScript
    eager._forward = forward.forward
    _lockstep(ts, eager, PROMPT, 20)


def test_t5_torchscript_and_eager_steps_agree():
    model = tiny_t5()
    ts, eager = T5FastStepper(model, PROMPT), T5FastStepper(model, PROMPT)
    assert isinstance(ts._forward, torch.jit.ScriptFunction)
    eager._forward = forward.t5_forward
    _lockstep(ts, eager, [model.config.decoder_start_token_id], 16)


def test_torchscript_compiles_the_functions_own_text():
    text = scripted.source(scripted.DECODER)
    assert "def decoder_layer(" in text and "QKV_W" not in text  # constants written in
    assert all(f"def {name}(" in text for name in scripted.DECODER)


def test_without_torchscript_the_steppers_run_eagerly(monkeypatch):
    monkeypatch.setattr(scripted, "_units", {"forward": None, "t5_forward": None})
    model = tiny("qwen3")
    fast = FastStepper(model)
    assert fast._forward is forward.forward
    ref = ModelStepper(model, use_cache=False)
    for seq in (PROMPT, PROMPT + [3], PROMPT + [3, 9, 11]):
        torch.testing.assert_close(fast.logits(seq), ref.logits(seq), atol=1e-4, rtol=1e-4)
    t5 = tiny_t5()
    assert T5FastStepper(t5, PROMPT)._forward is forward.t5_forward
