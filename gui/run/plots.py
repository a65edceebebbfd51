"""pyqtgraph plots. Items are created once and updated with setData / setOpts; ranges are set
explicitly (no auto-range per frame). Only the GUI thread calls these."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QCursor, QFont, QFontMetrics
from PySide6.QtWidgets import QToolTip, QWidget

from engine.records import SCORED, Candidate, Step
from gui.common.series_plot import still_plot, style_axes, tick_font
from gui.common.step_text import bar_text, legend_html, pct, short, value_text
from gui.common.theme import CUT_MARK, LIGHT, SERVER_BAR, Theme
from gui.run.class_bars import ClassBars
from gui.run.plot_fit import OTHER_ID, label_every, rows_for, x_limit, x_ticks

pg.setConfigOptions(antialias=True, useOpenGL=False)


class DistributionPlot(pg.PlotWidget):
    """Top-N candidates of one step as horizontal bars: raw probability, probability after the
    sampler (each row labelled with both), tokens cut by the filters hatched, the chosen token
    outlined (in a row of its own below a gap when it is not among the top N), and a line where
    the cut falls naming the filter. Hover a bar for its details; click it to choose that token
    (``bar_clicked(step_index, token_id)``)."""

    bar_clicked = Signal(int, int)
    legend_changed = Signal()  # the key changed (a scored text's tokens have no sampler bars)

    def __init__(self, parent: QWidget | None = None, top_n: int = 20) -> None:
        super().__init__(parent)
        self.setObjectName("distribution_plot")
        self.top_n = top_n
        self.step: Step | None = None
        self.marks: dict[int, str] = {}  # token id -> a class's guess that named it
        self.cut_note = ""
        self.rows: list[tuple[float, Candidate, int]] = []  # (y, candidate, rank) per bar row
        self.shown_n = 0  # ranked rows shown: top_n, or fewer when their labels would not fit
        self._x_upper = 1.0
        self._points = 11
        self._tick_font = QFont()
        self.theme = LIGHT
        plot = still_plot(self)
        vb = plot.getViewBox()
        vb.invertY(True)
        self.setXRange(0, self._x_upper, padding=0.02)
        self.setLabel("bottom", "probability")
        plot.getAxis("bottom").enableAutoSIPrefix(False)
        plot.getAxis("left").setStyle(hideOverlappingLabels=False)  # labels are thinned by us
        self.raw_kept = pg.BarGraphItem(x0=[], y=[], height=0.4, width=[])
        self.raw_cut = pg.BarGraphItem(x0=[], y=[], height=0.4, width=[])
        self.processed = pg.BarGraphItem(x0=[], y=[], height=0.4, width=[])
        self.server = pg.BarGraphItem(x0=[], y=[], height=0.26, width=[])
        self.chosen = pg.BarGraphItem(x0=[], y=[], height=0.9, width=[])
        self.cut_line = pg.InfiniteLine(angle=0, movable=False)
        self.cut_label = pg.TextItem(anchor=(1, 0))
        self.gap_line = pg.InfiniteLine(angle=0, movable=False)
        # where a penalised token's probability was before the penalty (a diamond on its row)
        self.before = pg.ScatterPlotItem(size=13, symbol="d")
        for item in (self.raw_kept, self.raw_cut, self.processed, self.server, self.chosen,
                     self.cut_line, self.gap_line, self.before, self.cut_label):  # fmt: skip
            self.addItem(item)
        self.class_bars = ClassBars(self)  # a live round's class, beside the model's bars
        self.value_labels: list[pg.TextItem] = []
        self._more_labels(51)  # made now: making them at the first token stalls the window
        self.scene().sigMouseClicked.connect(self._clicked)
        self.scene().sigMouseMoved.connect(self._hovered)
        self.set_theme(LIGHT)
        self.set_step(None)

    # -- look ----------------------------------------------------------------------------------

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        style_axes(self, theme)
        hatch = QBrush(QColor(theme.cut_bar), Qt.BrushStyle.BDiagPattern)
        self.raw_kept.setOpts(brush=pg.mkBrush(theme.raw_bar), pen=pg.mkPen(None))
        self.raw_cut.setOpts(brush=hatch, pen=pg.mkPen(theme.cut_bar, width=1))
        self.processed.setOpts(brush=pg.mkBrush(theme.kept_bar), pen=pg.mkPen(None))
        self.server.setOpts(brush=pg.mkBrush(SERVER_BAR), pen=pg.mkPen(None))
        self.chosen.setOpts(brush=pg.mkBrush(None), pen=pg.mkPen(theme.chosen, width=3))
        self.cut_line.setPen(pg.mkPen(CUT_MARK, width=2, style=Qt.PenStyle.DashLine))
        self.gap_line.setPen(pg.mkPen(theme.muted, width=1, style=Qt.PenStyle.DotLine))
        self.before.setPen(pg.mkPen(theme.chosen, width=1.5))
        self.before.setBrush(pg.mkBrush(None))
        self.cut_label.setColor(QColor(CUT_MARK if theme.name == "light" else "#e7a5c9"))
        for label in self.value_labels:
            label.setColor(QColor(theme.text))
        if self.step is not None:
            self.set_step(self.step)

    def set_text_size(self, points: int, presenting: bool) -> None:  # the display clock
        self.set_font_size(points if presenting else points - 1)

    def set_font_size(self, points: int) -> None:
        self._points = points
        self._tick_font = tick_font(self, points)
        plot = self.getPlotItem()
        plot.getAxis("bottom").label.setFont(self._tick_font)
        self.cut_label.setFont(self._tick_font)
        for label in self.value_labels:
            label.setFont(self._tick_font)
        plot.titleLabel.setAttr("size", f"{points + 1}pt")
        if self.step is not None:
            self.set_step(self.step)

    def set_top_n(self, n: int) -> None:
        self.top_n = n
        if self.step is not None:
            self.set_step(self.step)

    def resizeEvent(self, event: object) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        step = self.__dict__.get("step")  # None while the base class is being built
        if step is not None:  # the room for labels and how many fit depend on the size
            self.set_step(step)

    @property
    def sampled(self) -> bool:
        """The step shown has probabilities after a sampler: a scored text's has none, nor has
        a served stream's whose server reports raw probabilities only."""
        step = self.step
        return step is None or (step.source != SCORED and getattr(step, "after_sampler", True))

    @property
    def server_label(self) -> str:
        """Whose own sampler the third bar shows ("llama.cpp"), "" when there is none."""
        label = getattr(self.step, "server_sampler", "") if self.sampled else ""
        return label.split(" (")[0]

    def legend_html(self, short: int = 0) -> str:
        """The key, drawn outside the plot by whoever holds it; ``short`` 1 and 2 drop words
        and then the rarer marks, so that it fits on one line in a narrow plot."""
        return legend_html(self.theme, self.sampled, self.server_label, short, SERVER_BAR,
                           self.class_bars.key_colour())  # fmt: skip

    def legend_versions(self) -> tuple[str, ...]:
        return tuple(self.legend_html(n) for n in (0, 1, 2, 3))

    # -- drawing -------------------------------------------------------------------------------

    def set_marks(self, marks: dict[int, str], shares: dict[int, float] | None = None) -> None:
        """Mark guessed tokens' bars (``shares``: a class's own bars) until another step shows."""
        self.marks, self.class_bars.shares = dict(marks), dict(shares or {})
        if self.step is not None:
            self.set_step(self.step)

    def set_step(self, step: Step | None) -> None:
        """Draw ``step`` (None clears the plot): its bars, the probability axis, the cut and the
        gap before an outside row, the labels, and as many rows as fit."""
        if step is not self.step and self.marks and (step is None or self.step is None
                                                     or step.index != self.step.index):  # fmt: skip
            self.marks = self.class_bars.shares = {}
        was = (self.sampled, self.server_label)
        self.step = step
        if (self.sampled, self.server_label) != was:
            self.legend_changed.emit()
        if step is None:
            self._clear()
            return
        self.rows = self._rows(step)
        raw, proc = self._draw_bars(step)
        upper = self._scale_x(np.maximum.reduce([raw, proc, self._theirs, self.class_bars.ends]))
        shown = self.shown_n
        self._mark_cut(step, (proc <= 0)[:shown], upper)
        outside = len(self.rows) > shown
        self.gap_line.setPos(shown - 0.05 + 0.25)
        self.gap_line.setVisible(outside)
        self._label_rows(outside)
        last = shown + 1.15 if outside else max(shown, min(self.top_n, self._fit())) - 0.4
        self.setYRange(-0.6, last, padding=0)

    def _clear(self) -> None:
        self.rows = []
        for item in (self.raw_kept, self.raw_cut, self.processed, self.server, self.chosen):
            item.setOpts(x0=[], y=[], width=[])
        self.cut_line.hide()
        self.gap_line.hide()
        self.cut_label.setText("")
        self.before.setData([], [])
        self._place_values([])
        self.getPlotItem().getAxis("left").setTicks([[]])
        self.setYRange(-0.6, self.top_n - 0.4, padding=0)

    def _draw_bars(self, step: Step) -> tuple[np.ndarray, np.ndarray]:
        """The bars of ``self.rows``: the model's probability (hatched where a filter cut the
        token), the probability after the sampler, a diamond where a penalty moved it, and the
        chosen token's outline. Returns both probabilities per row."""
        y = np.array([r[0] for r in self.rows])
        raw = np.array([r[1].raw_prob for r in self.rows])
        proc = np.array([r[1].prob for r in self.rows])
        theirs = np.array([r[1].server_prob or 0.0 for r in self.rows])
        # nothing is cut where no sampler is shown (a raw-only stream's "other" bar included)
        cut = (proc <= 0) & self.sampled
        # a scored text's token (or a raw-only stream's) has no sampler: one bar per row, the
        # model's, twice as thick; a served model's own sampler adds a third, thinner bars
        off, tall, mid = (0.2, 0.4, 0.2) if self.sampled else (0.0, 0.8, 0.2)
        if self.server_label or self.class_bars.shown:  # three bars a row
            off, tall, mid = 0.27, 0.26, 0.0
        self.raw_kept.setOpts(x0=np.zeros((~cut).sum()), y=y[~cut] - off, width=raw[~cut],
                              height=tall)  # fmt: skip
        self.raw_cut.setOpts(x0=np.zeros(cut.sum()), y=y[cut] - off, width=raw[cut], height=tall)
        shown = len(y) if self.sampled else 0
        self.processed.setOpts(x0=np.zeros(shown), y=y[:shown] + mid, width=proc[:shown],
                               height=min(tall, 0.4))  # fmt: skip
        listed = [i for i, r in enumerate(self.rows) if r[1].server_prob is not None
                  and self.server_label]  # fmt: skip
        self.server.setOpts(x0=np.zeros(len(listed)), y=y[listed] + off, width=theirs[listed])
        self.class_bars.draw(y, off)
        marked = [(r[1].before_p, r[0]) for r in self.rows
                  if r[1].penalised_by and r[1].before_p is not None]  # fmt: skip
        self.before.setData([m[0] for m in marked], [m[1] + 0.2 for m in marked])
        chosen = [i for i, r in enumerate(self.rows) if r[1].token_id == step.token_id]
        if chosen:
            i = chosen[0]
            self.chosen.setOpts(x0=[0], y=[y[i]], width=[max(raw[i], proc[i], theirs[i], 0.002)])
        else:
            self.chosen.setOpts(x0=[], y=[], width=[])
        self._theirs = theirs if listed else np.zeros_like(raw)
        return raw, proc

    def _scale_x(self, ends: np.ndarray) -> float:
        """The probability axis for bars ending at ``ends``, with room for their value labels;
        returns its upper end."""
        texts = [self._value_text(c) for _y, c, _r in self.rows]
        upper = self._x_limit(ends, texts)
        if self._x_upper != upper:
            self._x_upper = upper
            self.setXRange(0, upper, padding=0.02)
        self._x_ticks(upper)
        return upper

    def _label_rows(self, outside: bool) -> None:
        """Each labelled row's token on the left axis and its values by its bar (``outside``:
        the chosen token has a row of its own below the gap)."""
        every = self._label_every(len(self.rows) + (1 if outside else 0))
        labelled = [self._labelled(k, every, c) for k, (_y, c, _r) in enumerate(self.rows)]
        ticks = [
            (row_y, (f"{rank}. {short(c.text)}" if rank else "other") if shown else "")
            for (row_y, c, rank), shown in zip(self.rows, labelled, strict=True)
        ]
        self._place_values(
            [(row_y, c) for (row_y, c, _), shown in zip(self.rows, labelled, strict=True) if shown]
        )
        axis = self.getPlotItem().getAxis("left")
        axis.setTicks([ticks])
        # wide enough for the longest label: pyqtgraph drops labels that do not fit
        metrics = QFontMetrics(self._tick_font)
        needed = max((metrics.horizontalAdvance(t) for _, t in ticks), default=40) + 16
        # Width and range change in steps, not with every token: each change re-lays out the
        # plot and paints it again (and a steady axis is easier to read on a projector).
        if needed > axis.width() or needed < axis.width() - 60:
            axis.setWidth(needed)

    def _fit(self) -> int:
        """How many rows' labels fit one above the other at this height and font (at least 5:
        the likely tokens are always labelled; fewer rows are shown rather than bare bars)."""
        height = self.getPlotItem().getViewBox().height()
        line = QFontMetrics(self._tick_font).height() * 1.05
        return max(5, int(height // line)) if height > 1 else self.top_n

    def _rows(self, step: Step) -> list[tuple[float, Candidate, int]]:
        rows, self.shown_n = rows_for(step, self.top_n, self._fit())
        return rows

    def _x_limit(self, ends: np.ndarray, texts: list[str]) -> float:
        # Past 1.0 the range grows for the label; the axis still stops at 1 (set_step).
        width = self.getPlotItem().getViewBox().width()
        return x_limit(width, QFontMetrics(self._tick_font).horizontalAdvance, ends, texts)

    def _x_ticks(self, upper: float) -> None:
        width = self.getPlotItem().getViewBox().width()
        label = QFontMetrics(self._tick_font).horizontalAdvance("0.75") * 1.6
        step, ticks = x_ticks(width, label, upper)
        key = (step, min(upper, 1.0))
        if getattr(self, "_ticks_key", None) != key:
            self._ticks_key = key
            self.getPlotItem().getAxis("bottom").setTicks([ticks])

    def _labelled(self, k: int, every: int, c: Candidate) -> bool:
        """Row ``k`` gets its labels: the top 5, every ``every``-th row, the chosen token's, a
        guessed one (``_rows`` shows only as many rows as fit, so ``every`` is 1 but for a
        plot too short for 5 rows)."""
        step = self.step
        chosen = step is not None and c.token_id == step.token_id
        return (k < 5 or k % every == 0 or chosen or c.token_id in self.marks
                or c.token_id == OTHER_ID)  # fmt: skip

    def _label_every(self, rows: int) -> int:
        height = self.getPlotItem().getViewBox().height()
        return label_every(height, QFontMetrics(self._tick_font).height() * 1.05, rows)

    def _mark_cut(self, step: Step, cut: np.ndarray, upper: float) -> None:
        # The cut falls where the kept prefix ends (when the kept tokens are a prefix by rank).
        first = int(np.argmax(cut)) if cut.any() else None
        if first is not None and (first == 0 or not cut[first:].all()):
            first = None
        self.cut_note = ""  # the cut, said in words, when the plot has no room for its label
        if first is None:
            self.cut_line.hide()
            self.cut_label.setText("")
            return
        by = step.candidates[first].cut_by
        kept = f"{step.survivors} kept"
        self.cut_line.setPos(first - 0.5)
        self.cut_line.show()
        text = f"{by} cut here: {kept}" if by else f"cut here: {kept}"
        self.cut_note = text
        width = self.getPlotItem().getViewBox().width()
        metrics = QFontMetrics(self._tick_font)
        # In the plot only where no bar label runs under it; else the box says it (cut_note).
        free = width - metrics.horizontalAdvance(text) - 8
        for k in (first - 1, first):
            if 0 <= k < len(self.rows):
                c = self.rows[k][1]
                right = max(c.raw_prob, c.prob, c.server_prob or 0.0) / self._x_upper * width
                right += metrics.horizontalAdvance(self._value_text(c)) + 12
                free = min(free, width - right - metrics.horizontalAdvance(text) - 8)
        if free < 0:
            self.cut_label.setText("")
            return
        self.cut_note = ""
        self.cut_label.setText(text)
        # at the right edge; above the line in the lower half
        self.cut_label.setAnchor((1, 1) if first > len(cut) / 2 else (1, 0))
        self.cut_label.setPos(QPointF(self.getPlotItem().viewRange()[0][1] * 0.99, first - 0.5))

    def _more_labels(self, n: int) -> None:
        while len(self.value_labels) < n:
            label = pg.TextItem(anchor=(0, 0.5), color=QColor(self.theme.text))
            label.setFont(self._tick_font)
            label.hide()
            self.addItem(label)
            self.value_labels.append(label)

    def _place_values(self, rows: list[tuple[float, Candidate]]) -> None:
        self._more_labels(len(rows))
        width = max(1.0, self.getPlotItem().getViewBox().width())
        metrics = QFontMetrics(self._tick_font)
        for label, (row_y, c) in zip(self.value_labels, rows, strict=False):
            text = self._value_text(c)
            if label.toPlainText() != text:
                label.setText(text)
            end = max(c.raw_prob, c.prob)
            room = (self._x_upper - end) / self._x_upper * width
            if room >= metrics.horizontalAdvance(text) + 8:
                label.fill = pg.mkBrush(None)
                label.setPos(end + self._x_upper * 0.01, row_y)
            else:  # over the bar, on a backing that keeps it readable
                backing = QColor(self.theme.plot_bg)
                backing.setAlpha(215)
                label.fill = pg.mkBrush(backing)
                label.setPos(self._x_upper * 0.01, row_y)
            label.show()
        for label in self.value_labels[len(rows) :]:
            if label.isVisible():
                label.hide()

    def _value_text(self, c: Candidate) -> str:
        guess = self.marks.get(c.token_id)
        said = value_text(c) if self.sampled else pct(c.raw_prob)  # no sampler: no ✂, no →
        return said + self.class_bars.label(c.token_id, guess)

    def shown_values(self) -> list[str]:
        return [label.toPlainText() for label in self.value_labels if label.isVisible()]

    # -- pointer -------------------------------------------------------------------------------

    def row_at(self, scene_pos: QPointF) -> int | None:
        vb = self.getPlotItem().getViewBox()
        if not vb.sceneBoundingRect().contains(scene_pos):
            return None
        y = vb.mapSceneToView(scene_pos).y()
        for k, (row_y, _c, _rank) in enumerate(self.rows):
            if abs(y - row_y) <= 0.5:
                return k
        return None

    def describe(self, row: int) -> str:
        """What the hover shows for one bar: token, id, rank, the probabilities, the cut."""
        if self.step is None or not 0 <= row < len(self.rows):
            return ""
        _y, c, rank = self.rows[row]
        return bar_text(self.step, c, rank, c.token_id == OTHER_ID)

    def _hovered(self, pos: QPointF) -> None:
        row = self.row_at(pos)
        if row is None:
            QToolTip.hideText()
            return
        QToolTip.showText(QCursor.pos(), self.describe(row), self)

    def _clicked(self, event: object) -> None:
        if self.step is None:
            return
        row = self.row_at(event.scenePos())  # type: ignore[attr-defined]
        if row is not None and self.rows[row][1].token_id != OTHER_ID:
            self.bar_clicked.emit(self.step.index, self.rows[row][1].token_id)
