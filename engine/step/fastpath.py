"""A lean decode path for the decoder families people open: Llama 2/3 and SmolLM, Mistral,
Qwen2/2.5, Qwen3, Gemma 2/3, Phi-3 and GPT-2.

At batch 1 a small model spends much of each token on launching ~40 small ops per layer, not
on arithmetic. This path reuses the model's own weights, but fuses q/k/v and gate/up into one
matrix product each, keeps a preallocated KV cache written in place, computes the rotary
tables once per call, and calls scaled_dot_product_attention directly: ~15 ops per layer.

The step is written once, as plain typed Python (``engine.step.forward``); the families differ
only in a small spec (``read_spec``, in ``engine.step.fast_spec``): which norm (Llama's
RMSNorm, Gemma's ``(1 + w)`` RMSNorm, LayerNorm), which activation, gated or plain MLP, q/k
norms, biases, Gemma's extra norms, embedding scale, learned positions, soft-capping, sliding
windows per layer, rotary tables per layer. Norms follow transformers (computed in float32
where transformers does), so the logits agree with ``model(...)`` to float rounding; tests
compare both and ``transformers.generate``.

``FastStepper`` runs that step on the CPU compiled by TorchScript from those same functions
(``engine.step.scripted``: the eager step measured 0.87x of it, and ``torch.compile`` slower
still; resources/notes/fast-path-python.md), and eagerly elsewhere (the GPU path where no graph
is captured) or where TorchScript is unavailable.

On CPU the matrix products go through oneDNN (``torch.ops.mkldnn._linear_pointwise``), which
reads a weight matrix at 30-35 GB/s on the development machine where ``x @ w.T`` (MKL gemv)
reads 15 GB/s at these shapes. float32 weights are used in place; bfloat16 weights are
reordered once into oneDNN's blocked layout (a second copy, cached per model), because the
plain bfloat16 layout is no faster. If the oneDNN op is missing or disagrees with ``x @ w.T``
on a probe, the path falls back to ``x @ w.T``.

One new token of a Llama-shaped model on the CPU (int8 / int4, bfloat16 or float32) runs in
one call of the lab's CPU step where it is built (``fused_here``; ``engine/quant/csrc/step.cpp``'s
Decoder: embedding, rotary tables, every layer, final norm and head; ``DECODING_LAB_FUSED=0``
turns it off). The prompt and several rows at once run the step above.

``FastStepper`` is a ``engine.step.stepper.Stepper`` (``logits``, ``truncate``, ``cache``,
``forward_passes``), so sessions can use it or ``ModelStepper`` alike.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from engine.models.device import switched_off
from engine.quant import native
from engine.runtime.threads import governed, governed_step
from engine.step.fast_spec import (  # noqa: F401 - re-exported: the fast path's public names
    ACT_SILU,
    DOWN_B,
    DOWN_S,
    DOWN_W,
    FAMILIES,
    IN_B,
    IN_W,
    KN_W,
    NORM_RMS,
    O_B,
    O_S,
    O_W,
    PA_W,
    PF_B,
    PF_W,
    PFF_W,
    QKV_B,
    QKV_S,
    QKV_W,
    QN_W,
    SUPPORTED,
    UP_B,
    UP_S,
    UP_W,
    FastPathUnsupported,
    Spec,
    _fused,
    read_spec,
    supports,
)
from engine.step.kernels import linear, mm
from engine.step.kvcache import StaticKV
from engine.step.scripted import cpu_step

log = logging.getLogger(__name__)


def has_onednn_linear() -> bool:
    """Whether this torch has the oneDNN linear op the CPU path uses."""
    try:
        torch.ops.mkldnn._linear_pointwise  # noqa: B018 - raises when the op is missing
    except (AttributeError, RuntimeError):
        return False
    return torch.backends.mkldnn.is_available()


def onednn_supports(dtype: torch.dtype) -> bool:
    """Whether oneDNN runs matrix products in ``dtype`` on this CPU: bfloat16 needs AVX-512
    (bw, vl, dq) or AVX-NE-CONVERT; an AVX2-only CPU (some AMD EPYC machines) has only fp32."""
    if not has_onednn_linear():
        return False
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return dtype == torch.float32


def _cpu_kernel(weights: list[torch.Tensor]) -> tuple[bool, list[torch.Tensor]]:
    """Whether to use oneDNN, and the weights the matrix products take (bfloat16 ones packed
    into oneDNN's blocked layout; ``prepared`` caches the result per model). Quantised
    weights (int8, int4: engine.quant) have their own kernels and pass through as they are;
    the float ones among them decide."""
    floats = [i for i, w in enumerate(weights) if w.is_floating_point()]
    if len(floats) < len(weights):
        if not floats:
            return False, weights
        onednn, ready = _cpu_kernel([weights[i] for i in floats])
        out = list(weights)
        for i, w in zip(floats, ready, strict=True):
            out[i] = w
        return onednn, out
    w0 = weights[0]
    if w0.device.type != "cpu" or w0.dtype not in (torch.float32, torch.bfloat16):
        return False, weights
    try:
        if not onednn_supports(w0.dtype):
            return False, weights
        if w0.dtype == torch.float32:
            ready = weights
        else:
            ready = [torch.ops.mkldnn._reorder_linear_weight(w, 1) for w in weights]
        probe = torch.randn(3, w0.shape[1], dtype=w0.dtype)
        tol = 1e-3 if w0.dtype == torch.float32 else 2e-2
        got, want = linear(probe, ready[0], True), linear(probe, w0, False)
        if not torch.allclose(got, want, atol=tol, rtol=tol):
            return False, weights
    except (RuntimeError, AttributeError, NotImplementedError):
        return False, weights
    return True, ready


# The step's weights as prepared for one model, so that a second stepper on the same model
# (a session restarted, a draft stepper, the bench) takes the same tensors instead of packing
# the bfloat16 matrices again (a second copy of the model): {model: (key, prepared)}.
_PACKED: weakref.WeakKeyDictionary[torch.nn.Module, tuple[tuple[Any, ...], Prepared]]
_PACKED = weakref.WeakKeyDictionary()


@dataclass
class Prepared:
    """The weights the step takes for one model: whether the matrix products go through
    oneDNN, every layer's slots (matrices packed where oneDNN wants them) and the LM head."""

    onednn: bool
    layers: list[list[torch.Tensor]]
    lm_head: torch.Tensor


def _weights_key(layers: list[list[torch.Tensor]], lm_head: torch.Tensor) -> tuple[Any, ...]:
    """What identifies the model's weights as they are now: a model moved to another dtype or
    device, or re-fused, has new storage, so its old preparation no longer matches."""
    tensors = [t for layer in layers for t in layer] + [lm_head]
    # a tensor packed for oneDNN's int8 matmul (engine.quant.onednn) has no data pointer
    where = tuple((id(t) if t.is_mkldnn else t.data_ptr(), t.storage_offset(), tuple(t.shape),
                   t.dtype) for t in tensors)  # fmt: skip
    return (torch.backends.mkldnn.is_available(), *where)


def prepared(
    model: torch.nn.Module,
    layers: list[list[torch.Tensor]],
    lm_head: torch.Tensor,
    slots: Sequence[int] = Spec.MATRIX_SLOTS,
) -> Prepared:
    """The step's weights for ``model`` (``slots`` of each layer and ``lm_head`` are the
    matrix products), made once and reused while its weights stay put. The slots are the
    cached tensor objects themselves (not new ``.data`` views), so every stepper on the model
    shares them."""
    key = _weights_key(layers, lm_head)
    cached = _PACKED.get(model)
    if cached is not None and cached[0] == key:
        return cached[1]
    _PACKED.pop(model, None)  # drop stale copies before making new ones
    plain = [layer[s] for layer in layers for s in slots]
    onednn, ready = _cpu_kernel(plain + [lm_head])
    it = iter(ready)
    layers = [list(layer) for layer in layers]
    for layer in layers:
        for s in slots:
            layer[s] = next(it)
    made = Prepared(onednn, layers, next(it))
    _PACKED[model] = (key, made)
    return made


# the slots of a layer csrc/step.cpp's decode_layer reads, in its order
FUSED_SLOTS = (IN_W, QKV_W, QKV_S, QKV_B, O_W, O_S, O_B, PF_W, UP_W, UP_S, UP_B, DOWN_W, DOWN_S,
               DOWN_B)  # fmt: skip


def fused_here(spec: Spec) -> bool:
    """Whether one new token runs in one call of the lab's CPU step (``decoder``): a
    Llama-shaped model on the CPU (RMS norms and no others in the layers, a gated SiLU, one
    rotary table, no soft cap) in bfloat16 (an int8 / int4 model's, or a bfloat16 one's) or
    float32, where the lab's kernels are built. A quantised layer runs the lab's own steps; a
    float one torch's own, but for a bfloat16 one's attention (``lab_attention_here``)."""
    plain = all(
        layer[s].numel() == 0
        for layer in spec.layers
        for s in (IN_B, QN_W, KN_W, PA_W, PF_B, PFF_W)
    )
    shaped = spec.norm_kind == NORM_RMS and spec.act_kind == ACT_SILU and spec.gated
    shaped = shaped and spec.attn_softcap <= 0.0 and spec.final_softcap <= 0.0
    shaped = shaped and len(spec.inv_freqs) == 1 and plain and spec.final_b.numel() == 0
    shaped = shaped and spec.embed_scale.numel() == 0 and spec.wpe.numel() == 0
    scales = [layer[s].numel() > 0 for layer in spec.layers for s in Spec.SCALE_SLOTS]
    quantised = all(scales)
    dtypes = (torch.bfloat16,) if quantised else (torch.bfloat16, torch.float32)
    if spec.device.type != "cpu" or spec.dtype not in dtypes or not shaped:
        return False
    if not quantised and any(scales):  # some layers quantised, some not
        return False
    return not switched_off("DECODING_LAB_FUSED") and native.usable()


def lab_attention_here(spec: Spec) -> bool:
    """Whether a step's one-query attention runs the lab's kernel with SDPA's rounding
    (engine/quant/csrc/attention.cpp) where it would call torch's SDPA: a bfloat16 model of
    float weights on the CPU, where the lab's kernels are built; the whole-token step and the
    unfused one alike, so the two keep each other's bits. torch's SDPA takes 34 us for
    SmolLM2's 9 heads over 50 positions in bfloat16 (10 us in float32), the lab's ~11 us:
    ~2 ms of a ~17 ms token. The weights are rounded as SDPA rounds them, the sums run in
    another order: SmolLM2's logits stay within transformers' own rounding (no further from
    generate's than its uncached forward is) and its greedy picks part from generate's only
    at a near-tie (token 4 of the sea poem, two logits of 14.1875: tests/engine/
    test_bundled.py). float32 keeps SDPA, transformers' own bits."""
    quantised = any(layer[s].numel() > 0 for layer in spec.layers for s in Spec.SCALE_SLOTS)
    cpu_bf16 = spec.device.type == "cpu" and spec.dtype == torch.bfloat16
    return cpu_bf16 and not quantised and native.usable()


def head_apart(spec: Spec, ready: Prepared) -> bool:
    """Whether the model's head runs outside the lab's step (``decoder``): an int8 head packed
    for oneDNN (engine.quant.onednn, whose product is Python's, ``kernels.int8_onednn``)."""
    return ready.lm_head.is_mkldnn and spec.lm_head_s.numel() > 0


def decoder(spec: Spec, ready: Prepared) -> Any:
    """The lab's whole-token step for this model (``csrc/step.cpp``'s Decoder, holding the
    step's own tensors, not copies). Where the head runs apart (``head_apart``) it is given
    none, and its step returns the final norm's output."""
    head = torch.empty(0) if head_apart(spec, ready) else ready.lm_head
    flat = [layer[s] for layer in ready.layers for s in FUSED_SLOTS]
    rest = [spec.embed, spec.final_w, head, spec.lm_head_s, spec.inv_freqs[0]]
    ints = [spec.rot, spec.n_heads, spec.n_kv]
    floats = [float(spec.rope_scales[0]), float(spec.eps), float(spec.attn_scale)]
    return torch.classes.decoding_lab.Decoder(flat, rest, ints, floats, ready.onednn)


class FastStepper:
    """The fast path's step (``engine.step.forward.forward``; TorchScript on CPU) over a
    ``StaticKV`` that grows as needed (attention reads only the filled part): the CPU path,
    and the GPU path where no graph is captured."""

    def __init__(self, model: torch.nn.Module, max_len: int | None = None) -> None:
        spec = read_spec(model)
        self.model = model
        self.spec = spec
        self.family = spec.family
        self.device, self.dtype = spec.device, spec.dtype
        self.n_heads, self.n_kv, self.head_dim = spec.n_heads, spec.n_kv, spec.head_dim
        self.max_len = min(max_len or spec.max_len, spec.max_len)
        with torch.no_grad():
            # the matrix products: oneDNN on CPU where it is available, x @ w.T elsewhere
            ready = prepared(model, spec.layers, spec.lm_head)
        self.onednn, self.lm_head = ready.onednn, ready.lm_head
        self.layers = [list(layer) for layer in ready.layers]  # shared tensors, own lists
        self._decoder = decoder(spec, ready) if fused_here(spec) else None
        self.fused = self._decoder is not None
        self._head_apart = head_apart(spec, ready)
        # a sliding window past its length masks the sliding layers: the step above runs
        self._window = spec.window if any(spec.sliding) else 0
        self._args = spec.args(self.onednn, lab_attention_here(spec)) | {
            "layers": self.layers, "lm_head": self.lm_head,
        }  # fmt: skip
        self._forward = cpu_step(self.device, "forward")  # TorchScript on CPU: scripted.py
        self.forward_passes = 0
        self.cache = StaticKV(
            len(self.layers), self.n_kv, self.head_dim, self.dtype, self.device, self.max_len
        )

    def truncate(self, length: int) -> None:
        # The cache is a preallocated buffer: forgetting positions is just moving the end.
        self.cache.crop(length)

    @torch.inference_mode()
    def greedy_logits(
        self, ids: Sequence[int], top_n: int
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``logits(ids)`` [1, vocab] and, from the same call of the lab's step, a greedy
        step's packed record of the top ``top_n`` (csrc/greedy.cpp's greedy_stats, its
        finiteness read from the logits: ``engine.decode.measure.greedy_measured`` reads it),
        its passes run while each thread's part of the logits is in its cache. None where
        the step does not run in one call with its head (then ``logits``)."""
        if self._decoder is None or self._head_apart:
            return None
        start, new = self.cache.take(ids, 1, self.max_len)
        end = start + len(new)
        if not self._one_call(new, 1, end):
            return None
        k_all, v_all = self.cache.ensure(end)
        n = min(top_n, self.spec.lm_head.shape[0])
        with governed(self.model):
            logits, row = self._decoder.step_greedy(new[0], start, k_all, v_all, end, n)
        self.forward_passes += 1
        self.cache.extend(new)
        return logits, row

    def _one_call(self, new: Sequence[int], keep: int, end: int) -> bool:
        """Whether these positions run in one call of the lab's step (one new token, not
        past a sliding window)."""
        return len(new) == 1 and keep == 1 and (self._window == 0 or end <= self._window)

    @torch.inference_mode()
    def logits(self, ids: Sequence[int], keep: int = 1) -> torch.Tensor:
        """Same contract as ModelStepper.logits: [keep, vocab] float32."""
        start, new = self.cache.take(ids, keep, self.max_len)
        end = start + len(new)
        k_all, v_all = self.cache.ensure(end)
        with governed_step(self.model, self.device, len(new)):
            if self._decoder is not None and self._one_call(new, keep, end):
                logits = self._decoder.step(new[0], start, k_all, v_all, end)
                if self._head_apart:
                    logits = mm(logits, self.lm_head, self.spec.lm_head_s, self.onednn).float()
            else:
                logits = self._forward(
                    ids=torch.tensor(new, device=self.device),
                    pos=torch.arange(start, end, device=self.device),
                    attn_len=end,
                    always_mask=False,
                    k_all=k_all,
                    v_all=v_all,
                    keep=keep,
                    **self._args,
                )
        self.forward_passes += 1
        self.cache.extend(new)
        return logits


LlamaFastStepper = FastStepper  # the name this path had while it knew only Llama


def fast_stepper_or_none(model: torch.nn.Module, **kwargs: Any) -> FastStepper | None:
    """The fast path when the model's family has one, else None (use ModelStepper); the reason
    is logged in one line."""
    reason = supports(model)
    if reason is not None:
        log.info("fast path off: %s; using model.forward", reason)
        return None
    try:
        return FastStepper(model, **kwargs)
    except FastPathUnsupported as exc:
        log.info("fast path off: %s; using model.forward", exc)
        return None
