"""Tiny randomly initialised models built from configs, for tests (no downloads)."""

from __future__ import annotations

import torch
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
)

VOCAB = 384  # matches ByT5Tokenizer (256 bytes + 3 specials + 125 extra ids)
INIT = 0.4  # a wide init so greedy output varies instead of repeating one token


def _finish(model: torch.nn.Module) -> torch.nn.Module:
    model.generation_config.pad_token_id = 0
    return model.eval()


def tiny_llama(seed: int = 0, vocab: int = VOCAB) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=2,
        eos_token_id=1,
        pad_token_id=0,
        initializer_range=INIT,
    )
    return _finish(LlamaForCausalLM(cfg))


def tiny_gpt2(seed: int = 0, vocab: int = VOCAB) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = GPT2Config(
        vocab_size=vocab,
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=256,
        bos_token_id=2,
        eos_token_id=1,
        initializer_range=INIT,
    )
    return _finish(GPT2LMHeadModel(cfg))


def tiny_t5(seed: int = 0, vocab: int = VOCAB) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = T5Config(
        vocab_size=vocab,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        decoder_start_token_id=0,
        eos_token_id=1,
        pad_token_id=0,
        initializer_factor=8.0,
    )
    return _finish(T5ForConditionalGeneration(cfg))


def tiny_bart(seed: int = 0, vocab: int = VOCAB) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = BartConfig(
        vocab_size=vocab,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=256,
        init_std=INIT,
        bos_token_id=0,
        eos_token_id=2,
        pad_token_id=1,
        decoder_start_token_id=2,
        forced_bos_token_id=None,
        forced_eos_token_id=None,
    )
    return _finish(BartForConditionalGeneration(cfg))


FACTORIES = {"llama": tiny_llama, "gpt2": tiny_gpt2, "t5": tiny_t5, "bart": tiny_bart}


def spy_on_init(monkeypatch, cls: type) -> list[type]:
    """Record the class of every object ``cls.__init__`` builds from now on (the test's
    monkeypatch undoes it): the list shows which stepper a code path chose."""
    built: list[type] = []
    real = cls.__init__

    def spy(self, *args, **kwargs):
        built.append(type(self))
        real(self, *args, **kwargs)

    monkeypatch.setattr(cls, "__init__", spy)
    return built


# A few lines of JSON and English for the tiny fast tokenizer's merges.
_CORPUS = [
    '{"name": "Ada", "age": 36, "type": "person", "ok": true}',
    '{"city": "Paris", "sky": "sunny", "celsius": 21, "list": [1, 2, 3]}',
    '{"type": "object", "items": ["a", "b"], "value": null, "flag": false}',
    "the cat sat on the mat and the dog ran after the ball in the park",
    "once upon a time there was a small dragon who liked to read books",
] * 4


def tiny_fast_tokenizer(vocab: int = VOCAB):
    """A byte-level BPE tokenizer of ``vocab`` tokens (ids 0..2: <pad>, </s>, <s>, as the
    tiny models' pad, EOS and BOS), trained here in milliseconds: a fast (Rust) tokenizer, as
    the grammar stage needs, with no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<pad>", "</s>", "<s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )  # fmt: skip
    tok.train_from_iterator(_CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", bos_token="<s>"
    )
