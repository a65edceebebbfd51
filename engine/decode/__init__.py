"""Decoding methods: from logits to tokens and ``Step`` records.

``base`` holds ``SessionBase`` (ids, history, stop reasons, the one loop ``stream()``),
``session`` ``GenerationSession`` (sampling token by token, force, branch, undo; one step body
whose logits source a served session replaces); ``clock`` times a run; ``measure`` copies what a
``Step`` shows to the host in one go; ``beam`` (the one beam loop, over the groups of
``beam_group``), ``search`` (sampled and diverse beam search: that loop with one thing changed),
``contrastive`` and ``speculative`` are the other methods, each the same base plus its strategy.
``pipeline`` (``PipelinedSession``) is sampling with the host one token behind: the common
chains' whole step as one tensor function (``device_stats``), on CUDA replayed with the forward
pass from one graph (``token_graph``); other chains take ``session``'s step.
"""
