"""`pardec serve`'s HTTP API: OpenAI's /v1/completions, /v1/chat/completions and /v1/models, with
/health and Prometheus /metrics, over the serving engine (engine.py)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
import uuid

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..decoding import DecodeConfig
from ..errors import PardecError
from ..model import chat
from .engine import Engine, Finished, QueueFull, Scoring
from .engine import Request as Job
from .protocol import ChatRequest, CompletionRequest

COMPLETION_DEFAULT_MAX_TOKENS = 16  # as OpenAI's completions endpoint
POLL = 0.25  # seconds between checks that a waiting client is still there


def error(
    status: int, message: str, kind: str = "invalid_request_error", code: str | None = None
) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": code}}, status)


def create_app(engine: Engine, model_name: str, base: DecodeConfig) -> FastAPI:
    """`base`: the server's decoding settings (method, block size, ...); requests set the rest."""

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        engine.start()
        yield
        engine.stop()

    app = FastAPI(title="pardec", lifespan=lifespan)
    tok = engine.lm.tokenizer

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        return error(400, f"{where}: {first.get('msg', 'invalid request')}" if where else str(exc))

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics():
        return Response(generate_latest(engine.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models():
        return {
            "object": "list",
            "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "pardec"}],
        }

    def settings(body) -> DecodeConfig:
        default = (
            COMPLETION_DEFAULT_MAX_TOKENS if isinstance(body, CompletionRequest) else base.max_new_tokens
        )
        n = default if body.max_tokens is None else max(1, body.max_tokens)  # 0: scoring only
        return dataclasses.replace(base, temperature=body.temperature, top_p=body.top_p, seed=body.seed,
                                   max_new_tokens=n, stop=tuple(body.stop or ()))  # fmt: skip

    async def serve(http: Request, body, prompts: list[list[int]], chat_format: bool):
        if body.model != model_name:
            return error(
                400, f"the model '{body.model}' is not served here: '{model_name}' is", code="model_not_found"
            )
        try:
            config = settings(body)
            for p in prompts:
                engine.check(p, config)
        except PardecError as e:
            return error(400, str(e))
        loop = asyncio.get_running_loop()
        jobs = [Job(p, config, loop) for p in prompts for _ in range(body.n)]
        score_only = body.max_tokens == 0  # echo with max_tokens 0: nothing to decode
        try:
            if not score_only:
                engine.submit(jobs)
        except QueueFull:
            return error(
                429, "the server's queue is full: retry later", kind="rate_limit_error", code="queue_full"
            )
        rid = ("chatcmpl-" if chat_format else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        n_prompt = sum(len(p) for p in prompts)
        if body.stream:
            stream = _stream(
                http, engine, jobs, rid, created, model_name, chat_format, body.include_usage, n_prompt
            )
            return StreamingResponse(stream, media_type="text/event-stream")
        if score_only:
            done = [Finished("", (), "length", 0, 0) for _ in jobs]
        else:
            done = await _gather(http, engine, jobs)
        if done is None:
            return Response(status_code=499)  # the client left; nothing to answer
        if isinstance(done, str):
            return error(500 if "shutting down" not in done else 503, done, kind="server_error")
        choices = []
        for i, f in enumerate(done):
            if chat_format:
                choices.append({"index": i, "message": {"role": "assistant", "content": f.text},
                                "finish_reason": f.finish_reason, "logprobs": None})  # fmt: skip
            else:
                p = prompts[i // body.n]
                choice = {"index": i, "text": f.text, "finish_reason": f.finish_reason, "logprobs": None}
                if body.echo:
                    choice["text"] = tok.decode(p, skip_special_tokens=False) + f.text
                if body.logprobs is not None:
                    job = Scoring(p + list(f.tokens), body.logprobs, loop)
                    engine.submit_scoring(job)
                    kind, value = await job.events.get()
                    if kind == "error":
                        return error(500, value, kind="server_error")
                    start = 0 if body.echo else len(p)
                    choice["logprobs"] = _logprobs(tok, job.ids, *value, start)
                choices.append(choice)
        return {
            "id": rid, "object": "chat.completion" if chat_format else "text_completion", "created": created,
            "model": model_name, "choices": choices, "usage": _usage(n_prompt, done),
        }  # fmt: skip

    @app.post("/v1/completions")
    async def completions(http: Request, body: CompletionRequest):
        try:
            prompts = [
                tok.encode(p, add_special_tokens=True) if isinstance(p, str) else p for p in body.prompts()
            ]
        except (TypeError, ValueError) as e:
            return error(400, f"prompt: {e}")
        vocab = len(tok)
        if any(not p for p in prompts):
            return error(400, "prompt: empty")
        if any(not 0 <= t < vocab for p in prompts for t in p):
            return error(400, f"prompt: token ids must lie in [0, {vocab})")
        return await serve(http, body, prompts, chat_format=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(http: Request, body: ChatRequest):
        try:
            prompt = chat.encode_messages(tok, [m.model_dump() for m in body.messages])
        except PardecError as e:
            return error(400, str(e))
        return await serve(http, body, [prompt], chat_format=True)

    return app


def _logprobs(tok, ids: list[int], token_lp, tops, start: int) -> dict:
    """OpenAI's completions logprobs object for ids[start:]."""
    pieces = [tok.decode([t], skip_special_tokens=False) for t in ids[start:]]
    offsets, at = [], 0
    for piece in pieces:
        offsets.append(at)
        at += len(piece)
    top = [None if i == 0 else {tok.decode([k], skip_special_tokens=False): v for k, v in t.items()}
           for i, t in zip(range(start, len(ids)), tops[start:])]  # fmt: skip
    return {"tokens": pieces, "token_logprobs": token_lp[start:], "top_logprobs": top, "text_offset": offsets}


def _usage(n_prompt: int, done: list[Finished]) -> dict:
    completion = sum(f.completion_tokens for f in done)
    return {
        "prompt_tokens": n_prompt, "completion_tokens": completion, "total_tokens": n_prompt + completion,
        "completion_tokens_details": {"accepted_prediction_tokens": sum(f.accepted_drafts for f in done),
                                      "rejected_prediction_tokens": sum(f.rejected_drafts for f in done)},
    }  # fmt: skip


async def _next_event(http: Request, job: Job):
    """The job's next event, or None once the client has gone."""
    while True:
        try:
            return await asyncio.wait_for(job.events.get(), POLL)
        except TimeoutError:
            if await http.is_disconnected():
                return None


async def _gather(http: Request, engine: Engine, jobs: list[Job]) -> list[Finished] | str | None:
    """Every job's Finished (None if the client left; an error message if decoding failed)."""
    out = []
    try:
        for job in jobs:
            while True:
                event = await _next_event(http, job)
                if event is None:
                    return None
                kind, value = event
                if kind == "done":
                    out.append(value)
                    break
                if kind == "error":
                    return value
        return out
    finally:
        for job in jobs:
            engine.cancel(job)  # a no-op for finished jobs; frees the rows of a client that left


async def _stream(http, engine, jobs, rid, created, model_name, chat_format, include_usage, n_prompt):
    """Server-sent events: a chunk per text delta of each choice, then finish reasons, usage, [DONE]."""
    kind = "chat.completion.chunk" if chat_format else "text_completion"

    def chunk(index: int, text: str | None, finish: str | None = None, first: bool = False) -> str:
        if chat_format:
            delta = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
            choice = {"index": index, "delta": delta, "finish_reason": finish, "logprobs": None}
        else:
            choice = {"index": index, "text": text or "", "finish_reason": finish, "logprobs": None}
        return "data: " + json.dumps({"id": rid, "object": kind, "created": created, "model": model_name,
                                      "choices": [choice]}) + "\n\n"  # fmt: skip

    done: list[Finished] = []
    try:
        if chat_format:
            for i in range(len(jobs)):
                yield chunk(i, None, first=True)
        # Choices stream one after another (each is complete before the next starts).
        for i, job in enumerate(jobs):
            while True:
                event = await _next_event(http, job)
                if event is None:
                    return
                what, value = event
                if what == "text":
                    yield chunk(i, value)
                elif what == "done":
                    done.append(value)
                    yield chunk(i, None, value.finish_reason)
                    break
                else:
                    err = {"error": {"message": value, "type": "server_error", "param": None, "code": None}}
                    yield "data: " + json.dumps(err) + "\n\n"
                    return
        if include_usage:
            usage = {"id": rid, "object": kind, "created": created, "model": model_name, "choices": [],
                     "usage": _usage(n_prompt, done)}  # fmt: skip
            yield "data: " + json.dumps(usage) + "\n\n"
        yield "data: [DONE]\n\n"
    finally:
        for job in jobs:
            engine.cancel(job)
