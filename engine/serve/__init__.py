"""Served models: an OpenAI-compatible endpoint (vLLM, SGLang, llama.cpp's server) explored as
if local.

``remote`` is the HTTP client (requests, retries, key handling, response checks);
``remote_session`` the sessions over it (our chain on the server's top-N, or its own sampling
streamed); ``vllm_server`` starts a local ``vllm serve`` for the tests.
"""
