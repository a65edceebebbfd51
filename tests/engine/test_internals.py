"""Inside the step (issue 33) against the model itself, family by family (tiny random models
built from configs): the lens against transformers' own ``output_hidden_states``, attention
against its eager ``output_attentions``, rollout against a plain matrix product, the direct
logit attribution against the logit difference it splits, the decision strip against the
per-step lens, and Captum's completeness check on integrated gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.errors import InternalsUnavailable
from engine.internals import lens as lens_module
from engine.internals.anatomy import anatomy
from engine.internals.attribution import attribute_inputs
from engine.internals.inspect import decision_strip, inspect_step
from engine.internals.lens import TopOne
from engine.internals.trace import TokenPath
from family_models import FAMILIES, tiny
from tiny_models import tiny_t5

ALL = [*FAMILIES, "t5", "t5-bundled"]


class Bundle:
    """What the internals read of a ModelBundle."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.tokenizer = None
        self.device = torch.device("cpu")
        self.is_encoder_decoder = bool(model.config.is_encoder_decoder)
        self.context_length = None
        self.name = "tiny"


def model_and_path(family: str, seed: int = 0) -> tuple[torch.nn.Module, TokenPath]:
    """A tiny model and a greedy path of 12 tokens after a 5-token context (the bundled tiny T5:
    its own example input)."""
    if family == "t5-bundled":
        return trained_t5()
    model = tiny_t5(seed) if family.startswith("t5") else tiny(family, seed)
    context = (2, 17, 99, 250, 31)
    with torch.no_grad():
        if family.startswith("t5"):
            out = model.generate(torch.tensor([(*context, 1)]), max_new_tokens=12,
                                 min_new_tokens=12, do_sample=False)  # fmt: skip
            return model, TokenPath((*context, 1), tuple(out[0, 1:].tolist()), start=0)
        out = model.generate(torch.tensor([context]), max_new_tokens=12, min_new_tokens=12,
                             do_sample=False)  # fmt: skip
    return model, TokenPath(context, tuple(out[0, len(context) :].tolist()))


def reference(model: torch.nn.Module, path: TokenPath, eager: bool = False):  # noqa: ANN201
    """transformers' own forward with every hidden state (and eager attention weights)."""
    before = model.config._attn_implementation
    if eager:
        model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            if path.encoder_decoder:
                out = model(input_ids=torch.tensor([path.context]),
                            decoder_input_ids=torch.tensor([path.ids]),
                            output_hidden_states=True, output_attentions=eager)  # fmt: skip
                return out, out.decoder_hidden_states, out.decoder_attentions
            out = model(torch.tensor([path.ids]), output_hidden_states=True,
                        output_attentions=eager)  # fmt: skip
            return out, out.hidden_states, out.attentions
    finally:
        model.set_attn_implementation(before)


def head_by_hand(model: torch.nn.Module, family: str, h: torch.Tensor) -> torch.Tensor:
    """Each family's output head written out: final norm, scale, unembedding, soft-cap."""
    if family == "gpt2":
        return model.lm_head(model.transformer.ln_f(h))
    if family.startswith("t5"):  # the bundled T5 does not scale (scale_decoder_outputs false)
        scale = model.config.d_model**-0.5 if model.config.scale_decoder_outputs else 1.0
        return model.lm_head(model.decoder.final_layer_norm(h) * scale)
    logits = model.lm_head(model.model.norm(h))
    cap = getattr(model.config, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


@pytest.mark.parametrize("family", ALL)
def test_lens_equals_the_models_own_head_on_its_hidden_states(family: str) -> None:
    model, path = model_and_path(family)
    out, hidden, _ = reference(model, path)
    for step in (0, 5, 11):
        inside = inspect_step(Bundle(model), path, step, top_n=384)
        q = inside.position
        final = torch.log_softmax(out.logits[0, q].float(), -1)
        lens = inside.lens
        order = [t for t, _ in lens.candidates]
        # the last layer is the model's output
        np.testing.assert_allclose(lens.logprobs[-1], final[order].numpy(), atol=1e-4)
        # every other layer: the head on transformers' hidden_states[l] (the last of which
        # transformers replaces by the normed output, so it is not compared)
        for layer in range(lens.layers):
            with torch.no_grad():
                ref = torch.log_softmax(head_by_hand(model, family, hidden[layer][0, q]), -1)
            np.testing.assert_allclose(lens.logprobs[layer], ref[order].numpy(), atol=1e-4)
        assert lens.kl_bits[-1] == pytest.approx(0.0, abs=1e-6)
        assert (lens.kl_bits >= 0).all()


@pytest.mark.parametrize("family", ALL)
def test_attention_equals_eager_output_attentions_and_rollout_a_matrix_product(
    family: str,
) -> None:
    model, path = model_and_path(family)
    _, _, attentions = reference(model, path, eager=True)
    inside = inspect_step(Bundle(model), path, 7)
    q, att = inside.position, inside.attention
    assert att is not None and len(att.sources) == q + 1
    for layer, weights in enumerate(attentions):
        np.testing.assert_allclose(att.heads[layer], weights[0, :, q, : q + 1].numpy(), atol=1e-5)
    product = np.eye(len(path.ids))
    for weights in attentions:  # A_L ... A_1, each with the identity, rows renormalised
        a = weights[0].mean(0).double().numpy() + np.eye(len(path.ids))
        product = (a / a.sum(-1, keepdims=True)) @ product
    assert att.rollout is not None
    np.testing.assert_allclose(att.rollout, product[q, : q + 1], atol=1e-5)
    assert att.rollout.sum() == pytest.approx(1.0, abs=1e-5)
    if family.startswith("t5"):
        cross = reference(model, path, eager=True)[0].cross_attentions
        for layer, weights in enumerate(cross):
            np.testing.assert_allclose(att.cross[layer], weights[0, :, q].numpy(), atol=1e-5)


@pytest.mark.parametrize("family", ALL)
def test_direct_logit_attribution_sums_to_the_logit_difference(family: str) -> None:
    model, path = model_and_path(family)
    out, _, _ = reference(model, path)
    an = anatomy(model)
    for step in range(0, 12, 3):
        dla = inspect_step(Bundle(model), path, step).attribution
        q = path.query(step)
        logits = out.logits[0, q].double()
        if an.softcap:  # the split is of the scores before Gemma's soft-cap
            logits = an.softcap * torch.atanh(logits / an.softcap)
        assert dla is not None and dla.blocks.shape == (an.layers, len(an.sublayers))
        diff = float(logits[dla.token[0]] - logits[dla.rival[0]])
        assert dla.total == pytest.approx(diff, abs=1e-3)
        assert dla.parts_sum == pytest.approx(diff, abs=1e-3)
        assert dla.token[0] != dla.rival[0]


@pytest.mark.parametrize("family", ALL)
def test_decision_strip_equals_the_per_step_lens(family: str) -> None:
    model, path = model_and_path(family)
    bundle = Bundle(model)
    strip = decision_strip(bundle, path)
    per_step = tuple(inspect_step(bundle, path, k).lens.decision_layer for k in range(12))
    first = 0 if path.offset else 1
    assert strip.first == first and strip.decision == per_step[first:]
    assert any(d is not None for d in strip.decision)  # greedy: every token is the output's top-1


def test_the_strip_is_exact_on_a_sampled_path_with_small_windows(monkeypatch) -> None:
    """A sampled path (tokens that are not the top-1: no decision layer), read in windows of 5
    positions (three passes), equals the per-step lens."""
    from engine.internals import inspect as inspect_module

    model = tiny("qwen3", 3)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        out = model(torch.tensor([[2, 40, 41]])).logits[0, -1]
    tokens = tuple(int(t) for t in torch.multinomial(out.softmax(-1), 14, True, generator=gen))
    path = TokenPath((2, 40, 41), tokens)
    monkeypatch.setattr(inspect_module, "STRIP_WINDOW", 5)
    strip = decision_strip(Bundle(model), path)
    assert strip.decision == tuple(
        inspect_step(Bundle(model), path, k).lens.decision_layer for k in range(14)
    )


def test_the_bf16_screen_answers_as_the_fp32_argmax(monkeypatch) -> None:
    """The screened top-1 test against plain argmax, on rows built to be close calls."""
    monkeypatch.setattr(lens_module, "bf16_pays", lambda *_: True)
    torch.manual_seed(0)
    w = torch.randn(3000, 48)
    top = TopOne(w)
    assert top.screen
    x = torch.randn(400, 48) * 3
    best = (x @ w.T).argmax(-1)
    second = (x @ w.T).topk(2).indices[:, 1]
    # near ties: move each row towards making the runner-up win
    x[:200] += 0.5 * (w[second[:200]] - w[best[:200]])
    logits = x @ w.T
    for c in (logits.argmax(-1), logits.topk(2).indices[:, 1], torch.randint(0, 3000, (400,))):
        assert torch.equal(top(x, c), logits.argmax(-1) == c)


def test_the_model_is_left_as_it_was() -> None:
    model, path = model_and_path("llama")
    before = model.config._attn_implementation
    inspect_step(Bundle(model), path, 4)
    decision_strip(Bundle(model), path)
    attribute_inputs(Bundle(model), path, 4, n_steps=64)
    assert model.config._attn_implementation == before
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert all(p.requires_grad for p in model.parameters())


def test_what_cannot_be_read_inside_says_so() -> None:
    with pytest.raises(InternalsUnavailable, match="local model"):
        anatomy(None)
    model, path = model_and_path("llama")
    no_context = TokenPath((), path.tokens)
    with pytest.raises(InternalsUnavailable, match="no context"):
        inspect_step(Bundle(model), no_context, 0)
    assert inspect_step(Bundle(model), no_context, 1).position == 0
    with pytest.raises(InternalsUnavailable, match="no token 13"):
        inspect_step(Bundle(model), path, 12)


def trained_t5() -> tuple[torch.nn.Module, TokenPath]:
    """The bundled tiny T5 (a trained model: the random tiny T5's logits are ~300 nats apart,
    too steep a path for any step budget) on its example input."""
    from engine.models.catalog import load_bundled

    bundle = load_bundled("tiny-t5", device="cpu")
    enc = bundle.encode_prompt("date: 2024-03-05")
    with torch.no_grad():
        out = bundle.model.generate(torch.tensor([enc]), max_new_tokens=12, do_sample=False)
    return bundle.model, TokenPath(tuple(enc), tuple(out[0, 1:].tolist()), start=0)


@pytest.mark.parametrize("family", ["llama", "gpt2", "t5"])
def test_integrated_gradients_pass_captums_completeness_check(family: str) -> None:
    model, path = trained_t5() if family.startswith("t5") else model_and_path(family)
    ig = attribute_inputs(Bundle(model), path, 6)
    q = path.query(6)
    assert len(ig.sources) == q + 1 + (len(path.context) if family.startswith("t5") else 0)
    # Captum's delta is the scores' sum against f(input) - f(baseline), which the result holds
    assert float(ig.scores.sum()) - (ig.value - ig.baseline_value) == pytest.approx(
        ig.delta, abs=1e-3
    )
    assert ig.relative_delta < 0.05, ig
    with torch.no_grad():
        if family.startswith("t5"):
            out = model(input_ids=torch.tensor([path.context]),
                        decoder_input_ids=torch.tensor([path.ids]))  # fmt: skip
        else:
            out = model(torch.tensor([path.ids]))
    logp = torch.log_softmax(out.logits[0, q], -1)[path.tokens[6]]
    assert ig.value == pytest.approx(float(logp), abs=1e-4)


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_the_strip_of_a_quantised_model_equals_its_per_step_lens(kind: str) -> None:
    """A quantised head (int8 per row, on oneDNN where the CPU has it: float32 logits) is
    asked through the head itself, as the lens reads it; a bf16 copy of its weights could part
    from the model's own argmax at a near-tie, leaving a greedy token with no decision layer."""
    from test_quant import quant_sized

    from engine.quant.apply import quantize_model

    model = quant_sized("qwen2", seed=2)
    quantize_model(model, kind)
    context = (2, 17, 99, 250, 31)
    with torch.no_grad():
        out = model.generate(torch.tensor([context]), max_new_tokens=12, min_new_tokens=12,
                             do_sample=False)  # fmt: skip
    path = TokenPath(context, tuple(out[0, len(context) :].tolist()))
    bundle = Bundle(model)
    strip = decision_strip(bundle, path)
    per_step = tuple(inspect_step(bundle, path, k).lens.decision_layer for k in range(12))
    assert strip.decision == per_step[strip.first :]
    assert all(d is not None for d in strip.decision)  # greedy: each is the output's top-1


def test_a_quantised_heads_top_one_is_asked_of_the_head_itself() -> None:
    """Two tokens whose logits differ by 5e-4 at ~80: the head's own product (float32 logits
    on the lab's kernel or oneDNN) tells them apart where a bfloat16 product of its
    dequantised weights ties them (and argmax takes the lower id): the strip must answer as
    the head does."""
    from types import SimpleNamespace

    from engine.quant.formats import COMPUTE
    from engine.quant.linear import QuantLinear

    gen = torch.Generator().manual_seed(0)
    q = torch.randint(-60, 60, (32, 64), generator=gen, dtype=torch.int8)
    q[3] = 127
    q[5] = 127
    q[5, 0] = 126  # one step less on the column x barely uses: token 5 a hair above token 3
    q[3, 0] = 125
    head = QuantLinear(q, torch.full((32,), 0.01).to(COMPUTE), None, 64)
    floats = head.as_head()  # float32 logits where a kernel gives them; else bf16 alike
    an = SimpleNamespace(
        head=head, softcap=None, finish=lambda t: t, final_norm=lambda t: t, out_scale=1.0
    )
    x = torch.ones(1, 64)
    x[0, 0] = 0.05
    x = x.to(COMPUTE)
    want = head(x).argmax(-1)
    top = lens_module.TopOne(head.weight)  # what the strip asked before: bf16 ties the two
    if floats:
        assert int(want) == 5 and not bool(top(x, want).all())
    assert lens_module.asks_the_head(an)
    # a model of no layers whose output row is x: the chosen token decides at the output
    assert lens_module.strip_scan(an, x[None], want) == [0]
