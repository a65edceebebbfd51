"""What a ``Step`` record says about a token, computed on the model's device and copied to
the host in one go: the top-N candidates with their raw and processed probabilities (and the
stage that cut each), the chosen token's probability and rank, how many tokens could have been
picked, and the entropy before and after the sampler."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.quant import native
from engine.sampling.sampler import PenaltyTrace

LN2 = math.log(2.0)


@dataclass(frozen=True)
class PenaltiesAtTop:
    """What the penalties did to the top-N candidates (``PenaltyTrace`` read at ``top_ids``)."""

    before: tuple[float, ...]  # probability before the penalties
    after: tuple[float, ...]  # and after them
    changed_by: tuple[int, ...]  # index of the stage that last changed each, -1: none


@dataclass(frozen=True)
class Measured:
    """The host copy of one row's numbers."""

    token_id: int
    raw_prob: float  # of the chosen token, softmax of the raw logits
    prob: float  # of the chosen token, after the chain
    rank: int  # 1-based, in the raw distribution
    survivors: int  # tokens with probability > 0 after the chain
    entropy_raw: float  # bits
    entropy: float  # bits
    finite: bool  # the logits had no NaN or inf
    top_ids: tuple[int, ...]  # top-N by raw probability
    top_raw: tuple[float, ...]
    top_prob: tuple[float, ...]
    top_cut: tuple[int, ...]  # index of the chain stage that removed each, -1 if kept
    penalties: PenaltiesAtTop | None = None  # None: no penalty stage ran
    extra: tuple[float, ...] = ()  # the ``extra`` block's row (the stages' notes)
    other_p: float | None = None  # raw mass the source did not show (a served model's tail)
    entropy_lower_bound: bool = False  # entropy_raw counts that tail as one outcome


_SCALARS = 8  # token, raw, prob, rank, survivors, entropy_raw, entropy, finite


def measure(
    logits: torch.Tensor,
    probs: torch.Tensor,
    tokens: torch.Tensor,
    top_n: int,
    cut: torch.Tensor | None = None,
    finite: torch.Tensor | None = None,
    penalties: PenaltyTrace | None = None,
    extra: torch.Tensor | None = None,
) -> list[Measured]:
    """logits, probs: [rows, vocab] (raw logits; probabilities after the chain); tokens: [rows]
    the chosen ids; cut: [rows, vocab] stage indices from the chain; finite: [rows] bool (default:
    checked on ``logits``); penalties: what the penalty stages did ([rows, vocab] each), read at
    the top-N ids; extra: [rows, k] numbers to bring along (the stages' notes). One
    device-to-host copy for all rows."""
    n = min(top_n, logits.shape[-1])
    columns, top_ids = record_columns(logits, probs, tokens, n, cut, finite)
    if penalties is not None:
        trace = (penalties.before, penalties.after, penalties.changed_by)
        columns += [t.gather(1, top_ids) for t in trace]
    if extra is not None:
        columns.append(extra.reshape(logits.shape[0], -1))
    block = columns[0] if len(columns) == 1 else torch.cat([c.double() for c in columns], 1)
    packed = block.tolist()  # the one copy
    return [unpack_row(row, n, penalties is not None) for row in packed]


def record_columns(
    logits: torch.Tensor,
    probs: torch.Tensor,
    tokens: torch.Tensor,
    n: int,
    cut: torch.Tensor | None,
    finite: torch.Tensor | None,
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """A record's columns (the lab's one packed block where ``native_columns`` takes the rows,
    else ``step_columns``' twelve) and the top-N ids [rows, n] long, for the blocks gathered
    at them (the penalties)."""
    head = native_columns(logits, probs, tokens, n, cut, finite)
    if head is None:
        columns = step_columns(logits, probs, tokens, n, cut, finite)
        return columns, columns[8]
    return [head], head[:, _SCALARS : _SCALARS + n].long()


def native_columns(
    logits: torch.Tensor,
    probs: torch.Tensor,
    tokens: torch.Tensor,
    n: int,
    cut: torch.Tensor | None,
    finite: torch.Tensor | None,
) -> torch.Tensor | None:
    """``step_columns`` packed into one float64 [rows, 8 + 4n] tensor by the lab's CPU op
    (``engine/quant/csrc/stats.cpp``: four passes over the vocabulary where the columns take
    ~20 operations: 0.4 ms a SmolLM2 token here, 1 ms on Qwen2.5's 151,936 tokens), for
    float32 CPU rows where the lab's kernels are built; None elsewhere (``step_columns``
    then). The numbers agree with ``step_columns``' to float32's rounding (another exp and
    order of sums); top-N ties go to the lower id. ``tests/engine/test_step_stats.py`` holds
    the two to each other."""
    usual = probs.shape == logits.shape and (cut is None or cut.dtype == torch.int16)
    if not usual or (finite is not None and finite.dtype != torch.bool):
        return None
    if not native.takes_rows(logits, probs) or tokens.device.type != "cpu":
        return None
    none = torch.empty(0)
    return torch.ops.decoding_lab.step_stats(
        logits.contiguous(), probs.contiguous(), tokens.reshape(-1).to(torch.long), n,
        none if cut is None else cut.contiguous(), none if finite is None else finite.cpu(),
    )  # fmt: skip


_READ_FROM_LOGITS = torch.empty(0, dtype=torch.bool)  # greedy_stats' finite: not given


def greedy_measured(
    logits: torch.Tensor,
    top_n: int,
    finite: torch.Tensor | None = None,
    row: torch.Tensor | None = None,
) -> Measured | None:
    """A greedy step whole (temperature 0 alone: ``engine.sampling.chain.Chain.plain_greedy``)
    from logits [1, vocab]: the token (the first maximum), its one-hot probabilities, the
    stage-0 cuts and ``measure``'s numbers, in one op of the lab's (csrc/greedy.cpp's
    greedy_stats) where the chain, its softmax, the pick and the record's passes take a dozen
    operations and ~0.3 ms a SmolLM2 token just after a forward pass. ``finite``: the source's
    own logits' flag, for logits ``finite_rows`` made finite (a token at -inf would count as
    cut where the chain leaves it uncut); None: the op reads it from these logits, and a
    record whose ``finite`` is False is not the chain's (the caller takes the chain's way).
    On a long vocabulary the op's passes run on every thread, each over the part of the
    logits its share of the head's product wrote. ``row``: the op's row for these logits,
    already made (``FastStepper.greedy_logits``: in the same call as the logits). None where
    the op does not take the logits (then the chain runs). ``tests/engine/test_greedy_ops.py``
    holds it to the chain's own records."""
    n = min(top_n, logits.shape[-1])
    if row is not None:
        return unpack_row(row.tolist()[0], n, False)
    if logits.shape[0] != 1 or not native.takes_rows(logits):
        return None
    if finite is not None and finite.dtype != torch.bool:
        return None
    flag = _READ_FROM_LOGITS if finite is None else finite.cpu()
    row = torch.ops.decoding_lab.greedy_stats(logits.contiguous(), n, flag)
    return unpack_row(row.tolist()[0], n, False)


def step_columns(
    logits: torch.Tensor,
    probs: torch.Tensor,
    tokens: torch.Tensor,
    n: int,
    cut: torch.Tensor | None,
    finite: torch.Tensor | None,
) -> list[torch.Tensor]:
    """The per-row scalars, then the top-N blocks (ids, raw, processed, cut), on the device."""
    rows = logits.shape[0]
    raw_logp = F.log_softmax(logits, dim=-1)
    raw = raw_logp.exp()
    top_raw, top_ids = torch.topk(raw, n, dim=-1)  # [rows, n]
    if raw.device.type == "cpu":  # ties in id order, as the lab's op gives them (topk: any)
        top_ids, order = top_ids.sort(-1)
        top_raw, order = top_raw.gather(1, order).sort(dim=-1, descending=True, stable=True)
        top_ids = top_ids.gather(1, order)
    tok = tokens.reshape(rows, 1).to(logits.device)
    chosen_raw = raw.gather(1, tok)  # [rows, 1]
    if finite is None:
        finite = all_finite(logits)
    top_cut = cut.gather(1, top_ids) if cut is not None else torch.full_like(top_ids, -1)
    # float64 keeps token ids exact
    return [
        tok,
        chosen_raw,
        probs.gather(1, tok),
        (raw > chosen_raw).sum(1, keepdim=True) + 1,
        (probs > 0).sum(1, keepdim=True),
        entropy_bits(raw, raw_logp),
        entropy_bits(probs),
        finite.reshape(rows, 1),
        top_ids,
        top_raw,
        probs.gather(1, top_ids),
        top_cut,
    ]


def all_finite(logits: torch.Tensor) -> torch.Tensor:
    """[rows, vocab] -> [rows] bool: no NaN or inf in the row, as isfinite(...).all(-1) says,
    read from the largest |logit| (a NaN propagates through amax): one vector reduction where
    isfinite and all take 180 us on a 151,936-token CPU row (the lab's CPU op, where it is
    built, one pass: 46 -> ~5 us on SmolLM2's 49,152)."""
    if native.takes_rows(logits):
        return torch.ops.decoding_lab.all_finite(logits.contiguous())
    return torch.isfinite(logits.abs().amax(dim=-1))


def finite_rows(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [rows, vocab] -> (the logits with every row holding a NaN or inf set to zeros,
    [rows] bool: whether the row was finite). A broken model's row is then harmless to sample
    from, and the flag refuses the step once it reaches the host with the one copy. On the CPU
    the host looks first and skips the rewrite when every row is finite (torch's CPU where
    takes 260 us on a 151,936-token row); elsewhere no host sync (a CUDA graph may capture
    this)."""
    finite = all_finite(logits)
    if logits.device.type == "cpu" and bool(finite.all()):
        return logits, finite
    return torch.where(finite[:, None], logits, torch.zeros_like(logits)), finite


def entropy_bits(p: torch.Tensor, logp: torch.Tensor | None = None) -> torch.Tensor:
    """[rows, vocab] probabilities (and their logs, when known) -> [rows, 1] entropy in bits,
    0 log 0 = 0: ``-xlogy(p, p)`` summed, which on the CPU took 220-360 us on a 151,936-token
    row. The log is taken of p raised to the smallest subnormal (every p > 0 is at least
    that, so only the zeros change): torch's CPU log of 0 (or exp of -inf) leaves the vector
    path, 770 us on a row of zeros where this takes 45."""
    if logp is None:
        info = torch.finfo(p.dtype)
        logp = p.clamp_min(info.tiny * info.eps).log()  # tiny x eps: the least subnormal
    terms = p * logp.clamp_min(torch.finfo(logp.dtype).min)  # p = 0: 0, not 0 * -inf
    # a one-hot row gives -0.0: clamp_min keeps -0.0, adding 0.0 makes it 0.0 (the window
    # printed "-0.00 bits")
    return (-terms.sum(1, keepdim=True) / LN2).clamp_min(0) + 0.0


def row_width(n: int, with_penalties: bool) -> int:
    """Numbers in one packed row: the scalars, then 4 (or 7, with the penalties) top-N blocks."""
    return _SCALARS + n * (7 if with_penalties else 4)


def unpack_row(row: list[float], n: int, with_penalties: bool) -> Measured:
    """One row of the host copy as a record (``engine.decode.device_stats`` packs the same)."""
    tops = row[_SCALARS:]
    block = [tops[j * n : (j + 1) * n] for j in range(7 if with_penalties else 4)]
    penalties = None
    if with_penalties:
        penalties = PenaltiesAtTop(
            tuple(block[4]), tuple(block[5]), tuple(int(i) for i in block[6])
        )
    return Measured(
        token_id=int(row[0]),
        raw_prob=row[1],
        prob=row[2],
        rank=int(row[3]),
        survivors=int(row[4]),
        entropy_raw=row[5],
        entropy=row[6],
        finite=row[7] == 1.0,
        top_ids=tuple(int(i) for i in block[0]),
        top_raw=tuple(block[1]),
        top_prob=tuple(block[2]),
        top_cut=tuple(int(i) for i in block[3]),
        penalties=penalties,
        extra=tuple(tops[len(block) * n :]),
    )
