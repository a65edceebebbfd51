"""The Tree tab: every branch of the runs on this prompt, as an outline.

One row per stretch of the tree that does not fork (a sampled run of 200 tokens with two
choices made is three rows, not 200 levels of indent); a row of one token shows the token and
its probability, coloured by it. The rows of the current path are bold and the row you stand
on is selected; each leaf shows its path's log-probability and perplexity. Click a row to go
there, fold and unfold with the arrows beside the rows, move with the keys (Left: parent,
Right: child, Up/Down: sibling). The view only reads the tree (``show``, on the window's
redraw timer); what the user asks for leaves as signals, for the window's controller."""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetrics, QKeyEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

# Okabe-Ito hues (as the rest of the window): probability runs reddish purple (rare) -> orange
# -> yellow -> sky blue (likely); black text reads on each of them in both themes.
PROB_COLOURS = (
    (0.5, "#56b4e9", "≥ 50%"),
    (0.2, "#f0e442", "20–50%"),
    (0.05, "#e69f00", "5–20%"),
    (0.0, "#cc79a7", "< 5%"),
)
ROW_CHARS = 48  # a stretch's text is cut in the middle beyond this
KEYS = {
    Qt.Key.Key_Left: "parent",
    Qt.Key.Key_Right: "child",
    Qt.Key.Key_Down: "next",
    Qt.Key.Key_Up: "previous",
}
NODE = Qt.ItemDataRole.UserRole  # the row's last node id


def prob_colour(p: float) -> str:
    return next(c for low, c, _ in PROB_COLOURS if p >= low)


def token_label(text: str) -> str:
    """A token as a reader can see it: a leading space as ␣, line breaks as ⏎."""
    shown = text.replace("\n", "⏎").replace("\t", "⇥")
    if shown.startswith(" "):
        shown = "␣" + shown[1:]
    return shown or "∅"


def _cut(text: str) -> str:
    if len(text) <= ROW_CHARS:
        return text
    half = ROW_CHARS // 2 - 1
    return f"{text[:half]}…{text[-half:]}"


def rows_of(tree: Any) -> list[tuple[int, list[int]]]:
    """The outline: (parent row's last node or 0, the row's nodes), parents before children.
    A row runs down from a node while each node has exactly one child. No recursion."""
    out: list[tuple[int, list[int]]] = []
    todo = [(0, c) for c in reversed(tree.nodes[0].children)]
    while todo:
        up, first = todo.pop()
        row = [first]
        while len(tree.nodes[row[-1]].children) == 1:
            row.append(tree.nodes[row[-1]].children[0])
        out.append((up, row))
        todo.extend((row[-1], c) for c in reversed(tree.nodes[row[-1]].children))
    return out


class _Outline(QTreeWidget):
    move_requested = Signal(str)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        move = KEYS.get(Qt.Key(event.key()))
        if move is not None and not event.modifiers():
            self.move_requested.emit(move)
            event.accept()
            return
        super().keyPressEvent(event)


class TreeView(QWidget):
    node_clicked = Signal(int)
    move_requested = Signal(str)  # "parent", "child", "next", "previous"
    expand_requested = Signal()
    fork_requested = Signal(bool)  # True: the next fork, False: the previous one

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.expand_button = QPushButton("Expand…")
        self.expand_button.setToolTip(
            "Grow the tree from the node you stand on: the likely next tokens, a few deep."
        )
        self.prev_fork = QPushButton("◀ Fork")
        self.prev_fork.setToolTip("The previous step where the model hesitated")
        self.next_fork = QPushButton("Fork ▶")
        self.next_fork.setToolTip("The next step where the model hesitated")
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
        self.outline = _Outline()
        self.outline.setObjectName("tree_outline")
        self.outline.setHeaderLabels(["Token", "p", "log p", "ppl"])
        self.outline.setUniformRowHeights(True)  # fast with thousands of rows
        self.outline.setIndentation(14)
        header = self.outline.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in (1, 2, 3):  # sized once per build: ResizeToContents re-measured every row
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Interactive)  # per change
        top = QHBoxLayout()
        for b in (self.expand_button, self.prev_fork, self.next_fork):
            top.addWidget(b)
        top.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.info)
        layout.addWidget(self.outline, 1)
        self.expand_button.clicked.connect(self.expand_requested)
        self.prev_fork.clicked.connect(lambda: self.fork_requested.emit(False))
        self.next_fork.clicked.connect(lambda: self.fork_requested.emit(True))
        self.outline.move_requested.connect(self.move_requested)
        self.outline.itemClicked.connect(self._clicked)
        self._shape: tuple[int, int] | None = None  # (tree id, node count) drawn
        self._row_of: dict[int, QTreeWidgetItem] = {}
        self._bold: list[QTreeWidgetItem] = []
        self._cursor: int | None = None

    # -- drawing -------------------------------------------------------------------------------

    def show_tree(self, tree: Any) -> None:
        """Draw ``tree`` (engine.tree.RunTree or None): rows only when nodes were added, the
        path and the cursor every time they moved."""
        shape = (id(tree), len(tree.nodes)) if tree is not None else None
        if shape != self._shape:
            self._shape = shape
            self._build(tree)
            self._cursor = None
        if tree is not None and tree.cursor != self._cursor:
            self._mark(tree)

    def _build(self, tree: Any) -> None:
        out = self.outline
        out.setUpdatesEnabled(False)
        out.clear()
        self._row_of, self._bold = {}, []
        if tree is not None:
            by_end: dict[int, QTreeWidgetItem] = {}
            for up, row in rows_of(tree):
                item = self._item(tree, row)
                if up:
                    by_end[up].addChild(item)
                else:
                    out.addTopLevelItem(item)
                by_end[row[-1]] = item
                for nid in row:
                    self._row_of[nid] = item
            out.expandAll()
        self._fit_columns()
        out.setUpdatesEnabled(True)

    def _fit_columns(self) -> None:
        """The numbers' columns as wide as their widest cell or header, measured in the bold
        font the current path is drawn in (measured plain, "45%" showed as "4…")."""
        out = self.outline
        bold = QFont(out.font())
        bold.setBold(True)
        extra = QFontMetrics(bold).horizontalAdvance("00") // 2 + 6
        for col in (1, 2, 3):
            out.resizeColumnToContents(col)
            out.setColumnWidth(col, out.columnWidth(col) + extra)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt's name
        """A new font (the presentation view, A+ / A-) re-measures the columns."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self._fit_columns()

    def _item(self, tree: Any, row: list[int]) -> QTreeWidgetItem:
        first, last = tree.nodes[row[0]], tree.nodes[row[-1]]
        text = token_label("".join(tree.nodes[n].text for n in row))
        more = f"  (+{len(row) - 1} tokens)" if len(row) > 1 else ""
        cells = [_cut(text) + more, f"{first.raw_prob:.0%}", "", ""]
        if not last.children:  # a leaf: how likely the whole path is
            cells[2] = f"{last.path_logprob:.2f}"
            cells[3] = f"{tree.perplexity(last.id):.2f}"
        item = QTreeWidgetItem(cells)
        item.setData(0, NODE, last.id)
        colour = QBrush(QColor(prob_colour(first.raw_prob)))
        item.setBackground(1, colour)
        item.setForeground(1, QBrush(QColor("#000000")))
        item.setTextAlignment(1, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        item.setToolTip(0, (
            f"{text}\np raw {first.raw_prob:.1%} · after the sampler {first.prob:.1%} · "
            f"entropy {first.entropy_raw:.2f} bits\npath log p {last.path_logprob:.3f} · "
            f"perplexity {tree.perplexity(last.id):.2f} · {last.depth} tokens"
        ))  # fmt: skip
        return item

    def _mark(self, tree: Any) -> None:
        """Bold rows along the path to the cursor; select (and show) the cursor's row."""
        for item in self._bold:
            self._set_bold(item, False)
        self._bold = []
        for nid in tree.path():
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
        node = tree.nodes[tree.cursor]
        here = (
            f"here: {node.depth} tokens, log p {node.path_logprob:.2f}, perplexity "
            f"{tree.perplexity(node.id):.2f}"
            if node.depth
            else "at the prompt"
        )
        count = f"{len(tree.nodes) - 1} nodes, {len(tree.leaves())} leaves"
        self.info.setText(f"{count} · {here} · p: {self.key}")

    @staticmethod
    def _set_bold(item: QTreeWidgetItem, on: bool) -> None:
        font = QFont(item.font(0))
        font.setBold(on)
        for col in range(4):
            item.setFont(col, font)

    def _clicked(self, item: QTreeWidgetItem, _column: int) -> None:
        nid = item.data(0, NODE)
        if isinstance(nid, int):
            self.node_clicked.emit(nid)
