"""Contrastive search equals a plain, uncached rewrite of its rule (transformers 5 keeps it on
the Hub, which these offline tests cannot reach) and streams tree and step records that agree
with its result."""

import pytest
import torch
import torch.nn.functional as F

from engine.decode.contrastive import ContrastiveSession
from engine.records import PRUNED, RUNNING, BeamEvent, Step
from engine.sampling.settings import SamplerSettings
from tiny_models import FACTORIES

PROMPT = [5, 17, 33, 90, 41, 7]


def contrastive_by_hand(model, prompt, alpha, k, n):
    """The rule with a full forward pass per candidate, no cache."""
    ids = list(prompt)
    for _ in range(n):
        out = model(torch.tensor([ids]), output_hidden_states=True)
        context = F.normalize(out.hidden_states[-1][0], dim=-1)  # [S, H]
        probs = out.logits[0, -1].softmax(-1)
        top_p, top_ids = torch.topk(probs, k)
        scores = []
        for p, c in zip(top_p.tolist(), top_ids.tolist(), strict=True):
            h = model(torch.tensor([ids + [c]]), output_hidden_states=True).hidden_states[-1][0, -1]
            degeneration = (context @ F.normalize(h, dim=-1)).max().item()
            scores.append((1 - alpha) * p - alpha * degeneration)
        ids.append(top_ids[scores.index(max(scores))].item())
    return ids[len(prompt) :]


@pytest.mark.parametrize("name", ["llama", "gpt2"])
@pytest.mark.parametrize("alpha, k", [(0.6, 4), (0.3, 6), (0.9, 3)])
@torch.no_grad()
def test_contrastive_equals_the_rule(name, alpha, k):
    model = FACTORIES[name]()
    session = ContrastiveSession(
        model, PROMPT, SamplerSettings(max_new_tokens=10), penalty_alpha=alpha, top_k=k,
        eos_token_ids=[],
    )  # fmt: skip
    records = list(session.stream())
    assert session.generated_ids == contrastive_by_hand(model, PROMPT, alpha, k, 10)
    assert session.forward_passes == 11  # the prompt, then one pass over k candidates a token
    events = [r for r in records if isinstance(r, BeamEvent)]
    steps = [r for r in records if isinstance(r, Step)]
    assert len(events) == len(steps) == 10
    for event, step in zip(events, steps, strict=True):
        chosen = [n for n in event.nodes if n.status == RUNNING]
        assert [n.token_id for n in chosen] == [step.token_id]
        assert len(event.nodes) == k and sum(n.status == PRUNED for n in event.nodes) == k - 1
        assert max(event.nodes, key=lambda n: n.score).token_id == step.token_id
        assert step.stage_notes[-1].text.startswith("chose")


@torch.no_grad()
def test_contrastive_alpha_zero_is_greedy():
    model = FACTORIES["llama"]()
    session = ContrastiveSession(
        model, PROMPT, SamplerSettings(max_new_tokens=8), penalty_alpha=0.0, eos_token_ids=[]
    )
    list(session.stream())
    greedy = model.generate(
        torch.tensor([PROMPT]), do_sample=False, max_new_tokens=8, eos_token_id=None,
        pad_token_id=0,
    )[0, len(PROMPT):].tolist()  # fmt: skip
    assert session.generated_ids == greedy
