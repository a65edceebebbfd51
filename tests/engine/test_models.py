"""Loading: folders, errors, chat templates, EOS ids. No network."""

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, ByT5Tokenizer

from engine import EmptyPromptError, GenerationSession, ModelLoadError, SamplerSettings, load_model
from engine.models.loading import (
    DECODER_ONLY,
    ENCODER_DECODER,
    make_bundle,
    pick_device,
    pick_dtype,
)
from tiny_models import tiny_llama, tiny_t5


def save(model, path):
    model.save_pretrained(path)
    ByT5Tokenizer().save_pretrained(path)
    return path


def test_load_decoder_only_folder(tmp_path):
    model = tiny_llama()
    bundle = load_model(save(model, tmp_path / "llama"), device="cpu")
    assert bundle.kind == DECODER_ONLY and bundle.dtype == torch.float32
    assert bundle.device.type == "cpu" and bundle.context_length == 256
    ids = bundle.encode_prompt("hello")
    ref = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, eos_token_id=None)
    session = GenerationSession(
        bundle.model,
        ids,
        SamplerSettings(temperature=0, max_new_tokens=8),
        tokenizer=bundle.tokenizer,
        eos_token_ids=[],
    )
    assert [s.token_id for s in session.stream()] == ref[0, len(ids) :].tolist()


def test_load_encoder_decoder_folder(tmp_path):
    bundle = load_model(save(tiny_t5(), tmp_path / "t5"), device="cpu", dtype="float32")
    assert bundle.kind == ENCODER_DECODER and bundle.is_encoder_decoder
    assert not bundle.has_chat_template
    assert bundle.tokenizer.eos_token_id in bundle.eos_token_ids
    assert bundle.name == "t5" and "encoder-decoder" in bundle.describe()


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="No such file or folder"):
        load_model(tmp_path / "nope" / "model.gguf")
    with pytest.raises(ModelLoadError, match="No such file or folder"):
        load_model("./does-not-exist")


def test_folder_without_config(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(tmp_path)


def test_non_generative_model_is_refused(tmp_path):
    cfg = BertConfig(
        vocab_size=384,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    )
    save(BertForMaskedLM(cfg), tmp_path / "bert")
    with pytest.raises(ModelLoadError, match="cannot generate text"):
        load_model(tmp_path / "bert")


def test_chat_template_wraps_prompt_and_adds_end_of_turn_eos():
    tok = ByT5Tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|im_end|>"]})
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}<|im_end|>{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    model = tiny_llama(vocab=len(tok))
    bundle = make_bundle(model, tok)
    assert bundle.has_chat_template
    wrapped = bundle.tokenizer.decode(bundle.encode_prompt("hi"))
    assert wrapped == "<user>hi<|im_end|><assistant>"
    plain = bundle.tokenizer.decode(bundle.encode_prompt("hi", use_chat_template=False))
    assert plain.startswith("hi")
    assert tok.convert_tokens_to_ids("<|im_end|>") in bundle.eos_token_ids


@pytest.mark.parametrize("text", ["", "   \n\t"])
def test_empty_prompt_error(text):
    bundle = make_bundle(tiny_llama(), ByT5Tokenizer())
    with pytest.raises(EmptyPromptError):
        bundle.encode_prompt(text)


def test_device_and_dtype_choice():
    assert pick_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        assert pick_device("auto").type in ("cpu", "mps")
        with pytest.raises(ModelLoadError):
            pick_device("cuda")
    assert pick_dtype(torch.device("cpu")) == torch.float32
    assert pick_dtype(torch.device("cpu"), "bfloat16") == torch.bfloat16
    with pytest.raises(ModelLoadError):
        pick_dtype(torch.device("cpu"), "float8")
