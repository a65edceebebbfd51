"""The window's areas, built declaratively: the prompt, the output, the distribution and the
plots. They hold widgets; ``gui.run.view`` draws the run into them and ``gui.shell.window``
wires them."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from gui.common.fitting import ElidedCombo, OneLineLabel
from gui.common.series_plot import SeriesPlot
from gui.common.step_text import step_summary
from gui.common.token_pane import COLOR_BY_PROB, COLOR_BY_RANK, TokenPane
from gui.controls.knob_row import guard_wheel
from gui.controls.method_panel import MethodPanel
from gui.controls.sampler_panel import SamplerPanel
from gui.experiments.tabs import ExperimentTabs
from gui.run.beam_tree import BeamTreePanel, BeamTreeView
from gui.run.compare_view import CompareView
from gui.run.plots import DistributionPlot
from gui.shell.status import StatusArea as StatusArea  # the window builds it with the areas
from gui.tree.view import TreeView


def _shrinkable(label: QLabel) -> QLabel:
    """A wrapping label that never widens its column."""
    label.setWordWrap(True)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return label


class ControlsColumn(QScrollArea):
    """The method and the sampler, scrolling when the window is short."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.method = MethodPanel()
        self.sampler = SamplerPanel()
        inner = QWidget()
        column = QVBoxLayout(inner)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.method)
        column.addWidget(self.sampler, 1)
        # Long choices ("Temperature first (transformers)") must not widen the column: the
        # combo boxes elide, and their popups show the whole text.
        for combo in inner.findChildren(QComboBox):
            combo.setSizeAdjustPolicy(
                QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
            )
            combo.setMinimumContentsLength(4)
        for form in inner.findChildren(QFormLayout):
            # Each label above its field: the sliders and combo boxes get the column's whole
            # width (beside their labels the sliders were ~25 px stubs at 1280x720).
            form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapAllRows)
        self.setWidget(inner)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        guard_wheel(self)  # the wheel scrolls the column; it changes a setting only on purpose


class PromptBox(QGroupBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = OneLineLabel()  # beside the chat box: shortens rather than wrap and clip
        self.label.set_versions(("<b>Prompt</b>",))
        self.editor = QPlainTextEdit()
        self.editor.setObjectName("prompt")
        self.editor.setPlaceholderText("Type a prompt, then press Generate (Ctrl+Enter).")
        self.chat_template = QCheckBox("Use the chat template")
        self.chat_template.setToolTip(
            "Wrap the prompt as a chat message, the way an instruct model was trained to see it."
        )
        layout = QVBoxLayout(self)
        top = QHBoxLayout()
        top.addWidget(self.label, 1)
        top.addWidget(self.chat_template)
        layout.addLayout(top)
        layout.addWidget(self.editor)
        # the tick as the user (a lesson, a restart) left it; None: never chosen, a model with
        # a template ticks it (loading a model never overrides a choice: issue 34)
        self.chat_choice: bool | None = None
        self._describing = False
        self.chat_template.toggled.connect(self._chosen)

    def _chosen(self, on: bool) -> None:
        if not self._describing:
            self.chat_choice = on

    def choose_chat(self, on: bool) -> None:
        """Tick or untick the chat template as a choice (a restart, a tree opened)."""
        self.chat_choice = on
        self.chat_template.setChecked(on)

    def use_chat(self) -> bool:
        return self.chat_template.isChecked() if self.chat_template.isEnabled() else False

    def describe_model(self, encoder_decoder: bool, has_chat_template: bool) -> None:
        self.label.set_versions(
            ("<b>Encoder input</b>, read once; the decoder writes the output below.",
             "<b>Encoder input</b>, read once", "<b>Encoder input</b>")
            if encoder_decoder
            else ("<b>Prompt</b>: the model continues this text.", "<b>Prompt</b>: continued",
                  "<b>Prompt</b>")
        )  # fmt: skip
        self.chat_template.setEnabled(has_chat_template)
        self._describing = True
        chosen = self.chat_choice
        self.chat_template.setChecked(has_chat_template if chosen is None else chosen)
        self._describing = False
        self.chat_template.setVisible(has_chat_template)  # room for the label when unused


class OutputBox(QGroupBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        self.normal_title = "Output"  # a long title would set the column's minimum width
        super().__init__(self.normal_title, parent)
        self.pane = TokenPane()
        self.color_mode = ElidedCombo()  # cut with "…" in a narrow column (1024 px screens)
        self.color_mode.setObjectName("color_mode")
        self.color_mode.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.color_mode.setMinimumContentsLength(9)
        self.color_mode.addItem("Colour by rank", COLOR_BY_RANK)
        self.color_mode.addItem("Colour by probability", COLOR_BY_PROB)
        self.color_mode.setToolTip("How each token's box is coloured.")
        self.legend = _shrinkable(QLabel())
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.special = QCheckBox("Special tokens")
        self.special.setObjectName("show_special")
        self.special.setChecked(True)
        self.special.setToolTip(
            "Show tokens such as <|im_end|> as small grey marks; untick to hide them."
        )
        layout = QVBoxLayout(self)
        row = QHBoxLayout()  # the controls on one line, the key on its own full-width line
        row.addWidget(self.special)
        row.addStretch(1)
        row.addWidget(self.color_mode)
        layout.addLayout(row)
        layout.addWidget(self.legend)
        layout.addWidget(self.pane, 1)
        self.special.toggled.connect(self.pane.set_show_special)


class DistributionBox(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plot = DistributionPlot()
        self.top_n = QSpinBox()
        self.top_n.setObjectName("top_n")
        self.top_n.setRange(5, 50)
        self.top_n.setValue(20)
        self.top_n.setToolTip("How many of the most likely tokens to show.")
        self.hint = _shrinkable(QLabel("Click a bar to take that token instead."))
        self.info = _shrinkable(QLabel(step_summary(None)))
        self.info.setObjectName("dist_info")
        self.info.setTextFormat(Qt.TextFormat.RichText)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        row.addWidget(self.hint, 1)
        self.top_n_label = QLabel("Show top")
        row.addWidget(self.top_n_label)
        row.addWidget(self.top_n)
        self.sample_button = QPushButton("Sample N×")  # gui.experiments.actions: the histogram
        self.sample_button.setToolTip("Draw this step's token N times (Experiments tab)")
        row.addWidget(self.sample_button)
        layout.addLayout(row)
        self.key = OneLineLabel()  # one line: two would take rows from the plot
        self.key.set_versions(self.plot.legend_versions())
        self.plot.legend_changed.connect(lambda: self.key.set_versions(self.plot.legend_versions()))
        self.key.setObjectName("dist_key")
        # a served model: what its bars are (engine.serve.backends), whole on hover
        self.capability = _shrinkable(QLabel())
        self.capability.setObjectName("served_capability")
        self.capability.setWordWrap(True)
        self.capability.setTextFormat(Qt.TextFormat.PlainText)
        self.capability.hide()
        layout.addWidget(self.capability)
        layout.addWidget(self.info)
        layout.addWidget(self.key)
        layout.addWidget(self.plot, 1)
        self.top_n.valueChanged.connect(self.plot.set_top_n)


class PlotArea(QSplitter):
    """Tabs (distribution, beam tree, comparison) over the speed and entropy curves."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Vertical, parent)
        self.dist_box = DistributionBox()
        self.speed = SeriesPlot(
            "Speed", "tok/s", [("running", "#0072b2"), ("this step", "#e69f00")]
        )
        self.entropy = SeriesPlot(
            "Entropy", "bits", [("model", "#0072b2"), ("after sampler", "#e69f00")]
        )
        self.beam_tree = BeamTreeView()
        self.compare_view = CompareView()
        self.tabs = QTabWidget()
        self.tabs.setObjectName("right_tabs")
        self.tabs.addTab(self.dist_box, "Distribution")
        self.beam_panel = BeamTreePanel(self.beam_tree)
        self.tabs.addTab(self.beam_panel, "Beam tree")
        self.tabs.addTab(self.compare_view, "Compare")
        self.tree_view = TreeView()  # every branch of the runs on this prompt (issue 25)
        self.tabs.addTab(self.tree_view, "Tree")
        self.experiments = ExperimentTabs()  # filled by gui.experiments.actions
        self.tabs.addTab(self.experiments, "Experiments")
        self.entropy.setToolTip(
            "Entropy: how unsure the model is, in bits. 2 to the power of the entropy is the "
            "number of equally likely tokens that would be as unsure: 3 bits ≈ a fair pick "
            "among 8. 'model': before the sampler; 'after sampler': what was sampled from."
        )
        self.speed.setToolTip(
            "Tokens per second of the decode steps (the first token, which reads the whole "
            "prompt, is timed on its own: see the status bar). 'this step': each token's rate."
        )
        self.curves = QSplitter(Qt.Orientation.Horizontal)
        self.curves.addWidget(self.speed)
        self.curves.addWidget(self.entropy)
        self.addWidget(self.tabs)
        self.addWidget(self.curves)
        self.setStretchFactor(0, 3)
        self.setStretchFactor(1, 2)
        # No divider drags a pane to nothing (a drag up left the tabs at 0 px, one down the
        # curves, brought back only by finding a 4 px handle): each keeps a few lines of room.
        for split in (self, self.curves):
            split.setChildrenCollapsible(False)
        self.fit_minimum()
        self.curves_allowed = True
        self.tabs.currentChanged.connect(lambda _i: self.fit_curves(self.curves_allowed))

    def fit_minimum(self) -> None:
        """The least room a drag leaves: the tabs 12 lines of text high (the distribution's
        lines and a plot under them; at 8 the plot was gone), each curve 5 lines high and 10
        characters wide (an axis, its title and a few ticks read)."""
        metrics = QFontMetrics(self.font())
        line, char = metrics.lineSpacing(), metrics.averageCharWidth()
        self.tabs.setMinimumHeight(12 * line)
        for plot in (self.speed, self.entropy):
            plot.setMinimumSize(10 * char, 5 * line)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:  # the presentation view, A+ / A-
            self.fit_minimum()

    def fit_curves(self, allowed: bool = True) -> None:
        """The speed and entropy curves are the run's: hidden (their room to the tab) while
        the tree, a comparison or an experiment is read; ``allowed`` off: hidden (the
        presentation view), and kept hidden when its tab changes (a tab change showed them,
        squeezed under 20 pt text, in the presentation view)."""
        self.curves_allowed = allowed
        reading = (self.tree_view, self.compare_view, self.experiments)
        self.curves.setVisible(allowed and self.tabs.currentWidget() not in reading)
