"""The run tree (issue 25): path log-probs against one full forward, batched expansion against
node by node, scoring against one full forward, the JSON round trip and its validation."""

import json

import pytest
import torch
import torch.nn.functional as F
from transformers import ByT5Tokenizer

from engine import SamplerSettings
from engine.models.loading import make_bundle
from engine.tree import RunTree, TreeFormatError
from engine.tree.expand import ExpandOptions, expand, expand_node_by_node
from engine.tree.score import score_text
from tiny_models import tiny_llama, tiny_t5

PROMPT = [72, 101, 108, 108, 111]


@pytest.fixture(scope="module", params=["llama", "t5"])
def bundle(request):
    model = (tiny_llama if request.param == "llama" else tiny_t5)(0).float()
    if request.param == "t5":  # the tiny T5's logits are huge (log-probs near -100): calm its
        # head so branches have plausible probabilities and 1e-4 is a fair absolute tolerance
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach() * 0.05)
    return make_bundle(model, ByT5Tokenizer(), name=request.param)


def full_forward_logprob(bundle, prompt, path):
    """Sum of log_softmax over ONE forward of the whole sequence, for the path's tokens."""
    m = bundle.model
    with torch.no_grad():
        if bundle.is_encoder_decoder:
            dec = torch.tensor([[m.config.decoder_start_token_id, *path]])
            logits = m(input_ids=torch.tensor([prompt]), decoder_input_ids=dec).logits[0, :-1]
        else:
            logits = m(input_ids=torch.tensor([[*prompt, *path]])).logits[0, len(prompt) - 1 : -1]
    logp = F.log_softmax(logits.float(), dim=-1)
    return float(logp[torch.arange(len(path)), torch.tensor(path)].sum())


def grown(bundle, fn, settings=None, **kw):
    tree = RunTree(PROMPT)
    opts = ExpandOptions(depth=3, max_children=3, **kw)
    stats = fn(bundle, tree, 0, opts, settings)
    return tree, stats


def shape(tree):
    return sorted((tuple(tree.path_ids(n)), round(tree.nodes[n].prob, 4)) for n in tree.nodes)


def test_path_logprobs_equal_one_full_forward(bundle):
    tree, _ = grown(bundle, expand)
    assert len(tree.leaves()) >= 9
    for leaf in tree.leaves():
        want = full_forward_logprob(bundle, PROMPT, tree.path_ids(leaf))
        assert tree.nodes[leaf].path_logprob == pytest.approx(want, abs=1e-4)
        assert tree.perplexity(leaf) == pytest.approx(torch.tensor(-want / 3).exp().item(), 1e-4)


@pytest.mark.parametrize("cut", [dict(), dict(min_prob=0.055), dict(top_p=0.02)])
def test_batched_expansion_equals_node_by_node_with_fewer_forwards(bundle, cut):
    a, sa = grown(bundle, expand, **cut)
    b, sb = grown(bundle, expand_node_by_node, **cut)
    assert shape(a) == shape(b)
    assert sa.added == sb.added == len(a.nodes) - 1
    assert sa.forwards == 3  # one batched pass per level
    assert sb.forwards == sum(1 for n in b.nodes.values() if n.depth < 3)  # one per node
    if len(a.nodes) > 4:  # more than a single chain: batching saves passes
        assert sa.forwards < sb.forwards


def test_cutoffs_bite_and_sampler_probabilities_are_kept(bundle):
    full, _ = grown(bundle, expand)
    # the root's likeliest child passes exactly, its siblings do not: the cutoff must bite
    floor = max(full.nodes[c].raw_prob for c in full.nodes[0].children)
    cut, _ = grown(bundle, expand, min_prob=floor)
    assert 1 < len(cut.nodes) < len(full.nodes)
    assert all(n.raw_prob >= floor for n in cut.nodes.values())
    s = SamplerSettings(temperature=0.5, top_k=2)
    hot, _ = grown(bundle, expand, settings=s, use_sampler=True)
    assert all(len(n.children) <= 2 for n in hot.nodes.values())  # top-k 2 leaves two tokens
    for n in hot.nodes.values():
        if len(n.children) == 2:  # by hand: temperature 0.5 squares, top-k 2 renormalises
            a, b = (hot.nodes[c] for c in n.children)
            want = torch.softmax(torch.tensor([a.logprob, b.logprob]) / 0.5, 0)
            assert [a.prob, b.prob] == pytest.approx(want.tolist(), abs=1e-5)


def test_stop_and_progress(bundle):
    seen = []
    tree = RunTree(PROMPT)
    stats = expand(bundle, tree, 0, ExpandOptions(depth=3, max_children=2),
                   progress=lambda d, n: seen.append(d), stop=lambda: len(seen) >= 1)  # fmt: skip
    assert stats.stopped and seen == [1] and max(n.depth for n in tree.nodes.values()) == 1


@pytest.mark.parametrize("text", ["Hello world", "zz\u00e9!", "a"])
def test_score_equals_one_full_forward(bundle, text):
    tok = bundle.tokenizer
    prompt = "The "
    res = score_text(bundle, text, prompt=prompt)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    pids = tok(prompt, add_special_tokens=False)["input_ids"]
    if bundle.is_encoder_decoder:  # the encoder input as generation builds it (T5: + </s>)
        pids = bundle.encode_prompt(prompt, use_chat_template=False)
    assert [t.token_id for t in res.tokens] == ids
    want = full_forward_logprob(bundle, pids, ids)
    assert res.total_logprob == pytest.approx(want, abs=1e-4)
    for t in res.tokens:
        best = t.top[0]
        assert (t.rank == 1) == (best[0] == t.token_id)
        assert t.surprisal == pytest.approx(-t.logprob / 0.6931471805599453)


def test_moves_and_forks(bundle):
    tree, _ = grown(bundle, expand)
    first = tree.nodes[0].children[0]
    assert tree.to_child() == first and tree.to_parent() == 0
    tree.goto(first)
    nxt = tree.to_sibling(1)
    assert nxt == tree.nodes[0].children[1] and tree.to_sibling(-1) == first
    tree.goto(0)
    at = tree.fork(forward=True, below_prob=1.1)  # every step is a fork at 110 %
    assert at == first
    assert tree.fork(forward=True, below_prob=0.0, above_bits=1e9) == first  # none: stays


def test_json_round_trip_and_hostile_files(bundle):
    tree, _ = grown(bundle, expand)
    tree.goto(tree.leaves()[-1])
    data = json.loads(json.dumps(tree.to_json()))
    back = RunTree.from_json(data)
    assert shape(back) == shape(tree) and back.cursor == tree.cursor
    assert back.to_json() == tree.to_json()
    bad = json.loads(json.dumps(data))
    bad["nodes"][3]["raw_prob"] = 7
    with pytest.raises(TreeFormatError, match=r"nodes\[3\]\.raw_prob"):
        RunTree.from_json(bad)
    bad = json.loads(json.dumps(data))
    bad["nodes"][2]["parent"] = 5  # listed after it: a cycle cannot be written
    with pytest.raises(TreeFormatError, match=r"nodes\[2\]\.parent"):
        RunTree.from_json(bad)
    with pytest.raises(TreeFormatError, match="format"):
        RunTree.from_json({"format": "x"})
    deep = {"format": data["format"], "prompt_ids": [], "nodes": [
        {"id": i, "token_id": 1 if i else -1, "text": "", "parent": i - 1 if i else None,
         "raw_prob": 1, "prob": 1, "logprob": 0, "path_logprob": 0}
        for i in range(50_000)]}  # fmt: skip
    assert max(n.depth for n in RunTree.from_json(deep).nodes.values()) == 49_999  # no recursion
