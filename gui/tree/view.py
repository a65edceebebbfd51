"""The Tree tab: every branch of the runs on this prompt, as an outline.

The first row is the prompt (Home goes there); under it one row per stretch of the tree that
does not fork (a sampled run of 200 tokens with two choices made is three rows, not 200 levels
of indent). Each row shows its text on one line, so the tree's shape fits the screen ("Whole
text" wraps each row's whole stretch instead; the hover always holds it). Beside it the first
token's probability, coloured by it, and the path's probability per token (the geometric mean:
how branches of different lengths compare, since a path's total falls with every token) beside
the total in percent and its log p. The rows of the current path are bold and the row you stand
on is selected. The branches can be ordered most (or least) likely per token first, and one
click goes to the most or least likely branch per token. Click a row to go there, fold and
unfold with the arrows beside the rows, move with the keys (Up/Down: the row above or below,
Left: the row it grows from, Right: back down, Home: the prompt). The view only reads the tree
(``show``, on the window's redraw timer); what the user asks for leaves as signals, for the
window's controller."""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetrics
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.palette import TREE_BANDS
from engine.words import count
from gui.common.step_text import pct
from gui.tree.outline import Outline
from gui.tree.rows import (
    AS_MADE,
    ORDERS,
    extreme_leaf,
    here_text,
    path_percent,
    per_token,
    prompt_text,
    row_tip,
    rows_of,
    stretch_text,
    token_label,
)

# The window's palette (engine.palette, the web page's too): probability runs reddish purple
# (rare) -> orange -> yellow -> sky blue (likely); black text reads on each in both themes.
PROB_COLOURS = TREE_BANDS
COLUMNS = ("Text", "p", "per token", "path", "log p")
NUMBERS = (1, 2, 3, 4)
COMPACT_HIDDEN = (4,)  # the presentation view: log p hides (per token and path stay)
HEADER_TIPS = {
    1: "The probability the model gave the row's first token (raw, before the sampler)",
    2: "The path's probability per token, prompt to row end: the geometric mean of its "
    "tokens' probabilities (1 / perplexity). Branches of different lengths compare by it: "
    "Most likely, Least likely and the order use it.",
    3: "The probability of the whole path, prompt to row end: it falls with every token, so a "
    "longer branch always has less in all",
    4: "The whole path's log-probability (natural log)",
}
NODE = Qt.ItemDataRole.UserRole  # the row's last node id

__all__ = ["NODE", "PROB_COLOURS", "TreeView", "prob_colour", "rows_of", "token_label"]


def prob_colour(p: float) -> str:
    return next(c for low, c, _ in PROB_COLOURS if p >= low)


class TreeView(QWidget):
    node_clicked = Signal(int)
    expand_requested = Signal()
    fork_requested = Signal(bool)  # True: the next fork, False: the previous one

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._make_controls()
        self.info = QLabel("")
        self.info.setObjectName("tree_info")
        self.info.setWordWrap(True)
        self.info.setTextFormat(Qt.TextFormat.RichText)
        # the colour key rides on the info line (a line of its own took rows; beside the
        # buttons it was cut off at 1280x720)
        self.key = " ".join(
            f"<span style='background:{c}; color:#000'>&nbsp;{chip}&nbsp;</span>"
            for _, c, label in PROB_COLOURS
            for chip in [html.escape(label).replace(" ", "&nbsp;")]  # one chip never wraps
        )
        self.info.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.info.setText(f"p: {self.key}")
        self.outline = Outline()
        self._build_outline()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(_row(self.expand_button, self.prev_fork, self.next_fork, None,
                              self.whole_text))  # fmt: skip
        layout.addLayout(_row(self.most_likely, self.least_likely, None, self.order))
        layout.addWidget(self.info)
        layout.addWidget(self.outline, 1)
        self.expand_button.clicked.connect(self.expand_requested)
        self.prev_fork.clicked.connect(lambda: self.fork_requested.emit(False))
        self.next_fork.clicked.connect(lambda: self.fork_requested.emit(True))
        self.most_likely.clicked.connect(lambda: self.go_to_extreme(True))
        self.least_likely.clicked.connect(lambda: self.go_to_extreme(False))
        self.order.currentIndexChanged.connect(lambda _i: self.show_tree(self._tree, True))
        self.whole_text.toggled.connect(self.outline.show_whole_text)
        self.outline.key_move.connect(self._key_move)
        self.outline.itemClicked.connect(self._clicked)
        self._tree: Any = None
        self._shape: tuple[int, int, str] | None = None  # (tree id, node count, order) drawn
        self._row_of: dict[int, QTreeWidgetItem] = {}
        self._bold: list[QTreeWidgetItem] = []
        self._cursor: int | None = None
        self._trail: int | None = None  # the row the keys came up from: Right goes back to it
        self.compact = False

    def _make_controls(self) -> None:
        self.expand_button = _button("Expand…", "Grow the tree from the node you stand on: "
                                     "the likely next tokens, a few deep.")  # fmt: skip
        self.prev_fork = _button("◀ Fork", "The previous step where the model hesitated")
        self.next_fork = _button("Fork ▶", "The next step where the model hesitated")
        # short names: "… per token" made the tab 160 px wider than a 1024 px screen allows
        # (the tips, the "per token" column and the Tree menu's items say it)
        self.most_likely = _button("Most likely", "Go to the most likely branch per token: the "
                                   "leaf whose path has the highest probability per token (a "
                                   "path's total falls with every token, so by the total the "
                                   "shortest branch would always win)")  # fmt: skip
        self.most_likely.setObjectName("tree_most_likely")
        self.least_likely = _button("Least likely", "Go to the least likely branch per token: "
                                    "the leaf whose path has the lowest probability per "
                                    "token")  # fmt: skip
        self.least_likely.setObjectName("tree_least_likely")
        self.whole_text = QCheckBox("Whole text")
        self.whole_text.setObjectName("tree_whole_text")
        self.whole_text.setToolTip("Each row's whole text, wrapped (the rows grow tall); "
                                   "unticked: one line per row, so the tree's shape shows, "
                                   "the whole text on hover")  # fmt: skip
        self.order = QComboBox()
        self.order.setObjectName("tree_order")
        for key, text in ORDERS:
            self.order.addItem(text, key)
        self.order.setToolTip(
            "The order of the branches under each row: as they were made, or by the "
            "probability per token of the best (worst) path under them"
        )

    def _build_outline(self) -> None:
        out = self.outline
        out.setObjectName("tree_outline")
        out.setHeaderLabels(list(COLUMNS))
        for col, tip in HEADER_TIPS.items():
            out.headerItem().setToolTip(col, tip)
        out.setIndentation(14)
        header = out.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.sectionResized.connect(out.relayout)
        for col in NUMBERS:  # sized once per build: ResizeToContents re-measured every row
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Interactive)  # per change

    # -- drawing -------------------------------------------------------------------------------

    def show_tree(self, tree: Any, force: bool = False) -> None:
        """Draw ``tree`` (engine.tree.RunTree or None): rows only when nodes were added or the
        order changed, the path and the cursor every time they moved."""
        self._tree = tree
        order = self.order.currentData() or AS_MADE
        shape = (id(tree), len(tree.nodes), order) if tree is not None else None
        if shape != self._shape or force:
            self._shape = shape
            self._build(tree, order)
            self._cursor = None
        if tree is not None and tree.cursor != self._cursor:
            self._mark(tree)

    def _build(self, tree: Any, order: str) -> None:
        out = self.outline
        out.setUpdatesEnabled(False)
        out.clear()
        self._row_of, self._bold = {}, []
        if tree is not None:
            root = self._root_item(tree)
            out.addTopLevelItem(root)
            by_end: dict[int, QTreeWidgetItem] = {0: root}
            self._row_of[0] = root
            for up, row in rows_of(tree, order):
                item = self._item(tree, row)
                by_end[up].addChild(item)
                by_end[row[-1]] = item
                for nid in row:
                    self._row_of[nid] = item
            out.expandAll()
        self._fit_columns()
        out.setUpdatesEnabled(True)

    def set_compact(self, on: bool) -> None:
        """The presentation view: the text and the percentages (log p hides)."""
        self.compact = on
        for col in COMPACT_HIDDEN:
            self.outline.setColumnHidden(col, on)

    def _fit_columns(self) -> None:
        """The numbers' columns as wide as their widest cell or header, measured in the bold
        font the current path is drawn in (measured plain, "45%" showed as "4…")."""
        out = self.outline
        bold = QFont(out.font())
        bold.setBold(True)
        extra = QFontMetrics(bold).horizontalAdvance("00") // 2 + 6
        for col in NUMBERS:
            out.resizeColumnToContents(col)
            out.setColumnWidth(col, out.columnWidth(col) + extra)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt's name
        """A new font (the presentation view, A+ / A-) re-measures the columns."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self._fit_columns()

    def _root_item(self, tree: Any) -> QTreeWidgetItem:
        prompt = tree.nodes[0].text
        item = QTreeWidgetItem([f"Prompt: {prompt_text(prompt)}", "", "100%", "100%", "0.00"])
        item.setData(0, NODE, 0)
        item.setToolTip(0, _tip(f"The prompt: {prompt[:2000]}", "Home goes here."))
        for col in NUMBERS:
            item.setTextAlignment(col, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        return item

    def _item(self, tree: Any, row: list[int]) -> QTreeWidgetItem:
        first, last = tree.nodes[row[0]], tree.nodes[row[-1]]
        text = "".join(tree.nodes[n].text for n in row)  # its token count: on hover
        cells = [stretch_text(text), pct(first.raw_prob), pct(per_token(tree, last.id)),
                 path_percent(last.path_logprob), f"{last.path_logprob:.2f}"]  # fmt: skip
        item = QTreeWidgetItem(cells)
        item.setData(0, NODE, last.id)
        item.setBackground(1, QBrush(QColor(prob_colour(first.raw_prob))))
        item.setForeground(1, QBrush(QColor("#000000")))
        for col in NUMBERS:
            item.setTextAlignment(col, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        tip = _tip(*row_tip(tree, row))
        for col in range(len(COLUMNS)):  # the whole row answers a hover
            item.setToolTip(col, tip)
        return item

    def _mark(self, tree: Any) -> None:
        """Bold rows along the path to the cursor; select (and show) the cursor's row."""
        for item in self._bold:
            self._set_bold(item, False)
        self._bold = []
        for nid in [0, *tree.path()]:
            item = self._row_of.get(nid)
            if item is not None and (not self._bold or self._bold[-1] is not item):
                self._set_bold(item, True)
                self._bold.append(item)
        self._cursor = tree.cursor
        current = self._row_of.get(tree.cursor)
        self.outline.blockSignals(True)
        if current is not None:
            self.outline.setCurrentItem(current)
        else:
            self.outline.clearSelection()
        self.outline.blockSignals(False)
        if current is not None:
            self.outline.scrollToItem(current)
        size = (
            f"{count(len(tree.nodes) - 1, 'node')}, {count(len(tree.leaves()), 'leaf', 'leaves')}"
        )
        self.info.setText(f"{size} · {html.escape(here_text(tree))} · p: {self.key}")

    @staticmethod
    def _set_bold(item: QTreeWidgetItem, on: bool) -> None:
        font = QFont(item.font(0))
        font.setBold(on)
        for col in range(len(COLUMNS)):
            item.setFont(col, font)

    # -- what the user asks for ----------------------------------------------------------------

    def _clicked(self, item: QTreeWidgetItem, _column: int) -> None:
        nid = item.data(0, NODE)
        if isinstance(nid, int):
            self.node_clicked.emit(nid)

    def go_to_extreme(self, likely: bool) -> None:
        """The most (least) likely branch: its leaf is gone to."""
        leaf = extreme_leaf(self._tree, likely) if self._tree is not None else None
        if leaf is not None:
            self.node_clicked.emit(leaf)

    def _key_move(self, kind: str) -> None:
        """Up/Down: the row above or below; Left: the row this one grows from; Right: back
        down the way the keys came up, else the first branch; Home: the prompt."""
        out = self.outline
        here = out.currentItem() or out.topLevelItem(0)
        if here is None:
            return
        target: QTreeWidgetItem | None = None
        if kind == "root":
            target = out.topLevelItem(0)
        elif kind == "previous":
            target = out.itemAbove(here)
        elif kind == "next":
            target = out.itemBelow(here)
        elif kind == "parent":
            target = here.parent()
            self._trail = here.data(0, NODE)
        elif kind == "child" and here.childCount():
            kids = [here.child(i) for i in range(here.childCount())]
            target = next((k for k in kids if k.data(0, NODE) == self._trail), kids[0])
            here.setExpanded(True)
        if target is not None:
            self._clicked(target, 0)


def _button(text: str, tip: str) -> QPushButton:
    button = QPushButton(text)
    button.setToolTip(tip)
    return button


def _row(*widgets: QWidget | None) -> QHBoxLayout:
    """Widgets in a row; None stretches."""
    row = QHBoxLayout()
    for w in widgets:
        if w is None:
            row.addStretch(1)
        else:
            row.addWidget(w)
    if widgets[-1] is not None and None not in widgets:
        row.addStretch(1)
    return row


def _tip(*lines: str) -> str:
    """A rich-text tooltip whose token text shows as text (a token "<b>" is not bold)."""
    shown = (html.escape(line, quote=False) for line in lines)
    return "<p style='white-space:pre-wrap'>" + "<br>".join(shown) + "</p>"
