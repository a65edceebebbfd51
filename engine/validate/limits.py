"""Every bound the validators apply, in one place, so a message can name the one it hit.

Sizes are chosen far above what the app itself writes (an 80,000-step autosave is ~100 MB;
the shipped lessons are a few KB) and far below what would exhaust memory or time."""

from __future__ import annotations

MIB = 1024 * 1024

# Autosave and run files (JSON).
MAX_RUN_FILE_BYTES = 1024 * MIB
MAX_STEPS = 1_000_000
MAX_CANDIDATES = 10_000
MAX_TEXT_CHARS = 4 * MIB  # one prompt or token text
MAX_TOKEN_ID = 2**31 - 1
MAX_SESSION_TREES = 20  # the window's list of trees (the open one included), in the autosave

# Lessons and other YAML.
MAX_LESSON_BYTES = 256 * 1024  # the pure-Python YAML reader takes ~1.5 s for this much
MAX_YAML_DEPTH = 24
MAX_YAML_NODES = 50_000  # after expanding aliases: what construction would build
MAX_YAML_ALIASES = 200

# Run options (lessons and the command line).
MAX_NEW_TOKENS = 100_000  # the window's own limit for a run
MAX_BEAMS = 64
MAX_GAMMA = 64  # speculative: tokens drafted per round
MAX_TOP_N = 1000  # candidates recorded per step
# below it (but above 0, greedy) softmax overflows to one-hot or NaN; the settings' check
from engine.sampling.checks import MIN_TEMPERATURE  # noqa: E402,F401

# Served replies.
MAX_REPLY_BYTES = 64 * MIB
MAX_SERVED_TOKEN_ID = 2**24  # no tokenizer has 16M tokens; a bigger id is a broken server
REQUEST_DEADLINE_S = 120.0  # one whole request (connect, headers, body), however slowly sent
# An answer's budget (issue 56): what its positions can need, never more than MAX_REPLY_BYTES.
# A candidate is ~60-150 bytes in any server's JSON; 1 KiB each leaves room for long pieces and
# their byte lists; the base covers the rest (llama-server's settings and timings) and a
# prompt's echo is counted per token. A one-token request with 20 candidates: ~1.1 MB at most.
REPLY_BASE_BYTES = 1 * MIB
REPLY_BYTES_PER_CANDIDATE = 1024
REPLY_BYTES_PER_PROMPT_TOKEN = 256
RETRY_AFTER_MAX_S = 30.0  # a server's Retry-After is clamped to [0, this]
STREAM_SECONDS_PER_TOKEN = 5.0  # a stream's deadline grows with the tokens asked for
# /tokenize and /detokenize: one call per reply (engine.serve.server_tokenizer), each within
# this many seconds; a tokenizer that slow is broken, and a run would wait on it every step
TOKENIZER_DEADLINE_S = 10.0
LOGPROB_TOLERANCE = 1e-4  # a logprob may exceed 0 by rounding, not more
