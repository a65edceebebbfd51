"""Inside the step on the bundled SmolLM2 (issue 33): the lens against transformers' own hidden
states, the DLA's sum, the strip against the per-step lens on a sampled run (with the bf16
screen forced on, as on CPUs where it pays), and integrated gradients on the lesson's prompts
within 5% of Captum's completeness check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.classroom.lessons import load_lesson
from engine.internals.attribution import attribute_inputs
from engine.internals.inspect import decision_strip, inspect_step, path_for
from engine.models.catalog import RESOURCES, load_bundled

pytestmark = pytest.mark.slow
LESSON = RESOURCES / "lessons" / "13-where-does-the-model-decide.yaml"


@pytest.fixture(scope="module")
def smollm2():  # noqa: ANN201
    return load_bundled("smollm2-135m", device="cpu")


def run(bundle, prompt: str, n: int, sample: bool, seed: int = 0):  # noqa: ANN001, ANN201
    ids = bundle.encode_prompt(prompt, use_chat_template=False)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = bundle.model.generate(torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n,
                                    do_sample=sample, top_k=0, top_p=1.0)  # fmt: skip
    return path_for(bundle, ids, out[0, len(ids) :].tolist())


def test_the_lens_and_dla_on_smollm2_are_the_models_own(smollm2) -> None:
    path = run(smollm2, "The capital of France is", 6, sample=False)
    m = smollm2.model
    with torch.no_grad():
        out = m(torch.tensor([path.ids]), output_hidden_states=True)
    for step in range(6):
        inside = inspect_step(smollm2, path, step, top_n=20)
        q, lens = inside.position, inside.lens
        order = [t for t, _ in lens.candidates]
        final = torch.log_softmax(out.logits[0, q], -1)[order]
        np.testing.assert_allclose(lens.logprobs[-1], final.numpy(), atol=1e-4)
        with torch.no_grad():
            for layer in range(lens.layers):
                h = out.hidden_states[layer][0, q]
                ref = torch.log_softmax(m.lm_head(m.model.norm(h)), -1)[order]
                np.testing.assert_allclose(lens.logprobs[layer], ref.numpy(), atol=1e-4)
        dla = inside.attribution
        logits = out.logits[0, q]
        diff = float(logits[dla.token[0]] - logits[dla.rival[0]])
        assert dla.parts_sum == pytest.approx(diff, abs=1e-3)
        assert inside.attention.rollout.sum() == pytest.approx(1.0, abs=1e-5)
    assert path.tokens[0] == smollm2.tokenizer.encode(" Paris")[0]


@pytest.mark.parametrize("screen", [False, True])
def test_the_strip_equals_the_per_step_lens_on_a_sampled_story(smollm2, screen):
    path = run(smollm2, "Once upon a time, a dragon", 40, sample=True, seed=3)
    strip = decision_strip(smollm2, path, screen=screen)
    per_step = tuple(inspect_step(smollm2, path, k, attention=False).lens.decision_layer
                     for k in range(40))  # fmt: skip
    assert strip.decision == per_step
    assert None in per_step and any(d is not None and d < 30 for d in per_step)


def test_integrated_gradients_converge_on_the_lessons_prompts(smollm2) -> None:
    """The lesson's stages that open a step: its first token, attributed with the default
    budget, within 5% of f(input) - f(baseline)."""
    lesson = load_lesson(LESSON)
    prompts = {s.prompt for s in lesson.stages if s.prompt}
    assert len(prompts) >= 3
    for prompt in prompts:
        path = run(smollm2, prompt, 1, sample=False)
        ig = attribute_inputs(smollm2, path, 0)
        assert ig.relative_delta < 0.05, (prompt, ig.delta, ig.value, ig.baseline_value)
