"""Beam searches beside the plain one: sampled beam search equals
transformers.generate(do_sample=True, num_beams=N) draw for draw; diverse (group) beam search
equals a plain rewrite of its rule (transformers 5 keeps it on the Hub, which these offline
tests cannot reach); both stream tree and step records that agree with their result."""

import pytest
import torch

from engine.decode.search import SampledBeamSession
from engine.records import RUNNING, BeamEvent
from engine.sampling.settings import SamplerSettings
from tiny_models import FACTORIES

PROMPT = [5, 17, 33, 90, 41, 7]


@pytest.mark.parametrize("name", ["llama", "gpt2"])
@pytest.mark.parametrize(
    "kw", [{"temperature": 1.0}, {"temperature": 0.7, "top_k": 12}, {"top_p": 0.9}]
)
def test_sampled_beam_equals_transformers(name, kw):
    model = FACTORIES[name]()
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
        ref = model.generate(
            torch.tensor([PROMPT]), num_beams=3, do_sample=True, max_new_tokens=10,
            eos_token_id=None, pad_token_id=0, top_k=kw.get("top_k", 0), **{
                k: v for k, v in kw.items() if k != "top_k"},
        )[0, len(PROMPT):].tolist()  # fmt: skip
        settings = SamplerSettings(seed=seed, max_new_tokens=10, **kw)
        session = SampledBeamSession(model, PROMPT, settings, num_beams=3, eos_token_ids=[])
        assert session.run().token_ids == ref, (seed, kw)


def test_sampled_beam_differs_by_seed_and_streams_its_tree():
    model = FACTORIES["llama"]()
    runs = []
    for seed in (0, 1, 2, 3):
        s = SampledBeamSession(
            model, PROMPT, SamplerSettings(seed=seed, temperature=1.5, max_new_tokens=8),
            num_beams=2, eos_token_ids=[],
        )  # fmt: skip
        records = list(s.stream())
        assert any(isinstance(r, BeamEvent) for r in records)
        assert [st.token_id for st in s.history] == s.result.token_ids
        runs.append(tuple(s.result.token_ids))
    assert len(set(runs)) > 1


# -- diverse (group) beam search -------------------------------------------------------------


def group_beam_by_hand(model, prompt, n, groups, penalty, max_new, eos):
    """Diverse beam search written plainly: a full forward pass per beam, transformers'
    per-group BeamSearchScorer rules (length penalty 1, early_stopping False)."""
    gs = n // groups
    beams = [[(0.0 if i == 0 else -1e9, list(prompt)) for i in range(gs)] for _ in range(groups)]
    hyps = [[] for _ in range(groups)]  # (score, seq)
    done = [False] * groups
    for step in range(max_new):
        counts = torch.zeros(model.config.vocab_size)
        last_step = step == max_new - 1
        for g in range(groups):
            if done[g]:
                continue
            cands = []
            for score, seq in beams[g]:
                logp = model(torch.tensor([seq])).logits[0, -1].float().log_softmax(-1)
                logp = logp - penalty * counts
                cands += [(score + lp, seq, t) for t, lp in enumerate(logp.tolist())]
            cands.sort(key=lambda c: -c[0])
            cands = cands[: max(2, 1 + len(eos)) * gs]
            nxt = []
            for rank, (score, seq, t) in enumerate(cands):
                if t in eos or last_step:
                    if rank < gs:
                        gen = len(seq) + 1 - len(prompt)
                        hyps[g].append((score / gen, seq + [t]))
                        hyps[g] = sorted(hyps[g], key=lambda h: -h[0])[:gs]
                    continue
                if len(nxt) < gs:
                    nxt.append((score, seq + [t]))
            beams[g] = nxt
            for _, seq in nxt:
                counts[seq[-1]] += 1
            gen = len(nxt[0][1]) - len(prompt) if nxt else 1
            if last_step or (len(hyps[g]) == gs and hyps[g][-1][0] >= nxt[0][0] / gen):
                done[g] = True
        if all(done):
            break
    best = max((h for group in hyps for h in group), key=lambda h: h[0])
    return best[1][len(prompt) :]


@pytest.mark.parametrize("name", ["llama", "gpt2"])
@pytest.mark.parametrize("n, groups, penalty", [(4, 2, 0.5), (6, 3, 1.5), (4, 4, 3.0)])
@torch.no_grad()
def test_group_beam_equals_the_rule(name, n, groups, penalty):
    from engine.decode.search import GroupBeamSession

    model = FACTORIES[name]()
    for eos in ([], [34, 52]):
        session = GroupBeamSession(
            model, PROMPT, SamplerSettings(max_new_tokens=8), num_beams=n,
            num_beam_groups=groups, diversity_penalty=penalty, eos_token_ids=eos,
        )  # fmt: skip
        records = list(session.stream())
        ref = group_beam_by_hand(model, PROMPT, n, groups, penalty, 8, eos)
        assert session.result.token_ids == ref, (eos, session.result.token_ids, ref)
        assert [s.token_id for s in session.history] == session.result.token_ids
        events = [r for r in records if isinstance(r, BeamEvent)]
        assert events and all(len({nd.node_id for nd in e.nodes}) == len(e.nodes) for e in events)


@torch.no_grad()
def test_group_beam_without_penalty_or_with_one_group_is_beam_search():
    from engine.decode.beam import beam_search
    from engine.decode.search import GroupBeamSession

    model = FACTORIES["llama"]()
    for n, groups, penalty, plain in ((4, 1, 2.0, 4), (6, 3, 0.0, 2)):
        s = GroupBeamSession(
            model, PROMPT, SamplerSettings(max_new_tokens=9), num_beams=n,
            num_beam_groups=groups, diversity_penalty=penalty, eos_token_ids=[],
        )  # fmt: skip
        ref = beam_search(model, PROMPT, num_beams=plain, max_new_tokens=9, eos_token_ids=[])
        assert s.run().token_ids == ref.token_ids


def test_group_beam_penalty_makes_groups_differ():
    from engine.decode.search import GroupBeamSession

    model = FACTORIES["llama"]()
    firsts = {}
    for penalty in (0.0, 50.0):
        s = GroupBeamSession(
            model, PROMPT, SamplerSettings(max_new_tokens=3), num_beams=4, num_beam_groups=4,
            diversity_penalty=penalty, eos_token_ids=[],
        )  # fmt: skip
        records = list(s.stream())
        first = next(r for r in records if isinstance(r, BeamEvent))
        firsts[penalty] = [nd.token_id for nd in first.nodes if nd.status == RUNNING]
    assert len(set(firsts[0.0])) == 1  # four identical groups pick the same first token
    assert len(set(firsts[50.0])) == 4  # a large penalty: every group a different one


@pytest.mark.parametrize("name", ["llama", "t5"])
@pytest.mark.parametrize("eos", [[], [34, 52]])
@torch.no_grad()
def test_plain_beam_is_group_beam_with_one_group(name, eos):
    """One loop runs both: one group (whatever its diversity penalty) gives the same
    hypotheses, scores and tree, node for node, as plain beam search."""
    from engine.decode.beam import BeamSession
    from engine.decode.search import GroupBeamSession

    model = FACTORIES[name]()
    settings = SamplerSettings(max_new_tokens=10, no_repeat_ngram_size=3)
    plain = BeamSession(model, PROMPT, settings, num_beams=4, eos_token_ids=eos)
    group = GroupBeamSession(
        model, PROMPT, settings, num_beams=4, num_beam_groups=1, diversity_penalty=5.0,
        eos_token_ids=eos,
    )  # fmt: skip
    trees = [[r for r in s.stream() if isinstance(r, BeamEvent)] for s in (plain, group)]
    a, b = plain.result.hypotheses, group.result.hypotheses
    assert len(a) == 4 and [h.token_ids for h in a] == [h.token_ids for h in b]
    assert [h.score for h in a] == [h.score for h in b]
    assert trees[0] == trees[1]
    assert [s.token_id for s in plain.history] == [s.token_id for s in group.history]
