"""A tiny random Llama with a word-level tokenizer whose BOS opens a chat turn and which has a
chat template, as SmolLM2-Instruct's has: what the window's chat-template tick and the
no-context scoring rule are about, without loading the bundled model."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from tiny_models import tiny_llama

WORDS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "user", "assistant", "the", "cat", "sat",
    "on", "a", "mat", "and", "dog", "ran", "far", "once", "upon", "time",
]  # fmt: skip
CHAT = (
    "{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> "
    "{% endfor %}{% if add_generation_prompt %}<|im_start|> assistant {% endif %}"
)


def word_tokenizer(chat_template: str | None = CHAT) -> PreTrainedTokenizerFast:
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token=WORDS[0]))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<|im_start|>",
                                  eos_token="<|im_end|>")  # fmt: skip
    tok.chat_template = chat_template
    return tok


def save_word_model(path: Path, seed: int = 5, chat_template: str | None = CHAT) -> Path:
    tiny_llama(seed, vocab=len(WORDS)).save_pretrained(path)
    word_tokenizer(chat_template).save_pretrained(path)
    return path
