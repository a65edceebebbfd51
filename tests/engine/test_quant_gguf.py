"""A GGUF file's 4-bit blocks read as integers and scales (engine.quant.gguf_blocks) mean what
the gguf package's own dequantiser says they mean; the bundled Q4_1 model runs on them, from a
cache the second time."""

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from engine.quant.formats import dequantize_int4, int4_groups
from engine.quant.gguf_blocks import read_blocks

N, K = 8, 512


def _ours(raw: np.ndarray, kind: str) -> torch.Tensor:
    u, scale, offset = read_blocks(raw, kind, N, K)
    assert u.dtype == torch.uint8 and int(u.max()) <= 15
    return (u.float().reshape(N, -1, 32) * scale[..., None] + offset[..., None]).reshape(N, K)


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1"])
def test_q4_0_and_q4_1_blocks_mean_what_gguf_dequantises(kind):
    w = np.random.default_rng(0).standard_normal((N, K)).astype(np.float32)
    raw = quantize(w, GGMLQuantizationType[kind])
    want = torch.from_numpy(dequantize(raw, GGMLQuantizationType[kind]).reshape(N, K))
    # both compute d * u + m in float32; Q4_0's -8 d offset may round once more
    torch.testing.assert_close(_ours(raw, kind), want, rtol=1e-6, atol=1e-6)


def test_q4_k_blocks_mean_what_gguf_dequantises():
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, size=(N, K // 256, 144), dtype=np.uint8)
    halves = rng.uniform(0.001, 0.05, size=(N, K // 256, 2)).astype(np.float16)
    raw[..., 0:4] = halves.view(np.uint8).reshape(N, K // 256, 4)  # d and dmin: finite
    raw = raw.reshape(N, -1)
    want = torch.from_numpy(dequantize(raw, GGMLQuantizationType.Q4_K).reshape(N, K))
    torch.testing.assert_close(_ours(raw, "Q4_K"), want, rtol=1e-6, atol=1e-6)


def test_blocks_in_the_kernel_form_keep_the_integers():
    w = np.random.default_rng(2).standard_normal((N, K)).astype(np.float32)
    raw = quantize(w, GGMLQuantizationType.Q4_1)
    u, scale, offset = read_blocks(raw, "Q4_1", N, K)
    want = torch.from_numpy(dequantize(raw, GGMLQuantizationType.Q4_1).reshape(N, K))
    got = dequantize_int4(u, int4_groups(scale, offset))
    # only the scale and zero are rounded (float16 -> bfloat16, 2^-9 each): the error stays
    # far below a 4-bit step (scale), here bounded by 2^-8 of the group's reach
    reach = want.abs().reshape(N, -1, 32).amax(-1, keepdim=True)
    assert ((got - want).abs().reshape(N, -1, 32) <= reach * 2.0**-7).all()


def test_wrong_sized_blocks_are_refused_before_reading():
    raw = np.zeros((N, K // 32 * 20 - 1), dtype=np.uint8)
    with pytest.raises(ValueError, match="should be"):
        read_blocks(raw, "Q4_1", N, K)


@pytest.fixture(scope="module")
def private_cache(tmp_path_factory):
    """A private cache, so the conversion really runs and is then read back."""
    mp = pytest.MonkeyPatch()
    mp.setenv("DECODING_LAB_CACHE", str(tmp_path_factory.mktemp("dl-quant-cache")))
    yield
    mp.undo()


@pytest.mark.slow
def test_bundled_q4_1_runs_its_own_blocks_and_reads_them_back_from_the_cache(private_cache):
    from engine.models.catalog import open_model
    from engine.quant.linear import QuantLinear
    from engine.step.fastpath import fast_stepper_or_none

    said: list[str] = []
    first = open_model("smollm2-135m", device="cpu", dtype="int4", progress=said.append)
    assert first.dtype_name == "int4"
    assert "210 × int4, GGUF Q4_1 as it is" in first.extra["quant_summary"]
    assert "1 × int8 per row" in first.extra["quant_summary"]  # the (tied) output head
    again = open_model("smollm2-135m", device="cpu", dtype="int4", progress=said.append)
    assert any("Read the cached int4 layers" in s for s in said)
    ids = first.encode_prompt("The capital of France is", use_chat_template=False)
    a = fast_stepper_or_none(first.model).logits(ids)
    torch.testing.assert_close(fast_stepper_or_none(again.model).logits(ids), a, rtol=0, atol=0)

    # the integers are the file's: the kernel's weights equal the float conversion of the same
    # blocks but for the bfloat16 rounding of each group's scale and zero (2^-9 of each)
    full = open_model("smollm2-135m", device="cpu", dtype="float32")
    layer = first.model.model.layers[3].mlp.down_proj
    assert isinstance(layer, QuantLinear)
    want = full.model.model.layers[3].mlp.down_proj.weight.float()
    reach = want.abs().reshape(want.shape[0], -1, 32).amax(-1, keepdim=True)
    err = (layer.weight.float() - want).abs().reshape(want.shape[0], -1, 32)
    assert (err <= reach * 2.0**-7).all()
    assert not torch.equal(layer.weight.float(), want)  # bfloat16 output, not a float copy


@pytest.mark.slow
def test_bundled_int4_logits_match_llama_cpp_on_the_same_file(private_cache):
    """Our int4 run of the bundled Q4_1 file against llama.cpp's own logits for the same
    prompt. llama.cpp multiplies Q4_1 by activations it rounds to 8 bits (Q8_1) and we by
    bfloat16 ones, so the logits differ by rounding: KL(llama.cpp || ours) below 0.02 nats at
    every position and the same top token at 90% of them. Not run where llama-cpp-python is
    missing (it builds from source)."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from engine.models.catalog import open_model
    from engine.step.fastpath import fast_stepper_or_none

    bundle = open_model("smollm2-135m", device="cpu", dtype="int4")
    ids = bundle.encode_prompt("The capital of France is", use_chat_template=False)
    ours = fast_stepper_or_none(bundle.model).logits(ids, keep=len(ids))
    llm = llama_cpp.Llama(model_path=bundle.extra["gguf"], logits_all=True, n_ctx=256,
                          verbose=False)  # fmt: skip
    llm.eval(ids)
    theirs = torch.tensor(llm.scores[: len(ids)], dtype=torch.float32)
    kl = (theirs.softmax(-1) * (theirs.log_softmax(-1) - ours.log_softmax(-1))).sum(-1)
    assert float(kl.max()) < 0.02
    same = (theirs.argmax(-1) == ours.argmax(-1)).float().mean()
    assert float(same) >= 0.9
