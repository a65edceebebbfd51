"""Plain, frozen records that leave the engine. No tensors, no Qt: safe to send anywhere."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Candidate:
    """One entry of a step's top-N list, ranked by the raw (unprocessed) probability."""

    token_id: int
    text: str
    raw_prob: float  # softmax of the model's logits, temperature 1, no filters
    prob: float  # after the whole sampler chain; 0.0 when a filter cut the token


@dataclass(frozen=True)
class Step:
    """Everything the GUI needs to draw one generated token."""

    index: int  # 0-based position among the generated tokens
    token_id: int
    text: str  # the new text this token adds (may be "" while a multi-byte char is incomplete)
    token_str: str  # the token shown on its own (for hover, plots)
    raw_prob: float  # probability of the chosen token before the chain
    prob: float  # probability of the chosen token after the chain
    rank: int  # 1-based rank of the chosen token in the raw distribution
    candidates: tuple[Candidate, ...]
    survivors: int  # tokens with non-zero probability after the chain
    entropy_raw: float  # bits
    entropy: float  # bits, after the chain
    step_time: float  # seconds spent on this token (forward + sampling + copy)
    tokens_per_s: float  # running rate since the start of the run
    forced: bool = False  # chosen by the user, not sampled
    is_eos: bool = False
    source: str = "sample"  # "sample", "greedy", "forced"


@dataclass(frozen=True)
class RunSummary:
    tokens: int
    seconds: float
    tokens_per_s: float
    stop_reason: str  # "eos", "max_new_tokens", "context", "stopped"
    text: str = ""
    token_ids: tuple[int, ...] = field(default_factory=tuple)
