"""File > Open served model…: a model behind an OpenAI-compatible endpoint (vLLM, SGLang,
llama.cpp's server). The dialog asks for the address, the model's served name and where the
API key comes from; the key itself is never typed here, shown, or remembered."""

from __future__ import annotations

from urllib.parse import urlsplit

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from engine.models.catalog import parse_served, served_source

KEY_KINDS = {
    "none": "No key (a server started without --api-key)",
    "env": "The environment variable DECODING_LAB_API_KEY",
    "keyring": "The system keychain (service decoding-lab, user: the host)",
}


def served_title(source: str) -> str:
    """How the model picker names a served model: its name and host."""
    parsed = parse_served(source)
    if parsed is None:
        return source
    url, model, _kind = parsed
    host = urlsplit(url).netloc or url
    return f"Served: {model or 'first model'} @ {host}"


class ServedDialog(QDialog):
    def __init__(self, parent: QWidget | None = None, last: str | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Open served model")
        self.url = QLineEdit()
        self.url.setObjectName("served_url")
        self.url.setPlaceholderText("http://127.0.0.1:8000")
        self.model = QLineEdit()
        self.model.setObjectName("served_model")
        self.model.setPlaceholderText("empty: the first model the server lists")
        self.key = QComboBox()
        self.key.setObjectName("served_key")
        for kind, text in KEY_KINDS.items():
            self.key.addItem(text, kind)
        self.key.setCurrentIndex(self.key.findData("env"))
        parsed = parse_served(last) if last else None
        if parsed is not None:
            url, model, kind = parsed
            self.url.setText(url)
            self.model.setText(model)
            self.key.setCurrentIndex(max(0, self.key.findData(kind)))
        hint = QLabel(
            "Start the server with per-token log-probabilities allowed, for example:<br>"
            "<code>vllm serve HuggingFaceTB/SmolLM2-135M-Instruct --max-logprobs 20</code><br>"
            "<b>Explore</b> (Sampling): each step asks the server for its top 20 and our "
            "sampler chain picks, so every slider, Step, branching and Undo work. "
            "<b>Served: the server samples</b> (Method): one streaming request, faster."
        )
        hint.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Address", self.url)
        form.addRow("Model", self.model)
        form.addRow("API key from", self.key)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(hint)
        layout.addWidget(buttons)

    def source(self) -> str | None:
        """The chosen endpoint as a source string, or None when the address is not usable."""
        url = self.url.text().strip()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return None
        return served_source(url, self.model.text().strip(), self.key.currentData())
