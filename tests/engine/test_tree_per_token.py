"""Issue 54, item 5: a path's probability per token (the geometric mean, 1 / perplexity) is
how branches of different lengths compare; its total falls with every token. The web page's
tree says it in each node's title."""

import math

from engine.classroom.share_tree import tree_html
from engine.tree import RunTree


def test_per_token_is_the_geometric_mean_and_compares_lengths_fairly():
    tree = RunTree([1], "p")
    short = tree.add_child(0, 2, " a", 0.5, 0.5, math.log(0.5))
    up = 0
    for k in range(10):  # ten tokens of 90% each
        up = tree.add_child(up, 10 + k, " b", 0.9, 0.9, math.log(0.9))
    long = up
    assert tree.per_token(0) == 1.0
    assert math.isclose(tree.per_token(short), 0.5)
    assert math.isclose(tree.per_token(long), 0.9)
    assert math.isclose(tree.per_token(long), 1 / tree.perplexity(long))
    # the total says the opposite: 0.5 against 0.9^10 = 0.35
    assert tree.nodes[short].path_logprob > tree.nodes[long].path_logprob
    assert tree.per_token(long) > tree.per_token(short)
    page = tree_html(tree)
    assert "90.0% per token" in page and "50.0% per token" in page
