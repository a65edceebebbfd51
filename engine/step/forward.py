"""The fast paths' model code: one decoder step (``forward``) for the decoder families of
``engine.step.fast_spec`` and one for T5's decoder (``t5_forward``), as plain typed functions.

They run eagerly (``engine.step.fastpath.FastStepper``, ``engine.step.fast_t5``), under
``torch.compile`` (``engine.step.static_step``: fused, and captured in a CUDA graph on a GPU),
and they are written in the subset of Python TorchScript also reads, so the bench can compare
the routes on the very same code (``engine.drivers.bench_static``).

Shapes: ``ids`` and ``pos`` are [n]; keys and values are written into the cache buffers
``k_all`` / ``v_all`` [layers, kv heads, capacity, head dim] at ``pos``, and attention reads
positions [0, attn_len) of them. Every function returns the logits of the last ``keep`` rows,
[keep, vocab] float32.

The matrix products go through ``engine.step.kernels.mm``: each weight slot has a scale slot
beside it (``QKV_S`` for ``QKV_W``, ...; empty for float weights), so one step runs float,
int8 and int4 models alike (engine.quant).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from engine.step.fast_spec import (
    ACT_GELU_TANH,
    ACT_SILU,
    DOWN_B,
    DOWN_S,
    DOWN_W,
    IN_B,
    IN_W,
    KN_W,
    NORM_RMS,
    NORM_RMS_GEMMA,
    O_B,
    O_S,
    O_W,
    PA_B,
    PA_W,
    PF_B,
    PF_W,
    PFF_B,
    PFF_W,
    QKV_B,
    QKV_S,
    QKV_W,
    QN_W,
    UP_B,
    UP_S,
    UP_W,
)  # fmt: skip
from engine.step.kernels import (  # noqa: F401 - the step's names (scripted.py)
    int8_onednn,
    linear,
    mm,
    number,
)


def rms(x: Tensor, eps: float) -> Tensor:
    """``torch.rms_norm(x, [last], None, eps)``; on the CPU spelt out as its decomposition
    (the same numbers, bit for bit): the op's own wrapper cost 12.7 us a call there beside
    about 8 us for these five ops, 61 calls a SmolLM2 token. Other devices keep their fused
    kernel."""
    if x.device.type != "cpu":
        return torch.rms_norm(x, [x.shape[-1]], None, eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def norm(x: Tensor, w: Tensor, b: Tensor, kind: int, eps: float) -> Tensor:
    if kind == NORM_RMS:  # Llama's RMSNorm: normalise in float32, scale in the model dtype
        return w * rms(x.float(), eps).to(x.dtype)
    if kind == NORM_RMS_GEMMA:  # Gemma's: scale by (1 + w) in float32, then cast
        normed = rms(x.float(), eps)
        return (normed * (1.0 + w.float())).to(x.dtype)
    return torch.layer_norm(x, [x.shape[-1]], w, b, eps)


def affine(x: Tensor, w: Tensor, s: Tensor, b: Tensor, onednn: bool) -> Tensor:
    """``x @ w.T + b`` for any weight ``engine.step.kernels.mm`` takes (``s``: its scales)."""
    y = mm(x, w, s, onednn)
    if b.numel() > 0:
        y = y + b
    return y


def act(x: Tensor, kind: int) -> Tensor:
    if kind == ACT_SILU:
        return torch.ops.aten.silu(x)
    if kind == ACT_GELU_TANH:
        return F.gelu(x, approximate="tanh")
    return F.gelu(x)


def rotate(x: Tensor, cos: Tensor, sin: Tensor, rot: int) -> Tensor:
    """Rotary embedding of ``x`` [heads, n, D] by ``cos``, ``sin`` [n, rot]; only the first
    ``rot`` dims turn (Phi's partial rotary)."""
    half = rot // 2
    xr = x[:, :, :rot]
    out = xr * cos + torch.cat((-xr[:, :, half:], xr[:, :, :half]), -1) * sin
    if rot < x.shape[-1]:
        out = torch.cat((out, x[:, :, rot:]), -1)
    return out


def attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float, softcap: float,
    gqa: bool,
) -> Tensor:  # fmt: skip
    """q [H, n, D]; k, v [KV, L, D]; mask [n, L] (True: may attend) -> [H, n, D]."""
    if softcap <= 0.0:
        out = F.scaled_dot_product_attention(
            q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), attn_mask=mask, scale=scale,
            enable_gqa=gqa,
        )  # fmt: skip
        return out[0]
    # Gemma 2's soft-capped scores: SDPA has no hook for tanh, so spell attention out
    rep = q.shape[0] // k.shape[0]
    if rep > 1:
        k = k.repeat_interleave(rep, 0)
        v = v.repeat_interleave(rep, 0)
    scores = torch.matmul(q, k.transpose(1, 2)) * scale
    scores = torch.tanh(scores / softcap) * softcap
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    probs = torch.softmax(scores.float(), -1).to(q.dtype)
    return torch.matmul(probs, v)


def rotary_tables(
    pos: Tensor, inv_freqs: list[Tensor], rope_scales: list[float], like: Tensor
) -> list[list[Tensor]]:
    """[cos, sin], each [n, rot] in ``like``'s dtype, per distinct rotary table (Gemma 3:
    local and global)."""
    tables: list[list[Tensor]] = []
    for j in range(len(inv_freqs)):
        freqs = torch.outer(pos.float(), inv_freqs[j])  # [n, rot/2]
        emb = torch.cat((freqs, freqs), -1)
        scale = rope_scales[j]
        tables.append([(emb.cos() * scale).to(like.dtype), (emb.sin() * scale).to(like.dtype)])
    return tables


def masks(
    pos: Tensor, attn_len: int, always_mask: bool, window: int
) -> tuple[Tensor | None, Tensor | None]:
    """(full, local), each [n, attn_len] or None: key j is visible to the row at position p
    when j <= p (and j > p - window for local). No full mask for one row over exactly its
    past, unless ``always_mask`` (a static cache holds unwritten positions past ``pos``)."""
    full: Tensor | None = None
    local: Tensor | None = None
    j = torch.arange(attn_len, device=pos.device).unsqueeze(0)
    p = pos.unsqueeze(1)
    if pos.shape[0] > 1 or always_mask:
        full = j <= p
    if window > 0 and (full is not None or attn_len > window):
        local = (j <= p) & (j > p - window)
    return full, local


def write_kv(
    k_all: Tensor, v_all: Tensor, layer: Tensor, pos: Tensor, k: Tensor, v: Tensor
) -> None:
    """Keys and values [n, kv, D] of one layer (``layer``: its index as a [1] tensor) into the
    cache at ``pos``. Written into the whole buffer, not a view of the layer: torch.compile
    then updates the graph's input in place instead of copying a layer's cache per token."""
    k_all[layer, :, pos] = k
    v_all[layer, :, pos] = v


def decoder_layer(
    x: Tensor, w: list[Tensor], i: int, layer: Tensor, pos: Tensor, cos_sin: list[Tensor],
    mask: Tensor | None, k_all: Tensor, v_all: Tensor, attn_len: int, n_heads: int,
    n_kv: int, head_dim: int, rot: int, eps: float, norm_kind: int, act_kind: int,
    gated: bool, attn_scale: float, attn_softcap: float, onednn: bool, lab_attention: bool,
) -> Tensor:  # fmt: skip
    """One decoder layer over x [n, hidden] (``cos_sin`` empty: no rotary). ``lab_attention``:
    one query without a mask or soft cap takes the lab's attention with SDPA's rounding
    (engine/quant/csrc/attention.cpp), as the lab's whole-token step does (a bfloat16 model
    on the CPU: engine.step.fastpath.lab_attention_here)."""
    n = x.shape[0]
    q_size, kv_size = n_heads * head_dim, n_kv * head_dim
    h = norm(x, w[IN_W], w[IN_B], norm_kind, eps)
    qkv = affine(h, w[QKV_W], w[QKV_S], w[QKV_B], onednn)  # [n, q + 2 kv]
    qk = qkv[:, : q_size + kv_size].view(n, n_heads + n_kv, head_dim).transpose(0, 1)
    v = qkv[:, q_size + kv_size :].view(n, n_kv, head_dim).transpose(0, 1)
    if w[QN_W].numel() > 0:  # Qwen3 / Gemma 3: RMSNorm over each head's q and k
        q_normed = norm(qk[:n_heads], w[QN_W], w[QN_W], norm_kind, eps)
        qk = torch.cat((q_normed, norm(qk[n_heads:], w[KN_W], w[KN_W], norm_kind, eps)), 0)
    if len(cos_sin) > 0:
        qk = rotate(qk, cos_sin[0], cos_sin[1], rot)
    write_kv(k_all, v_all, layer, pos, qk[n_heads:].transpose(0, 1), v.transpose(0, 1))
    if lab_attention and n == 1 and mask is None and attn_softcap <= 0.0:
        att = torch.ops.decoding_lab.decode_attention(
            qk[:n_heads], k_all, v_all, i, attn_len, attn_scale, True
        )
    else:
        att = attend(
            qk[:n_heads], k_all[i, :, :attn_len], v_all[i, :, :attn_len], mask, attn_scale,
            attn_softcap, n_heads != n_kv,
        )  # fmt: skip
    a = affine(att.transpose(0, 1).reshape(n, q_size), w[O_W], w[O_S], w[O_B], onednn)
    if w[PA_W].numel() > 0:  # Gemma: norm the attention output before the residual
        a = norm(a, w[PA_W], w[PA_B], norm_kind, eps)
    x = x + a
    u = affine(norm(x, w[PF_W], w[PF_B], norm_kind, eps), w[UP_W], w[UP_S], w[UP_B], onednn)
    if gated:
        gate, up = u.chunk(2, -1)
        u = act(gate, act_kind) * up
    else:
        u = act(u, act_kind)
    m = affine(u, w[DOWN_W], w[DOWN_S], w[DOWN_B], onednn)
    if w[PFF_W].numel() > 0:
        m = norm(m, w[PFF_W], w[PFF_B], norm_kind, eps)
    return x + m


def forward(
    ids: Tensor, pos: Tensor, attn_len: int, always_mask: bool, embed: Tensor,
    embed_scale: Tensor, wpe: Tensor, layers: list[list[Tensor]], sliding: list[bool],
    rope_of: list[int], final_w: Tensor, final_b: Tensor, lm_head: Tensor, lm_head_s: Tensor,
    k_all: Tensor, v_all: Tensor, inv_freqs: list[Tensor], rope_scales: list[float], rot: int,
    n_heads: int, n_kv: int, head_dim: int, eps: float, norm_kind: int, act_kind: int,
    gated: bool, attn_scale: float, attn_softcap: float, final_softcap: float, window: int,
    keep: int, onednn: bool, lab_attention: bool,
) -> Tensor:  # fmt: skip
    """One pass of a decoder over ``ids`` at ``pos`` (the module doc has the shapes)."""
    n = ids.shape[0]
    x = embed.index_select(0, ids)  # [n, hidden]
    if embed_scale.numel() > 0:
        x = x * embed_scale
    if wpe.numel() > 0:
        x = x + wpe.index_select(0, pos)
    tables = rotary_tables(pos, inv_freqs, rope_scales, x)
    full, local = masks(pos, attn_len, always_mask, window)
    no_rotary: list[Tensor] = []
    layer_ids = torch.arange(len(layers), device=x.device)
    for i in range(len(layers)):
        mask = local if sliding[i] and local is not None else full
        x = decoder_layer(
            x, layers[i], i, layer_ids[i : i + 1], pos,
            tables[rope_of[i]] if len(tables) > 0 else no_rotary, mask, k_all, v_all,
            attn_len, n_heads, n_kv, head_dim, rot, eps, norm_kind, act_kind, gated,
            attn_scale, attn_softcap, onednn, lab_attention,
        )  # fmt: skip
    x = norm(x[n - keep :], final_w, final_b, norm_kind, eps)
    logits = mm(x, lm_head, lm_head_s, onednn)
    if final_softcap > 0.0:
        logits = torch.tanh(logits / final_softcap) * final_softcap
    return logits.float()  # [keep, vocab]


# --- T5's decoder (engine.step.fast_t5 reads the model into these slots) ---

# per-layer slots (engine.step.fast_t5._layer_slots fills them in this order) and activations
(SA_NORM, T5_QKV, SA_O, CA_NORM, CA_Q, CA_O, FF_NORM, WI_W, WO_W) = range(9)  # fmt: skip
T5_RELU, T5_GELU_TANH, T5_GELU, T5_SILU = 0, 1, 2, 3


def t5_norm(x: Tensor, w: Tensor, eps: float) -> Tensor:
    # T5LayerNorm: float32 mean of squares, no mean, no bias; scale in the weight's dtype
    return w * torch.rms_norm(x.float(), [x.shape[-1]], None, eps).to(w.dtype)


def t5_act(x: Tensor, kind: int) -> Tensor:
    if kind == T5_RELU:
        return torch.relu(x)
    if kind == T5_GELU_TANH:
        return F.gelu(x, approximate="tanh")
    if kind == T5_GELU:
        return F.gelu(x)
    return torch.ops.aten.silu(x)


def t5_bias_mask(pos: Tensor, attn_len: int, bias_table: Tensor, n_heads: int) -> Tensor:
    """Relative position bias and causal mask as one float mask [1, H, n, attn_len]: the key
    at j is pos - j back (distances past the table's end share its last bucket); keys ahead
    of the row are -inf."""
    n = pos.shape[0]
    back = pos.unsqueeze(1) - torch.arange(attn_len, device=pos.device).unsqueeze(0)
    far = bias_table.shape[1] - 1
    bias = bias_table.index_select(1, back.clamp(0, far).reshape(-1))
    bias = bias.view(n_heads, n, attn_len).masked_fill((back < 0).unsqueeze(0), float("-inf"))
    return bias.unsqueeze(0)


def t5_layer(
    x: Tensor, w: list[Tensor], i: int, layer: Tensor, pos: Tensor, mask: Tensor,
    cross_k: Tensor, cross_v: Tensor, k_all: Tensor, v_all: Tensor, attn_len: int,
    n_heads: int, head_dim: int, eps: float, act_kind: int, gated: bool, onednn: bool,
) -> Tensor:  # fmt: skip
    """One T5 decoder layer: self-attention (cache at ``pos``), cross-attention, feed-forward;
    T5 does not scale attention scores."""
    n = x.shape[0]
    inner = n_heads * head_dim
    qkv = linear(t5_norm(x, w[SA_NORM], eps), w[T5_QKV], onednn).view(n, 3 * n_heads, head_dim)
    write_kv(k_all, v_all, layer, pos, qkv[:, n_heads : 2 * n_heads], qkv[:, 2 * n_heads :])
    q = qkv[:, :n_heads].transpose(0, 1)
    att = F.scaled_dot_product_attention(
        q.unsqueeze(0), k_all[i, :, :attn_len].unsqueeze(0),
        v_all[i, :, :attn_len].unsqueeze(0), attn_mask=mask, scale=1.0,
    )[0]  # fmt: skip
    x = x + linear(att.transpose(0, 1).reshape(n, inner), w[SA_O], onednn)
    q = linear(t5_norm(x, w[CA_NORM], eps), w[CA_Q], onednn)
    q = q.view(n, n_heads, head_dim).transpose(0, 1)
    att = F.scaled_dot_product_attention(
        q.unsqueeze(0), cross_k[i].unsqueeze(0), cross_v[i].unsqueeze(0), scale=1.0
    )[0]
    x = x + linear(att.transpose(0, 1).reshape(n, inner), w[CA_O], onednn)
    u = linear(t5_norm(x, w[FF_NORM], eps), w[WI_W], onednn)
    if gated:
        gate, up = u.chunk(2, -1)
        u = t5_act(gate, act_kind) * up
    else:
        u = t5_act(u, act_kind)
    return x + linear(u, w[WO_W], onednn)


def t5_forward(
    ids: Tensor, pos: Tensor, attn_len: int, embed: Tensor, layers: list[list[Tensor]],
    bias_table: Tensor, cross_k: Tensor, cross_v: Tensor, final_w: Tensor, lm_head: Tensor,
    out_scale: float, k_all: Tensor, v_all: Tensor, n_heads: int, head_dim: int, eps: float,
    act_kind: int, gated: bool, keep: int, onednn: bool,
) -> Tensor:  # fmt: skip
    """One pass of T5's decoder over ``ids`` at ``pos``; cross_k, cross_v: [layers, H, S, D],
    projected once from the encoder's output."""
    n = ids.shape[0]
    x = embed.index_select(0, ids)  # [n, d_model]
    mask = t5_bias_mask(pos, attn_len, bias_table, n_heads)
    layer_ids = torch.arange(len(layers), device=x.device)
    for i in range(len(layers)):
        x = t5_layer(
            x, layers[i], i, layer_ids[i : i + 1], pos, mask, cross_k, cross_v, k_all, v_all,
            attn_len, n_heads, head_dim, eps, act_kind, gated, onednn,
        )  # fmt: skip
    x = t5_norm(x[n - keep :], final_w, eps)
    if out_scale != 1.0:
        x = x * out_scale
    return linear(x, lm_head, onednn).float()  # [keep, vocab]
