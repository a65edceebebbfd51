"""Loading models in the window: the model picker's choice or File > Open served model… (a
local model, a folder, a .gguf file, a hub id or an OpenAI-compatible endpoint), and the
speculative method's draft model. ``ModelActions`` owns the loaded model (``bundle``) and the
source being loaded; it never imports the window: ``ModelNeeds`` is what it is given."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Slot
from PySide6.QtWidgets import QInputDialog, QLabel

from engine.models.catalog import served_kind, served_options
from engine.validate.served import CREDENTIALS_REFUSED, has_credentials, redact_url
from gui.common.actions import ActionSpec, Place
from gui.core.session import Session
from gui.models.served_dialog import ServedDialog, parse_served

if TYPE_CHECKING:
    from engine.models.loading import ModelBundle
    from gui.controls.method_panel import MethodPanel
    from gui.models.picker import ModelPicker


def served_run_options(source: str) -> dict[str, object]:
    """``open_served``'s keywords from a served source: the server kind and the remembered
    options (tokenizer, llama.cpp's own sampler, raw log-probabilities)."""
    options = served_options(source)
    return {
        "kind": served_kind(source), "tokenizer": options.get("tokenizer") or None,
        "server_sampler": options.get("server_sampler") == "1",
        "raw_logprobs": options.get("raw_logprobs") == "1",
    }  # fmt: skip


@dataclass
class ModelNeeds(Session):
    """What model loading is given: the picker, the panels that describe a model, and two
    callbacks of the window's."""

    picker: ModelPicker
    method: MethodPanel
    prompt_box: Any  # gui.shell.areas.PromptBox
    model_label: QLabel
    clear_output: Callable[[], None]
    show_capability: Callable[[tuple[str, ...]], None]  # a served model's capability line


class ModelActions(QObject):
    def __init__(self, host: ModelNeeds) -> None:
        super().__init__(host.parent)
        self.host = host
        self._loading_source: str | None = None  # as the user gave it (the recents keep it)
        r = host.runner
        r.model_loaded.connect(self.adopt)
        r.load_failed.connect(self._on_load_failed)
        r.draft_loaded.connect(self._on_draft_loaded)
        host.method.load_draft_requested.connect(self._pick_draft)
        host.picker.source_chosen.connect(self.load_model)
        host.picker.served_requested.connect(self.open_served_dialog)
        host.picker.weights.dtype_chosen.connect(self._reload_in)

    @property
    def bundle(self) -> ModelBundle | None:
        return self.host.model.bundle

    @bundle.setter
    def bundle(self, bundle: ModelBundle | None) -> None:
        self.host.model.bundle = bundle

    def action_specs(self) -> list[ActionSpec]:
        """File > Open served model…"""
        return [
            ActionSpec("served", "Open served model…", self.open_served_dialog,
                       (Place("file", "served", 0),),
                       tip="A model on vLLM, llama.cpp's llama-server, Ollama or SGLang"),
        ]  # fmt: skip

    @Slot(str)
    def load_model(self, source: str) -> None:
        """Load a model; a running generation is stopped first (the current model stays until
        the new one is ready)."""
        h = self.host
        if h.runner.busy:
            h.runner.stop()
            h.after_idle(lambda: self.load_model(source))  # busy: queued for the job's end
            return
        served = parse_served(source)
        if served is not None and has_credentials(served[0]):  # before it is shown or kept
            h.show_error(CREDENTIALS_REFUSED.format(url=redact_url(served[0])))
            return
        self._loading_source = source
        h.picker.fill(pending=source)
        if served is not None:  # a model behind a served endpoint
            from engine.serve.remote import KeySource

            url, model, key_kind = served
            h.say(f"Connecting to {url}…")
            h.runner.open_served(
                url, model or None, KeySource(key_kind), **served_run_options(source)
            )
            return
        dtype = h.picker.weights.dtype()
        h.say(f"Loading {source}{'' if dtype == 'auto' else ' in ' + dtype}…")
        h.runner.load(source, dtype=dtype)

    @Slot(str)
    def _reload_in(self, _dtype: str) -> None:
        """Weights changed in the toolbar: the current local model again, in them."""
        key = self.bundle.source_key if self.bundle is not None else None
        if key and parse_served(key) is None:
            self.load_model(key)

    @Slot()
    def open_served_dialog(self) -> None:
        """File > Open served model…: the endpoint, the model, where the key comes from."""
        last = next((r for r in self.host.picker.recents if parse_served(r)), None)
        dialog = ServedDialog(self.host.parent, last)
        if dialog.exec() != ServedDialog.DialogCode.Accepted:
            return
        source = dialog.source()
        if source is None:
            self.host.show_error("Give the server's address, for example http://127.0.0.1:8000")
            return
        self.load_model(source)

    @Slot(object)
    def adopt(self, bundle: ModelBundle) -> None:
        """A model is loaded: it becomes the window's, the panels describe it."""
        h = self.host
        source = self._loading_source or bundle.source_key or bundle.source
        bundle.source_key = source
        previous_example = self.bundle.extra.get("example_prompt") if self.bundle else None
        self.bundle, self._loading_source = bundle, None
        h.picker.remember(source)
        h.model_label.setText(bundle.describe())
        # int8 / int4: where the integers came from and whose kernels run them
        h.model_label.setToolTip(bundle.extra.get("quant_summary", ""))
        h.show_capability(getattr(bundle, "capability_versions", tuple)())  # a served model
        h.method.set_served(hasattr(bundle, "make_session"))  # a served model's stream mode
        h.prompt_box.describe_model(bundle.is_encoder_decoder, bundle.has_chat_template)
        example = bundle.extra.get("example_prompt")
        current = h.prompt_box.editor.toPlainText().strip()
        if example and (not current or current == previous_example):
            h.prompt_box.editor.setPlainText(example)
        h.clear_output()
        # int8 / int4: what the load got, in one clause ("14 of 15 matrices int4"), all on hover
        got = bundle.extra.get("quant_summary", "").split(";")[0].strip()
        h.say(f"Ready: {bundle.name}{f' ({got})' if got else ''}. Press Generate (Ctrl+Enter).")

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        self._loading_source = None
        self.host.picker.fill()
        self.host.show_error(f"Could not load the model.\n\n{message}")

    @Slot()
    def _pick_draft(self) -> None:
        text, ok = QInputDialog.getText(
            self.host.parent, "Draft model",
            "A bundled name, a folder, a .gguf file or a Hugging Face id:",
        )  # fmt: skip
        if ok and text.strip():
            self.load_draft(text.strip())

    def load_draft(self, source: str) -> None:
        if self.host.runner.busy:
            return
        self.host.say(f"Loading draft model {source}…")
        self.host.runner.load_draft(source)

    @Slot(object)
    def _on_draft_loaded(self, draft: ModelBundle) -> None:
        self.host.method.draft_label.setText(draft.name)
        self.host.say(f"Draft model ready: {draft.name}")
