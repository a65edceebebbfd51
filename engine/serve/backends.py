"""What each served backend returns, in one table, and the line that says it to the user.

The servers differ in exactly what this lab shows (their own documentation, cited per row):
whether the top-N are the raw distribution or one after the server's sampler, how many it
gives, whether a prompt can be sent as token ids, and whether a text can be scored (prompt
log-probabilities). A session never draws what its backend cannot give: a raw-only server's
stream has no "after sampler" bars, a missing log-probability is an error and not a zero, and
the entropy from N candidates is a lower bound. ``capability_line`` turns a row into the one
line the window and the CLI show. No Qt, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

VLLM, LLAMA_SERVER, OLLAMA, SGLANG = "vllm", "llama-server", "ollama", "sglang"
SHORT = {VLLM: "vLLM", LLAMA_SERVER: "llama-server", OLLAMA: "Ollama", SGLANG: "SGLang"}
AUTO = "auto"  # detect the server from what it answers


@dataclass(frozen=True)
class Backend:
    """One server's row. ``stream_probs``: what its streamed top-N are ("raw": the softmax of
    the logits at temperature 1; "tempered": after its temperature, before its filters)."""

    kind: str
    title: str
    max_top_n: int | None  # the most candidates per token it ever gives (None: a server flag)
    limit_flag: str  # how its limit is raised, or why it cannot be
    stream_probs: str
    post_sampling: bool  # it can also report its own sampler's probabilities (llama-server)
    token_ids: bool  # prompts as token ids and candidates as ids (else text, re-tokenised)
    prompt_logprobs: bool  # a text can be scored
    vocab_ranks: bool  # prompt log-probabilities carry each token's rank over the vocabulary
    tokenizer_routes: bool  # /tokenize and /detokenize: no local tokenizer needed
    source: str  # where the row's facts come from


BACKENDS: dict[str, Backend] = {
    VLLM: Backend(
        VLLM,
        "vLLM",
        None,
        "vllm serve --max-logprobs N",
        "raw",
        False,
        True,
        True,
        True,
        True,
        "vllm/entrypoints/openai/completion/protocol.py (logprobs, prompt_logprobs, "
        "return_tokens_as_token_ids); --logprobs-mode raw_logprobs is the default",
    ),
    LLAMA_SERVER: Backend(
        LLAMA_SERVER,
        "llama.cpp llama-server",
        None,
        "n_probs has no server limit",
        "raw",
        True,
        True,
        False,
        False,
        True,
        "llama.cpp tools/server/README.md: POST /completion (n_probs, post_sampling_probs, "
        "token-id prompts), /tokenize, /detokenize, /props",
    ),
    OLLAMA: Backend(
        OLLAMA,
        "Ollama",
        20,
        "Ollama refuses top_logprobs above 20",
        "raw",
        False,
        False,
        False,
        False,
        False,
        "ollama docs/openapi.yaml (GenerateRequest.logprobs, top_logprobs; Logprob, "
        "TokenLogprob); server/routes.go refuses top_logprobs > 20; text prompts only",
    ),
    SGLANG: Backend(
        SGLANG,
        "SGLang",
        None,
        "top_logprobs_num has no server limit",
        "tempered",
        False,
        True,
        True,
        False,
        False,
        "sglang docs/basic_usage/sampling_params.md (/generate: input_ids, return_logprob, "
        "top_logprobs_num, logprob_start_len); logprobs follow the temperature unless the "
        "server runs with SGLANG_RETURN_ORIGINAL_LOGPROB=1",
    ),
}
KINDS = tuple(BACKENDS)


def backend(kind: str) -> Backend:
    if kind not in BACKENDS:
        raise ValueError(f"Unknown server kind {kind!r}: choose {', '.join((AUTO, *KINDS))}")
    return BACKENDS[kind]


def stream_view(kind: str, temperature: float, raw_flag: bool = False) -> str:
    """What a stream's bars can show: "raw" (the server's raw top-N only), or "" when the
    server cannot give raw probabilities at this temperature (SGLang reports them after its
    temperature: raw only at 0 or 1, or with its raw flag)."""
    b = backend(kind)
    if b.stream_probs == "raw" or raw_flag or temperature in (0.0, 1.0):
        return "raw"
    return ""


def capability_line(kind: str, n: int, server_sampler: bool = False, raw_flag: bool = False) -> str:
    """One line: which probabilities the bars show, how many candidates, the entropy bound,
    whether a text can be scored, and whether ids are exact. ``raw_flag``: the user says the
    server runs with its raw-log-probabilities flag (SGLang), so its stream is raw too."""
    b = backend(kind)
    bars = f"bars: the server's raw top-{n} (before any sampler), then our sampler on them"
    if server_sampler and b.post_sampling:
        bars += ", and llama.cpp's own sampler on the same position"
    if b.stream_probs == "tempered" and not raw_flag:
        bars += "; its stream reports them after its temperature (raw at 0 or 1 only)"
    else:
        bars += "; its stream reports raw probabilities only (no after-sampler bars)"
    score = (
        "scoring a text: yes"
        if b.prompt_logprobs
        else f"scoring a text: no ({b.title} returns no prompt log-probabilities)"
    )
    if b.prompt_logprobs and not b.vocab_ranks:
        score += f" (ranks beyond the top-{n} are bounds)"
    ids = "ids: exact" if b.token_ids else "ids: re-tokenised text (the server takes text)"
    limit = f"at most {b.max_top_n}" if b.max_top_n else b.limit_flag
    entropy = f"entropy: a lower bound (top-{n} + the rest as one)"
    return f"{b.title} · {bars} · {entropy} · {score} · {ids} · candidates: {limit}"


def capability_versions(
    kind: str, n: int, server_sampler: bool = False, raw_flag: bool = False
) -> tuple[str, ...]:
    """The capability line, longest first, then shorter ones that still say the same things
    (the window shows the first that fits on one line, the whole one on hover)."""
    b = backend(kind)
    ours = "our sampler" + (" + llama.cpp's" if server_sampler and b.post_sampling else "")
    tempered = b.stream_probs == "tempered" and not raw_flag
    stream = "stream: tempered" if tempered else "stream: raw"
    score = "scores texts" if b.prompt_logprobs else "can't score texts"
    ids = "exact ids" if b.token_ids else "ids from text"
    brief = (
        f"{SHORT[kind]} · raw top-{n} → {ours} · {stream} · entropy: a lower bound · {score} · "
        f"{ids}"
    )
    briefer = f"{SHORT[kind]} · top-{n} → {ours} · {stream} · H ≥ · {score} · {ids}"
    return capability_line(kind, n, server_sampler, raw_flag), brief, briefer
