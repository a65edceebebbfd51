"""File > Open served model…: a model served by vLLM, llama.cpp's llama-server, Ollama or SGLang.
The dialog asks for the address, which server it is (or asks the server), the model's served
name, a local copy of its tokenizer when the server has no tokenizer routes (Ollama, SGLang),
llama.cpp's own sampler beside ours, and where the API key comes from; the key itself is never
typed here, shown, or remembered."""

from __future__ import annotations

from urllib.parse import urlsplit

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from engine.models.catalog import parse_served, served_kind, served_options, served_source
from engine.serve.backends import SHORT

SERVER_KINDS = {  # engine.serve.backends
    "auto": "Ask the server (it says which it is)",
    "vllm": "vLLM",
    "llama-server": "llama.cpp llama-server",
    "ollama": "Ollama (0.12.11 or newer)",
    "sglang": "SGLang",
}
# The options that mean something for a server kind ("auto": any, the server says which later).
SAMPLER_KINDS, RAW_KINDS = ("auto", "llama-server"), ("auto", "sglang")
KEY_KINDS = {
    "none": "No key (a server started without --api-key)",
    "env": "The environment variable DECODING_LAB_API_KEY",
    "keyring": "The system keychain (service decoding-lab, user: the host)",
}


def served_title(source: str) -> str:
    """How the model picker names a served model: its name and host, then the server and the
    options chosen, so two recents of one address read apart."""
    parsed = parse_served(source)
    if parsed is None:
        return source
    url, model, _key = parsed
    host = urlsplit(url).netloc or url
    kind, options = served_kind(source), served_options(source)
    said = [SHORT.get(kind, kind)] if kind != "auto" else []
    said += ["+ llama.cpp's sampler"] if options.get("server_sampler") == "1" else []
    said += ["raw log-probabilities"] if options.get("raw_logprobs") == "1" else []
    tail = f" ({' '.join(said)})" if said else ""
    return f"Served: {model or 'first model'} @ {host}{tail}"


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
        self._server_fields()
        self._fill(last)
        hint = QLabel(
            "For example <code>vllm serve HuggingFaceTB/SmolLM2-135M-Instruct --max-logprobs "
            "20</code> or <code>llama-server -m model.gguf</code>.<br>"
            "<b>Explore</b> (Sampling): each step asks the server for its top 20 and our "
            "sampler chain picks, so every slider, Step, branching and Undo work. "
            "<b>Served: the server samples</b> (Method): one streaming request, faster; its "
            "bars are the raw probabilities only. The line above the plot says what each "
            "server returns."
        )
        hint.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Address", self.url)
        form.addRow("Server", self.kind)
        form.addRow("Model", self.model)
        form.addRow("Tokenizer", self.tokenizer)
        form.addRow("API key from", self.key)
        form.addRow("", self.server_sampler)
        form.addRow("", self.raw)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(hint)
        layout.addWidget(buttons)

    def _server_fields(self) -> None:
        """Which server, a local tokenizer, llama.cpp's own sampler, SGLang's raw flag."""
        self.kind = QComboBox()
        self.kind.setObjectName("served_kind")
        for kind, text in SERVER_KINDS.items():
            self.kind.addItem(text, kind)
        self.tokenizer = QLineEdit()
        self.tokenizer.setObjectName("served_tokenizer")
        self.tokenizer.setPlaceholderText("empty: the model's name, else the server's /tokenize")
        self.tokenizer.setToolTip(
            "A hub id or folder of the served model's tokenizer. Ollama and SGLang need one: "
            "Ollama answers tokens as text, and neither has routes to tokenize with."
        )
        self.server_sampler = QCheckBox("Also show llama.cpp's own sampler (llama-server)")
        self.server_sampler.setObjectName("served_server_sampler")
        self.server_sampler.setToolTip(
            "Each step also asks llama-server's sampler chain, with your settings, for its "
            "probabilities at the same position (post_sampling_probs): a third bar beside ours."
        )
        self.raw = QCheckBox(
            "Its log-probabilities are raw (SGLang: SGLANG_RETURN_ORIGINAL_LOGPROB=1)"
        )
        self.raw.setObjectName("served_raw")
        self.raw.setToolTip(
            "SGLang reports log-probabilities after its temperature unless it was started with "
            "this variable set; tick it only if it was: its stream then draws raw bars at any "
            "temperature."
        )
        self.kind.currentIndexChanged.connect(self._kind_changed)

    def _kind_changed(self) -> None:
        """Only the options the chosen server has can be ticked (any, when it is asked)."""
        kind = self.kind.currentData()
        self.server_sampler.setEnabled(kind in SAMPLER_KINDS)
        self.raw.setEnabled(kind in RAW_KINDS)

    def _fill(self, last: str | None) -> None:
        """The last served model's choices (the recents keep them in its source string)."""
        parsed = parse_served(last) if last else None
        if parsed is None or last is None:
            return
        url, model, key = parsed
        self.url.setText(url)
        self.model.setText(model)
        self.key.setCurrentIndex(max(0, self.key.findData(key)))
        self.kind.setCurrentIndex(max(0, self.kind.findData(served_kind(last))))
        options = served_options(last)
        self.tokenizer.setText(options.get("tokenizer", ""))
        self.server_sampler.setChecked(options.get("server_sampler") == "1")
        self.raw.setChecked(options.get("raw_logprobs") == "1")

    def source(self) -> str | None:
        """The chosen endpoint as a source string, or None when the address is not usable."""
        url = self.url.text().strip()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return None
        sampler = self.server_sampler.isEnabled() and self.server_sampler.isChecked()
        raw = self.raw.isEnabled() and self.raw.isChecked()
        options = {"tokenizer": self.tokenizer.text().strip(),
                   "server_sampler": "1" if sampler else "",
                   "raw_logprobs": "1" if raw else ""}  # fmt: skip
        options = {k: v for k, v in options.items() if v}
        return served_source(url, self.model.text().strip(), self.key.currentData(),
                             self.kind.currentData(), options)  # fmt: skip
