"""Plain, frozen records that leave the engine. No tensors, no Qt: safe to send anywhere.

A run is a stream of these: ``RunStarted``, then ``Step`` records (one per token), with
``Rewind`` where earlier steps are replaced (a branch, an undo, a new best beam), ``BeamEvent``
and ``SpeculativeReport`` where the method has more to show, ``Progress`` while something long
runs, and a ``RunSummary`` at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

# The ways a run picks its tokens: one set of names for the engine, the window, the lessons.
SAMPLING, BEAM, SPEC_NGRAM, SPEC_DRAFT = "sampling", "beam", "spec_ngram", "spec_draft"
SAMPLED_BEAM, GROUP_BEAM, CONTRASTIVE = "sampled_beam", "group_beam", "contrastive"
BEAMS = (BEAM, SAMPLED_BEAM, GROUP_BEAM)  # searches: no settings mid-run, the best beam at the end
RUN_METHODS = {
    SAMPLING: "Sampling, token by token",
    BEAM: "Beam search",
    SPEC_NGRAM: "Speculative: n-gram drafts",
    SPEC_DRAFT: "Speculative: draft model",
    SAMPLED_BEAM: "Beam search, sampled",
    GROUP_BEAM: "Diverse (group) beam search",
    CONTRASTIVE: "Contrastive search",
}


@dataclass(frozen=True)
class Candidate:
    """One entry of a step's top-N list, ranked by the raw (unprocessed) probability."""

    token_id: int
    text: str
    raw_prob: float  # softmax of the model's logits, temperature 1, no filters
    prob: float  # after the whole sampler chain; 0.0 when a filter cut the token
    cut_by: str = ""  # the stage that removed the token ("top-p 0.90"), "" when kept
    # A penalty (repetition, frequency/presence, DRY, logit bias) changed this token's score:
    # its label, and the probability just before the first penalty and just after the last.
    penalised_by: str = ""
    before_p: float | None = None
    after_p: float | None = None
    # A served model's OWN sampler at this position (llama-server's post_sampling_probs), beside
    # ours: 0.0 where its chain cut the token, None where it did not say.
    server_prob: float | None = None


# Step.source of a token of a scored text: the model's own probabilities, no sampler ran
SCORED = "score"
# Step.source of a token a class chose in a live round's "be the sampler" (forced, by the class)
CLASS = "class"


@dataclass(frozen=True)
class StageNote:
    """What one stage of the sampler did at a step ("mu 4.82: kept 31", "XTC removed 2 top
    tokens: ' the', ' a'", "dynamic temperature 0.73")."""

    stage: str  # the stage's label
    text: str


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
    # "sample", "greedy", "forced", "draft", "target", "beam", SCORED (a scored text's token)
    # or CLASS (a live round's class chose it)
    source: str = "sample"
    prefill: bool = False  # step_time includes reading the prompt (or catching up after undo)
    special: bool = False  # a special token of the tokenizer (<|im_end|>, </s>, ...)
    # A served model (engine.serve.remote_session) reports only its top-N candidates: the raw mass
    # outside them ("other"), and entropies computed from N candidates plus that one lump,
    # which are lower bounds of the true entropy.
    other_p: float | None = None
    entropy_lower_bound: bool = False
    # False: the server sampled and reported raw probabilities only, so nothing "after the
    # sampler" is known (prob and each candidate's prob repeat the raw ones; no bar is drawn).
    after_sampler: bool = True
    server_sampler: str = ""  # whose sampler the candidates' server_prob is ("llama.cpp")
    stage_notes: tuple[StageNote, ...] = ()  # what the sampler's stages did at this step
    mu: float | None = None  # mirostat's running target surprise after this step (bits)


# Memory bound for long runs: the newest KEEP_FULL steps keep every candidate, older ones their
# top LIGHT_CANDIDATES (enough for the hover text). Sessions and the window's store both use it.
KEEP_FULL = 2000
LIGHT_CANDIDATES = 5


def lighten(step: Step) -> Step:
    """The same record with its top few candidates only."""
    if len(step.candidates) <= LIGHT_CANDIDATES:
        return step
    return replace(step, candidates=step.candidates[:LIGHT_CANDIDATES])


def lighten_old(steps: list[Step], added: int, keep_full: int | None = KEEP_FULL) -> range:
    """After ``added`` steps were appended to ``steps``, lighten the ones that just fell out of
    the newest ``keep_full`` (in place; None keeps everything). Returns their indices."""
    if keep_full is None:
        return range(0)
    end = len(steps) - keep_full
    changed = range(max(0, end - added), max(0, end))
    for i in changed:
        steps[i] = lighten(steps[i])
    return changed


@dataclass(frozen=True)
class RunStarted:
    """A new run begins: whoever shows runs starts afresh."""

    method: str
    prompt: str
    prompt_tokens: int
    settings: dict[str, Any] = field(default_factory=dict)
    chat_template: bool = False  # the prompt was wrapped in the model's chat template


@dataclass(frozen=True)
class Rewind:
    """The steps from ``keep`` on are replaced by the ones that follow."""

    keep: int


@dataclass(frozen=True)
class ChoiceHistory:
    """Whether the run has a token choice to undo or redo."""

    can_undo: bool
    can_redo: bool


@dataclass(frozen=True)
class Progress:
    """Something long is under way (loading, a long prompt); ``fraction`` when known."""

    text: str
    fraction: float | None = None


@dataclass(frozen=True)
class RunSummary:
    tokens: int
    seconds: float
    tokens_per_s: float
    stop_reason: str  # "eos", "max_new_tokens", "context", "stopped", "grammar"
    text: str = ""
    token_ids: tuple[int, ...] = field(default_factory=tuple)
    first_token_s: float | None = None  # the prompt's forward pass and the first token
    prompt_tokens: int = 0  # tokens read before the first new one (0: none this time)
    note: str = ""  # why the run stopped, in words, when a reason needs them (the grammar's)
    # a grammar was set and the output stops before it is complete (cut by the budget, Stop)
    incomplete: bool = False

    @property
    def finished(self) -> bool:
        """The run cannot simply continue: it ended its answer, filled the context, or its
        grammar cannot go on."""
        return self.stop_reason in ("eos", "context", GRAMMAR_STOP)

    @property
    def ending(self) -> str:
        """The grammar's word on the output, for a summary line ("" when it has none)."""
        if self.stop_reason == GRAMMAR_STOP:
            return f"stopped by the grammar: {self.note}"
        return INCOMPLETE if self.incomplete else ""


GRAMMAR_STOP = "grammar"  # a stop reason: the grammar could not go on (RunSummary.note says why)
INCOMPLETE = "incomplete: the output stops before its grammar is complete"


@dataclass(frozen=True)
class SpeculativeReport:
    """A speculative run's statistics so far."""

    gamma: int
    drafted: int
    accepted: int
    rounds: int
    target_passes: int
    generated: int
    acceptance_rate: float
    mean_accepted_length: float
    target_passes_per_token: float
    acceptance_by_position: tuple[float, ...]


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


# Comparing methods: the rows of the comparison table, and one result per row.

ROW_PLAIN_NO_CACHE = "plain, no cache"
ROW_PLAIN = "plain, KV cache"
ROW_PLAIN_FAST = "plain, fast path"
ROW_BEAM = "beam search"
ROW_SPEC_DRAFT = "speculative, draft model"
ROW_SPEC_NGRAM = "speculative, n-gram"
COMPARE_ROWS = (
    ROW_PLAIN_NO_CACHE, ROW_PLAIN, ROW_PLAIN_FAST, ROW_BEAM, ROW_SPEC_DRAFT, ROW_SPEC_NGRAM
)  # fmt: skip
# A served model (engine.serve.remote_session): our chain on its top-N, or its own sampling,
# streamed.
ROW_SERVED_EXPLORE = "served, explore"
ROW_SERVED_STREAM = "served, stream"
SERVED_ROWS = (ROW_SERVED_EXPLORE, ROW_SERVED_STREAM)
# The method names of a served model's runs (RunRequest.method); explore is SAMPLING.
SERVED_STREAM = "served_stream"


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
