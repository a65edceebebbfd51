"""Issue 34, item 4: a decoder-only text scored with no context is read after the token that
started every document in training, not after a chat-turn marker; its first token is marked
"no context" and left out of the most-surprising pick."""

import math

import pytest
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from engine.models.loading import make_bundle
from engine.tree.score import score_text
from engine.tree.scored import ScoredToken, TextScore, context_and_text
from tiny_models import tiny_llama

WORDS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<s>",
    *["the", "cat", "sat", "on", "a", "mat"],
]


def tokenizer(bos: str | None, words: list[str] = WORDS) -> PreTrainedTokenizerFast:
    """A word-level tokenizer with the given BOS (SmolLM2-Instruct's is ``<|im_start|>``)."""
    vocab = {w: i for i, w in enumerate(words)}
    core = Tokenizer(models.WordLevel(vocab, unk_token=words[0]))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token=bos, eos_token="<|im_end|>")


@pytest.mark.parametrize(
    "bos,words,start",
    [
        ("<|im_start|>", WORDS, "<|endoftext|>"),  # a chat turn's opener: the separator instead
        ("<s>", WORDS, "<s>"),  # a real BOS: itself
        (None, WORDS, "<|endoftext|>"),  # no BOS (Qwen): the separator
        ("<|im_start|>", WORDS[1:], None),  # a chat marker and no separator: none
    ],
)
def test_the_document_start(bos, words, start):
    from engine.tree.scored import document_start

    tok = tokenizer(bos, words)
    want = None if start is None else tok.get_vocab()[start]
    assert document_start(tok) == want
    head, ids = context_and_text(tok, "the cat sat")
    assert head == ([] if want is None else [want]) and len(ids) == 3
    assert context_and_text(tok, "the cat sat", "a mat")[0] == tok("a mat")["input_ids"]


def test_no_context_is_read_after_the_document_start_and_marked():
    tok = tokenizer("<|im_start|>")
    bundle = make_bundle(tiny_llama(3, vocab=len(WORDS)).float(), tok, name="chat-bos")
    text = "the cat sat on a mat"
    ids = tok(text)["input_ids"]
    sep = tok.get_vocab()["<|endoftext|>"]
    with torch.no_grad():  # by hand: one forward over [separator, text]
        logits = bundle.model(input_ids=torch.tensor([[sep, *ids]])).logits[0, :-1]
    want = F.log_softmax(logits.float(), dim=-1)[torch.arange(len(ids)), torch.tensor(ids)]
    res = score_text(bundle, text)
    assert res.unscored == 0
    assert [t.logprob for t in res.tokens] == pytest.approx(want.tolist(), abs=1e-4)
    assert res.no_context
    with_context = score_text(bundle, text, prompt="a mat")
    assert not with_context.no_context


def fake(bits: list[float], no_context: bool) -> TextScore:
    toks = [ScoredToken(i, i, f"w{i}", -b * math.log(2), 1, b) for i, b in enumerate(bits)]
    return TextScore(toks, no_context=no_context)


def test_the_peak_leaves_the_no_context_token_out():
    assert fake([20.0, 3.0, 9.0, 1.0], no_context=True).peak() == 2
    assert fake([20.0, 3.0, 9.0, 1.0], no_context=False).peak() == 0
    assert fake([20.0], no_context=True).peak() is None
    assert fake([20.0, 3.0], no_context=True).to_json()["no_context"] is True


def byte_bpe() -> PreTrainedTokenizerFast:
    """A small byte-level BPE (GPT-2's kind: a word carries its leading space, " The")."""
    from tokenizers import decoders, trainers

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    corpus = ["Here is a short story. The teacher opened the old book and smiled."] * 20
    core.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))  # fmt: skip
    return PreTrainedTokenizerFast(tokenizer_object=core)


def test_a_text_after_a_context_is_read_as_the_words_that_follow_it():
    """ "Here is a short story." then "The teacher…" is scored as "… story. The teacher…" when
    the tokenizer writes words with their space (joined bare, "The" was the peak at 14.9
    bits on SmolLM2); a context ending in a space, or a byte tokenizer, is left as it is."""
    from transformers import ByT5Tokenizer

    tok = byte_bpe()
    text, ctx = "The teacher opened the book", "Here is a short story."
    spaced, bare = tok(" " + text)["input_ids"], tok(text)["input_ids"]
    assert spaced != bare and len(spaced) == len(bare)
    assert context_and_text(tok, text, ctx) == (tok(ctx)["input_ids"], spaced)
    assert context_and_text(tok, text, ctx + " ")[1] == bare  # the space is the context's
    assert context_and_text(tok, " " + text, ctx)[1] == spaced
    byt5 = ByT5Tokenizer()
    assert (
        context_and_text(byt5, text, ctx)[1] == byt5(text, add_special_tokens=False)["input_ids"]
    )  # bytes: a space would be a token of its own, not part of the word
