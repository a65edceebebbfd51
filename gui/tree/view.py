"""The Tree tab: every branch of the runs on this prompt, as an outline.

The first row is the prompt (Home goes there); under it one row per stretch of the tree that
does not fork (a sampled run of 200 tokens with two choices made is three rows, not 200 levels
of indent), each showing its whole text, wrapped. Beside it the first token's probability,
coloured by it, and the path's probability in percent, its log p and perplexity. The rows of
the current path are bold and the row you stand on is selected. The branches can be ordered
most (or least) likely first, and one click goes to the most or least likely branch. Click a
row to go there, fold and unfold with the arrows beside the rows, move with the keys (Up/Down:
the row above or below, Left: the row it grows from, Right: back down, Home: the prompt). The
view only reads the tree (``show``, on the window's redraw timer); what the user asks for
leaves as signals, for the window's controller."""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import QEvent, QRect, QSize, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetrics, QKeyEvent, QResizeEvent
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from gui.common.step_text import pct
from gui.tree.rows import (
    AS_MADE,
    ORDERS,
    extreme_leaf,
    path_percent,
    prompt_text,
    rows_of,
    stretch_text,
    token_label,
)

# Okabe-Ito hues (as the rest of the window): probability runs reddish purple (rare) -> orange
# -> yellow -> sky blue (likely); black text reads on each of them in both themes.
PROB_COLOURS = (
    (0.5, "#56b4e9", "≥ 50%"),
    (0.2, "#f0e442", "20–50%"),
    (0.05, "#e69f00", "5–20%"),
    (0.0, "#cc79a7", "< 5%"),
)
COLUMNS = ("Text", "p", "path", "log p", "ppl")
NUMBERS = (1, 2, 3, 4)
COMPACT_HIDDEN = (4,)  # the presentation view: perplexity hides (log p tells deep paths apart)
KEYS = {
    Qt.Key.Key_Left: "parent",
    Qt.Key.Key_Right: "child",
    Qt.Key.Key_Down: "next",
    Qt.Key.Key_Up: "previous",
    Qt.Key.Key_Home: "root",
}
NODE = Qt.ItemDataRole.UserRole  # the row's last node id

__all__ = ["NODE", "PROB_COLOURS", "TreeView", "prob_colour", "rows_of", "token_label"]


def prob_colour(p: float) -> str:
    return next(c for low, c, _ in PROB_COLOURS if p >= low)


class _WrapText(QStyledItemDelegate):
    """The text column's rows as tall as their wrapped text at the column's width (a tree
    view's own size hint ignores the width and the default delegate then elides)."""

    def __init__(self, view: QTreeWidget) -> None:
        super().__init__(view)
        self.view = view

    def initStyleOption(self, option: QStyleOptionViewItem, index: Any) -> None:  # noqa: N802
        super().initStyleOption(option, index)
        option.features |= QStyleOptionViewItem.ViewItemFeature.WrapText

    def sizeHint(self, option: QStyleOptionViewItem, index: Any) -> QSize:  # noqa: N802
        hint = super().sizeHint(option, index)
        if index.column() != 0:
            return hint
        depth, up = 0, index.parent()
        while up.isValid():
            depth, up = depth + 1, up.parent()
        room = self.view.columnWidth(0) - self.view.indentation() * (depth + 1) - 8
        drawn = QStyleOptionViewItem(option)
        self.initStyleOption(drawn, index)  # the font as painted: the row's bold on the view's
        rect = QFontMetrics(drawn.font).boundingRect(
            QRect(0, 0, max(40, room), 100_000), int(Qt.TextFlag.TextWordWrap), drawn.text
        )
        return QSize(hint.width(), max(hint.height(), rect.height() + 4))


class _Outline(QTreeWidget):
    key_move = Signal(str)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        move = KEYS.get(Qt.Key(event.key()))
        if move is not None and not event.modifiers():
            self.key_move.emit(move)
            event.accept()
            return
        super().keyPressEvent(event)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self.scheduleDelayedItemsLayout()  # wrapped rows take the new width's height

    def relayout(self, *_args: object) -> None:
        """A column was resized: the wrapped rows are measured again."""
        self.scheduleDelayedItemsLayout()


class TreeView(QWidget):
    node_clicked = Signal(int)
    expand_requested = Signal()
    fork_requested = Signal(bool)  # True: the next fork, False: the previous one

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.expand_button = _button("Expand…", "Grow the tree from the node you stand on: "
                                     "the likely next tokens, a few deep.")  # fmt: skip
        self.prev_fork = _button("◀ Fork", "The previous step where the model hesitated")
        self.next_fork = _button("Fork ▶", "The next step where the model hesitated")
        self.most_likely = _button("Most likely", "Go to the most likely branch: the leaf "
                                   "whose whole path has the highest probability")  # fmt: skip
        self.most_likely.setObjectName("tree_most_likely")
        self.least_likely = _button("Least likely", "Go to the least likely branch")
        self.least_likely.setObjectName("tree_least_likely")
        self.order = QComboBox()
        self.order.setObjectName("tree_order")
        for key, text in ORDERS:
            self.order.addItem(text, key)
        self.order.setToolTip(
            "The order of the branches under each row: as they were made, or by the "
            "probability of the best (worst) path under them"
        )
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
        self._build_outline()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(_row(self.expand_button, self.prev_fork, self.next_fork))
        layout.addLayout(_row(self.most_likely, self.least_likely, None, self.order))
        layout.addWidget(self.info)
        layout.addWidget(self.outline, 1)
        self.expand_button.clicked.connect(self.expand_requested)
        self.prev_fork.clicked.connect(lambda: self.fork_requested.emit(False))
        self.next_fork.clicked.connect(lambda: self.fork_requested.emit(True))
        self.most_likely.clicked.connect(lambda: self.go_to_extreme(True))
        self.least_likely.clicked.connect(lambda: self.go_to_extreme(False))
        self.order.currentIndexChanged.connect(lambda _i: self.show_tree(self._tree, True))
        self.outline.key_move.connect(self._key_move)
        self.outline.itemClicked.connect(self._clicked)
        self._tree: Any = None
        self._shape: tuple[int, int, str] | None = None  # (tree id, node count, order) drawn
        self._row_of: dict[int, QTreeWidgetItem] = {}
        self._bold: list[QTreeWidgetItem] = []
        self._cursor: int | None = None
        self._trail: int | None = None  # the row the keys came up from: Right goes back to it
        self.compact = False

    def _build_outline(self) -> None:
        out = self.outline
        out.setObjectName("tree_outline")
        out.setHeaderLabels(list(COLUMNS))
        out.headerItem().setToolTip(2, "The probability of the whole path, prompt to row end")
        out.headerItem().setToolTip(3, "The path's log-probability (natural log)")
        out.headerItem().setToolTip(4, "The path's perplexity: exp of the mean surprise per token")
        out.setWordWrap(True)  # a row shows its whole stretch, wrapped between words
        out.setTextElideMode(Qt.TextElideMode.ElideNone)
        out.setUniformRowHeights(False)
        out.setItemDelegateForColumn(0, _WrapText(out))
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
        """The presentation view: the text, the percentages and log p (perplexity hides)."""
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
        item = QTreeWidgetItem([f"Prompt: {prompt_text(prompt)}", "", "100%", "0.00", "1.00"])
        item.setData(0, NODE, 0)
        item.setToolTip(0, _tip(f"The prompt: {prompt[:2000]}", "Home goes here."))
        for col in NUMBERS:
            item.setTextAlignment(col, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        return item

    def _item(self, tree: Any, row: list[int]) -> QTreeWidgetItem:
        first, last = tree.nodes[row[0]], tree.nodes[row[-1]]
        text = "".join(tree.nodes[n].text for n in row)
        more = f"  (+{len(row) - 1} tokens)" if len(row) > 1 else ""
        ppl = tree.perplexity(last.id)
        cells = [stretch_text(text) + more, pct(first.raw_prob), path_percent(last.path_logprob),
                 f"{last.path_logprob:.2f}", f"{ppl:.2f}"]  # fmt: skip
        item = QTreeWidgetItem(cells)
        item.setData(0, NODE, last.id)
        item.setBackground(1, QBrush(QColor(prob_colour(first.raw_prob))))
        item.setForeground(1, QBrush(QColor("#000000")))
        for col in NUMBERS:
            item.setTextAlignment(col, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        leaf = "a leaf: the end of a branch" if not last.children else "a fork below"
        item.setToolTip(0, _tip(
            text[:2000],
            f"p raw {pct(first.raw_prob)} · after the sampler {pct(first.prob)} · entropy "
            f"{first.entropy_raw:.2f} bits",
            f"path {path_percent(last.path_logprob)} (log p {last.path_logprob:.3f}) · "
            f"perplexity {ppl:.2f} · {last.depth} tokens · {leaf}",
        ))  # fmt: skip
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
        node = tree.nodes[tree.cursor]
        here = (
            f"here: {node.depth} tokens, path {path_percent(node.path_logprob)} (log p "
            f"{node.path_logprob:.2f}), perplexity {tree.perplexity(node.id):.2f}"
            if node.depth
            else "at the prompt"
        )
        count = f"{len(tree.nodes) - 1} nodes, {len(tree.leaves())} leaves"
        self.info.setText(f"{count} · {html.escape(here)} · p: {self.key}")

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
    return "<p style='white-space:pre-wrap'>" + "<br>".join(map(html.escape, lines)) + "</p>"
