"""The run's tree on the shared web page and in the JSON export: every node drawn or counted,
tokens escaped, the current path marked, size and nesting bounded, and the page without a
tree unchanged."""

import html
import json
import math
import random
import re
from html.parser import HTMLParser

import pytest

from engine.classroom.export import run_to_dict, run_to_json
from engine.classroom.lessons import LESSONS_DIR
from engine.classroom.share import run_to_html, write_run_html
from engine.classroom.share_tree import MAX_NESTING, MAX_PAGE_NODES
from engine.palette import tree_band
from engine.records import Candidate, Step
from engine.tree import RunTree

EVIL = '<script>x()</script>"><img src=x>&amp;'  # under the 40-character cut
SHIPPED = LESSONS_DIR.parent / "trees" / "once-upon-a-time.json"
KB = 1024


def step(i: int, text: str = " a") -> Step:
    c = (Candidate(5, text, 0.5, 0.6), Candidate(6, " b", 0.2, 0.0, cut_by="top_k"))
    return Step(i, 5, text, text, 0.5, 0.6, 1, c, 2, 1.0, 1.0, 0.01, 100.0)


STEPS = [step(i) for i in range(3)]


def grow(n: int, seed: int = 0, text=lambda i: f" t{i}") -> RunTree:
    """A random tree of ``n`` nodes below the prompt; the cursor on its deepest node."""
    rng = random.Random(seed)
    tree = RunTree([1, 2], "The prompt")
    ids = [0]
    while len(tree.nodes) <= n:
        p = rng.uniform(0.001, 1.0)
        nid = len(tree.nodes)
        ids.append(tree.add_child(rng.choice(ids), nid, text(nid), p, p * 0.9, math.log(p)))
    tree.goto(max(tree.nodes, key=lambda i: tree.nodes[i].depth))
    return tree


class Shape(HTMLParser):
    """The tree section as a browser reads it: its chips (in document order), the deepest
    <details> nesting, which <details> are open, and the page's own counts of left-out nodes."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = self.deepest = 0
        self.chips: list[dict] = []
        self.open_summaries: list[str] = []
        self.scripts = 0
        self._in: list[str] = []
        self._summary_open: list[bool] = []
        self.text = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        if tag == "details":
            self.depth += 1
            self.deepest = max(self.deepest, self.depth)
            self._summary_open.append("open" in a)
        if tag == "span" and "tn" in (a.get("class") or "").split():
            self.chips.append({"cur": "cur" in a["class"].split(), "title": a["title"], "t": ""})
            self._in.append("tn")
        elif tag == "span" and (a.get("class") or "").startswith("sw t"):
            self.chips[-1]["band"] = int(a["class"][4:])
            self._in.append("sw")
        elif tag == "small":
            self._in.append("small")
        elif tag == "span":
            self._in.append("other")

    def handle_endtag(self, tag):
        if tag == "details":
            self.depth -= 1
            self._summary_open.pop()
        if tag in ("span", "small") and self._in:
            self._in.pop()

    def handle_data(self, data):
        self.text += data
        if self._in and self._in[-1] == "tn":
            self.chips[-1]["t"] += data
        elif self._in and self._in[-1] == "small":
            self.chips[-1]["small"] = data


def section(page: str) -> str:
    m = re.search(r'<div id="tree">.*?</details></div>(<p class="more">.*?</p>)*', page, re.S)
    assert m, "no tree section"
    return m.group(0)


def shape(page: str) -> Shape:
    s = Shape()
    s.feed(section(page))
    return s


def left_out(page: str) -> int:
    notes = re.findall(r'<p class="more">([\d,]+) nodes?', section(page))
    return sum(int(n.replace(",", "")) for n in notes)


def dfs(tree: RunTree) -> list[int]:
    """Node ids in document order, written independently of the page's iterative walk."""
    out: list[int] = []

    def visit(nid: int) -> None:
        out.append(nid)
        for c in tree.nodes[nid].children:
            visit(c)

    for c in tree.nodes[0].children:
        visit(c)
    return out


def test_every_node_shows_token_probability_and_path_logprob_in_order():
    tree = RunTree.from_json(json.loads(SHIPPED.read_text(encoding="utf-8")))
    tree.goto(tree.leaves()[4])
    s = shape(run_to_html("p", "m", {}, STEPS, tree=tree))
    order = dfs(tree)
    assert len(s.chips) == len(order) == len(tree.nodes) - 1
    for chip, nid in zip(s.chips, order, strict=True):
        n = tree.nodes[nid]
        assert chip["t"] == n.text.replace(" ", "\u2423")
        pct, logp = chip["small"].split(" \u00b7 ")
        assert math.isclose(float(pct.rstrip("%")) / 100, n.raw_prob, abs_tol=6e-4)
        assert math.isclose(float(logp.replace("\u2212", "-")), n.path_logprob, abs_tol=6e-3)
        assert chip["band"] == tree_band(n.raw_prob)  # the window's Tree tab's colours
        assert chip["cur"] == (nid in tree.path())
    assert sum(c["cur"] for c in s.chips) == len(tree.path()) == 3


def test_tokens_stay_text():
    tree = RunTree([1], "<b>prompt</b>")
    a = tree.add_child(0, 7, EVIL, 0.5, 0.5, math.log(0.5))
    tree.add_child(a, 8, "\n\t\x00</details>", 0.25, 0.25, math.log(0.25))
    tree.add_child(a, 10, " ok", 0.25, 0.25, math.log(0.25))
    tree.add_child(0, 9, "</div></summary>", 0.125, 0.125, math.log(0.125))
    page = run_to_html("p", "m", {}, STEPS, tree=tree)
    plain = run_to_html("p", "m", {}, STEPS)
    assert EVIL not in page and "<img" not in page and "<b>prompt" not in page
    assert page.count("<script") == plain.count("<script") == 2
    s = shape(page)
    assert [c["t"] for c in s.chips] == [
        EVIL.replace(" ", "\u2423"), "\u21b5\u21e5\\x00</details>", "\u2423ok",
        "</div></summary>",
    ]  # fmt: skip
    assert s.deepest == 2  # the escaped </details> closed nothing
    assert html.escape(EVIL.replace(" ", "\u2423")) in page


def test_two_thousand_nodes_stay_under_the_size_bound():
    """Bounds stated in the report: 2,000 nodes of ordinary tokens add < 512 KB to the page;
    2,000 hostile 10,000-character tokens < 2,000 KB (1 KB a node: tokens are cut to 40
    characters, 60 in the hover title)."""
    plain = len(run_to_html("p", "m", {}, STEPS).encode())
    tree = grow(2000)
    page = run_to_html("p", "m", {}, STEPS, tree=tree)
    assert len(shape(page).chips) == 2000 and left_out(page) == 0
    assert len(page.encode()) - plain < 512 * KB
    hostile = grow(2000, text=lambda i: '<&"' * 3333 + str(i))
    assert len(hostile.nodes[5].text) >= 9999
    page = run_to_html("p", "m", {}, STEPS, tree=hostile)
    assert len(shape(page).chips) == 2000
    assert len(page.encode()) - plain < 2000 * KB


def test_nesting_is_bounded_and_what_is_cut_is_counted():
    """A comb: every node has a leaf and a branch going on, 1,000 branch points deep."""
    tree = RunTree([1], "comb")
    spine = 0
    for k in range(1000):
        tree.add_child(spine, 2 * k, f" leaf{k}", 0.4, 0.4, math.log(0.4))
        spine = tree.add_child(spine, 2 * k + 1, f" on{k}", 0.6, 0.6, math.log(0.6))
    tree.goto(spine)
    page = run_to_html("p", "m", {}, STEPS, tree=tree)
    s = shape(page)
    assert s.deepest <= MAX_NESTING + 1  # the prompt's own <details> and MAX_NESTING below
    assert len(s.chips) + left_out(page) == 2000  # every node drawn or counted
    assert left_out(page) > 0 and "branch points deep" in page


def test_a_long_chain_is_one_line_and_draws_without_recursion():
    tree = RunTree([1], "long run")
    nid = 0
    for k in range(5000):  # far past the recursion limit (1,000)
        nid = tree.add_child(nid, k, " w", 0.9, 0.9, math.log(0.9))
    tree.goto(nid)
    s = shape(run_to_html("p", "m", {}, STEPS, tree=tree))
    assert len(s.chips) == 5000 and all(c["cur"] for c in s.chips)
    assert s.deepest == 1


@pytest.mark.parametrize("seed", [0, 1])
def test_a_huge_tree_draws_at_most_the_budget_and_always_the_current_path(seed):
    tree = grow(MAX_PAGE_NODES + 3000, seed)
    page = run_to_html("p", "m", {}, STEPS, tree=tree)
    s = shape(page)
    path = tree.path()
    assert len(s.chips) + left_out(page) == len(tree.nodes) - 1
    assert len(s.chips) <= MAX_PAGE_NODES + len(path)
    assert sum(c["cur"] for c in s.chips) == len(path) >= 5
    assert f"at most {MAX_PAGE_NODES:,}" in page


def test_the_current_path_is_unfolded_and_the_rest_folded():
    tree = RunTree.from_json(json.loads(SHIPPED.read_text(encoding="utf-8")))
    leaf = tree.leaves()[-1]
    tree.goto(leaf)
    tree_part = section(run_to_html("p", "m", {}, STEPS, tree=tree))
    opened = re.findall(r"<details( open)?[^>]*><summary[^>]*>(.*?)</summary>", tree_part)
    titles = {t for _o, t in opened}
    assert len(titles) == len(opened)
    on_path = {tree.nodes[n].text for n in tree.path()[:-1]}
    for is_open, summary in opened[1:]:  # [0] is the prompt: always open
        first = re.search(r'<span class="tn( cur)?"', summary)
        assert bool(is_open) == bool(first.group(1)), summary
    assert sum(1 for o, _t in opened[1:] if o) == len(on_path) == 2


def test_the_page_without_a_tree_is_unchanged():
    plain = run_to_html("p", "m", {"t": 1}, STEPS, method="sampling")
    assert run_to_html("p", "m", {"t": 1}, STEPS, method="sampling", tree=None) == plain
    assert 'id="tree"' not in plain and "Tree of continuations" not in plain
    assert "#tree" not in plain  # not even its style


def test_the_tree_page_keeps_the_csp_and_fetches_nothing():
    import base64
    import hashlib

    page = run_to_html("p", "m", {}, STEPS, tree=grow(50))
    csp = html.unescape(re.search(r'Content-Security-Policy" content="([^"]+)"', page).group(1))
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp
    assert len(re.findall(r"<style>", page)) == 1
    style = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    assert "#tree" in style
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    assert f"style-src 'sha256-{digest}'" in csp
    assert " style=" not in section(page)  # the CSP would refuse inline style attributes
    assert "https://" not in page and "src=" not in section(page)


def test_the_json_export_includes_the_tree():
    tree = RunTree.from_json(json.loads(SHIPPED.read_text(encoding="utf-8")))
    tree.goto(tree.leaves()[2])
    data = json.loads(run_to_json("p", "m", {}, STEPS, tree=tree))
    assert data["tree"]["format"] == "decoding-lab-tree/1"
    back = RunTree.from_json(data["tree"])
    assert back.cursor == tree.cursor and back.prompt_ids == tree.prompt_ids
    for nid, n in tree.nodes.items():
        m = back.nodes[nid]
        assert (m.text, m.parent, m.children, m.raw_prob, m.path_logprob) == (
            n.text, n.parent, n.children, n.raw_prob, n.path_logprob,
        )  # fmt: skip
    assert "tree" not in run_to_dict("p", "m", {}, STEPS)
    assert "tree" not in json.loads(run_to_json("p", "m", {}, STEPS))


def test_write_run_html_passes_the_tree(tmp_path):
    path = write_run_html(tmp_path / "t.html", "p", "m", {}, STEPS, tree=grow(10))
    assert len(shape(path.read_text(encoding="utf-8")).chips) == 10


def test_the_tree_in_a_headless_browser(tmp_path):
    """The style is allowed by the CSP (no console error), the path is outlined, and a folded
    branch opens on a click, with no script of ours involved."""
    from test_share import CHROMIUM, _browser_or_skip

    sync_playwright = _browser_or_skip()
    tree = RunTree.from_json(json.loads(SHIPPED.read_text(encoding="utf-8")))
    tree.goto(tree.leaves()[0])
    path = write_run_html(tmp_path / "t.html", "p", "m", {}, STEPS, tree=tree)
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.goto(path.as_uri())
            cur = page.locator("#tree .tn.cur")
            assert cur.count() == 3 and cur.first.is_visible()
            assert (
                page.eval_on_selector("#tree .cur", "e => getComputedStyle(e).outlineStyle")
                == "solid"
            )  # the tree's style was applied: the CSP let it through
            # element handles: a locator for "not open" would find the next one after a click
            folded = page.locator("#tree details:not([open])").first.element_handle()
            hidden = folded.query_selector(":scope > div")
            assert not hidden.is_visible()
            folded.query_selector(":scope > summary").click()
            assert hidden.is_visible() and folded.get_attribute("open") is not None
        finally:
            browser.close()
    assert not problems, problems
