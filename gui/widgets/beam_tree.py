"""The beam search drawn as it grows: one column per step, that step's candidates ranked top to
bottom, an edge from each to the beam it extends. Running beams are drawn normally, finished
hypotheses boxed in green, pruned candidates greyed; the final choice is highlighted."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import (
    QGraphicsRectItem,
    QGraphicsScene,
    QGraphicsSimpleTextItem,
    QGraphicsView,
    QWidget,
)

from engine.records import FINISHED, PRUNED, BeamEvent, BeamNode, BeamResult
from gui.theme import LIGHT, Theme

COL_W, ROW_H, BOX_W, BOX_H = 150, 46, 132, 38


def _label(node: BeamNode) -> str:
    token = repr(node.text)[1:-1].replace(" ", "␣")
    if len(token) > 12:
        token = token[:11] + "…"
    return f"{token}\n{node.logprob:+.2f}  Σ{node.score:.1f}"


class BeamTreeView(QGraphicsView):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
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

    def set_font_size(self, points: int) -> None:
        self.font_pt = points
        self._redraw()

    def clear_tree(self) -> None:
        self.nodes.clear()
        self.result = None
        self.events: list[BeamEvent] = []
        self._redraw()

    def add_event(self, event: BeamEvent) -> None:
        self.events.append(event)
        self._draw_event(event)
        self.scene().setSceneRect(self.scene().itemsBoundingRect().adjusted(-10, -10, 40, 40))
        self.horizontalScrollBar().setValue(self.horizontalScrollBar().maximum())

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
        root.setPos(-70, -10)
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
        for row, node in enumerate(event.nodes):
            self.nodes[node.node_id] = node
            pos = QPointF(event.step * COL_W, row * ROW_H)
            self.positions[node.node_id] = pos
            parent = self.positions.get(node.parent, QPointF(0, 0))
            start = QPointF(parent.x() + (BOX_W if node.parent else 0), parent.y() + BOX_H / 2)
            grey = node.status == PRUNED
            pen = QPen(QColor(t.cut_bar if grey else t.muted), 1.0 if grey else 1.6)
            self.edges[node.node_id] = scene.addLine(
                start.x(), start.y(), pos.x(), pos.y() + BOX_H / 2, pen
            )
            box = QGraphicsRectItem(QRectF(pos.x(), pos.y(), BOX_W, BOX_H))
            fill = QColor(t.base)
            border = QPen(QColor(t.cut_bar if grey else t.accent), 1.5)
            if node.status == FINISHED:
                border = QPen(QColor("#2da44e"), 3)
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
