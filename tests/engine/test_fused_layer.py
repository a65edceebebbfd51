"""One token's step on the lab's fused CPU ops (engine/quant/csrc/layer.cpp and step.cpp's
Decoder, engine.step.fastpath): each op against the unfused step's own operations, a layer
against its pieces, the whole token against the unfused step, which steps use it, and what
the ops refuse."""

from __future__ import annotations

import platform

import pytest
import torch
from test_quant import PROMPT, quant_sized

from engine.quant import native
from engine.quant.apply import quantize_model
from engine.step import fastpath
from engine.step import forward as step
from engine.step.fastpath import FastStepper

pytestmark = pytest.mark.skipif(not native.usable(), reason=f"not built: {native.why_not()}")
lab = torch.ops.decoding_lab
BF = torch.bfloat16


def _ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    """The largest distance between two bfloat16 tensors in units of the last place."""
    ia, ib = a.view(torch.int16).int(), b.view(torch.int16).int()
    ia = torch.where(ia < 0, -32768 - ia, ia)  # sign-magnitude -> ordered integers
    ib = torch.where(ib < 0, -32768 - ib, ib)
    return int((ia - ib).abs().max())


@pytest.mark.parametrize("width", [64, 576, 896])
def test_norms_and_silu_are_the_unfused_operations(width):
    g = torch.Generator().manual_seed(width)
    x = (torch.randn(3, width, generator=g) * 3).to(BF)
    a = torch.randn(3, width, generator=g).to(BF)
    w = torch.randn(width, generator=g).to(BF)
    want = w * step.rms(x.float(), 1e-6).to(BF)
    assert _ulps(lab.rms_norm(x, w, 1e-6), want) <= 1  # a sum's order may move one rounding
    s, h = lab.add_rms_norm(x, a, w, 1e-6)
    assert torch.equal(s, x + a)
    assert _ulps(h, w * step.rms((x + a).float(), 1e-6).to(BF)) <= 1
    u = torch.randn(2, 2 * width, generator=g).to(BF)
    gate, up = u.chunk(2, -1)
    assert _ulps(lab.silu_mul(u), step.act(gate, step.ACT_SILU) * up) <= 1


def test_a_float_norms_mean_is_torchs_bit_for_bit_in_the_labs_own_sum():
    """The exact norms' mean (a float layer's, the unfused step's bits) is summed by the lab in
    torch's order, not by at::mean: the same bits at every width, magnitude and sign, and on
    x86 the lab's sum does the work at every width from one vector to torch's grain."""
    g = torch.Generator().manual_seed(5)
    widths = [*range(1, 70), 576, 896, 1000, 1536, 2048, 3584, 4099, 8192, 20000, 32767, 32768]
    ours = 0
    for width in widths:
        for scale in (1e-3, 1.0, 1e4):
            x = torch.randn(2, width, generator=g) * scale
            for sq in (x * x, x):
                got, by_lab = lab.row_means(sq.contiguous())
                assert torch.equal(got.view(torch.int32), sq.mean(-1).view(torch.int32)), width
                ours += by_lab
    if platform.machine().lower() in ("x86_64", "amd64"):
        # torch 2.13 sums with AVX2's 8 lanes (16 tried too, for a torch that uses AVX-512's)
        assert ours >= 6 * sum(16 <= w < 32768 for w in widths)


@pytest.mark.parametrize(("heads", "kv", "d", "rot"), [(14, 2, 64, 64), (4, 4, 32, 16)])
def test_rotary_and_cache_writes_are_the_unfused_ones_bit_for_bit(heads, kv, d, rot):
    g = torch.Generator().manual_seed(heads)
    qkv = torch.randn(1, (heads + 2 * kv) * d, generator=g).to(BF)
    pos = torch.tensor([7])
    inv = [1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))]
    cos, sin = step.rotary_tables(pos, inv, [1.0], qkv)[0]
    k_all = torch.randn(3, kv, 12, d, generator=g).to(BF)
    v_all = torch.randn(3, kv, 12, d, generator=g).to(BF)
    k_ref, v_ref = k_all.clone(), v_all.clone()
    q = lab.rope_kv(qkv, cos, sin, k_all, v_all, 2, pos, heads, kv, rot)
    qk = qkv[:, : (heads + kv) * d].view(1, heads + kv, d).transpose(0, 1)
    v = qkv[:, (heads + kv) * d :].view(1, kv, d).transpose(0, 1)
    qk = step.rotate(qk, cos, sin, rot)
    k_new, v_new = qk[heads:].transpose(0, 1), v.transpose(0, 1)
    step.write_kv(k_ref, v_ref, torch.tensor([2]), pos, k_new, v_new)
    assert torch.equal(q, qk[:heads]) and torch.equal(k_all, k_ref) and torch.equal(v_all, v_ref)
    with pytest.raises(RuntimeError, match="past the cache"):
        lab.rope_kv(qkv, cos, sin, k_all, v_all, 2, torch.tensor([12]), heads, kv, rot)


@pytest.mark.parametrize(("heads", "kv", "length"), [(14, 2, 1), (14, 2, 37), (4, 4, 300)])
def test_one_query_attention_is_within_bfloat16s_rounding_of_the_exact_one(heads, kv, length):
    g = torch.Generator().manual_seed(length)
    d = 64
    q = torch.randn(heads, 1, d, generator=g).to(BF)
    k_all = (torch.randn(2, kv, 320, d, generator=g) * 2).to(BF)
    v_all = torch.randn(2, kv, 320, d, generator=g).to(BF)
    got = lab.decode_attention(q, k_all, v_all, 1, length, 0.125)
    rep = heads // kv
    k = k_all[1, :, :length].double().repeat_interleave(rep, 0)
    v = v_all[1, :, :length].double().repeat_interleave(rep, 0)
    exact = torch.softmax(q.double() @ k.transpose(1, 2) * 0.125, -1) @ v
    assert float((got.double() - exact).abs().max()) <= float(exact.abs().max()) * 2.0**-8 + 1e-6
    sdpa = step.attend(q, k_all[1, :, :length], v_all[1, :, :length], None, 0.125, 0.0, rep > 1)
    assert (
        float((got.double() - exact).abs().max())
        <= float((sdpa.double() - exact).abs().max()) + 1e-6
    )


def test_attention_with_sdpas_rounding_is_sdpa_but_for_a_sums_order():
    """A bfloat16 model's one-query attention (sdpa_rounding): the weights rounded to bfloat16
    as torch's SDPA rounds them, against the largest score of each 512-position block and those
    before. Across head widths, GQA ratios and lengths past two blocks, nearly every output is
    SDPA's bit for bit (on this machine 1.8% differ, against 17.6% with float32 weights), and
    none by more than two bfloat16 units of its row's largest."""
    g = torch.Generator().manual_seed(11)
    same = same_f32 = total = 0
    for d, rep, kv, length in [(64, 3, 3, 50), (64, 7, 2, 33), (128, 4, 2, 700), (64, 1, 4, 1100),
                               (96, 2, 1, 512), (64, 3, 3, 513), (256, 2, 1, 300),
                               (64, 10, 1, 200)]:  # fmt: skip
        q = (torch.randn(kv * rep, 1, d, generator=g) * 2).to(BF)
        k_all = (torch.randn(2, kv, 1200, d, generator=g) * 2).to(BF)
        v_all = torch.randn(2, kv, 1200, d, generator=g).to(BF)
        sdpa = step.attend(q, k_all[1, :, :length], v_all[1, :, :length], None, d**-0.5, 0.0,
                           rep > 1)  # fmt: skip
        got = lab.decode_attention(q, k_all, v_all, 1, length, d**-0.5, True)
        f32 = lab.decode_attention(q, k_all, v_all, 1, length, d**-0.5)
        unit = sdpa.float().abs().amax(-1, keepdim=True) * 2.0**-8
        assert float(((got.float() - sdpa.float()).abs() / unit).max()) <= 2.0
        same += int((got == sdpa).sum())
        same_f32 += int((f32 == sdpa).sum())
        total += sdpa.numel()
    assert same >= 0.95 * total and total - same <= (total - same_f32) / 4


def test_attention_with_sdpas_rounding_takes_each_blocks_running_maximum():
    """Past 512 positions SDPA takes a block's weights against the largest score so far, not
    the largest of all: one strong key in the first block, a stronger one (by 0 to 2.4) in the
    second, the rest far below. Taken against the largest of all, about 17% of the outputs
    differ from SDPA's; as SDPA takes them, about 1%."""
    d, kv, rep, length = 64, 2, 10, 600
    heads = kv * rep
    differ = total = 0
    for seed in range(10):
        g = torch.Generator().manual_seed(seed)
        u = torch.randn(d, generator=g)
        u = u / u.norm()
        q = (u * 4).expand(heads, 1, d).to(BF)  # every head's query along u
        scores = torch.randn(kv, length, generator=g) - 30.0
        scores[:, 3] = 8.0
        scores[:, 550] = 8.0 + 2.4 * torch.rand(kv, generator=g)
        k = scores.unsqueeze(-1) * u * (8.0 / 4.0)  # q . k / 8 = the score
        k_all = torch.zeros(2, kv, 640, d)
        k_all[1, :, :length] = k
        k_all = k_all.to(BF)
        v_all = torch.randn(2, kv, 640, d, generator=g).to(BF)
        sdpa = step.attend(q, k_all[1, :, :length], v_all[1, :, :length], None, 0.125, 0.0, True)
        got = lab.decode_attention(q, k_all, v_all, 1, length, 0.125, True)
        differ += int((got != sdpa).sum())
        total += sdpa.numel()
    assert differ <= 0.05 * total, (differ, total)


@pytest.mark.parametrize("sdpa_rounding", [False, True])
@pytest.mark.parametrize("length", [31, 32, 33, 97, 600])
def test_attention_gives_the_same_numbers_on_any_number_of_threads(length, sdpa_rounding):
    """Its chunks of positions are fixed, so one thread or two combine the same partials in
    the same order."""
    g = torch.Generator().manual_seed(length)
    q = torch.randn(9, 1, 64, generator=g).to(BF)
    k_all = (torch.randn(2, 3, 640, 64, generator=g) * 2).to(BF)
    v_all = torch.randn(2, 3, 640, 64, generator=g).to(BF)
    threads = torch.get_num_threads()
    try:
        outs = []
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            outs.append(lab.decode_attention(q, k_all, v_all, 1, length, 0.125, sdpa_rounding))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral", "phi3"])
@pytest.mark.parametrize("kind", ["int8", "int4", "int8-aten"])
def test_a_quantised_step_runs_fused_and_gives_the_unfused_steps_numbers(family, kind, monkeypatch):
    """int8-aten: PyTorch's int8 layout, whose head is packed for oneDNN and runs apart."""
    if kind == "int8-aten":
        monkeypatch.setattr(native, "takes_int8", lambda *_: False)
    model = _unwindowed(quant_sized(family))
    quantize_model(model, kind.removesuffix("-aten"))
    fused = FastStepper(model)
    assert fused.fused and fused._head_apart == (kind == "int8-aten")
    calls = _counting(fused)
    monkeypatch.setenv("DECODING_LAB_FUSED", "0")
    plain = FastStepper(model)
    assert not plain.fused
    seq = list(PROMPT)
    fused.logits(seq)
    plain.logits(seq)
    for token in (3, 8, 41, 5):  # one token at a time: the fused layers
        seq.append(token)
        a, b = fused.logits(seq)[-1], plain.logits(seq)[-1]
        torch.testing.assert_close(a, b, atol=0.05, rtol=0.02)
    assert len(calls) == 4  # every token after the prompt: the Decoder
    # the keys and values the fused layers wrote are the unfused layers' (their inputs differ
    # by the layers' roundings only)
    n = len(seq)
    torch.testing.assert_close(fused.cache.k[:, :, :n].float(), plain.cache.k[:, :, :n].float(),
                               atol=0.05, rtol=0.02)  # fmt: skip
    torch.testing.assert_close(fused.cache.v[:, :, :n].float(), plain.cache.v[:, :, :n].float(),
                               atol=0.05, rtol=0.02)  # fmt: skip


def _pieces(x, w, i, pos, cos_sin, k_all, v_all, attn_len, heads, kv, rot, eps, scale):
    """A quantised layer as one op call a piece (as stop 44 ran it)."""
    h = lab.rms_norm(x, w[step.IN_W], eps)
    qkv = step.affine(h, w[step.QKV_W], w[step.QKV_S], w[step.QKV_B], False).contiguous()
    q = lab.rope_kv(qkv, cos_sin[0], cos_sin[1], k_all, v_all, i, pos, heads, kv, rot)
    att = lab.decode_attention(q, k_all, v_all, i, attn_len, scale)
    a = step.affine(att.reshape(1, -1), w[step.O_W], w[step.O_S], w[step.O_B], False)
    x, h = lab.add_rms_norm(x, a, w[step.PF_W], eps)
    u = lab.silu_mul(step.affine(h, w[step.UP_W], w[step.UP_S], w[step.UP_B], False))
    return x + step.affine(u, w[step.DOWN_W], w[step.DOWN_S], w[step.DOWN_B], False)


@pytest.mark.parametrize("layout", ["lab", "aten"])
@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_the_fused_layer_op_is_its_pieces_bit_for_bit(kind, layout, monkeypatch):
    """decode_layer (one call a layer) against the ops it strings together, on the lab's
    layouts and on PyTorch's (a matrix whose shape the lab's kernels do not take), with the
    q/k/v bias of Qwen2: the same output and the same keys and values in the cache."""
    if layout == "aten":
        monkeypatch.setattr(native, "takes_int4", lambda *_: False)
        monkeypatch.setattr(native, "takes_int8", lambda *_: False)
    model = quant_sized("qwen2")
    quantize_model(model, kind)
    stepper = FastStepper(model)
    assert stepper.fused
    w = stepper.layers[1]
    assert (w[step.QKV_W].dim() == 3) == (layout == "lab") and w[step.QKV_B].numel() > 0
    spec, g = stepper.spec, torch.Generator().manual_seed(3)
    heads, kv, rot = spec.n_heads, spec.n_kv, spec.rot
    d = spec.head_dim
    pos = torch.tensor([9])
    cos, sin = step.rotary_tables(pos, spec.inv_freqs, spec.rope_scales, torch.zeros(1).to(BF))[0]
    caches = [torch.randn(2, kv, 16, d, generator=g).to(BF) for _ in range(2)]
    mine = [c.clone() for c in caches]
    x = torch.randn(1, model.config.hidden_size, generator=g).to(BF)
    want = _pieces(x, w, 1, pos, [cos, sin], *caches, 10, heads, kv, rot, 1e-6, 0.2)
    slots = list(fastpath.FUSED_SLOTS)
    got = lab.decode_layer(x, w, slots, 1, pos, cos, sin, *mine, 10, heads, kv, rot, 1e-6, 0.2,
                           False)  # fmt: skip
    assert torch.equal(got, want)
    assert torch.equal(mine[0], caches[0]) and torch.equal(mine[1], caches[1])
    args = (1, pos, cos, sin, *mine, 10, heads, kv, rot, 1e-6, 0.2, False)
    with pytest.raises(RuntimeError, match="slots"):
        lab.decode_layer(x, w, [0, 1], *args)
    with pytest.raises(RuntimeError, match="one token"):
        lab.decode_layer(x.repeat(2, 1), w, list(range(14)), *args)


def _unwindowed(model):
    """The tiny Mistral and Phi-3 slide a window of 8, shorter than PROMPT: past it a token
    takes the masked step, not the Decoder. Without it every token here reaches the Decoder."""
    if getattr(model.config, "sliding_window", None):
        model.config.sliding_window = None
    return model


def _counting(stepper):
    """Count the stepper's calls of its Decoder."""
    real, calls = stepper._decoder, []

    class Counted:
        def step(self, *args):
            calls.append(args[1])
            return real.step(*args)

    stepper._decoder = Counted()
    return calls


def _same_bits(model, monkeypatch, tokens=(3, 8, 41, 5, 17)):
    """The model's fused stepper and its unfused one: logits and cache, bit for bit, over a
    prompt (the step of several rows, both) and one token at a time (the Decoder)."""
    fused = FastStepper(model)
    assert fused.fused
    calls = _counting(fused)
    with monkeypatch.context() as m:
        m.setenv("DECODING_LAB_FUSED", "0")
        plain = FastStepper(model)
    assert not plain.fused
    seq = list(PROMPT)
    assert torch.equal(fused.logits(seq), plain.logits(seq))  # the prompt: unfused both
    for token in tokens:
        seq.append(token)
        assert torch.equal(fused.logits(seq), plain.logits(seq))
    n = len(seq)
    assert torch.equal(fused.cache.k[:, :, :n], plain.cache.k[:, :, :n])
    assert torch.equal(fused.cache.v[:, :, :n], plain.cache.v[:, :, :n])
    window = getattr(model.config, "sliding_window", None) or n
    assert calls == [p for p in range(len(PROMPT), n) if p < window]  # the Decoder's
    return fused


@pytest.mark.parametrize("dtype", [BF, torch.float32])
@pytest.mark.parametrize("onednn", ["1", "0"])
@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral", "phi3"])
def test_a_float_step_runs_fused_and_gives_the_unfused_steps_bits(family, onednn, dtype,
                                                                   monkeypatch):  # fmt: skip
    """A bfloat16 or float32 model's token in one call runs the unfused step's operations
    (torch's own, the lab's rotary, which gives theirs, and in bfloat16 the lab's attention,
    which the unfused step takes too): its logits and cache, bit for bit, on oneDNN's
    matrices and on plain ones. (tests/engine/test_bundled.py holds the fast path to
    transformers on SmolLM2: float32's greedy tokens exactly, bfloat16 within its rounding.)"""
    if onednn == "0":
        monkeypatch.setattr(fastpath, "onednn_supports", lambda _dtype: False)
    fused = _same_bits(_unwindowed(quant_sized(family)).to(dtype), monkeypatch)
    assert fused.onednn == (onednn == "1")


@pytest.mark.parametrize("dtype", [BF, torch.float32])
def test_the_decoders_rotary_tables_are_the_unfused_steps_past_a_block(dtype, monkeypatch):
    """The Decoder makes its rotary tables a block of positions at a time (64) where the
    unfused step makes one row a token: the same bits at every position, across the first
    block's end and into the second's (phi3: a partial rotary)."""
    tokens = [(7 * i + 3) % 50 for i in range(62)]  # positions 10-71
    for family in ("llama", "phi3"):
        _same_bits(_unwindowed(quant_sized(family)).to(dtype), monkeypatch, tokens=tokens)


def test_a_sliding_window_past_its_length_runs_the_masked_step(monkeypatch):
    """Mistral's window, shorter than the run: the tokens past it take the unfused step's
    masked attention, the same bits as before."""
    model = quant_sized("mistral").to(BF)
    model.config.sliding_window = 12  # the prompt is 10 tokens: the window ends mid-run
    _same_bits(model, monkeypatch, tokens=(3, 8, 41, 5, 17, 60, 2))


def test_the_decoder_refuses_what_does_not_fit():
    model = quant_sized("llama")
    quantize_model(model, "int4")
    stepper = FastStepper(model)
    k_all, v_all = stepper.cache.ensure(8)
    with pytest.raises(RuntimeError, match="not in the vocabulary"):
        stepper._decoder.step(model.config.vocab_size, 0, k_all, v_all, 1)
    with pytest.raises(RuntimeError, match="does not fit the cache"):
        stepper._decoder.step(3, k_all.shape[2], k_all, v_all, k_all.shape[2] + 1)
    with pytest.raises(RuntimeError, match="does not fit the cache"):  # unwritten positions
        stepper._decoder.step(3, 2, k_all, v_all, 5)
    with pytest.raises(RuntimeError, match="14 tensors a layer"):
        torch.classes.decoding_lab.Decoder([], [], [], [], False)
    flat = [t for layer in stepper.layers for t in (layer[s] for s in fastpath.FUSED_SLOTS)]
    with pytest.raises(RuntimeError, match="5 model tensors"):
        torch.classes.decoding_lab.Decoder(flat, [], [], [], False)


@pytest.mark.parametrize("family", ["qwen3", "gemma2", "gpt2"])
def test_which_steps_are_fused(family):
    assert FastStepper(quant_sized("llama")).fused  # float32 Llama: fused
    # q/k norms (Qwen3), Gemma's norms, a layer norm and GELU: not the shape the ops take
    assert not FastStepper(quant_sized(family)).fused
    model = quant_sized(family)
    quantize_model(model, "int4")
    assert not FastStepper(model).fused


def test_the_ops_refuse_what_does_not_fit_before_touching_the_cache():
    qkv = torch.randn(3, 8 * 16).to(BF)
    cos = torch.ones(1, 16).to(BF)  # one row of tables for three rows
    k_all = torch.zeros(2, 2, 8, 16).to(BF)
    v_all = torch.zeros(2, 2, 8, 16).to(BF)
    with pytest.raises(RuntimeError, match="one row of the rotary tables per row"):
        lab.rope_kv(qkv, cos, cos, k_all, v_all, 0, torch.tensor([0, 1, 2]), 4, 2, 16)
    tables = torch.ones(3, 16).to(BF)
    with pytest.raises(RuntimeError, match="past the cache"):  # the third row's position
        lab.rope_kv(qkv, tables, tables, k_all, v_all, 0, torch.tensor([0, 1, 8]), 4, 2, 16)
    assert bool((k_all == 0).all()) and bool((v_all == 0).all())  # nothing written
    with pytest.raises(RuntimeError, match="integer position"):
        lab.rope_kv(qkv, tables, tables, k_all, v_all, 0, torch.tensor([0.0, 1, 2]), 4, 2, 16)
    q = torch.randn(4, 1, 16).to(BF)
    for layer in (2, -1):
        with pytest.raises(RuntimeError, match="not in the cache"):
            lab.decode_attention(q, k_all, v_all, layer, 4, 0.25)
    with pytest.raises(RuntimeError, match="differ in shape"):
        lab.decode_attention(q, k_all, v_all[:1], 0, 4, 0.25)
