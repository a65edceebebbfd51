"""Issue 56 (Hardening IV), one test per behaviour that did not hold: served replies that cannot
be probabilities, budgets a server could break, terminal escapes, int8 / int4 that is not what
it says, and the command line's edge. Servers are httpx.MockTransport fakes, or a real one on
127.0.0.1 at a free port where the bytes on the wire matter (headers trickled)."""

from __future__ import annotations

import math

import pytest
from served_fakes import step_client, step_reply

from engine.serve.remote import BAD_RESPONSE, RemoteError

LN = math.log


def _refused(kind: str, data, match: str, post: bool = False, **kw) -> RemoteError:
    client = step_client(kind, **kw)
    with pytest.raises(RemoteError, match=match) as err:
        if kind == "llama-server":
            client._served(data, post=post)
        elif kind == "sglang":
            client._answer(data)
        else:
            client._served(data)
    assert err.value.kind == BAD_RESPONSE
    return err.value


# -- 1. served replies that cannot be probabilities -----------------------------------------


@pytest.mark.parametrize("kind", ["vllm", "llama-server", "ollama", "sglang"])
def test_a_token_listed_twice_is_refused_not_drawn_twice(kind):
    # one id (one Ollama piece) twice: drawn twice before (and its mass counted once)
    top = [(7, LN(0.3)), (7, LN(0.3)), (9, LN(0.01))]
    error = _refused(kind, step_reply(kind, 7, LN(0.3), top), "listed twice")
    assert "lab-box:8080" in str(error) or kind == "ollama"


def test_llama_server_post_sampling_duplicates_are_refused():
    top = [(7, 0.65), (7, 0.65)]
    _refused("llama-server", step_reply("llama-server", 7, 0.65, top, post=True), "listed twice",
             post=True)  # fmt: skip


@pytest.mark.parametrize("kind", ["vllm", "llama-server", "ollama", "sglang"])
def test_a_chosen_token_beside_a_list_it_cannot_fit_is_refused(kind):
    # p=0.99 chosen, unlisted, beside three at 0.3: 1.89 in all
    top = [(1, LN(0.3)), (2, LN(0.3)), (3, LN(0.3))]
    _refused(kind, step_reply(kind, 7, LN(0.99), top), "add up to|leaves out")


@pytest.mark.parametrize("kind", ["vllm", "llama-server", "sglang"])
def test_a_chosen_token_whose_own_entry_differs_is_refused(kind):
    top = [(7, LN(0.05)), (2, LN(0.01))]
    _refused(kind, step_reply(kind, 7, LN(0.9), top), "its own entry")


@pytest.mark.parametrize("kind", ["vllm", "llama-server", "sglang"])
def test_every_candidate_at_probability_zero_is_refused(kind):
    zero = {"vllm": -9999.0, "llama-server": -3.4028234663852886e38, "sglang": -9999.0}[kind]
    top = [(1, zero), (2, zero), (3, zero)]
    _refused(kind, step_reply(kind, 4, zero, top), "probability 0")


def test_every_candidate_at_zero_makes_the_cli_fail_not_print_nan(capsys, monkeypatch):
    # before: p=nan printed, a token no one offered picked, exit 0
    import engine.cli.generate as generate
    from engine.cli import run

    zero = -9999.0
    client = step_client("vllm", lambda r: _reply_json(step_reply("vllm", 4, zero, [(1, zero)])))
    monkeypatch.setattr(generate, "open_served", lambda args, model=None: _bundle(client))
    code = run(["generate", "--server", "http://lab-box:8080", "--model", "m", "--prompt",
                "[1][2]", "--max-new-tokens", "3", "--show-probs", "2"])  # fmt: skip
    out = capsys.readouterr()
    assert code != 0 and "nan" not in out.out and "probability 0" in out.err


def _reply_json(data):
    import httpx

    return httpx.Response(200, json=data)


def _bundle(client, kind: str | None = None):
    import torch
    from served_fakes import PieceTokenizer

    from engine.serve.remote_session import RemoteBundle

    return RemoteBundle(
        model=None, tokenizer=PieceTokenizer(1000), kind="decoder-only",
        device=torch.device("cpu"), dtype=torch.float32, name="m", source=client.base_url,
        context_length=256, eos_token_ids=(), extra={"served": True}, client=client,
        n_logprobs=5, server_kind=kind or client.kind,
    )  # fmt: skip


def _sglang_prompt(top_rows, values):
    """An SGLang /generate answer with prompt log-probabilities: ``values`` per prompt token
    (the first None), ``top_rows`` its top lists."""
    return {"text": "", "meta_info": {
        "input_token_logprobs": [[v, t, None] for t, v in values],
        "input_top_logprobs": [None if r is None else [[v, t, None] for t, v in r]
                               for r in top_rows],
        "output_token_logprobs": [], "output_top_logprobs": [],
    }}  # fmt: skip


@pytest.mark.parametrize(
    "row,value",
    [
        # p=0.5 left out below five at 0.19: ranked ">= 6" before
        ([(10 + i, LN(0.19)) for i in range(5)], LN(0.5)),
        # p=0.9 whose own entry says 0.05
        ([(3, LN(0.05)), (11, LN(0.01))], LN(0.9)),
    ],
)
def test_sglang_prompt_scores_get_the_same_checks_as_vllm(row, value):
    ids = [1, 3]
    data = _sglang_prompt([None, row], [(1, None), (3, value)])
    client = step_client("sglang", lambda r: _reply_json(data))
    with pytest.raises(RemoteError, match="add up to|its own entry|leaves out"):
        client.prompt_positions(ids, 5)


def test_ollama_switching_model_mid_run_is_refused():
    top = [(7, LN(0.6)), (8, LN(0.1))]
    error = _refused("ollama", step_reply("ollama", 7, LN(0.6), top, model="other:7b"),
                     "answered as the model")  # fmt: skip
    assert "'other:7b'" in str(error)


def test_the_shared_check_keeps_an_honest_step():
    from engine.validate.served_step import check_step

    ranked = check_step(7, LN(0.6), [(8, LN(0.1)), (7, LN(0.6))], "position 1", id_limit=10)
    assert [k for k, _ in ranked] == [7, 8]
    # a scored prompt token may be impossible; a generated one may not
    assert check_step(3, -math.inf, [(8, LN(0.5))], "p", generated=False)
    with pytest.raises(ValueError, match="probability 0"):
        check_step(3, -math.inf, [(8, LN(0.5))], "p")


# -- 2. budgets a server could break --------------------------------------------------------


def _stream_body(kind: str, n: int) -> str:
    """``n`` streamed tokens in ``kind``'s stream format, whatever was asked for."""
    import json

    events = []
    for k in range(n):
        data = step_reply(kind, 5 + k, LN(0.5), [(5 + k, LN(0.5)), (1, LN(0.1))])
        if kind == "llama-server":
            data["stop"] = False
        elif kind == "ollama":
            data["done"] = False
        elif kind == "sglang":
            data["meta_info"].pop("finish_reason")
            data["meta_info"]["completion_tokens"] = k + 1  # incremental lists of one
        events.append(data)
    if kind == "ollama":
        return "".join(json.dumps(e) + "\n" for e in events)
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


STREAMS = [("vllm", 12, 4), ("sglang", 10, 3), ("llama-server", 9, 2), ("ollama", 9, 5)]


@pytest.mark.parametrize("kind,sent,asked", STREAMS)
def test_a_stream_stops_at_the_token_budget(kind, sent, asked):
    import httpx

    body = _stream_body(kind, sent)
    client = step_client(kind, lambda r: httpx.Response(200, text=body))
    got = list(client.stream([1, 2], asked, 2))
    assert len(got) == asked and got[-1].finish_reason == "length"


def test_a_stream_session_keeps_only_its_max_new_tokens():
    import httpx

    from engine.records import SERVED_STREAM, Step
    from engine.sampling.settings import SamplerSettings

    body = _stream_body("vllm", 12)
    client = step_client("vllm", lambda r: httpx.Response(200, text=body))
    session = _bundle(client).make_session(
        [1, 2], _request(SERVED_STREAM, SamplerSettings(max_new_tokens=4))
    )
    assert len([s for s in session.stream() if isinstance(s, Step)]) == 4


def _request(method, settings):
    from engine.drivers.workbench import RunRequest

    return RunRequest("x", method=method, settings=settings, top_n=2)


@pytest.mark.parametrize("kind", ["vllm", "llama-server", "ollama", "sglang"])
def test_a_huge_reply_to_a_one_token_request_is_refused_as_it_arrives(kind):
    import json
    import time

    import httpx

    one = step_reply(kind, 5, LN(0.5), [(5, LN(0.5))] + [(k, LN(0.01)) for k in range(6, 20)])
    # ~100,000 positions (tens of MB) where one was asked for: never parsed whole now
    blob = json.dumps(one).encode()
    many = blob * (30_000_000 // len(blob))
    client = step_client(kind, lambda r: httpx.Response(200, content=many))
    start = time.monotonic()
    with pytest.raises(RemoteError, match="limit of this request") as err:
        client.next_token([1, 2, 3], 20)
    assert time.monotonic() - start < 5.0 and err.value.kind == BAD_RESPONSE


@pytest.mark.parametrize("kind", ["vllm", "llama-server", "ollama", "sglang"])
def test_more_positions_than_asked_are_refused(kind):
    import httpx

    data = step_reply(kind, 5, LN(0.5), [(5, LN(0.5))])
    if kind == "vllm":
        block = data["choices"][0]["logprobs"]
        for field in ("tokens", "token_logprobs", "top_logprobs"):
            block[field] = block[field] * 3
    elif kind == "llama-server":
        data["completion_probabilities"] *= 3
    elif kind == "ollama":
        data["logprobs"] *= 3
    else:
        data["meta_info"]["output_token_logprobs"] *= 3
        data["meta_info"]["output_top_logprobs"] *= 3
    client = step_client(kind, lambda r: httpx.Response(200, json=data))
    with pytest.raises(RemoteError, match="3 positions for a request of 1"):
        client.next_token([1, 2], 1)


@pytest.fixture
def raw_server():
    from served_fakes import RawServer

    servers = []

    def start(reply):
        servers.append(RawServer(reply))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_headers_trickled_a_byte_at_a_time_meet_the_whole_request_deadline(raw_server):
    import time

    from engine.serve.remote import RemoteClient

    def trickle(conn, stop):  # 0.1 s a byte, for 10 s at most: never a whole header
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 200:
            if stop.wait(0.1):
                return
            conn.sendall(bytes([byte]))

    server = raw_server(trickle)
    client = RemoteClient(server.url, "m", deadline=1.0, retries=0, timeout=5.0)
    start = time.monotonic()
    with pytest.raises(RemoteError, match="deadline of 1 s"):
        client.next_token([1, 2], 1)
    assert time.monotonic() - start < 3.0  # before: waited on every byte (per-read timeout)


def test_a_broken_response_header_is_named_not_called_unreachable(raw_server):
    from engine.serve.remote import RemoteClient

    def broken(conn, stop):
        conn.sendall(b"HTTP/1.1 200 OK\r\nthis is not a header\r\n\r\n{}")

    server = raw_server(broken)
    client = RemoteClient(server.url, "m", retries=0, deadline=5.0)
    with pytest.raises(RemoteError, match="broken HTTP reply") as err:
        client.next_token([1, 2], 1)
    assert "Cannot reach" not in str(err.value)


@pytest.mark.parametrize(
    "after", ["-1", "nan", "NaN", "inf", "-inf", "1e9", "Wed, 21 Oct 2015 07:28:00 GMT"]
)
def test_retry_after_is_clamped_to_a_sane_range(after, monkeypatch):
    import time as time_module

    import httpx

    from engine.validate.limits import RETRY_AFTER_MAX_S

    slept: list[float] = []
    monkeypatch.setattr(time_module, "sleep", lambda s: slept.append(s))
    ok = step_reply("vllm", 5, LN(0.5), [(5, LN(0.5))])
    busy = httpx.Response(503, headers={"Retry-After": after}, json={"error": "busy"})
    answers = iter([busy, httpx.Response(200, json=ok)])
    client = step_client("vllm", lambda r: next(answers), retries=1)
    assert client.next_token([1, 2], 1).token_id == 5
    assert len(slept) == 1 and 0.0 <= slept[0] <= RETRY_AFTER_MAX_S


# -- 3. terminal escapes ----------------------------------------------------------------------

ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x9b\u202e"


def test_a_servers_error_text_reaches_no_terminal_raw():
    import httpx

    def handle(request):
        return httpx.Response(400, json={"error": {"message": f"bad{ESCAPES}request"}})

    client = step_client("vllm", handle)
    with pytest.raises(RemoteError) as err:
        client.next_token([1, 2], 1)
    text = str(err.value)
    assert "bad" in text and not any(c in text for c in "\x1b\x07\x9b\u202e")
    assert "\\x1b" in text  # shown, escaped, not hidden


class _EscapingTokenizer:
    """A tokenizer whose every token is text with terminal escapes (a server's /detokenize
    could send it)."""

    eos_token_id = None
    chat_template = None

    def __len__(self) -> int:
        return 1000

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(f"t{i}{ESCAPES}" for i in ids)

    def convert_ids_to_tokens(self, i: int) -> str:
        return self.decode([i])

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        return {"input_ids": [1, 2]}


def test_a_model_id_and_streamed_text_reach_the_terminal_escaped(capsys, monkeypatch):
    import httpx

    import engine.cli.generate as generate
    from engine.cli import run

    reply = step_reply("vllm", 5, LN(0.9), [(5, LN(0.9)), (6, LN(0.05))])
    client = step_client("vllm", lambda r: httpx.Response(200, json=reply))
    client.model = f"evil{ESCAPES}model"
    bundle = _bundle(client)
    bundle.tokenizer = _EscapingTokenizer()
    monkeypatch.setattr(generate, "open_served", lambda args, model=None: bundle)
    code = run(["generate", "--server", client.base_url, "--model", "m", "--prompt", "x",
                "--max-new-tokens", "2", "--temperature", "0"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0 and "t5" in out.out and "evil" in out.err
    for stream in (out.out, out.err):
        assert not any(c in stream for c in "\x1b\x07\x9b\u202e"), stream


# -- 4. int8 / int4 that is not what it says, and the vocabulary at load --------------------


@pytest.fixture
def no_native(monkeypatch):
    """PyTorch's int8 / int4 kernels (no build of the lab's during these tests)."""
    from engine.quant import native

    monkeypatch.setenv(native.SWITCH, "0")


def _llama(hidden: int, inter: int, vocab: int = 64, heads: int = 2):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                      num_hidden_layers=1, num_attention_heads=heads, num_key_value_heads=heads,
                      max_position_embeddings=64, tie_word_embeddings=False)  # fmt: skip
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize(
    "hidden,inter,says",
    [
        (40, 72, "run bfloat16 under the int4 label"),  # 40 columns: neither int4 nor int8
        (48, 80, "int8 may fit"),  # 48 columns: int8 only (int4's groups are 32)
    ],
)
def test_int4_that_nothing_can_take_is_refused_with_the_reason(no_native, hidden, inter, says):
    from engine.quant.apply import quantize_model

    with pytest.raises(ValueError, match="none of its .* matrices can be int4") as err:
        quantize_model(_llama(hidden, inter), "int4")
    assert says in str(err.value) and "columns" in str(err.value)


def test_the_load_says_what_it_got_and_refuses_a_label_it_cannot_keep(no_native):
    from word_models import word_tokenizer

    from engine.errors import ModelLoadError
    from engine.models.loading import make_bundle, quantise_bundle

    said: list[str] = []
    bundle = make_bundle(_llama(64, 128, vocab=32), word_tokenizer())
    quantise_bundle(bundle, "int4", said.append)
    line = bundle.extra["quant_summary"]
    assert said[-1] == f"Quantised: {line}"
    assert line.startswith("int4: 7 of 8 matrices int4") and "1 × int8 per row" in line
    with pytest.raises(ModelLoadError, match="none of its"):
        quantise_bundle(
            make_bundle(_llama(40, 72, vocab=32), word_tokenizer()), "int4", said.append
        )


def test_a_gguf_4_bit_matrix_that_falls_back_keeps_its_origin(no_native):
    import torch

    from engine.quant.apply import Forced, quantize_model

    model = _llama(64, 104)  # the MLP's gate and up: 104 rows, not int4's multiple of 16
    given = {
        name: Forced("int4", f"int4, rounded here from GGUF Q4_0 ({name})", "GGUF Q4_0")
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and name != "lm_head"
    }
    summary = quantize_model(model, "int4", given)
    fell = [o for o in summary.origins if o.startswith("int8") and "GGUF Q4_0" in o]
    assert fell and summary.count("int4") == 4  # q, k, v, o; gate and up fell back
    assert "fell back from int4" in summary.describe() and "104 rows" in summary.describe()


def test_a_tokenizer_larger_than_the_embedding_is_refused_at_load(tmp_path, monkeypatch):
    from word_models import WORDS, word_tokenizer

    from engine.errors import ModelLoadError
    from engine.models.loading import load_model
    from engine.quant import native
    from tiny_models import tiny_llama

    monkeypatch.setattr(native, "prepare", lambda say: False)
    tiny_llama(3, vocab=len(WORDS) - 8).save_pretrained(tmp_path)  # 10 rows, 18 tokens
    word_tokenizer().save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="18 tokens but the model's embedding has only 10"):
        load_model(tmp_path, device="cpu", dtype="float32")


# -- 5. the command line's edge -----------------------------------------------------------


def _word_bundle(monkeypatch, poison: bool = False):
    import torch
    from word_models import WORDS, word_tokenizer

    import engine.cli.generate as generate
    from engine.models.loading import make_bundle
    from tiny_models import tiny_llama

    model = tiny_llama(3, vocab=len(WORDS))
    if poison:
        with torch.no_grad():
            model.lm_head.weight[3, 0] = math.inf  # one +inf weight: NaN / inf logits
    bundle = make_bundle(model, word_tokenizer(None), source="words")
    monkeypatch.setattr(generate, "_load_model", lambda args: bundle)
    return bundle


def test_non_finite_logits_end_generate_in_one_line_not_a_traceback(capsys, monkeypatch):
    from engine.cli import run

    _word_bundle(monkeypatch, poison=True)
    code = run(["generate", "--prompt", "the cat", "--max-new-tokens", "3", "--engine",
                "transformers", "--device", "cpu"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and "NaN or infinite" in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: ")


def test_an_unexpected_error_is_one_line_with_its_type(capsys, monkeypatch):
    import engine.cli.generate as generate
    from engine.cli import run

    def boom(args):
        raise IndexError("index out of range in self")

    monkeypatch.setattr(generate, "_load_model", boom)
    code = run(["generate", "--prompt", "x"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert err.startswith("error: IndexError: index out of range in self")


@pytest.mark.parametrize("option", ["--json", "--html"])
@pytest.mark.parametrize("where", ["/proc/decoding-lab-56.json", "missing-folder/out.json"])
def test_inspect_checks_its_outputs_before_any_work(capsys, monkeypatch, option, where, tmp_path):
    import engine.models.catalog as catalog
    from engine.cli import run

    def never(*a, **k):
        raise AssertionError("the model was loaded before the output was checked")

    monkeypatch.setattr(catalog, "open_model", never)
    path = where if where.startswith("/") else str(tmp_path / where)
    code = run(["inspect", "--model", "tiny", option, path])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1


def test_experiments_emit_whole_json_with_non_finite_as_null(capsys):
    import json

    from engine.cli.experiments import _emit

    assert _emit({"kl_bound": math.inf, "steps": [{"p": 0.0, "kl": math.nan}]}) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == {"kl_bound": None, "steps": [{"p": 0.0, "kl": None}]}


def test_lockstep_refuses_a_bad_dtype_b_before_any_model_loads(capsys, monkeypatch):
    import engine.models.catalog as catalog
    from engine.cli import run

    monkeypatch.setattr(catalog, "open_model", lambda *a, **k: pytest.fail("loaded model A"))
    with pytest.raises(SystemExit) as exit_:
        run(["lockstep", "--model", "tiny", "--dtype-b", "int3"])
    assert exit_.value.code == 2 and "'int3' is not a dtype" in capsys.readouterr().err


# -- 6. smaller ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["llama-server", "ollama", "sglang"])
def test_a_stream_that_ends_in_an_error_keeps_the_last_token_that_arrived(kind):
    import httpx

    good = _stream_body(kind, 3).replace("data: [DONE]\n\n", "")
    tail = '{"error": "the slot crashed"}\n' if kind == "ollama" else "error: the slot crashed\n\n"
    client = step_client(kind, lambda r: httpx.Response(200, text=good + tail))
    got = []
    with pytest.raises(RemoteError, match="slot crashed"):
        for token in client.stream([1, 2], 8, 2):
            got.append(token.token_id)
    assert got == [5, 6, 7]  # before: the held last token (7) was dropped


def test_the_cli_warns_of_served_ids_its_tokenizer_lacks(capsys, monkeypatch):
    import httpx

    import engine.cli.generate as generate
    from engine.cli import run

    reply = step_reply("sglang", 500, LN(0.9), [(500, LN(0.9)), (6, LN(0.05))])
    client = step_client("sglang", lambda r: httpx.Response(200, json=reply))
    client.vocab_size = 100  # the local tokenizer's: id 500 has no text here
    monkeypatch.setattr(generate, "open_served", lambda args, model=None: _bundle(client))
    code = run(["generate", "--server", client.base_url, "--model", "m", "--prompt", "[1]",
                "--max-new-tokens", "1", "--temperature", "0"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0 and "warning: the server sent 1 token id(s)" in err and "500" in err


def test_inspect_breaks_a_tie_the_same_way_for_the_decision_layer_and_the_grid():
    import torch

    from engine.internals.inspect import _lens_view

    # three layers over 8 tokens; at layer 1 tokens 0 and 7 tie exactly (as bfloat16 rounds
    # two close logits to one value); torch.topk lists 7 first there, argmax says 0
    logp = torch.full((3, 8), -9.0)
    logp[0, 3] = logp[1, 0] = logp[1, 7] = logp[2, 0] = -0.1
    view = _lens_view(logp.log_softmax(-1), 0, 3, lambda i: f"t{i}")
    grid_top1 = [layer[0][0] for layer in view.layer_top]
    assert grid_top1 == [3, 0, 0]
    assert view.decision_layer == 1  # the grid's top-1 from layer 1 on: the same token


@pytest.mark.parametrize("dtype,says", [("bfloat16", True), ("float32", False)])
def test_score_says_why_a_reduced_precision_differs_from_the_run(capsys, monkeypatch, dtype, says):
    import torch
    from word_models import WORDS, word_tokenizer

    import engine.cli.tree as tree
    from engine.cli import run
    from engine.models.loading import make_bundle
    from tiny_models import tiny_llama

    model = tiny_llama(3, vocab=len(WORDS)).to(getattr(torch, dtype))
    bundle = make_bundle(model, word_tokenizer(None), source="words")
    monkeypatch.setattr(tree, "_open", lambda args: bundle)
    code = run(["score", "--text", "the cat sat on the mat", "--prompt", "once upon a time"])
    captured = capsys.readouterr()
    assert code == 0
    assert ("score reads the whole text in one pass" in captured.err) is says
    assert ("In bfloat16" in captured.err) is says
    if says:
        assert "float32 they agree" in tree.score_precision_note(bundle)
