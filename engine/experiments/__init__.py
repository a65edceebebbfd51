"""Experiments that one run cannot answer (issue 26): sample one step many times against its
after-sampler distribution (``step_sample``), sweep a setting or repeat a sampled run
(``sweep``), and run two models in lockstep (``lockstep``). Each returns plain frozen records
(no tensors), like ``engine.records``; the CLI prints them as JSON and the window can plot them.
The grammar stage and adaptive-p live with the other stages in ``engine.sampling``."""
