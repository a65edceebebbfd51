"""The beam search drawn as it grows: one column per step (numbered), that step's candidates
ranked top to bottom, an edge from each to the beam it extends. Running beams are drawn
normally, finished hypotheses boxed in bluish green, pruned candidates greyed; the final choice
is highlighted. The panel around it has a key, zoom and fit buttons, and follows the newest
step unless the user scrolled away."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt, Slot
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetrics, QPainter, QPen, QWheelEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QGraphicsRectItem,
    QGraphicsScene,
    QGraphicsSimpleTextItem,
    QGraphicsView,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine.records import FINISHED, PRUNED, BeamEvent, BeamNode, BeamResult
from gui.common.theme import LIGHT, Theme

FINISHED_COLOR = "#009e73"  # Okabe-Ito bluish green
KEY = (
    "Each box: a token, its log-probability (+ = likelier) and Σ the beam's total so far. "
    "Grey: pruned (not among the best beams). Green box: a finished answer. "
    "Thick outline: the final choice."
)


def _label(node: BeamNode) -> str:
    token = repr(node.text)[1:-1].replace(" ", "␣")
    if len(token) > 12:
        token = token[:11] + "…"
    return f"{token}\n{node.logprob:+.2f}  Σ{node.score:.1f}"


class BeamTreeView(QGraphicsView):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.follow = True  # keep the newest step in view (until the user scrolls away)
        self._scrolling = False
        self.horizontalScrollBar().valueChanged.connect(self._scrolled)
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)  # pan by dragging
        self.setObjectName("beam_tree")
        self.setScene(QGraphicsScene(self))
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.theme: Theme = LIGHT
        self.font_pt = 10
        self.nodes: dict[int, BeamNode] = {}
        self.positions: dict[int, QPointF] = {0: QPointF(0, 0)}
        self.boxes: dict[int, QGraphicsRectItem] = {}
        self.edges: dict[int, object] = {}
        self.result: BeamResult | None = None
        self.clear_tree()

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.setBackgroundBrush(QBrush(QColor(theme.plot_bg)))
        self._redraw()

    def set_text_size(self, points: int, presenting: bool) -> None:  # the display clock
        self.set_font_size(points if presenting else points - 1)

    def set_font_size(self, points: int) -> None:
        self.font_pt = points
        self._redraw()

    # Box and column sizes follow the font, so labels fit at every zoom.
    @property
    def box_w(self) -> float:
        return QFontMetrics(self._font()).horizontalAdvance("M" * 11) + 12

    @property
    def box_h(self) -> float:
        return 2 * QFontMetrics(self._font()).lineSpacing() + 8

    @property
    def col_w(self) -> float:
        return self.box_w + 18

    @property
    def row_h(self) -> float:
        return self.box_h + 8

    # -- view: zoom, fit, follow ----------------------------------------------------------

    def zoom(self, factor: float) -> None:
        self.scale(factor, factor)

    def fit(self) -> None:
        self.fitInView(self.scene().sceneRect(), Qt.AspectRatioMode.KeepAspectRatio)

    def reset_zoom(self) -> None:
        self.resetTransform()

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802 - Qt override
        if event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            self.zoom(1.15 if event.angleDelta().y() > 0 else 1 / 1.15)
            event.accept()
        else:
            super().wheelEvent(event)

    @Slot(int)
    def _scrolled(self, value: int) -> None:
        if not self._scrolling:  # the user moved it: follow only when back at the end
            self.follow = value >= self.horizontalScrollBar().maximum() - 4

    def _follow_newest(self) -> None:
        if self.follow:
            self._scrolling = True
            bar = self.horizontalScrollBar()
            bar.setValue(bar.maximum())
            self._scrolling = False

    def clear_tree(self) -> None:
        self.nodes.clear()
        self.result = None
        self.events: list[BeamEvent] = []
        self._redraw()

    def add_event(self, event: BeamEvent) -> None:
        self.events.append(event)
        self._draw_event(event)
        self._scrolling = True
        self.scene().setSceneRect(self.scene().itemsBoundingRect().adjusted(-10, -10, 40, 40))
        self._scrolling = False
        self._follow_newest()

    def finish(self, result: BeamResult) -> None:
        self.result = result
        self._redraw()

    # -- drawing ------------------------------------------------------------------------------

    def _redraw(self) -> None:
        scene = self.scene()
        scene.clear()
        self.positions = {0: QPointF(0, 0)}
        self.boxes, self.edges = {}, {}
        root = QGraphicsSimpleTextItem("prompt")
        root.setFont(self._font(bold=True))
        root.setBrush(QBrush(QColor(self.theme.text)))
        root.setPos(-QFontMetrics(self._font(bold=True)).horizontalAdvance("prompt") - 12, -10)
        scene.addItem(root)
        for event in self.events:
            self._draw_event(event)
        if self.result is not None and self.result.hypotheses:
            self._highlight_path(self.result.best.node_id)
        scene.setSceneRect(scene.itemsBoundingRect().adjusted(-10, -10, 40, 40))

    def _font(self, bold: bool = False) -> QFont:
        font = QFont()
        font.setPointSize(self.font_pt)
        font.setBold(bold)
        return font

    def _draw_event(self, event: BeamEvent) -> None:
        scene = self.scene()
        t = self.theme
        col_w, row_h, box_w, box_h = self.col_w, self.row_h, self.box_w, self.box_h
        header = QGraphicsSimpleTextItem(f"step {event.step}")
        header.setFont(self._font(bold=True))
        header.setBrush(QBrush(QColor(t.muted)))
        header.setPos(event.step * col_w + 4, -QFontMetrics(self._font()).lineSpacing() - 10)
        scene.addItem(header)
        for row, node in enumerate(event.nodes):
            self.nodes[node.node_id] = node
            pos = QPointF(event.step * col_w, row * row_h)
            self.positions[node.node_id] = pos
            parent = self.positions.get(node.parent, QPointF(0, 0))
            start = QPointF(parent.x() + (box_w if node.parent else 0), parent.y() + box_h / 2)
            grey = node.status == PRUNED
            pen = QPen(QColor(t.cut_bar if grey else t.muted), 1.0 if grey else 1.6)
            self.edges[node.node_id] = scene.addLine(
                start.x(), start.y(), pos.x(), pos.y() + box_h / 2, pen
            )
            box = QGraphicsRectItem(QRectF(pos.x(), pos.y(), box_w, box_h))
            fill = QColor(t.base)
            border = QPen(QColor(t.cut_bar if grey else t.accent), 1.5)
            if node.status == FINISHED:
                border = QPen(QColor(FINISHED_COLOR), 3)
            box.setBrush(QBrush(fill))
            box.setPen(border)
            box.setToolTip(
                f"token {node.token_id} {node.text!r}\n"
                f"log-prob {node.logprob:.3f}, path {node.score:.3f}"
                + (
                    f"\nfinished, score {node.final_score:.3f}"
                    if node.final_score is not None
                    else ""
                )
                + ("\npruned: not among the best beams" if grey else "")
            )
            scene.addItem(box)
            self.boxes[node.node_id] = box
            text = QGraphicsSimpleTextItem(_label(node))
            text.setFont(self._font())
            text.setBrush(QBrush(QColor(t.muted if grey else t.text)))
            text.setPos(pos.x() + 6, pos.y() + 2)
            scene.addItem(text)

    def _highlight_path(self, node_id: int) -> None:
        pen = QPen(QColor(self.theme.chosen), 3.5)
        while node_id in self.nodes:
            if node_id in self.boxes:
                self.boxes[node_id].setPen(pen)
            edge = self.edges.get(node_id)
            if edge is not None:
                edge.setPen(pen)  # type: ignore[attr-defined]
            node_id = self.nodes[node_id].parent

    def best_path(self) -> list[int]:
        """Token ids on the highlighted path (for tests and export)."""
        if self.result is None or not self.result.hypotheses:
            return []
        out, node_id = [], self.result.best.node_id
        while node_id in self.nodes:
            out.append(self.nodes[node_id].token_id)
            node_id = self.nodes[node_id].parent
        return out[::-1]


class BeamTreePanel(QWidget):
    """The tree with its key and its view controls."""

    def __init__(self, view: BeamTreeView, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.key = QLabel(KEY)
        self.key.setObjectName("beam_key")
        self.key.setWordWrap(True)
        self.key.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.follow = QCheckBox("Follow")
        self.follow.setToolTip("Keep the newest step in view while the search runs.")
        self.follow.setChecked(True)
        buttons = QHBoxLayout()  # under the key, which wraps across the tab's whole width
        for text, tip, slot in (
            ("Fit", "Show the whole tree", view.fit),
            ("−", "Zoom out (or Ctrl+wheel)", lambda: view.zoom(1 / 1.25)),
            ("+", "Zoom in (or Ctrl+wheel); drag to pan", lambda: view.zoom(1.25)),
            ("1:1", "Actual size", view.reset_zoom),
        ):
            b = QToolButton()  # as narrow as its text: four 80 px push buttons made it 412 px
            b.setText(text)
            b.setToolTip(tip)
            b.clicked.connect(slot)
            buttons.addWidget(b)
        buttons.addWidget(self.follow)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.key)
        layout.addLayout(buttons)
        layout.addWidget(view, 1)
        self.follow.toggled.connect(self._set_follow)
        view.horizontalScrollBar().valueChanged.connect(self._show_follow)

    @Slot(bool)
    def _set_follow(self, on: bool) -> None:
        self.view.follow = on
        self.view._follow_newest()

    @Slot(int)
    def _show_follow(self, _value: int) -> None:
        if self.follow.isChecked() != self.view.follow:
            self.follow.blockSignals(True)
            self.follow.setChecked(self.view.follow)
            self.follow.blockSignals(False)
