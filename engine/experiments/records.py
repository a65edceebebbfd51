"""The experiments' records: plain frozen values (no tensors, no torch import), so the window's
views can import them before the first model loads. ``step_sample``, ``sweep`` and
``lockstep`` fill them."""

from __future__ import annotations

from dataclasses import dataclass

MAX_SAMPLES = 100_000  # draws in one round of "sample this step"
MAX_RUNS = 1000  # runs in one sweep or stochastic variation
MAX_SWEEP_VALUES = MAX_RUNS  # values in one sweep: a run each


@dataclass(frozen=True)
class HistogramRow:
    token_id: int
    text: str
    prob: float  # after the sampler chain
    count: int  # times drawn
    freq: float  # count / n


@dataclass(frozen=True)
class Checkpoint:
    """The fit after the first ``n`` draws (the bars converging as N grows)."""

    n: int
    tv: float
    chi2: float
    dof: int
    p_value: float


@dataclass(frozen=True)
class StepSample:
    n: int
    seed: int
    rows: tuple[HistogramRow, ...]  # the ``top`` most probable, then the most drawn others
    other_prob: float  # after-sampler mass outside ``rows``
    other_count: int
    survivors: int  # tokens with non-zero after-sampler probability
    tv: float  # total-variation distance, empirical vs after-sampler
    chi2: float
    dof: int
    p_value: float
    checkpoints: tuple[Checkpoint, ...]
    forward_s: float  # the one forward pass and the chain
    sample_s: float  # drawing and counting, after the forward pass


@dataclass(frozen=True)
class SweepRow:
    setting: str
    value: float
    text: str
    token_ids: tuple[int, ...]
    logprob: float  # sum of log raw probabilities (the model's, temperature 1)
    sampler_logprob: float  # sum of log after-sampler probabilities (what the draw saw)
    mean_entropy: float  # bits, after the sampler, averaged over the steps
    mean_entropy_raw: float  # bits, the model's own
    distinct: tuple[float, ...]  # distinct-1, distinct-2, distinct-3
    stop_reason: str
    ending: str = ""  # the grammar's word: why it stopped the run, or that it is incomplete


@dataclass(frozen=True)
class Continuation:
    text: str
    token_ids: tuple[int, ...]
    count: int
    seeds: tuple[int, ...]
    diverges_at: int | None  # first token index that differs from the most common; None: it


@dataclass(frozen=True)
class Variation:
    runs: int
    distinct: int
    continuations: tuple[Continuation, ...]  # most common first


@dataclass(frozen=True)
class Ranked:
    token_id: int
    text: str
    prob: float


@dataclass(frozen=True)
class LockstepStep:
    index: int
    token_id: int  # A's choice
    text: str
    a_top: tuple[Ranked, ...]
    b_top: tuple[Ranked, ...]
    a_prob: float  # the chosen token's raw probability under A
    b_prob: float  # and under B
    kl: float  # KL(A || B), nats
    jaccard: float  # |top-N of A ∩ top-N of B| / |union|
    greedy_agree: bool  # argmax of A == argmax of B
    # B is a served model that sent only its top-N (engine.serve.served_lockstep): ``kl`` is
    # then a lower bound (B's tail counted as one outcome), and ``b_prob`` an upper bound when
    # A's token was not among B's N (it is no likelier than the least likely one listed).
    kl_lower_bound: bool = False
    b_prob_upper_bound: bool = False


@dataclass(frozen=True)
class LockstepSummary:
    tokens: int
    mean_kl: float
    max_kl: float
    max_kl_step: int
    mean_jaccard: float
    greedy_agreement: float  # fraction of steps
    text: str
    note: str = ""  # why the comparison ended early (B cannot read a token A wrote)
