"""Models: loading (hub id, folder, GGUF, bundled), the device and dtype, the prompt's ids and
the text of tokens.

``loading`` builds a ``ModelBundle``; ``catalog`` lists and opens the bundled models;
``device`` says where a model runs and keeps honest clocks there; ``prompt`` turns a prompt into
the decoder's first ids; ``text`` turns ids back into text; ``verbalize`` is the bundled tiny
T5's task.
"""
