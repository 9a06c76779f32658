"""`pardec serve` on a tiny model, through the official openai client on 127.0.0.1: the same text as
the Python API, streaming or not, concurrent requests, bad input as 400s, a full queue as 429, a
client that leaves, and metrics that move."""

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
import torch
import uvicorn

from pardec.api import configure, generate
from pardec.decoding import DecodeConfig
from pardec.model import load_model
from pardec.server.app import create_app
from pardec.server.engine import Engine
from pardec.server.metrics import Metrics

NAME = "tiny"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    def __init__(self, lm, config, extras, max_batch=4, max_queue=16):
        self.engine = Engine(lm, extras, max_batch, max_queue, Metrics())
        self.port = free_port()
        app = create_app(self.engine, NAME, config)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            assert time.time() < deadline, "server did not start"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=60)

    def close(self):
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture(scope="module")
def lm(tiny_dir):
    return load_model(tiny_dir, torch.float32, "none")


@pytest.fixture(scope="module")
def served(lm):
    config, extras = configure(lm, DecodeConfig(method="spec", block_size=3, adaptive=False), True)
    s = Served(lm, config, extras)
    yield s
    s.close()


def api_output(lm, prompt, **kw):
    config = DecodeConfig(method="spec", block_size=3, adaptive=False, temperature=0.0, **kw)
    return generate(lm, [prompt], config)[0]


def api_text(lm, prompt, **kw):
    return api_output(lm, prompt, **kw).text


def test_models_and_health(served):
    assert [m.id for m in served.client.models.list().data] == [NAME]
    assert httpx.get(served.url + "/health").json() == {"status": "ok"}


def test_chat_streaming_and_not_give_the_python_apis_text(served, lm):
    c = served.client
    messages = [{"role": "user", "content": "the cat sat on the mat"}]
    whole = c.chat.completions.create(model=NAME, messages=messages, temperature=0, max_tokens=12)
    text = whole.choices[0].message.content
    want = api_output(lm, "the cat sat on the mat", max_new_tokens=12)
    assert text == want.text and whole.choices[0].finish_reason == want.finish
    assert whole.usage.completion_tokens == want.new_tokens
    details = whole.usage.completion_tokens_details
    assert details.accepted_prediction_tokens + details.rejected_prediction_tokens > 0
    chunks = list(c.chat.completions.create(model=NAME, messages=messages, temperature=0, max_tokens=12,
                                            stream=True, stream_options={"include_usage": True}))  # fmt: skip
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert streamed == text and len([ch for ch in chunks if ch.choices]) > 2
    assert chunks[-1].usage.completion_tokens == want.new_tokens and chunks[-1].choices == []


def test_completions_take_text_token_ids_and_lists_and_cut_stop_strings(served, lm):
    c = served.client
    prompt = "hello world"
    plain = c.completions.create(model=NAME, prompt=prompt, temperature=0, max_tokens=10).choices[0].text
    words = plain.split()
    assert len(words) >= 4
    stop = " ".join(words[2:4])  # two words, so the stop string spans tokens (and likely chunks)
    cut = c.completions.create(model=NAME, prompt=prompt, temperature=0, max_tokens=10, stop=[stop])
    assert cut.choices[0].text == plain[: plain.index(stop)] and cut.choices[0].finish_reason == "stop"
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(
        model=NAME, prompt=prompt, temperature=0, max_tokens=10, stop=[stop], stream=True))  # fmt: skip
    assert streamed == cut.choices[0].text
    ids = lm.tokenizer.encode(prompt, add_special_tokens=True)
    by_ids = c.completions.create(model=NAME, prompt=ids, temperature=0, max_tokens=10)
    assert by_ids.choices[0].text == plain
    two = c.completions.create(model=NAME, prompt=[prompt, "one two"], temperature=0, max_tokens=6, n=2)
    assert [ch.index for ch in two.choices] == [0, 1, 2, 3]
    assert two.choices[0].text == two.choices[1].text and two.choices[2].text == two.choices[3].text
    lengths = [6 if ch.finish_reason == "length" else None for ch in two.choices]
    assert two.usage.completion_tokens >= sum(n for n in lengths if n) and two.usage.completion_tokens <= 24


def test_concurrent_streams_all_complete_with_their_own_text(served, lm):
    prompts = ["the cat", "a dog ran", "one two three", "red blue green", "hello world", "it is yes"]

    def ask(p):
        stream = served.client.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": p}], temperature=0, max_tokens=10, stream=True
        )
        return "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)

    with ThreadPoolExecutor(6) as pool:
        texts = list(pool.map(ask, prompts))
    assert texts == [api_text(lm, p, max_new_tokens=10) for p in prompts]


@pytest.mark.parametrize(
    "body,message",
    [
        ({"prompt": "hi", "max_tokens": "many"}, "max_tokens"),
        ({"prompt": "hi", "temperature": 3}, "temperature"),
        ({"prompt": "hi", "top_p": 0}, "top_p"),
        ({"prompt": "hi", "n": 0}, "n"),
        ({"prompt": "hi", "max_tokens": 100000}, "context"),
        ({"prompt": ""}, "empty"),
        ({"prompt": []}, "empty"),
        ({"prompt": [10**9]}, "token ids"),
        ({"prompt": "hi", "model": "gpt-4"}, "not served"),
        ({"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({}, "prompt"),
    ],
)
def test_bad_requests_are_400_with_an_openai_error_body(served, body, message):
    body = {"model": NAME, **body}
    r = httpx.post(served.url + "/v1/completions", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert message in err["message"] and err["type"] == "invalid_request_error"
    if "prompt" in body:  # the client itself refuses a call without one
        with pytest.raises(openai.BadRequestError):
            served.client.completions.create(**body)
    assert httpx.get(served.url + "/health").status_code == 200


def test_malformed_json_and_bad_messages_are_400(served):
    r = httpx.post(served.url + "/v1/chat/completions", content=b"{not json",
                   headers={"content-type": "application/json"})  # fmt: skip
    assert r.status_code == 400 and "error" in r.json()
    for messages in (
        [],
        [{"role": "user"}],
        [{"role": "wizard", "content": "hi"}],
        [{"role": "user", "content": " "}],
    ):
        r = httpx.post(served.url + "/v1/chat/completions", json={"model": NAME, "messages": messages})
        assert r.status_code == 400, (messages, r.text)


def test_a_full_queue_answers_429_at_once(lm):
    config, extras = configure(lm, DecodeConfig(method="ar"), True)
    s = Served(lm, config, extras, max_batch=1, max_queue=1)
    try:
        with pytest.raises(openai.RateLimitError):  # n = 2 choices cannot fit a queue of 1
            s.client.completions.create(model=NAME, prompt="hi", max_tokens=2, n=2)
        assert s.client.completions.create(model=NAME, prompt="hi", max_tokens=2).choices[0].text is not None
    finally:
        s.close()


def test_a_client_that_leaves_frees_its_row(served):
    body = {"model": NAME, "prompt": "the cat", "max_tokens": 200, "stream": True}
    with httpx.stream("POST", served.url + "/v1/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and json.loads(line[6:])["choices"][0]["text"]:
                break
    deadline = time.time() + 20
    while served.engine.running and time.time() < deadline:
        time.sleep(0.1)
    assert not served.engine.running  # cancelled at a step, long before its 200 tokens


def test_metrics_count_drafts_and_latencies(served):
    served.client.completions.create(model=NAME, prompt="one two", temperature=0, max_tokens=8)
    text = httpx.get(served.url + "/metrics").text

    def value(name):
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")
                   or line.startswith(name + "{"))  # fmt: skip

    assert value("pardec:spec_decode_num_draft_tokens_total") > 0
    assert value("pardec:spec_decode_num_drafts_total") > 0
    assert value("pardec:time_to_first_token_seconds_count") >= 1
    assert value("pardec:num_requests_total") >= 1
    assert "pardec:inter_token_latency_seconds_bucket" in text


def test_sigterm_ends_a_running_stream_cleanly_and_the_server_exits(tiny_dir, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    port = free_port()
    env = {**os.environ, "PARDEC_CACHE": str(tmp_path)}
    cmd = [sys.executable, "-m", "pardec.cli", "serve", "--model", tiny_dir, "--dtype", "float32",
           "--adapter", "none", "--method", "ar", "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.time() < deadline and proc.poll() is None, "server did not start"
            time.sleep(0.2)
        body = {"model": tiny_dir, "prompt": "the cat", "max_tokens": 40, "stream": True}
        lines = []
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line:
                    lines.append(line)
                if len(lines) == 2:
                    proc.send_signal(signal.SIGTERM)  # mid-stream
        assert lines[-1] in ("data: [DONE]",) or "error" in lines[-1]  # finished, or told why not
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_echo_and_logprobs_score_the_prompt_and_completion_under_the_base_model(served, lm):
    """What lm-evaluation-harness's loglikelihood requests ask: echo the prompt with its logprobs. The
    gated adapter leaves every clean position the base model's, so they are the base model's."""
    prompt = "the cat sat on the mat"
    ids = lm.tokenizer.encode(prompt, add_special_tokens=True)
    r = httpx.post(served.url + "/v1/completions", json={"model": NAME, "prompt": prompt, "max_tokens": 0,
                                                         "echo": True, "logprobs": 2}).json()  # fmt: skip
    lp = r["choices"][0]["logprobs"]
    assert r["choices"][0]["text"] == lm.tokenizer.decode(ids, skip_special_tokens=False)
    with torch.no_grad():
        logits = lm.model(torch.tensor([ids])).logits[0].float()
    logits[:, lm.mask_id] = float("-inf")
    want = torch.log_softmax(logits, -1)[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    assert lp["token_logprobs"][0] is None and len(lp["token_logprobs"]) == len(ids)
    torch.testing.assert_close(torch.tensor(lp["token_logprobs"][1:]), want, rtol=1e-4, atol=1e-4)
    assert all(len(t) == 2 for t in lp["top_logprobs"][1:]) and lp["text_offset"][0] == 0
    # With a completion: its logprobs follow the prompt's, through the official client too.
    c = served.client.completions.create(model=NAME, prompt=prompt, max_tokens=3, temperature=0, echo=True,
                                         logprobs=1)  # fmt: skip
    assert len(c.choices[0].logprobs.token_logprobs) >= len(ids)
    echoed = c.choices[0].logprobs.token_logprobs
    assert echoed[0] is None and echoed[1 : len(ids)] == pytest.approx(want.tolist(), abs=1e-4)
    plain = served.client.completions.create(
        model=NAME, prompt=prompt, max_tokens=3, temperature=0, logprobs=0
    )
    assert len(plain.choices[0].logprobs.tokens) == plain.usage.completion_tokens
    for bad in ({"max_tokens": 0}, {"logprobs": 9}, {"stream": True, "logprobs": 1}):
        r = httpx.post(served.url + "/v1/completions", json={"model": NAME, "prompt": prompt, **bad})
        assert r.status_code == 400, bad


def test_scores_under_a_gated_adapter_are_the_base_models():
    """echo/logprobs score with the adapted model: a gated adapter acts only at [MASK] inputs, so the
    log-likelihoods lm-eval reads are exactly the base model's."""
    from tiny import randomize_lora, tiny_model

    from pardec.model import adapters
    from pardec.server.engine import score

    base, mask_id = tiny_model("qwen2")
    adapted, _ = tiny_model("qwen2")
    adapters.attach(adapted, adapters.LoRAConfig("gated-lora", rank=4, alpha=8))
    randomize_lora(adapted)
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    lp_base, top_base = score(base, ids, 3, mask_id)
    lp_adapted, top_adapted = score(adapted, ids, 3, mask_id)
    assert lp_adapted[1:] == pytest.approx(lp_base[1:], abs=1e-5) and lp_base[0] is None
    assert [list(t) for t in top_adapted] == [list(t) for t in top_base]


def test_idle_sessions_do_not_pile_up(served):
    for seed in range(5):  # each seed decodes in a session of its own
        served.client.completions.create(model=NAME, prompt="hi", max_tokens=2, temperature=1.0, seed=seed)
    deadline = time.time() + 10
    while served.engine.sessions and time.time() < deadline:
        time.sleep(0.05)
    assert not served.engine.sessions
