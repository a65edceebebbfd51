"""Served models explored as if local: vLLM, llama.cpp's llama-server, Ollama and SGLang.

``backends`` is the table of what each returns and the capability line; ``connect`` finds which
server answers and makes its client; ``http`` holds what every client shares (bounded requests,
retries, streamed events); ``remote`` (vLLM / OpenAI), ``llama_server``, ``ollama`` and
``sglang`` are the clients, each checking its replies with its schema in ``engine.validate``;
``remote_session`` (explore: our chain on the server's top-N, with llama.cpp's own sampler
beside it) and ``remote_stream`` (the server samples) are the sessions, ``remote_score`` scores a
text, ``served_lockstep`` compares a local model with a served one; ``vllm_server`` and
``llama_server_run`` start local servers for the tests.
"""
