"""Decode back-ends: from ids to the next logits.

One ``Stepper`` protocol (``stepper``): ``logits(ids, keep)``, ``truncate``, and a ``cache``
(``kvcache``) that knows which ids it holds. ``ModelStepper`` runs ``model.forward``;
``fastpath`` (decoder-only; ``fast_spec`` reads a model into its slots), ``fast_t5`` (T5) and
``static_step`` (a fixed-capacity step for ``torch.compile`` and CUDA graphs) are the lean
paths. Their model code is plain Python in ``forward``, run eagerly, compiled by
``torch.compile``, or on the CPU by TorchScript from the same functions (``scripted``).
"""
