"""One or two sentences per control: what it does, its default (the value that switches it
off, where there is one), and where users know it from. The sampler and method panels take
their tooltips from here, and the CLI its help; no torch, no Qt."""

from __future__ import annotations

HELP: dict[str, str] = {
    "temperature": "Divides the logits: below 1 sharpens the distribution, above 1 flattens "
    "it; 0 is greedy. Default 1 (off). Everywhere: OpenAI, llama.cpp --temp, transformers.",
    "top_k": "Keeps the k most likely tokens (ties with the k-th kept). Default 0 (off). "
    "llama.cpp --top-k (40 there), transformers top_k (50 there).",
    "top_p": "Nucleus sampling: keeps the smallest set of top tokens whose mass reaches p. "
    "Default 1 (off). OpenAI top_p, llama.cpp --top-p, transformers.",
    "min_p": "Keeps tokens with probability >= min_p × the top probability. Default 0 (off). "
    "llama.cpp --min-p (0.05 there), transformers min_p (Nguyen et al. 2024).",
    "typical_p": "Locally typical sampling: keeps the tokens whose surprise is closest to the "
    "entropy until their mass reaches p. Default 1 (off). transformers typical_p, llama.cpp.",
    "repetition_penalty": "Divides a repeated token's positive logit (multiplies a negative "
    "one) by this. Default 1 (off). CTRL; transformers, llama.cpp --repeat-penalty.",
    "penalty_last_n": "How many of the last tokens the repetition, frequency and presence "
    "penalties look at; 0 = all. Default 0. llama.cpp --repeat-last-n (64 there).",
    "frequency_penalty": "Subtracts this once per earlier occurrence of a token. Default 0 "
    "(off). OpenAI frequency_penalty, llama.cpp --frequency-penalty.",
    "presence_penalty": "Subtracts this once from every token that already occurred. Default "
    "0 (off). OpenAI presence_penalty, llama.cpp --presence-penalty.",
    "dry_multiplier": "DRY: penalises the token that would continue a repeat of earlier text, "
    "growing with the repeat's length. Default 0 (off); 0.8 is the usual start. "
    "text-generation-webui, koboldcpp, llama.cpp --dry-multiplier, SillyTavern.",
    "dry_base": "DRY: how fast the penalty grows per extra repeated token "
    "(multiplier × base^(length − allowed)). Default 1.75. llama.cpp --dry-base.",
    "dry_allowed_length": "DRY: repeats up to this long go unpunished. Default 2. "
    "llama.cpp --dry-allowed-length.",
    "dry_penalty_last_n": "DRY: how many of the last tokens it searches; 0 = all. Default 0. "
    "llama.cpp --dry-penalty-last-n.",
    "dry_sequence_breakers": "DRY: repeats never run across these strings (newline, colon, "
    "quote, asterisk by default, as llama.cpp). llama.cpp --dry-sequence-breaker.",
    "logit_bias": "Adds a bias to a token's logit (word, or #id); -inf bans it. Default none. "
    "OpenAI logit_bias, llama.cpp --logit-bias, transformers sequence_bias.",
    "banned_strings": "Words (or #ids) never generated: a one-token word is removed, a longer "
    "one's last token after the rest. Default none. transformers bad_words_ids.",
    "suppress_tokens": "Token ids removed at every step. Default none. transformers "
    "suppress_tokens (Whisper).",
    "top_n_sigma": "Keeps logits within n standard deviations of the top logit; ignores "
    "temperature. Default 0 (off). Top-nσ (Tang et al. 2024), llama.cpp --top-nsigma.",
    "epsilon_cutoff": "Removes tokens with probability below ε. Default 0 (off); 3e-4 to 9e-4 "
    "suggested. Hewitt et al. 2022; transformers epsilon_cutoff.",
    "eta_cutoff": "Removes tokens below min(η, √η·e^−entropy): a cut that adapts to the "
    "entropy. Default 0 (off). Hewitt et al. 2022; transformers eta_cutoff.",
    "xtc_threshold": "XTC: tokens at least this likely count as top choices. Default 0.1. "
    "text-generation-webui, koboldcpp, llama.cpp --xtc-threshold.",
    "xtc_probability": "XTC: the chance per step of removing every top choice but the least "
    "likely one, for more creative text. Default 0 (off). llama.cpp --xtc-probability.",
    "top_a": "Removes tokens below a × (top probability)²: strict when the model is sure. "
    "Default 0 (off). koboldcpp, text-generation-webui top_a.",
    "dynatemp_range": "Dynamic temperature: from temperature − range (sure) to temperature + "
    "range (unsure), by the normalised entropy. Default 0 (off). llama.cpp --dynatemp-range.",
    "dynatemp_exponent": "Dynamic temperature: the curve from entropy to temperature (1 = "
    "straight). Default 1. llama.cpp --dynatemp-exp.",
    "smoothing_factor": "Quadratic sampling: bends logits around the top one; higher sharpens "
    "the top, keeps plausible alternatives. Default 0 (off). text-generation-webui, koboldcpp.",
    "smoothing_curve": "Quadratic sampling's cubic term: 1 is a plain parabola, higher "
    "punishes the tail more. Default 1. text-generation-webui smoothing_curve.",
    "mirostat": "Mirostat 1 or 2 keeps the text's surprise near τ by adjusting a cut (mu) "
    "after every token. Default 0 (off). Basu et al. 2021; llama.cpp --mirostat.",
    "mirostat_tau": "Mirostat's target surprise in bits (higher: more varied text). "
    "Default 5. llama.cpp --mirostat-ent.",
    "mirostat_eta": "Mirostat's learning rate: how fast mu follows the surprise. Default 0.1. "
    "llama.cpp --mirostat-lr.",
    "no_repeat_ngram_size": "Forbids repeating any n-gram already in the text. Default 0 "
    "(off). transformers no_repeat_ngram_size.",
    "min_new_tokens": "The end-of-text token is blocked until this many tokens exist. "
    "Default 0. transformers min_new_tokens.",
    "max_new_tokens": "How many tokens to generate at most. Default 128. "
    "transformers max_new_tokens, llama.cpp -n.",
    "seed": "The seed of the run's random draws: the same seed replays the same text. "
    "llama.cpp --seed, OpenAI seed.",
    "order": "Where temperature sits: first (transformers) or after the filters (llama.cpp); "
    "it changes what top-p and min-p keep. Default transformers' order.",
    "stage_order": "The order of the sampler stages; drag to change it, or pick a preset "
    "(llama.cpp's default chain, transformers' order).",
    "penalty_alpha": "Contrastive search: weight of the penalty for tokens whose hidden state "
    "resembles earlier text; 0 is greedy. Default 0.6. Su et al. 2022; transformers.",
    "contrastive_k": "Contrastive search: how many top tokens it scores per step. Default 4. "
    "transformers top_k with penalty_alpha.",
    "grammar": "Constrained decoding: only tokens that keep the text inside a JSON schema "
    "(json:SCHEMA), a regular expression (regex:RE), one of some choices (choice:a|b|c) or a "
    "Lark grammar (lark:...) stay in; the rest are cut as 'grammar'. Default off. llguidance; "
    "llama.cpp --grammar / --json-schema, vLLM structured outputs.",
    "adaptive_p_target": "Adaptive-p: prefers tokens whose probability is near this target, "
    "steering the average probability of the chosen tokens towards it. Below 0: off (the "
    "default); 0.5 is a start. llama.cpp's adaptive-p sampler (PR #17927).",
    "adaptive_p_decay": "Adaptive-p: how long its running average of chosen probabilities "
    "remembers (0 to 0.99). Default 0.9. llama.cpp's adaptive-p decay.",
    "num_beam_groups": "Diverse beam search: the beams split into this many groups that are "
    "pushed apart. Default 2. Vijayakumar et al. 2016; transformers num_beam_groups.",
    "diversity_penalty": "Diverse beam search: subtracted per beam of an earlier group that "
    "chose the same token at this step. Default 0.5. transformers diversity_penalty.",
}


def tooltip(name: str) -> str:
    """The help text of a control ('' for an unknown name)."""
    return HELP.get(name, "")
