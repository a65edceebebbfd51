"""Share a run: one self-contained HTML page that any browser opens with no server. No Qt.

The page shows the prompt, the generated text coloured by the probability the model gave each
picked token (ten bands of the window's own colours, engine.palette, with a legend; dark where
the reader's system is), the top-N at a step when a token is hovered, and a bar chart of a
step's distribution when it is clicked; the model, method and settings are named.
Everything is inside the file: the style, a small script of our own, and the run as JSON.

Tokens are untrusted text. The visible text is escaped by ``html.escape``; the JSON is embedded
in a ``<script type="application/json">`` block with ``<``, ``>``, ``&`` and the JavaScript
line separators written as ``\\uXXXX`` escapes (so ``</script>`` inside a token cannot end the
block); the script only ever sets ``textContent``; and a Content-Security-Policy allows nothing
but this page's own style and script (by hash): no network, no other scripts, no images.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.classroom.export import write_atomic
from engine.classroom.share_colours import colour_style
from engine.classroom.share_decisions import DECISION_STYLE, with_decisions
from engine.classroom.share_tree import TREE_STYLE, band, tree_html
from engine.records import RUN_METHODS, Step
from engine.words import count

if TYPE_CHECKING:
    from engine.tree import RunTree

TIP_ROWS = 10  # candidates in the hover tooltip
LABEL_CHARS = 18  # a longer token is cut short in the chart (in full in the bar's tooltip)
DEFAULT_TOP_N = 20  # candidates kept per step (bars in the chart)


def _json_for_script(data: Any) -> str:
    """JSON that is safe inside a <script> element: no '<', '>' or '&' characters at all."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for raw, esc in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"),
                     ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):  # fmt: skip
        text = text.replace(raw, esc)
    return text


def _finite(x: float) -> float:
    return float(x) if math.isfinite(x) else 0.0


def _step_data(step: Step, top_n: int) -> dict[str, Any]:
    return {
        "index": step.index,
        "token_id": step.token_id,
        "token": step.token_str,
        "raw_prob": _finite(step.raw_prob),
        "prob": _finite(step.prob),
        "rank": step.rank,
        "entropy": _finite(step.entropy_raw),
        "survivors": step.survivors,
        "source": step.source,
        "candidates": [
            {
                "id": c.token_id,
                "text": c.text,
                "raw_prob": _finite(c.raw_prob),
                "prob": _finite(c.prob),
                "cut_by": c.cut_by,
            }
            for c in step.candidates[:top_n]
        ],
    }


_STYLE = """
body { font: 16px/1.5 system-ui, sans-serif; color: var(--fg); background: var(--bg);
  margin: 0 auto;
  max-width: 60rem; padding: 1rem 1.5rem 4rem; }
h1 { font-size: 1.5rem; margin: .5rem 0; } h2 { font-size: 1.1rem; margin: 1.5rem 0 .5rem; }
.meta { color: var(--muted); margin: 0; }
table.settings { border-collapse: collapse; font-size: .9rem; }
table.settings td { border-bottom: 1px solid var(--line); padding: .1rem .8rem .1rem 0; }
pre.prompt { white-space: pre-wrap; background: var(--panel); padding: .6rem .8rem; margin: 0;
  border-radius: 4px; }
#text { white-space: pre-wrap; font: 1.05rem/1.9 ui-monospace, monospace;
  border: 1px solid var(--line); border-radius: 4px; padding: .6rem .8rem; }
.tok { cursor: pointer; border-radius: 2px; padding: 0 1px; }
.tok:hover, .tok:focus { outline: 2px solid var(--accent); }
.tok.selected { outline: 3px solid var(--accent); }
.b0 { background: var(--b0); } .b1 { background: var(--b1); } .b2 { background: var(--b2); }
.b3 { background: var(--b3); } .b4 { background: var(--b4); } .b5 { background: var(--b5); }
.b6 { background: var(--b6); } .b7 { background: var(--b7); } .b8 { background: var(--b8); }
.b9 { background: var(--b9); } .tok.f, .chip.f { background: var(--forced); }
.legend { display: flex; gap: 0; margin: .4rem 0; font-size: .8rem; align-items: center; }
.legend span.chip { padding: .1rem .4rem; }
.legend .label { margin-right: .6rem; color: var(--muted); }
#tip { position: absolute; z-index: 10; background: var(--bg); border: 1px solid var(--muted);
  border-radius: 4px; box-shadow: 0 2px 8px rgba(0,0,0,.25); padding: .4rem .6rem;
  font-size: .85rem; max-width: 26rem; }
#tip table { border-collapse: collapse; }
#tip td { padding: 0 .5rem 0 0; font-family: ui-monospace, monospace; white-space: nowrap; }
#tip td:nth-child(2) { white-space: pre-wrap; overflow-wrap: anywhere; }
.tip-head { overflow-wrap: anywhere; }
#tip tr.head td { font-family: system-ui, sans-serif; color: var(--muted); }
#tip tr.chosen td { font-weight: bold; color: var(--accent); }
#tip tr.cut td { color: var(--muted); }
.tip-head { font-weight: bold; margin-bottom: .2rem; }
#chart-title { color: var(--muted); }
#chart text { font: 12px ui-monospace, monospace; fill: var(--fg); }
#chart rect.raw { fill: var(--raw); } #chart rect.raw.cut { fill: var(--cut); opacity: .5; }
#chart rect.after { fill: var(--after); }
#chart rect.raw.chosen { stroke: var(--chosen); stroke-width: 2; }
footer { margin-top: 2rem; color: var(--muted); font-size: .8rem; }
"""

_SCRIPT = """
(function () {
  "use strict";
  var run = JSON.parse(document.getElementById("run-data").textContent);
  var pane = document.getElementById("text");
  var tip = document.getElementById("tip");
  var chart = document.getElementById("chart");
  var chartTitle = document.getElementById("chart-title");
  var SVG = "http://www.w3.org/2000/svg";
  var TIP_ROWS = run.tip_rows, LABEL_CHARS = run.label_chars;

  function show(t) {
    if (!t) return "\\u2205";
    t = t.replace(/ /g, "\\u2423").replace(/\\n/g, "\\u21b5").replace(/\\t/g, "\\u21e5");
    return t.replace(/[\\u0000-\\u001f\\u007f]/g, function (ch) {
      return "\\\\x" + ch.charCodeAt(0).toString(16).padStart(2, "0");
    });
  }
  function short(t) { return t.length > LABEL_CHARS ? t.slice(0, LABEL_CHARS - 1) + "\u2026" : t; }
  function pct(p) { return (100 * p).toFixed(p >= 0.1 ? 1 : 2) + "%"; }
  function cell(tr, text) {
    var td = document.createElement("td"); td.textContent = text; tr.appendChild(td);
  }
  function fillTip(step) {
    tip.replaceChildren();
    var head = document.createElement("div");
    head.className = "tip-head";
    head.textContent = "Step " + (step.index + 1) + ": " + show(step.token) + "  " +
      pct(step.raw_prob) + ", rank " + step.rank;
    if (step.decision_layer !== undefined) {
      head.textContent += step.decision_layer === null ? " \u00b7 never the top choice"
        : " \u00b7 decided at layer " + step.decision_layer + " of " + run.layers;
    }
    tip.appendChild(head);
    var table = document.createElement("table");
    var tr = document.createElement("tr"); tr.className = "head";
    ["#", "token", "model", "after sampler"].forEach(function (h) { cell(tr, h); });
    table.appendChild(tr);
    step.candidates.slice(0, TIP_ROWS).forEach(function (c, k) {
      var row = document.createElement("tr");
      row.className = c.id === step.token_id ? "chosen" : (c.cut_by ? "cut" : "");
      cell(row, String(k + 1)); cell(row, show(c.text)); cell(row, pct(c.raw_prob));
      cell(row, c.cut_by ? "cut by " + c.cut_by : pct(c.prob));
      table.appendChild(row);
    });
    tip.appendChild(table);
  }
  function place(el) {
    var r = el.getBoundingClientRect();
    tip.style.left = (window.scrollX + r.left) + "px";
    tip.style.top = (window.scrollY + r.bottom + 6) + "px";
  }
  function svg(name, attrs, parent) {
    var el = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { el.setAttribute(k, attrs[k]); });
    parent.appendChild(el);
    return el;
  }
  function drawChart(step) {
    chart.replaceChildren();
    var cands = step.candidates, rowH = 22, labelW = 150, barW = 420, width = labelW + barW + 70;
    var height = Math.max(1, cands.length) * rowH + 24;
    chart.setAttribute("viewBox", "0 0 " + width + " " + height);
    chart.setAttribute("width", width);
    chart.setAttribute("height", height);
    var top = 0;
    cands.forEach(function (c) { top = Math.max(top, c.raw_prob, c.prob); });
    top = top > 0 ? top : 1;
    cands.forEach(function (c, k) {
      var y = k * rowH + 4;
      var g = svg("g", {"class": "bar", "data-rank": k + 1}, chart);
      var label = svg("text", {x: labelW - 6, y: y + 14, "text-anchor": "end"}, g);
      label.textContent = short(show(c.text));
      var cls = "raw" + (c.cut_by ? " cut" : "") + (c.id === step.token_id ? " chosen" : "");
      svg("rect", {"class": cls, x: labelW, y: y, height: rowH - 8,
                   width: Math.max(1, barW * c.raw_prob / top)}, g);
      if (!c.cut_by && c.prob > 0) {
        svg("rect", {"class": "after", x: labelW, y: y + rowH - 8, height: 3,
                     width: Math.max(1, barW * c.prob / top)}, g);
      }
      var value = svg("text", {x: labelW + barW * c.raw_prob / top + 6, y: y + 14}, g);
      value.textContent = pct(c.raw_prob);
      var title = svg("title", {}, g);
      title.textContent = show(c.text) + ": model " + pct(c.raw_prob) +
        (c.cut_by ? ", cut by " + c.cut_by : ", after sampler " + pct(c.prob));
    });
    chartTitle.textContent = "Step " + (step.index + 1) + ": picked " + show(step.token) +
      " (" + pct(step.raw_prob) + ", rank " + step.rank + ") \\u00b7 entropy " +
      step.entropy.toFixed(2) + " bits \\u00b7 " + step.survivors +
      " token(s) could be picked. Outlined: the picked token; blue: the model; orange line: " +
      "after the sampler.";
  }
  function select(el) {
    var old = pane.querySelector(".tok.selected");
    if (old) old.classList.remove("selected");
    el.classList.add("selected");
    drawChart(run.steps[Number(el.dataset.i)]);
  }
  pane.addEventListener("mouseover", function (e) {
    var el = e.target.closest(".tok");
    if (!el) return;
    fillTip(run.steps[Number(el.dataset.i)]);
    tip.hidden = false;
    place(el);
  });
  pane.addEventListener("mouseout", function (e) {
    if (e.target.closest(".tok")) tip.hidden = true;
  });
  pane.addEventListener("click", function (e) {
    var el = e.target.closest(".tok");
    if (el) select(el);
  });
  pane.addEventListener("keydown", function (e) {
    var el = e.target.closest(".tok");
    if (el && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); select(el); }
  });
  var first = pane.querySelector(".tok");
  if (first) select(first);
})();
"""


def _csp_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def _settings_dict(settings: Any) -> dict[str, Any]:
    if is_dataclass(settings) and not isinstance(settings, type):
        settings = asdict(settings)
    # NaN and infinity have no JSON spelling: shown as words, so the page is still written
    return {
        k: v if not isinstance(v, float) or math.isfinite(v) else str(v)
        for k, v in dict(settings or {}).items()
    }


def _csp(style: str) -> str:
    """Nothing but this page's own style and script (by hash): no network, no other scripts."""
    return (
        "default-src 'none'; "
        f"script-src {_csp_hash(_SCRIPT)}; style-src {_csp_hash(style)}; "
        "img-src 'none'; connect-src 'none'; base-uri 'none'; form-action 'none'"
    )


def _tree_section(tree: RunTree | None) -> str:
    """The tree's heading, key and collapsible tree; nothing without a tree."""
    if tree is None:
        return ""
    return (
        '<h2>Tree of continuations</h2>\n<p class="meta">Every branch of the run: each token '
        "with the model's probability for it and the path's log-probability (the sum from the "
        "prompt down to it; closer to 0 is likelier). The current path is outlined; click a "
        f"line to fold or unfold it.</p>\n{tree_html(tree)}\n"
    )


_LEGEND = "".join(f'<span class="chip b{k}">{10 * k}-{10 * (k + 1)}%</span>' for k in range(10))
_FORCED_CHIP = '<span class="chip f">chosen by you</span>'


def _legend(steps: Sequence[Step]) -> str:
    """The key of the text's colours; "chosen by you" where a token was."""
    return _LEGEND + (_FORCED_CHIP if any(s.forced for s in steps) else "")


def _spans(steps: Sequence[Step]) -> str:
    """The generated text, one focusable span per token, coloured by its band."""
    return "".join(
        f'<span class="tok b{band(s.raw_prob)}{" f" if s.forced else ""}" data-i="{i}" '
        'tabindex="0">'
        f"{html.escape(s.text or s.token_str)}</span>"
        for i, s in enumerate(steps)
    )


def _settings_rows(settings: dict[str, Any]) -> str:
    e = html.escape
    return "".join(
        f"<tr><td>{e(str(k))}</td><td>{e(str(v))}</td></tr>" for k, v in settings.items()
    )


def _page_data(prompt: str, model: str, method: str, settings: dict[str, Any],
               steps: Sequence[Step], top_n: int) -> dict[str, Any]:  # fmt: skip
    """The run as the page's script reads it (embedded as JSON)."""
    return {
        "format": "decoding-lab-share/1",
        "model": model,
        "method": method,
        "prompt": prompt,
        "settings": settings,
        "tip_rows": TIP_ROWS,
        "label_chars": LABEL_CHARS,
        "steps": [_step_data(s, top_n) for s in steps],
    }


def _meta(model: str, method: str, tokens: int, ending: str) -> str:
    """The line under the title: the model, the method, the length and, when the grammar has
    a word on the output (stopped, incomplete), that word."""
    e = html.escape
    out = f'Model: <b id="model">{e(model)}</b>'
    if method:
        out += f' · Method: <b id="method">{e(RUN_METHODS.get(method, method))}</b>'
    out += f" · {count(tokens, 'token')}"
    if ending:
        out += f' · <b id="ending">{e(ending)}</b>'
    return f'<p class="meta">{out}</p>'


def run_to_html(
    prompt: str,
    model: str,
    settings: Mapping[str, Any] | Any,
    steps: Sequence[Step],
    *,
    method: str = "",
    title: str = "Decoding Lab run",
    top_n: int = DEFAULT_TOP_N,
    tree: RunTree | None = None,
    decisions: Mapping[int, int | None] | None = None,
    layers: int = 0,
    ending: str = "",
) -> str:
    """The run as one HTML page (``run_to_json``'s inputs and the method; ``settings`` a dict or
    ``SamplerSettings``); with a ``tree`` every branch too (share_tree), with ``decisions``
    (step index -> decision layer of ``layers``) the output shaded by decision layer."""
    e = html.escape  # quote=True: safe in text and in attribute values
    data = _page_data(prompt, model, method, settings := _settings_dict(settings), steps, top_n)
    decided = with_decisions(data, steps, decisions, layers) if decisions else ""
    spans, legend, rows = _spans(steps), _legend(steps), _settings_rows(settings)
    text = "".join(s.text for s in steps)
    style = colour_style() + _STYLE + (TREE_STYLE if tree is not None else "")
    style += DECISION_STYLE if decisions else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{e(_csp(style))}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="Decoding Lab">
<title>{e(title)}</title>
<style>{style}</style>
</head>
<body>
<h1>{e(title)}</h1>
{_meta(model, method, len(steps), ending)}
<h2>Prompt</h2>
<pre class="prompt" id="prompt">{e(prompt)}</pre>
<h2>Output</h2>
<div class="legend"><span class="label">probability the model gave each picked token:</span>\
{legend}</div>
<div id="text" aria-label="generated text: hover a token, click it">{spans}</div>
<noscript><p>Turn on JavaScript to see each token's alternatives.</p></noscript>
{decided}<h2>Distribution at a step</h2>
<p id="chart-title">Click a token.</p>
<svg id="chart" xmlns="http://www.w3.org/2000/svg" width="640" height="24"></svg>
{_tree_section(tree)}<h2>Settings</h2>
<table class="settings" id="settings">{rows}</table>
<details><summary>Text only</summary><pre class="prompt" id="plain">{e(text)}</pre></details>
<div id="tip" hidden></div>
<footer>Made with Decoding Lab. Colours: the window's own (orange: unlikely, blue: likely), by
the model's own probability (before the sampler). Hover a token for the top {TIP_ROWS}
alternatives; click it for the top {top_n}.
</footer>
<script type="application/json" id="run-data">{_json_for_script(data)}</script>
<script>{_SCRIPT}</script>
</body>
</html>
"""


def write_run_html(
    path: str | os.PathLike[str],
    prompt: str,
    model: str,
    settings: Mapping[str, Any] | Any,
    steps: Sequence[Step],
    **kwargs: Any,
) -> Path:
    """Write ``run_to_html(...)`` to ``path`` atomically; returns the path."""
    return write_atomic(path, run_to_html(prompt, model, settings, steps, **kwargs))
