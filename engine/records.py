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


# Beam search: the tree the GUI draws and the result.

RUNNING, FINISHED, PRUNED = "running", "finished", "pruned"


@dataclass(frozen=True)
class BeamNode:
    node_id: int
    parent: int  # 0 is the root (the prompt)
    token_id: int
    text: str
    logprob: float  # of this token given its parent
    score: float  # cumulative log-probability of the path
    depth: int  # 1 for the first generated token
    status: str  # RUNNING, FINISHED or PRUNED
    final_score: float | None = None  # length-penalised score of a finished hypothesis


@dataclass(frozen=True)
class BeamEvent:
    step: int
    nodes: tuple[BeamNode, ...]  # this step's candidates, best first
    running: tuple[int, ...]  # node ids that carry on
    finished: tuple[int, ...]  # node ids of the best finished hypotheses so far, best first


@dataclass(frozen=True)
class BeamHypothesis:
    token_ids: tuple[int, ...]  # generated ids (without the prompt / decoder start)
    score: float
    node_id: int


@dataclass(frozen=True)
class BeamResult:
    hypotheses: tuple[BeamHypothesis, ...]  # best first
    steps: int
    forward_passes: int
    seconds: float

    @property
    def best(self) -> BeamHypothesis:
        return self.hypotheses[0]

    @property
    def token_ids(self) -> list[int]:
        return list(self.best.token_ids)

    @property
    def tokens_per_s(self) -> float:
        return len(self.best.token_ids) / self.seconds if self.seconds > 0 else 0.0


# Comparing methods: their names and one result row each.

PLAIN_NO_CACHE = "plain, no cache"
PLAIN = "plain, KV cache"
PLAIN_FAST = "plain, fast path"
BEAM = "beam search"
SPEC_DRAFT = "speculative, draft model"
SPEC_NGRAM = "speculative, n-gram"
METHODS = (PLAIN_NO_CACHE, PLAIN, PLAIN_FAST, BEAM, SPEC_DRAFT, SPEC_NGRAM)


@dataclass(frozen=True)
class MethodResult:
    method: str
    token_ids: tuple[int, ...]
    text: str
    seconds: float
    forward_passes: int
    acceptance: float | None = None  # speculative only
    mean_accepted: float | None = None
    identical_to_greedy: bool | None = None
    note: str = ""

    @property
    def tokens(self) -> int:
        return len(self.token_ids)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0
