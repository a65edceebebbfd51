"""Decode back-ends: from ids to the next logits.

One ``Stepper`` protocol (``stepper``): ``logits(ids, keep)``, ``truncate``, and a ``cache``
(``kvcache``) that knows which ids it holds. ``ModelStepper`` runs ``model.forward``;
``fastpath`` (decoder-only; ``fast_spec`` reads a model into its slots), ``fast_t5`` (T5) and
``static_step`` (a fixed-capacity step for ``torch.compile`` and CUDA graphs) are the lean
paths.
"""
