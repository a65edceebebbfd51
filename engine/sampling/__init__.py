"""Sampling: from logits to the probabilities a token is drawn from.

``settings`` (no torch) is the plain record the window edits and ``checks`` its limits;
the stages follow transformers' protocol ``__call__(input_ids, scores)`` (``base``), by kind in
``temperature``, ``truncation``, ``penalties``, ``mirostat``, ``grammar`` and ``adaptive_p``;
``sampler`` is the contract every session uses (``Sampler``: prepare, probs, pick, report, notes,
accept, snapshot/restore; llama.cpp's chain API) and its typed records; ``chain`` runs the
stages in order and implements it; ``build`` holds the STAGES table and ``build_chain``; ``help``
is one sentence per setting. Importing this
package loads no torch: the window builds settings before the engine loads.
"""
