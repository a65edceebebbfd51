"""Loading models: a Hugging Face id, a local folder or a GGUF file -> a ``ModelBundle``.

Device auto = CUDA, then MPS, then CPU. Dtype auto = bf16 on a CUDA device that supports it
(fp16 otherwise), fp32 on CPU. Models that cannot generate text are refused with a clear error.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import EmptyPromptError, ModelLoadError
from engine.models.cache import cache_root

if TYPE_CHECKING:  # torch loads with the first model, not with the window
    import torch

ENCODER_DECODER = "encoder-decoder"
DECODER_ONLY = "decoder-only"

# End-of-turn markers of common chat templates: when the template uses one, it ends generation.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")
_GENERATIVE_HEADS = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration", "Seq2SeqLM")

DTYPES = ("float32", "bfloat16", "float16")
QUANT_KINDS = ("int8", "int4")  # weights quantised on load for the CPU kernels (engine.quant)


@dataclass
class ModelBundle:
    model: torch.nn.Module
    tokenizer: Any
    kind: str  # DECODER_ONLY or ENCODER_DECODER
    device: torch.device
    dtype: torch.dtype
    name: str
    source: str
    context_length: int | None
    eos_token_ids: tuple[int, ...]
    extra: dict[str, Any] = field(default_factory=dict)
    source_key: str = ""  # what the user opened it by (a bundled name, a path, a hub id)

    @property
    def is_encoder_decoder(self) -> bool:
        return self.kind == ENCODER_DECODER

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None)) and not self.is_encoder_decoder

    @property
    def dtype_name(self) -> str:
        """float32, bfloat16, float16, or int8 / int4 for a quantised model."""
        return self.extra.get("quant") or str(self.dtype).removeprefix("torch.")

    def describe(self) -> str:
        return f"{self.name} · {self.kind} · {self.device.type} · {self.dtype_name}"

    def encode_prompt(self, text: str, use_chat_template: bool | None = None) -> list[int]:
        """Tokenise a prompt. Instruct models wrap it in their chat template by default."""
        if not text or not text.strip():
            raise EmptyPromptError("The prompt is empty: type something for the model to continue.")
        if use_chat_template is None:
            use_chat_template = self.has_chat_template
        if use_chat_template and self.has_chat_template:
            rendered = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
            )
            ids = self.tokenizer(rendered, add_special_tokens=False)["input_ids"]
        else:
            ids = self.tokenizer(text)["input_ids"]
        if not ids:
            raise EmptyPromptError("The prompt gave no tokens: type something else.")
        return list(ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


def pick_device(device: str | torch.device = "auto") -> torch.device:
    import torch

    if str(device) != "auto":
        dev = torch.device(device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ModelLoadError("CUDA was requested but no CUDA GPU is available.")
        return dev
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def pick_dtype(device: torch.device, dtype: str | torch.dtype = "auto") -> torch.dtype:
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype != "auto":
        if dtype in QUANT_KINDS:  # loaded in float32, then quantised (quantise_bundle)
            return torch.float32
        if dtype not in DTYPES:
            names = ", ".join(DTYPES + QUANT_KINDS)
            raise ModelLoadError(f"Unknown dtype {dtype!r}: choose one of {names}.")
        return getattr(torch, dtype)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def _looks_like_path(source: str) -> bool:
    return (
        source.startswith((".", "/", "~"))
        or os.sep in source
        and source.count("/") != 1
        or source.lower().endswith(".gguf")
        or (len(source) > 1 and source[1] == ":")  # a Windows drive
    )


def check_generative(config: Any, source: str) -> None:
    """Refuse configs of models that have no generation head (a BERT encoder, say)."""
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING

    model_type = getattr(config, "model_type", "?")
    if getattr(config, "is_encoder_decoder", False):
        ok = type(config) in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING
    else:
        ok = type(config) in MODEL_FOR_CAUSAL_LM_MAPPING
    archs = getattr(config, "architectures", None) or []
    if ok and archs and not any(a.endswith(_GENERATIVE_HEADS) for a in archs):
        ok = False
    if not ok:
        what = f" ({', '.join(archs)})" if archs else ""
        raise ModelLoadError(
            f"{source} is a {model_type} model{what} that cannot generate text. "
            "Open a decoder-only model (GPT-2, Llama, SmolLM...) or an encoder-decoder model "
            "(T5, BART)."
        )


def eos_ids_for(model: Any, tokenizer: Any) -> tuple[int, ...]:
    ids: list[int] = []

    def add(value: Any) -> None:
        if value is None:
            return
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, int) and v not in ids:
                ids.append(v)

    gen = getattr(model, "generation_config", None)
    add(getattr(gen, "eos_token_id", None))
    add(getattr(model.config, "eos_token_id", None))
    add(getattr(tokenizer, "eos_token_id", None))
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, str):
        vocab = tokenizer.get_vocab()
        for marker in END_OF_TURN_TOKENS:
            if marker in template and marker in vocab:
                add(vocab[marker])
    return tuple(ids)


def _location(source: str, path: Path, torch_dtype: Any, say: Callable[[str], None]) -> str:
    """Where transformers reads ``source`` from: a GGUF file's converted folder, a model
    folder, or a Hugging Face id; a clear error for anything else."""
    if path.is_file() and path.suffix.lower() == ".gguf":
        # GGUF dequantisation is slow (~20 s for 135M): convert once, then load the cache.
        return str(converted_gguf(path, torch_dtype, say))
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"The folder {path} has no config.json: it is not a model folder.")
        return str(path)
    if path.exists():
        raise ModelLoadError(f"{path} is not a model folder or a .gguf file.")
    if _looks_like_path(source):
        raise ModelLoadError(f"No such file or folder: {path}")
    return source  # a Hugging Face id


def load_model(
    source: str | os.PathLike[str],
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    progress: Callable[[str], None] | None = None,
    name: str | None = None,
) -> ModelBundle:
    """Load a Hugging Face id, a local folder or a ``.gguf`` file."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    say = progress or (lambda _msg: None)
    source = str(source)
    dev = pick_device(device)
    torch_dtype = pick_dtype(dev, dtype)
    if dtype in QUANT_KINDS and dev.type != "cpu":
        raise ModelLoadError(f"{dtype} weights run on the CPU kernels only: choose --device cpu.")
    path = Path(source).expanduser()
    location = _location(source, path, torch_dtype, say)
    kwargs: dict[str, Any] = {}
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        kwargs["local_files_only"] = True

    say("Reading the configuration")
    try:
        config = AutoConfig.from_pretrained(location, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every reader error becomes one message
        raise ModelLoadError(f"Could not read a model configuration from {source}: {exc}") from exc
    check_generative(config, source)
    auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    say("Loading the tokenizer")
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every reader error becomes one message
        raise ModelLoadError(f"Could not load the tokenizer of {source}: {exc}") from exc
    say("Loading the weights")
    try:
        model = auto.from_pretrained(location, dtype=torch_dtype, **kwargs)
    except torch.OutOfMemoryError as exc:
        raise ModelLoadError(f"Out of memory while loading {source}: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - safetensors, GGUF readers and others have their own
        raise ModelLoadError(
            f"Could not load the weights of {source}: the files may be damaged or incomplete "
            f"({exc.__class__.__name__}: {exc})"
        ) from exc
    model.to(dev)
    model.eval()
    if dev.type == "cpu":  # the lab's CPU kernels: built once per CPU, said while loading
        from engine.quant import native

        native.prepare(say)
    check_vocabulary(model, tokenizer, source)
    bundle = make_bundle(model, tokenizer, source=source, name=name, device=dev, dtype=torch_dtype)
    if path.is_file():
        bundle.extra["gguf"] = str(path)  # the benchmark runs llama.cpp on the same file
    if dtype in QUANT_KINDS:
        quantise_bundle(bundle, str(dtype), say)
    return bundle


def check_vocabulary(model: Any, tokenizer: Any, source: str) -> None:
    """The tokenizer's ids must all have a row in the model's embedding (more rows than ids
    is common: padding); fewer is a file that does not belong with its tokenizer (a GGUF
    whose embedding has 1,000 rows under a 49,152-token tokenizer), refused at load rather
    than failing later with "index out of range"."""
    try:
        rows = model.get_input_embeddings().weight.shape[0]
        ids = len(tokenizer)
    except (AttributeError, TypeError, NotImplementedError):
        return  # a model or tokenizer that does not say: nothing to compare
    if ids > rows:
        raise ModelLoadError(
            f"{source} does not fit its tokenizer: the tokenizer has {ids:,} tokens but the "
            f"model's embedding has only {rows:,} rows, so any token past {rows - 1:,} would "
            "fail. The weights or the tokenizer are not the model's own."
        )


def quantise_bundle(bundle: ModelBundle, kind: str, say: Callable[[str], None]) -> None:
    """The bundle's model to int8 or int4 weights (engine.quant), in place: a GGUF file's own
    4-bit blocks where they fit the int4 kernel (cached), else rounded from the float weights."""
    from engine.quant.apply import quantize_model
    from engine.quant.gguf import quantise_gguf

    gguf = bundle.extra.get("gguf")
    try:
        if gguf is not None:
            folder = quant_cache_folder(Path(gguf), kind)
            summary = quantise_gguf(bundle.model, Path(gguf), kind, folder, say)
        else:
            summary = quantize_model(bundle.model, kind, say=say)
    except ValueError as exc:
        raise ModelLoadError(f"Could not quantise {bundle.name} to {kind}: {exc}") from exc
    bundle.dtype = next(bundle.model.parameters()).dtype
    bundle.extra["quant"] = kind
    bundle.extra["quant_summary"] = summary.describe()  # the CLI's load line, the status bar
    say(f"Quantised: {bundle.extra['quant_summary']}")


def make_bundle(
    model: torch.nn.Module,
    tokenizer: Any,
    source: str = "<in memory>",
    name: str | None = None,
    device: torch.device | None = None,
    dtype: torch.dtype | None = None,
) -> ModelBundle:
    """Wrap an already loaded model and tokenizer."""
    from engine.models.device import context_length, model_device

    kind = ENCODER_DECODER if getattr(model.config, "is_encoder_decoder", False) else DECODER_ONLY
    first = next(model.parameters())
    return ModelBundle(
        model=model,
        tokenizer=tokenizer,
        kind=kind,
        device=device or model_device(model),
        dtype=dtype or first.dtype,
        name=name or Path(source).name or source,
        source=source,
        context_length=context_length(model) if kind == DECODER_ONLY else None,
        eos_token_ids=eos_ids_for(model, tokenizer),
        source_key=source,
    )


# --------------------------------------------------------------------------------------------
# GGUF conversion cache
# --------------------------------------------------------------------------------------------

MANIFEST = "decoding-lab-manifest.json"


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _cache_is_complete(folder: Path) -> bool:
    """A cache folder counts only if its manifest exists and every listed file has its size."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        return all(
            (folder / name).stat().st_size == size for name, size in manifest["files"].items()
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False


def gguf_cache_folder(path: Path, dtype: torch.dtype) -> Path:
    key = f"{path.stem}-{file_digest(path)[:16]}-{str(dtype).removeprefix('torch.')}"
    return cache_root() / "converted" / key


def quant_cache_folder(path: Path, kind: str) -> Path:
    """Where ``path``'s int8 / int4 layers are kept: per CPU kernel layout (PyTorch's, or the
    lab's where its kernels run: ``engine.quant.native``) and torch."""
    import torch

    from engine.quant import native

    where = torch.backends.cpu.get_cpu_capability().lower()
    layout = native.LAYOUT if native.usable() else "aten"  # the lab's is the same on any ISA
    key = f"{path.stem}-{file_digest(path)[:16]}-{kind}-{where}-{layout}-torch{torch.__version__}"
    return cache_root() / "quantised" / key


def converted_gguf(path: Path, dtype: torch.dtype, say: Callable[[str], None] = print) -> Path:
    """Return a folder holding ``path`` converted to safetensors in ``dtype``, converting it
    first if needed. The folder is written under a temporary name and renamed when complete,
    so an interrupted conversion is never loaded; an incomplete one is rebuilt."""
    say("Checking the converted-model cache")
    final = gguf_cache_folder(path, dtype)
    if _cache_is_complete(final):
        return final
    from filelock import FileLock, Timeout

    final.parent.mkdir(parents=True, exist_ok=True)
    # Two processes (two windows, the app and a test run) may open the same file at once: one
    # converts, the other waits here and then finds the cache complete.
    lock = FileLock(str(final.parent / f".{final.name}.lock"))  # released if a process dies
    try:
        lock.acquire(timeout=0)
    except Timeout:
        say("Another Decoding Lab process is converting this model: waiting for it")
        try:
            lock.acquire(timeout=CONVERT_WAIT_S, poll_interval=0.2)
        except Timeout as exc:
            raise ModelLoadError(
                f"Another process has been converting {path.name} for over {CONVERT_WAIT_S} s; "
                "try again when it has finished."
            ) from exc
    try:
        return _convert_gguf(path, dtype, final, say)
    finally:
        lock.release()


CONVERT_WAIT_S = 600  # how long a second process waits for another's GGUF conversion


def _convert_gguf(path: Path, dtype: torch.dtype, final: Path, say: Callable[[str], None]) -> Path:
    """The conversion itself, under the cache folder's lock."""
    if _cache_is_complete(final):  # another process converted it while this one waited
        return final
    if final.exists():
        say("The cached conversion is incomplete: rebuilding it")
        shutil.rmtree(final, ignore_errors=True)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for stale in final.parent.glob(f".tmp-{final.name}-*"):  # left by a process that died
        shutil.rmtree(stale, ignore_errors=True)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    say("Converting the GGUF file once (about 20 s); later starts load the cache")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        )
    except Exception as exc:  # noqa: BLE001 - gguf raises many kinds of errors
        raise ModelLoadError(
            f"Could not load the GGUF file {path.name}: it may be damaged, or its architecture "
            f"is one transformers cannot read ({exc.__class__.__name__}: {exc})"
        ) from exc
    model.to(dtype)
    # The weights are dequantised now; drop the GGUF marker so they can be saved as they are.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    say("Writing the converted model")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    files = {p.name: p.stat().st_size for p in tmp.iterdir() if p.is_file()}
    manifest = {"source": str(path), "dtype": str(dtype), "files": files}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, final)  # atomic on one filesystem
    return final
