"""MainWindow: layout, actions and wiring. Engine records arrive through the runner's buffer
and are drawn by a 30 Hz timer, so the generation rate never drives the screen rate."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from PySide6.QtCore import QSettings, QStandardPaths, Qt, QTimer, Slot
from PySide6.QtGui import QAction, QCloseEvent, QFont, QFontMetrics, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from engine.catalog import BUNDLED, DEFAULT_MODEL
from engine.export import (
    run_to_csv,
    run_to_json,
    run_to_markdown,
    step_to_dict,
    steps_from_dict,
    write_atomic,
)
from engine.models import ModelBundle
from engine.records import BeamEvent, BeamResult, MethodResult, RunSummary, Step
from engine.settings import SamplerSettings
from gui.theme import BUCKET_LABELS, THEMES, apply_palette
from gui.widgets.beam_tree import BeamTreeView
from gui.widgets.compare_view import CompareView
from gui.widgets.method_panel import BEAM, SAMPLING, SPEC_DRAFT, SPEC_NGRAM, MethodPanel
from gui.widgets.plots import DistributionPlot, SeriesPlot, step_summary
from gui.widgets.sampler_panel import SamplerPanel
from gui.widgets.token_pane import COLOR_BY_PROB, COLOR_BY_RANK, TokenPane
from gui.worker import KEEP_CANDIDATES, EngineRunner, StatsUpdate, Truncate

SETTINGS_VERSION = 1
REDRAW_HZ = 30
MAX_RECENTS = 8
BASE_FONT_PT = 12
OPEN_FOLDER, OPEN_GGUF, OPEN_HUB = "action:folder", "action:gguf", "action:hub"
DIST_EVERY = 3  # while generating: the distribution plot at 10 Hz (text stays at 30 Hz)
SERIES_EVERY = 12  # and the speed/entropy curves at 2.5 Hz (offset by one frame); all when idle
AUTOSAVE_MS = 2000  # while something changed, write the autosave at most this often


def lighten(step: Step) -> Step:
    """The same record with its top 5 candidates only (enough for the hover text)."""
    return replace(step, candidates=step.candidates[:5]) if len(step.candidates) > 5 else step


def default_autosave_path() -> Path:
    base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppDataLocation)
    return Path(base or Path.home() / ".decoding-lab") / "autosave.json"


class MainWindow(QMainWindow):
    def __init__(
        self,
        store: QSettings | None = None,
        autoload: bool = True,
        autosave_path: Path | None = None,
    ) -> None:
        super().__init__()
        self.autosave_path = Path(autosave_path) if autosave_path else default_autosave_path()
        self.restored_from_autosave = False
        self.setWindowTitle("Decoding Lab")
        self.store = store or QSettings("DecodingLab", "Decoding Lab")
        self.runner = EngineRunner(self)
        self.steps: list[Step] = []
        # Per-step values kept incrementally, so a redraw never walks the whole run:
        # plot series and each step's autosave JSON (serialised once, when it arrives).
        self._series: dict[str, list[float]] = {
            k: [] for k in ("running", "per_step", "h_raw", "h")
        }
        self._saved: list[str] = []
        self._frame = 0
        self.selected: int | None = None
        self.bundle: ModelBundle | None = None
        self.recents: list[str] = []
        self.theme = THEMES["light"]
        self.font_pt = BASE_FONT_PT
        self.last_error: str | None = None
        self.last_summary: RunSummary | None = None
        self._error_box: QMessageBox | None = None
        self._after_idle: list = []
        self._loading_source: str | None = None
        self._closing = False

        self._build_ui()
        self._build_actions()
        self._wire()
        self.restore_state()
        self.timer = QTimer(self)
        self.timer.setInterval(1000 // REDRAW_HZ)
        self.timer.timeout.connect(self.drain)
        self.timer.start()
        self.autosave_timer = QTimer(self)
        self.autosave_timer.setSingleShot(True)
        self.autosave_timer.setInterval(AUTOSAVE_MS)
        self.autosave_timer.timeout.connect(self.autosave)
        self.prompt.textChanged.connect(self._changed)
        self.sampler.settings_changed.connect(self._changed)
        self.restore_autosave()
        self._update_buttons()
        if autoload:
            QTimer.singleShot(0, lambda: self.load_model(self._initial_model))

    # -- layout -------------------------------------------------------------------------------

    def _build_ui(self) -> None:
        self.method = MethodPanel()
        self.sampler = SamplerPanel()
        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.addWidget(self.method)
        ll.addWidget(self.sampler, 1)
        self.left = QScrollArea()
        self.left.setWidget(left)
        self.left.setWidgetResizable(True)
        self.left.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

        self.prompt_label = QLabel("Prompt")
        self.prompt_label.setWordWrap(True)
        self.prompt = QPlainTextEdit()
        self.prompt.setObjectName("prompt")
        self.prompt.setPlaceholderText("Type a prompt, then press Generate (Ctrl+Enter).")
        self.chat_template = QCheckBox("Use the chat template")
        self.chat_template.setToolTip(
            "Wrap the prompt as a chat message, the way an instruct model was trained to see it."
        )
        prompt_box = QGroupBox()
        pl = QVBoxLayout(prompt_box)
        top = QHBoxLayout()
        top.addWidget(self.prompt_label, 1)
        top.addWidget(self.chat_template)
        pl.addLayout(top)
        pl.addWidget(self.prompt)

        self.pane = TokenPane()
        self.color_mode = QComboBox()
        self.color_mode.setObjectName("color_mode")
        self.color_mode.addItem("Colour by rank", COLOR_BY_RANK)
        self.color_mode.addItem("Colour by probability", COLOR_BY_PROB)
        self.color_mode.setToolTip("How each token's box is coloured.")
        self.legend = QLabel()
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        self.legend.setWordWrap(True)
        self.legend.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        out_box = QGroupBox("Output: one box per token. Hover for details, click to inspect.")
        ol = QVBoxLayout(out_box)
        legend_row = QHBoxLayout()
        legend_row.addWidget(self.legend, 1)
        legend_row.addWidget(self.color_mode)
        ol.addLayout(legend_row)
        ol.addWidget(self.pane, 1)

        middle = QSplitter(Qt.Orientation.Vertical)
        middle.addWidget(prompt_box)
        middle.addWidget(out_box)
        middle.setStretchFactor(0, 1)
        middle.setStretchFactor(1, 3)

        self.dist = DistributionPlot()
        self.top_n = QSpinBox()
        self.top_n.setObjectName("top_n")
        self.top_n.setRange(5, 50)
        self.top_n.setValue(20)
        self.top_n.setToolTip("How many of the most likely tokens to show.")
        self.dist_hint = QLabel("Click a bar to take that token instead.")
        self.dist_hint.setWordWrap(True)
        self.dist_hint.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        dist_box = QWidget()
        dl = QVBoxLayout(dist_box)
        dl.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        row.addWidget(self.dist_hint, 1)
        row.addWidget(QLabel("Show top"))
        row.addWidget(self.top_n)
        dl.addLayout(row)
        self.dist_info = QLabel(step_summary(None))
        self.dist_info.setObjectName("dist_info")
        self.dist_info.setWordWrap(True)
        self.dist_info.setTextFormat(Qt.TextFormat.RichText)
        self.dist_info.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        dl.addWidget(self.dist_info)
        dl.addWidget(self.dist, 1)

        self.speed = SeriesPlot(
            "Speed", "tokens / s", [("running", "#1f6feb"), ("this step", "#e8772e")]
        )
        self.entropy = SeriesPlot(
            "Entropy", "bits", [("model", "#1f6feb"), ("after sampler", "#e8772e")]
        )
        bottom = QSplitter(Qt.Orientation.Horizontal)
        bottom.addWidget(self.speed)
        bottom.addWidget(self.entropy)
        self.beam_tree = BeamTreeView()
        self.compare_view = CompareView()
        self.tabs = QTabWidget()
        self.tabs.setObjectName("right_tabs")
        self.tabs.addTab(dist_box, "Distribution")
        self.tabs.addTab(self.beam_tree, "Beam tree")
        self.tabs.addTab(self.compare_view, "Compare methods")
        self.plots = QSplitter(Qt.Orientation.Vertical)
        self.plots.addWidget(self.tabs)
        self.plots.addWidget(bottom)
        self.plots.setStretchFactor(0, 3)
        self.plots.setStretchFactor(1, 2)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.left)
        self.splitter.addWidget(middle)
        self.splitter.addWidget(self.plots)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setStretchFactor(2, 3)
        self.splitter.setSizes([350, 550, 820])
        self.setCentralWidget(self.splitter)

        self.model_label = QLabel("No model")
        self.busy_bar = QProgressBar()
        self.busy_bar.setRange(0, 0)
        self.busy_bar.setMaximumWidth(140)
        self.busy_bar.hide()
        self.status_text = QLabel("")
        # Long messages must never widen the window: let the label shrink and elide.
        self.status_text.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.status_text.setTextFormat(Qt.TextFormat.PlainText)  # messages may quote <tokens>
        self.status_text.setMinimumWidth(1)
        self.rate_label = QLabel("")
        sb = self.statusBar()
        sb.addWidget(self.model_label)
        sb.addWidget(self.busy_bar)
        sb.addWidget(self.status_text, 1)
        sb.addPermanentWidget(self.rate_label)
        self._fit_to_screen()

    def _fit_to_screen(self) -> None:
        """First start: fill most of the screen (saved geometry wins later)."""
        screen = QApplication.primaryScreen()
        if screen is None:
            self.resize(1600, 900)
            return
        area = screen.availableGeometry()
        self.resize(min(1720, int(area.width() * 0.96)), min(1000, int(area.height() * 0.94)))

    def _build_actions(self) -> None:
        tb = QToolBar("Main")
        tb.setObjectName("main_toolbar")
        tb.setMovable(False)
        tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.addToolBar(tb)
        tb.addWidget(QLabel(" Model "))
        self.model_picker = QComboBox()
        self.model_picker.setObjectName("model_picker")
        self.model_picker.setMinimumWidth(280)
        self.model_picker.setToolTip("Pick a bundled model, a recent one, or open another.")
        tb.addWidget(self.model_picker)
        tb.addSeparator()

        def action(
            text: str, keys: str | QKeySequence.StandardKey | None, tip: str, slot
        ) -> QAction:
            a = QAction(text, self)
            if keys is not None:
                a.setShortcut(QKeySequence(keys))
                a.setToolTip(
                    f"{tip} ({a.shortcut().toString(QKeySequence.SequenceFormat.NativeText)})"
                )
            else:
                a.setToolTip(tip)
            a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            a.triggered.connect(slot)
            self.addAction(a)
            return a

        self.act_generate = action(
            "Generate", "Ctrl+Return", "Start a new run from the prompt", self.generate
        )
        self.act_stop = action("Stop", "Esc", "Stop after the current token", self.stop)
        self.act_step = action(
            "Step", "Ctrl+Right", "Generate exactly one more token", self.step_once
        )
        self.act_continue = action(
            "Continue",
            "Ctrl+Shift+Return",
            "Carry on from where the run stopped",
            self.continue_run,
        )
        self.act_undo = action(
            "Undo choice",
            "Alt+Backspace",
            "Go back to the text before your last token choice",
            self.undo,
        )
        self.act_clear = action(
            "Clear", "Ctrl+L", "Clear the output and the plots", self.clear_output
        )
        for a in (
            self.act_generate,
            self.act_stop,
            self.act_step,
            self.act_continue,
            self.act_undo,
            self.act_clear,
        ):
            tb.addAction(a)
        tb.addSeparator()
        self.act_theme = action(
            "Dark theme", "Ctrl+T", "Switch between light and dark", self.toggle_theme
        )
        self.act_theme.setCheckable(True)
        tb.addAction(self.act_theme)
        self.act_zoom_in = action(
            "A+",
            QKeySequence.StandardKey.ZoomIn,
            "Bigger text",
            lambda: self.set_zoom(self.font_pt + 1),
        )
        self.act_zoom_out = action(
            "A−",
            QKeySequence.StandardKey.ZoomOut,
            "Smaller text",
            lambda: self.set_zoom(self.font_pt - 1),
        )
        self.act_zoom_reset = action(
            "A", "Ctrl+0", "Normal text size", lambda: self.set_zoom(BASE_FONT_PT)
        )
        for a in (self.act_zoom_out, self.act_zoom_reset, self.act_zoom_in):
            tb.addAction(a)
        tb.addSeparator()
        menu = self.menuBar().addMenu("&File")
        self.act_export_json = action(
            "Export run as JSON…",
            None,
            "Prompt, model, settings and every step",
            lambda: self.export("json"),
        )
        self.act_export_csv = action(
            "Export steps as CSV…", None, "One row per generated token", lambda: self.export("csv")
        )
        self.act_export_png = action(
            "Export plots as PNG…", None, "A picture of the plots", lambda: self.export("png")
        )
        self.act_export_md = action(
            "Export text as Markdown…", None, "The prompt and the output", lambda: self.export("md")
        )
        for a in (
            self.act_export_json,
            self.act_export_csv,
            self.act_export_png,
            self.act_export_md,
        ):
            menu.addAction(a)
        menu.addSeparator()
        menu.addAction(
            action("Quit", QKeySequence.StandardKey.Quit, "Close Decoding Lab", self.close)
        )
        help_menu = self.menuBar().addMenu("&Help")
        self.act_about = action(
            "About Decoding Lab", None, "Versions and licences", self.show_about
        )
        help_menu.addAction(self.act_about)
        self.export_button = tb.addAction("Export…")
        self.export_button.setToolTip("Save the run: JSON, CSV, PNG or Markdown")
        self.export_button.triggered.connect(lambda: self.export("json"))

    def _wire(self) -> None:
        r = self.runner
        r.busy_changed.connect(self._on_busy)
        r.progress.connect(self._on_progress)
        r.model_loaded.connect(self._on_model_loaded)
        r.load_failed.connect(self._on_load_failed)
        r.run_finished.connect(self._on_run_finished)
        r.beam_finished.connect(self._on_beam_finished)
        r.draft_loaded.connect(self._on_draft_loaded)
        r.compare_finished.connect(self._on_compare_finished)
        r.failed.connect(self.show_error)
        self.method.method_changed.connect(self._on_method_changed)
        self.method.load_draft_requested.connect(self._pick_draft)
        self.compare_view.run_requested.connect(self.run_comparison)
        self.sampler.settings_changed.connect(r.update_settings)
        self.sampler.pacing_changed.connect(r.set_pacing)
        self.pane.token_clicked.connect(self.select_step)
        self.dist.bar_clicked.connect(self.choose_token)
        self.top_n.valueChanged.connect(self.dist.set_top_n)
        self.color_mode.currentIndexChanged.connect(lambda _i: self._set_color_mode())
        self.model_picker.activated.connect(self._on_model_picked)

    # -- models -------------------------------------------------------------------------------

    def _fill_model_picker(self) -> None:
        p = self.model_picker
        p.blockSignals(True)
        p.clear()
        for m in BUNDLED.values():
            p.addItem(f"{m.title}  [{m.kind}]", m.name)
            p.setItemData(p.count() - 1, m.description, Qt.ItemDataRole.ToolTipRole)
        for source in self.recents:
            if source not in BUNDLED:
                p.addItem(f"Recent: {source}", source)
        p.insertSeparator(p.count())
        p.addItem("Open folder…", OPEN_FOLDER)
        p.addItem("Open GGUF file…", OPEN_GGUF)
        p.addItem("Hugging Face id…", OPEN_HUB)
        current = (
            self.bundle.source_key if self.bundle and hasattr(self.bundle, "source_key") else None
        )
        key = current or self._loading_source
        if key is not None and p.findData(key) >= 0:
            p.setCurrentIndex(p.findData(key))
        p.blockSignals(False)

    @Slot(int)
    def _on_model_picked(self, index: int) -> None:
        data = self.model_picker.itemData(index)
        source = None
        if data == OPEN_FOLDER:
            source = QFileDialog.getExistingDirectory(self, "Open a model folder")
        elif data == OPEN_GGUF:
            source, _ = QFileDialog.getOpenFileName(
                self, "Open a GGUF file", "", "GGUF files (*.gguf)"
            )
        elif data == OPEN_HUB:
            text, ok = QInputDialog.getText(
                self, "Hugging Face model", "Model id (for example gpt2):"
            )
            source = text.strip() if ok else None
        else:
            source = data
        if source:
            self.load_model(source)
        else:
            self._fill_model_picker()

    def load_model(self, source: str) -> None:
        """Load a model; a running generation is stopped first (the current model stays until
        the new one is ready)."""
        if self.runner.busy:
            self.runner.stop()
            self._after_idle.append(lambda: self.load_model(source))
            return
        self._loading_source = source
        self.status_text.setText(f"Loading {source}…")
        self.runner.load(source)

    @Slot(object)
    def _on_model_loaded(self, bundle: ModelBundle) -> None:
        source = self._loading_source or bundle.source
        bundle.source_key = source  # type: ignore[attr-defined]
        previous_example = self.bundle.extra.get("example_prompt") if self.bundle else None
        self.bundle = bundle
        self._loading_source = None
        if source in self.recents:
            self.recents.remove(source)
        self.recents.insert(0, source)
        del self.recents[MAX_RECENTS:]
        self._fill_model_picker()
        self.model_label.setText(bundle.describe())
        enc = bundle.is_encoder_decoder
        self.prompt_label.setText(
            "<b>Encoder input</b>: the encoder reads this once; the decoder then writes the "
            "output below, token by token."
            if enc
            else "<b>Prompt</b>: the model continues this text."
        )
        self.chat_template.setEnabled(bundle.has_chat_template)
        self.chat_template.setChecked(bundle.has_chat_template)
        example = bundle.extra.get("example_prompt")
        current = self.prompt.toPlainText().strip()
        if example and (not current or current == previous_example):
            self.prompt.setPlainText(example)
        self.clear_output()
        self.status_text.setText(f"Ready: {bundle.name}. Press Generate (Ctrl+Enter).")

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        self._loading_source = None
        self._fill_model_picker()
        self.show_error(f"Could not load the model.\n\n{message}")

    # -- running ------------------------------------------------------------------------------

    @Slot()
    def generate(self) -> None:
        if self.runner.busy:
            return
        settings = self.sampler.next_run_settings()
        self.runner.update_settings(settings)
        method = self.method.current()
        prompt, chat = self.prompt.toPlainText(), self._use_chat()
        if method == BEAM:
            self.runner.buffer.append(Truncate(0))
            self.beam_tree.clear_tree()
            started = self.runner.generate_beam(
                prompt, chat, self.method.beams.value(), settings.max_new_tokens,
                settings.no_repeat_ngram_size,
            )  # fmt: skip
            if started:
                self.tabs.setCurrentWidget(self.beam_tree)
        elif method in (SPEC_NGRAM, SPEC_DRAFT):
            self.method.stats.setText("")
            started = self.runner.generate_speculative(
                prompt, chat, method == SPEC_DRAFT, self.method.gamma.value()
            )
        else:
            started = self.runner.generate(prompt, chat)
        if started:
            self.selected = None
            self.status_text.setText("Generating…")

    @Slot()
    def run_comparison(self) -> None:
        if self.runner.busy:
            return
        settings = self.sampler.next_run_settings()
        self.runner.update_settings(settings)
        if self.runner.compare(
            self.prompt.toPlainText(), self._use_chat(), settings.max_new_tokens,
            self.method.beams.value(), self.method.gamma.value(),
        ):  # fmt: skip
            self.tabs.setCurrentWidget(self.compare_view)
            self.status_text.setText("Comparing methods…")

    @Slot()
    def _pick_draft(self) -> None:
        text, ok = QInputDialog.getText(
            self, "Draft model", "A bundled name, a folder, a .gguf file or a Hugging Face id:"
        )
        if ok and text.strip():
            self.load_draft(text.strip())

    def load_draft(self, source: str) -> None:
        if self.runner.busy:
            return
        self.status_text.setText(f"Loading draft model {source}…")
        self.runner.load_draft(source)

    @Slot(object)
    def _on_draft_loaded(self, draft: ModelBundle) -> None:
        self.method.draft_label.setText(draft.name)
        self.status_text.setText(f"Draft model ready: {draft.name}")

    @Slot(str)
    def _on_method_changed(self, method: str) -> None:
        self.pane.speculative = method in (SPEC_NGRAM, SPEC_DRAFT)
        self._update_legend()
        if method == BEAM:
            self.tabs.setCurrentWidget(self.beam_tree)
        elif self.tabs.currentWidget() is self.beam_tree:
            self.tabs.setCurrentIndex(0)

    @Slot(object)
    def _on_beam_finished(self, result: BeamResult) -> None:
        self.drain()
        self.beam_tree.finish(result)
        # Show the best hypothesis in the output pane (probabilities from the beam's log-probs).
        from engine.generate import StepRecorder  # loaded with the model by now

        recorder = StepRecorder(self.bundle.tokenizer if self.bundle else None, 1)
        steps = []
        nodes = self.beam_tree.nodes
        path, node_id = [], result.best.node_id
        while node_id in nodes:
            path.append(nodes[node_id])
            node_id = nodes[node_id].parent
        for i, node in enumerate(reversed(path)):
            p = float(np.exp(node.logprob))
            values = [node.token_id, p, p, node.token_id, p, p, 0, 1, 0.0, 0.0, 1.0]
            step = recorder.record(
                i,
                values,
                result.seconds / max(1, len(path)),  # beam steps are not timed one by one
                result.tokens_per_s,
                self.bundle.eos_token_ids if self.bundle else (),
                source="beam",
            )
            steps.append(step)
        self.runner.buffer.append(Truncate(0))
        self.runner.buffer.extend(steps)
        self.drain()
        best = result.best
        self.status_text.setText(
            f"Beam search done: {len(best.token_ids)} tokens, score {best.score:.3f}, "
            f"{result.forward_passes} forward passes, {result.tokens_per_s:.1f} tokens/s."
        )

    @Slot(object)
    def _on_compare_finished(self, results: list[MethodResult]) -> None:
        self.compare_view.show_results(results)
        self.status_text.setText(f"Compared {len(results)} methods.")

    @Slot()
    def stop(self) -> None:
        if self.runner.busy:
            self.runner.stop()
            self.status_text.setText("Stopping…")

    @Slot()
    def step_once(self) -> None:
        if self.runner.busy:
            return
        if self.runner.session is None:  # no run yet: start one that stops after one token
            self.runner.update_settings(self.sampler.next_run_settings())
            self.runner.generate(self.prompt.toPlainText(), self._use_chat(), limit=1)
            return
        self.runner.step_once()

    @Slot()
    def continue_run(self) -> None:
        if not self.runner.busy:
            self.runner.continue_()

    @Slot()
    def undo(self) -> None:
        if not self.runner.busy:
            self.runner.undo()

    def _use_chat(self) -> bool:
        return self.chat_template.isChecked() if self.chat_template.isEnabled() else False

    @Slot(int, int)
    def choose_token(self, step_index: int, token_id: int) -> None:
        """Force ``token_id`` at ``step_index`` and continue from there (a branch)."""
        if self.method.current() != SAMPLING or self.runner.session is None:
            self.show_error(
                "Choosing a token by hand works with the Sampling method: "
                "switch to it and Generate."
            )
            return
        if self.runner.busy:
            self.runner.stop()
            self._after_idle.append(lambda: self.choose_token(step_index, token_id))
            return
        remaining = max(1, self.sampler.settings().max_new_tokens - step_index)
        if self.runner.branch(step_index, token_id, remaining):
            self.selected = None
            self.status_text.setText(f"Chose another token at step {step_index + 1}; continuing…")

    @Slot()
    def clear_output(self) -> None:
        if self.runner.busy:
            return
        self.runner.buffer.clear()
        self.runner.session = None
        self.steps.clear()
        self._saved.clear()
        for values in self._series.values():
            values.clear()
        self.selected = None
        self.pane.clear_tokens()
        self.dist.set_step(None)
        self.dist_info.setText(step_summary(None))
        self.speed.clear_series()
        self.entropy.clear_series()
        self.rate_label.setText("")
        self._update_buttons()

    # -- drawing (timer) ----------------------------------------------------------------------

    @Slot()
    def drain(self) -> None:
        """Move everything the worker buffered onto the screen, redrawing once."""
        buf = self.runner.buffer
        if not buf:
            return
        new: list[Step] = []
        while buf:
            item = buf.popleft()
            if isinstance(item, Truncate):
                self.pane.append_steps(new)
                new = []
                del self.steps[item.keep :]
                del self._saved[item.keep :]
                for values in self._series.values():
                    del values[item.keep :]
                self.pane.truncate(item.keep)
                if self.selected is not None and self.selected >= item.keep:
                    self.selected = None
            elif isinstance(item, BeamEvent):
                self.beam_tree.add_event(item)
            elif isinstance(item, StatsUpdate):
                self._show_spec_stats(item.stats)
            else:
                new.append(item)
                self.steps.append(item)
                self._track(item)
        before = len(self.steps) - len(new)
        self.pane.append_steps(new)
        # Memory bound: steps older than the last KEEP_CANDIDATES keep only their top 5.
        for i in range(max(0, before - KEEP_CANDIDATES), len(self.steps) - KEEP_CANDIDATES):
            self.steps[i] = self.pane.steps[i] = lighten(self.steps[i])
        self._redraw_plots()
        self._changed()

    # -- autosave: nothing lost, even if the process is killed -----------------------------------

    def _track(self, step: Step) -> None:
        self._saved.append(json.dumps(step_to_dict(lighten(step)), ensure_ascii=False))
        series = self._series
        series["running"].append(step.tokens_per_s)
        series["per_step"].append(1.0 / step.step_time if step.step_time > 0 else 0.0)
        series["h_raw"].append(step.entropy_raw)
        series["h"].append(step.entropy)

    @Slot()
    def _changed(self, *_args: object) -> None:
        if not self.autosave_timer.isActive() and not self._closing:
            self.autosave_timer.start()

    @Slot()
    def autosave(self) -> bool:
        """Write prompt, settings and the last run (top-5 candidates per step) atomically."""
        model = self.bundle.source_key if self.bundle and hasattr(self.bundle, "source_key") else ""
        head = {
            "format": "decoding-lab-autosave/1",
            "prompt": self.runner.prompt_text,
            "editor_prompt": self.prompt.toPlainText(),
            "model": model,
            "settings": self.sampler.settings().to_dict(),
            "method": self.method.current(),
            "saved_at": time.time(),
        }
        text = (
            json.dumps(head, ensure_ascii=False)[:-1]
            + ', "steps": ['
            + ",".join(self._saved)
            + "]}"
        )
        try:
            self.autosave_path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.autosave_path, text)
        except OSError as exc:
            self.status_text.setText(f"Could not autosave: {exc}")
            return False
        return True

    def restore_autosave(self) -> None:
        try:
            data = json.loads(self.autosave_path.read_text(encoding="utf-8"))
            if data.get("format") != "decoding-lab-autosave/1":
                return
            steps = steps_from_dict(data)
            settings = SamplerSettings.from_dict(data.get("settings", {}))
        except (OSError, ValueError, TypeError, KeyError):
            return  # no autosave, or a damaged one: start fresh
        self.prompt.setPlainText(data.get("editor_prompt", ""))
        self.sampler.set_settings(settings)
        self.runner.prompt_text = data.get("prompt", "")
        if steps:
            self.runner.buffer.append(Truncate(0))
            self.runner.buffer.extend(steps)
            self.drain()
            self.status_text.setText(
                f"Restored the last run ({len(steps)} tokens) from the autosave."
            )
        self.restored_from_autosave = True

    def _show_spec_stats(self, st: dict) -> None:
        by_pos = " ".join(f"{r:.0%}" for r in st["acceptance_by_position"])
        self.method.stats.setText(
            f"Accepted {st['accepted']} of {st['drafted']} drafts ({st['acceptance_rate']:.0%}); "
            f"{st['mean_accepted_length']:.2f} per check; "
            f"{st['target_passes_per_token']:.2f} target passes per token.\nBy position: {by_pos}"
        )

    def _redraw_plots(self) -> None:
        steps = self.steps
        if not steps:
            self.dist.set_step(None)
            self.dist_info.setText(step_summary(None))
            self.speed.clear_series()
            self.entropy.clear_series()
            return
        shown = (
            steps[self.selected]
            if self.selected is not None and self.selected < len(steps)
            else steps[-1]
        )
        self._frame += 1
        busy = self.runner.busy
        # While generating, plots redraw less often than the text (painting holds the GIL the
        # worker needs), and never both in one frame: the curves come on a frame without the
        # distribution, so no frame keeps the event loop busy for both paints.
        if not busy or self._frame % DIST_EVERY == 0:
            self.dist.set_step(shown)
            self.dist_info.setText(step_summary(shown))
        if busy and self._frame % SERIES_EVERY != 1:
            return
        x = np.arange(1, len(steps) + 1)
        series = {k: np.asarray(v) for k, v in self._series.items()}
        last = steps[-1]
        self.speed.set_series(
            x, {"running": series["running"], "this step": series["per_step"]},
            f"{last.tokens_per_s:.1f} tok/s · {last.step_time * 1000:.0f} ms/token",
        )  # fmt: skip
        if last.source == "beam":  # a beam's tokens have no single distribution to measure
            self.entropy.clear_series()
            self.entropy.getPlotItem().setTitle("entropy: n/a for beams")
        else:
            self.entropy.set_series(
                x, {"model": series["h_raw"], "after sampler": series["h"]},
                f"entropy {last.entropy_raw:.2f} bits ≈ {2 ** last.entropy_raw:.0f} tokens",
            )  # fmt: skip
        self.speed.mark(self.selected + 1 if self.selected is not None else None)
        self.entropy.mark(self.selected + 1 if self.selected is not None else None)
        self.rate_label.setText(f"{len(steps)} tokens · {last.tokens_per_s:.1f} tok/s")

    @Slot(int)
    def select_step(self, index: int) -> None:
        self.selected = index
        self.pane.select(index)
        self._redraw_plots()

    # -- events from the runner ---------------------------------------------------------------

    @Slot(bool)
    def _on_busy(self, busy: bool) -> None:
        self.busy_bar.setVisible(busy)
        if not busy:
            self.drain()  # always flush, so the last token shows
            if self.steps:
                self._redraw_plots()  # and every curve has its last point
            queued, self._after_idle = self._after_idle, []
            for fn in queued:
                fn()
        self._update_buttons()

    @Slot(str)
    def _on_progress(self, message: str) -> None:
        self.status_text.setText(message)

    @Slot(object)
    def _on_run_finished(self, summary: RunSummary) -> None:
        self.drain()
        self.last_summary = summary
        reasons = {
            "eos": "the model ended its answer",
            "max_new_tokens": "reached the token limit (Continue for more)",
            "context": "the model's context is full",
            "stopped": "stopped",
        }
        why = reasons.get(summary.stop_reason, summary.stop_reason)
        self.status_text.setText(
            f"Done: {summary.tokens} tokens in {summary.seconds:.2f} s "
            f"({summary.tokens_per_s:.1f} tokens/s); {why}."
        )

    def _update_buttons(self) -> None:
        busy = self.runner.busy
        has_model = self.bundle is not None
        session = self.runner.session
        self.act_generate.setEnabled(not busy and has_model)
        self.act_stop.setEnabled(busy)
        self.act_step.setEnabled(not busy and has_model)
        self.act_continue.setEnabled(not busy and session is not None and not session.finished)
        self.act_undo.setEnabled(not busy and self.runner.can_undo())
        self.act_clear.setEnabled(not busy)
        self.model_picker.setEnabled(True)

    # -- errors -------------------------------------------------------------------------------

    @Slot(str)
    def show_error(self, message: str) -> None:
        """One dialog with the message; while one is open, later errors go to the status bar."""
        self.last_error = message
        self.status_text.setText(message.splitlines()[0])
        if self._closing or (self._error_box is not None and self._error_box.isVisible()):
            return
        box = QMessageBox(
            QMessageBox.Icon.Warning, "Decoding Lab", message, QMessageBox.StandardButton.Ok, self
        )
        box.setTextFormat(Qt.TextFormat.PlainText)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.open()
        self._error_box = box

    # -- classroom: theme, zoom, colours --------------------------------------------------------

    def toggle_theme(self) -> None:
        self.set_theme("dark" if self.theme.name == "light" else "light")

    def set_theme(self, name: str) -> None:
        self.theme = THEMES.get(name, THEMES["light"])
        app = QApplication.instance()
        if isinstance(app, QApplication):
            apply_palette(app, self.theme)
        self.act_theme.setChecked(self.theme.name == "dark")
        self.pane.set_theme(self.theme)
        self.dist.set_theme(self.theme)
        self.speed.set_theme(self.theme)
        self.entropy.set_theme(self.theme)
        self.beam_tree.set_theme(self.theme)
        self._update_legend()

    def set_zoom(self, points: int) -> None:
        self.font_pt = max(8, min(32, points))
        font = QFont(self.font())
        font.setPointSize(self.font_pt)
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.setFont(font)
        self.setFont(font)
        mono = QFont("DejaVu Sans Mono")
        mono.setStyleHint(QFont.StyleHint.Monospace)
        mono.setPointSize(self.font_pt + 3)
        self.pane.setFont(mono)
        self.pane.document().setDefaultFont(mono)
        prompt_font = QFont(mono)
        prompt_font.setPointSize(self.font_pt + 1)
        self.prompt.setFont(prompt_font)
        for plot in (self.dist, self.speed, self.entropy):
            plot.set_font_size(self.font_pt - 1)
        self.beam_tree.set_font_size(self.font_pt - 1)
        # Room for two lines of the step summary whatever it says: a summary that grew from one
        # line to two would shift the plot below it, and repaint it, at every token.
        self.dist_info.setMinimumHeight(2 * QFontMetrics(font).lineSpacing() + 4)
        QTimer.singleShot(0, self._fit_left_column)  # after the new font reaches the widgets

    def _fit_left_column(self) -> None:
        """The controls column is as wide as its contents need (they change with the zoom)."""
        inner = self.left.widget()
        inner.adjustSize()
        scrollbar = self.left.verticalScrollBar().sizeHint().width()
        frame = 2 * self.left.frameWidth()
        self.left.setMinimumWidth(inner.sizeHint().width() + scrollbar + frame + 4)

    def _set_color_mode(self) -> None:
        self.pane.set_mode(self.color_mode.currentData())
        self._update_legend()

    def _update_legend(self) -> None:
        t = self.theme

        def chip(color: str, label: str) -> str:
            return f"<span style='background:{color}; color:{t.text}'>&nbsp;{label}&nbsp;</span>"

        if self.pane.speculative:
            draft, target = chip(t.draft, "draft accepted"), chip(t.target, "chosen by the target")
            self.legend.setText(f"Speculative: {draft} {target}")
            return
        if self.pane.mode == COLOR_BY_RANK:
            chips = [
                f"<span style='background:{c}; color:{t.text}'>&nbsp;{label}&nbsp;</span>"
                for c, label in zip(t.buckets, BUCKET_LABELS, strict=True)
            ]
            text = "Rank of the chosen token: " + " ".join(chips)
        else:
            low = f"<span style='background:{t.prob_low}; color:{t.text}'>&nbsp;0%&nbsp;</span>"
            high = f"<span style='background:{t.prob_high}; color:{t.text}'>&nbsp;100%&nbsp;</span>"
            text = f"Probability: {low} → {high}"
        text += (
            f" <span style='background:{t.forced}; color:{t.text}'>&nbsp;chosen by you&nbsp;</span>"
        )
        self.legend.setText(text)

    def about_text(self) -> str:
        import platform
        from importlib.metadata import PackageNotFoundError, version

        def v(name: str) -> str:
            try:
                return version(name)
            except PackageNotFoundError:
                return "?"

        models = "".join(f"<li><b>{m.title}</b>: {m.licence}</li>" for m in BUNDLED.values())
        return (
            f"<h3>Decoding Lab {v('decoding-lab')}</h3>"
            "<p>Explore by hand how a language model turns probabilities into text.</p>"
            f"<p>Python {platform.python_version()} · torch {v('torch')} · transformers "
            f"{v('transformers')} · PySide6 {v('PySide6-Essentials')} · "
            f"pyqtgraph {v('pyqtgraph')}</p>"
            f"<p>Bundled models:</p><ul>{models}</ul>"
            "<p>Decoding Lab is licensed under Apache-2.0.</p>"
        )

    @Slot()
    def show_about(self) -> None:
        QMessageBox.about(self, "About Decoding Lab", self.about_text())

    # -- export -------------------------------------------------------------------------------

    def export(self, kind: str, path: str | None = None) -> bool:
        if kind != "png" and not self.steps:
            self.show_error("Nothing to export yet: generate first.")
            return False
        filters = {
            "json": "JSON (*.json)",
            "csv": "CSV (*.csv)",
            "png": "PNG image (*.png)",
            "md": "Markdown (*.md)",
        }
        if path is None:
            path, _ = QFileDialog.getSaveFileName(
                self, "Export", f"decoding-lab-run.{kind}", filters[kind]
            )
            if not path:
                return False
        model = self.bundle.name if self.bundle else ""
        settings = self.sampler.settings().to_dict()
        prompt = self.runner.prompt_text or self.prompt.toPlainText()
        try:
            if kind == "png":
                tmp = Path(path).with_name(f".{Path(path).name}.tmp.png")
                if not self.plots.grab().save(str(tmp), "PNG"):
                    raise OSError(f"could not write {path}")
                tmp.replace(path)
            elif kind == "json":
                write_atomic(path, run_to_json(prompt, model, settings, self.steps))
            elif kind == "csv":
                write_atomic(path, run_to_csv(self.steps))
            else:
                write_atomic(path, run_to_markdown(prompt, model, settings, self.steps))
        except OSError as exc:
            self.show_error(f"Could not export to {path}:\n{exc}")
            return False
        self.status_text.setText(f"Exported {path}")
        return True

    # -- persistence --------------------------------------------------------------------------

    def save_state(self) -> None:
        s = self.store
        s.setValue("version", SETTINGS_VERSION)
        s.beginGroup("window")
        s.setValue("geometry", self.saveGeometry())
        s.setValue("splitter", self.splitter.saveState())
        s.setValue("theme", self.theme.name)
        s.setValue("zoom", self.font_pt)
        s.setValue("color_mode", self.color_mode.currentData())
        s.setValue("top_n", self.top_n.value())
        s.endGroup()
        s.beginGroup("models")
        s.setValue(
            "last",
            (self.bundle.source_key if self.bundle and hasattr(self.bundle, "source_key") else "")
            or "",
        )
        s.setValue("recents", json.dumps(self.recents))
        s.endGroup()
        s.beginGroup("prompt")
        s.setValue("text", self.prompt.toPlainText())
        s.endGroup()
        self.sampler.save_state(s)
        self.method.save_state(s)
        s.sync()

    def restore_state(self) -> None:
        s = self.store
        s.beginGroup("window")
        geometry = s.value("geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        splitter = s.value("splitter")
        if splitter is not None:
            self.splitter.restoreState(splitter)
        theme = s.value("theme", "light", type=str)
        zoom = s.value("zoom", BASE_FONT_PT, type=int)
        mode = s.value("color_mode", COLOR_BY_RANK, type=str)
        self.top_n.setValue(s.value("top_n", 20, type=int))
        s.endGroup()
        s.beginGroup("models")
        self._initial_model = s.value("last", DEFAULT_MODEL, type=str) or DEFAULT_MODEL
        try:
            self.recents = [str(r) for r in json.loads(s.value("recents", "[]", type=str))][
                :MAX_RECENTS
            ]
        except ValueError:
            self.recents = []
        s.endGroup()
        s.beginGroup("prompt")
        self.prompt.setPlainText(s.value("text", "", type=str))
        s.endGroup()
        self.sampler.restore_state(s)
        self.method.restore_state(s)
        self.color_mode.setCurrentIndex(max(0, self.color_mode.findData(mode)))
        self.set_theme(theme)
        self.set_zoom(zoom)
        self._set_color_mode()
        self._fill_model_picker()

    # -- closing ------------------------------------------------------------------------------

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        self._closing = True
        self.timer.stop()
        self.autosave_timer.stop()
        self.drain()
        self.autosave()
        self.save_state()
        self.hide()
        if not self.runner.shutdown():
            self.status_text.setText("Still finishing the current job…")
        event.accept()
