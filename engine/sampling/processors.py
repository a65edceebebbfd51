"""Compatibility re-export: the sampler moved into engine.sampling.{base, truncation, penalties,
temperature, mirostat, chain, build}. New code imports from those modules."""

from engine.sampling.base import (  # noqa: F401
    NEG_INF,
    LogitsProcessor,
    StepState,
    _check,
    _keep_top,
    _window,
)
from engine.sampling.build import (  # noqa: F401
    PENALTIES,
    STAGES,
    BuildInfo,
    Factory,
    _banned,
    _logit_bias,
    _temperature,
    build_chain,
)
from engine.sampling.chain import (  # noqa: F401
    _NO_IDS,
    Chain,
    ChainReport,
    Sampler,
    _name_ids,
    apply_chain,
    pick,
)
from engine.sampling.mirostat import (  # noqa: F401
    Mirostat,
)
from engine.sampling.penalties import (  # noqa: F401
    DRY,
    BannedSequences,
    FrequencyPresencePenalty,
    MinNewTokens,
    NoRepeatNGram,
    RepetitionPenalty,
    SequenceBias,
    SuppressTokens,
    parse_bias_key,
)
from engine.sampling.settings import (  # noqa: F401 - the orders were part of this module's API
    LLAMA_CPP_ORDER,
    ORDER_OF,
    ORDER_TEMPERATURE_FIRST,
    ORDER_TEMPERATURE_LAST,
    STAGE_NAMES,
    TRANSFORMERS_ORDER,
    SamplerSettings,
    stage_order,
)
from engine.sampling.temperature import (  # noqa: F401
    DynamicTemperature,
    Smoothing,
    Temperature,
)
from engine.sampling.truncation import (  # noqa: F401
    XTC,
    EpsilonCutoff,
    EtaCutoff,
    MinP,
    TopA,
    TopK,
    TopNSigma,
    TopP,
    TypicalP,
)
