"""Issue 35, items 3, 4 and 6: tree files the reader accepted but the app could not handle, an
expansion with no bound, and trees that lie. Each case: the reader (or the expansion) refuses
or bounds it with one message naming the field or the limit."""

import copy
import json
import math

import pytest
import torch
from transformers import ByT5Tokenizer

from engine import SamplerSettings
from engine.models.loading import make_bundle
from engine.tree import RunTree, TreeFormatError
from engine.tree.expand import ExpandOptions, expand, expand_node_by_node
from engine.validate.autosave import saved_run
from tiny_models import tiny_llama

PROMPT = [72, 101, 108, 108, 111]
EOS = 1


@pytest.fixture(scope="module")
def bundle():
    return make_bundle(tiny_llama(0).float(), ByT5Tokenizer(), name="llama")


def good_file() -> dict:
    """A small honest tree file: the root, two children, a grandchild."""
    tree = RunTree(PROMPT, "Hello")
    a = tree.add_child(0, 40, "a", 0.5, 0.5, math.log(0.5), 1.0, [(40, "a", 0.5, 0.5)])
    tree.add_child(0, 41, "b", 0.25, 0.25, math.log(0.25))
    tree.add_child(a, 42, "c", 0.125, 0.125, math.log(0.125))
    tree.chat_template = False
    return json.loads(json.dumps(tree.to_json()))


def changed(path, value) -> dict:
    data = good_file()
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


def test_an_honest_file_round_trips_and_its_autosave_is_read_back():
    tree = RunTree.from_json(good_file())
    again = RunTree.from_json(json.loads(json.dumps(tree.to_json(), allow_nan=False)))
    assert [(n.id, n.parent, n.token_id) for n in again.nodes.values()] == [
        (n.id, n.parent, n.token_id) for n in tree.nodes.values()
    ]
    autosave = {"format": "decoding-lab-autosave/1", "tree": tree.to_json(), "steps": []}
    assert saved_run(json.loads(json.dumps(autosave))).tree is not None


@pytest.mark.parametrize("token", [-1, 2**31])
def test_node_token_ids_are_bounded(token):
    """-1 (the root's mark) or 2**31 on a node used to be read, and the autosave written from
    it was then refused at the next start, setting the whole run aside."""
    with pytest.raises(TreeFormatError, match=r"nodes\[1\]\.token_id"):
        RunTree.from_json(changed(("nodes", 1, "token_id"), token))


def test_token_ids_are_below_the_models_vocabulary_when_it_is_known():
    data = changed(("nodes", 2, "token_id"), 500)
    assert RunTree.from_json(data).nodes[2].token_id == 500  # no model: int32 is the bound
    with pytest.raises(TreeFormatError, match="below the vocabulary"):
        RunTree.from_json(data, vocab=384)


@pytest.mark.parametrize("nid", [2**63, 3_000_000_000])
def test_node_ids_fit_a_32_bit_int(nid):
    """2**63 and 3e9 raised OverflowError in the reader and in the Tree tab's click slot."""
    data = good_file()
    data["nodes"][3]["id"] = nid
    with pytest.raises(TreeFormatError, match=r"nodes\[3\]\.id"):
        RunTree.from_json(data)


def test_a_path_log_probability_of_minus_1000_has_an_infinite_perplexity():
    data = changed(("nodes", 2, "logprob"), -1000.0)
    data["nodes"][2]["path_logprob"] = -1000.0
    tree = RunTree.from_json(data)
    assert tree.perplexity(2) == math.inf  # exp(1000) used to raise OverflowError
    lying = changed(("nodes", 3, "path_logprob"), -1000.0)  # its parent's plus its own: no
    with pytest.raises(TreeFormatError, match="parent's plus its own"):
        RunTree.from_json(lying)


def test_two_siblings_with_one_token_are_refused():
    """They were accepted and the cursor jumped between them."""
    with pytest.raises(TreeFormatError, match="repeats a sibling's token"):
        RunTree.from_json(changed(("nodes", 2, "token_id"), 40))


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("nodes", 1, "entropy_raw"), float("nan"), "entropy_raw"),
        (("nodes", 1, "logprob"), float("-inf"), "logprob"),
        (("nodes", 0, "token_id"), 5, "root"),
        (("settings",), {"temperature": -3}, "settings"),
        (("chat_template",), "yes", "chat_template"),
        (("prompt_ids",), [2**40], "prompt_ids"),
    ],
)
def test_values_the_app_could_not_write_back_are_refused(path, value, field):
    with pytest.raises(TreeFormatError, match=field):
        RunTree.from_json(changed(path, value))


def test_the_chat_template_flag_travels_with_the_file():
    data = good_file()
    data["chat_template"] = True
    tree = RunTree.from_json(data)
    assert tree.uses_chat_template() and tree.to_json()["chat_template"] is True
    older = good_file()
    del older["chat_template"]
    older["settings"] = {"chat_template": True}  # what the window wrote before
    assert RunTree.from_json(older).uses_chat_template()


# -- expansion: bounded before it starts, honest about ends ----------------------------------


def test_an_expansion_stops_at_its_node_budget(bundle):
    """depth 6 x 50 children had no bound (15.6 billion nodes at most)."""
    tree = RunTree(PROMPT)
    opts = ExpandOptions(depth=6, max_children=50, max_nodes=120)
    stats = expand(bundle, tree, 0, opts)
    assert stats.limited and stats.added == len(tree.nodes) - 1 == 120
    assert "node budget of 120" in stats.describe()
    reference = RunTree(PROMPT)
    ref = expand_node_by_node(bundle, reference, 0, opts)
    assert ref.limited and sorted(map(tuple, map(reference.path_ids, reference.nodes))) == sorted(
        map(tuple, map(tree.path_ids, tree.nodes))
    )


@pytest.mark.parametrize(
    ("option", "value"),
    [("depth", 13), ("max_children", 51), ("max_nodes", 20_001), ("top_p", 1.5),
     ("min_prob", float("nan")), ("top_n", 0)],
)  # fmt: skip
def test_expand_options_are_bounded_with_the_limit_named(option, value):
    with pytest.raises(ValueError, match=option):
        ExpandOptions(**{option: value})


def test_nothing_grows_under_an_end_of_text_token(bundle):
    """`tree` grew 6 nodes under <|im_end|>: an end ends its branch."""
    settings = SamplerSettings(logit_bias=((f"#{EOS}", 30.0),))  # EOS first after the sampler
    tree = RunTree(PROMPT)
    expand(bundle, tree, 0, ExpandOptions(depth=3, max_children=2, use_sampler=True), settings)
    ends = [n for n in tree.nodes.values() if n.token_id == EOS]
    assert ends and all(not n.children for n in ends)
    assert any(n.depth == 3 for n in tree.nodes.values())  # the other branches grew


def test_top_p_0_keeps_the_likeliest_child(bundle):
    """--top-p 0 gave 0 nodes and exit 0; it keeps the top token, as the sampler's top-p 0."""
    tree = RunTree(PROMPT)
    expand(bundle, tree, 0, ExpandOptions(depth=2, max_children=3, top_p=0.0))
    assert len(tree.nodes) == 3 and all(len(n.children) <= 1 for n in tree.nodes.values())
    with torch.no_grad():
        logits = bundle.model(torch.tensor([PROMPT])).logits[0, -1]
    assert tree.nodes[tree.nodes[0].children[0]].token_id == int(logits.argmax())


def test_a_tree_file_is_not_changed_by_reading_it():
    data = good_file()
    before = copy.deepcopy(data)
    RunTree.from_json(data)
    assert data == before
