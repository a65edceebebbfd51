"""Inside the step (issue 33): where in the model each token is decided (the logit lens and the
decision layer), what it looked at (attention, rollout), what pushed it (direct logit
attribution, integrated gradients with Captum), for any token of any run, branch or scored
text. Torch only; one hooked forward pass per question (``trace``).

    anatomy.py     each family's blocks, read points and output head, as the model's own modules
    trace.py       the one forward pass with hooks: residual stream and attention
    lens.py        the logit lens, the decision layer, the strip's scan over every position
    attention.py   head average and attention rollout
    dla.py         direct logit attribution with the final norm's scale frozen
    attribution.py integrated gradients on the input embeddings (Captum)
    inspect.py     the entry points: inspect_step, decision_strip, path_for
    reader.py      any step of a path read before, from its kept keys and values (the window)
    pace.py        the threads a job the user waits on gets from the machine's load
    records.py     the plain records they return
"""
