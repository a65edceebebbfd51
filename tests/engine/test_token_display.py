"""How single tokens are shown (axis labels, candidate tables): a token that carries only
part of a character shows its bytes, ``<0xF0>``, never U+FFFD or the byte alphabet."""

import re

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import bytes_to_unicode

from engine.models.text import TokenTable, show_bytes

TEXT = "Hi 🌊 café 日本 ünï"


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """A GPT-2-style byte-level BPE (the kind SmolLM2, Llama 3 and Qwen use): the 256-byte
    alphabet and two merges, so some characters are one token and others split into bytes."""
    alphabet = list(bytes_to_unicode().values())
    merges = [("Ã", "©"), ("c", "a")]  # "é" whole; "ca"
    vocab = {c: i for i, c in enumerate(alphabet)}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=backend)


def bytes_of(shown: str) -> bytes:
    """What a shown token stands for: its text, with each ``<0xNN>`` as that byte."""
    parts = re.split(r"<0x([0-9A-F]{2})>", shown)
    return b"".join(
        bytes([int(p, 16)]) if i % 2 else p.encode("utf-8") for i, p in enumerate(parts)
    )


def test_byte_level_tokens_show_their_bytes_and_add_up_to_the_text():
    tok = byte_level_tokenizer()
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    table = TokenTable(tok)
    shown = [table(i) for i in ids]
    assert b"".join(bytes_of(s) for s in shown) == TEXT.encode("utf-8")
    assert tok.decode(ids) == TEXT
    assert not any("\ufffd" in s for s in shown)
    alphabet_only = set(bytes_to_unicode().values()) - {chr(c) for c in range(33, 127)}
    assert not any(set(s) & alphabet_only - set(TEXT) for s in shown)  # no "ðŁ", "Ã"
    assert "<0xF0>" in shown and "<0xE6>" in shown  # the first bytes of the wave and of 日
    assert " caf" + "é" in "".join(shown)  # whole characters stay characters


@pytest.mark.parametrize(
    "data, want",
    [
        (b" \xf0\x9f", " <0xF0><0x9F>"),
        ("é".encode()[:1] + b"x", "<0xC3>x"),
        ("naïve".encode(), "naïve"),
        (b"\x8c", "<0x8C>"),
        (b"", ""),
    ],
)
def test_show_bytes(data, want):
    assert show_bytes(data) == want
    assert bytes_of(show_bytes(data)) == data


def test_byte_fallback_and_unknown_tokens_keep_their_own_names():
    class SentencePieceLike:
        def decode(self, ids, skip_special_tokens=False):
            return "\ufffd"

        def convert_ids_to_tokens(self, token_id):
            return {1: "<0xF0>", 2: "▁x\ufffd"}.get(token_id)

    table = TokenTable(SentencePieceLike())
    assert table(1) == "<0xF0>"  # already in the byte-fallback notation
    assert table(2) == "▁x\ufffd"  # not byte-level BPE: shown as the vocabulary writes it
    assert table(3) == "<3>"


def test_byt5_byte_tokens_show_their_bytes():
    """ByT5 (the bundled tiny T5's tokenizer) names each byte chr(byte): the bytes of a
    character split across tokens show as <0xNN>, control-range ones too."""
    from transformers import ByT5Tokenizer

    tok = ByT5Tokenizer()
    text = "🌊 é"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    table = TokenTable(tok)
    shown = [table(i) for i in ids]
    assert b"".join(bytes_of(s) for s in shown) == text.encode("utf-8")
    assert shown[:4] == ["<0xF0>", "<0x9F>", "<0x8C>", "<0x8A>"]
