"""The serving loop: requests join running batches (decoding.engine.Session) at the next step and
leave when done, on one thread that owns the model; results flow back to the event loop per request.

Requests that decode the same way (method settings, temperature, top-p, seed) share a session; each
step steps every session with rows. A full queue refuses at once (the caller answers 429); a request
whose client went away is cancelled and its row leaves at the next step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch

from ..api import TextTracker
from ..core.scoring import text_logits
from ..decoding import DecodeConfig
from ..decoding.engine import GenerationResult, Session, check_prompt, context_limit
from ..errors import PardecError
from ..model import LoadedModel
from .metrics import Metrics


class QueueFull(Exception):
    pass


@dataclass
class Request:
    """One completion (one choice): token ids in, text deltas and a final result out."""

    prompt: list[int]
    config: DecodeConfig  # this request's settings (max_new_tokens, sampling, stop)
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)  # ("text", str) ... ("done", Finished)
    cancelled: bool = False
    created: float = field(default_factory=time.perf_counter)
    first_token: float | None = None
    last_token: float | None = None
    tracker: Any = None

    def emit(self, kind: str, value) -> None:
        self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))


@dataclass(frozen=True)
class Finished:
    text: str
    tokens: tuple[int, ...]  # the emitted token ids (after a stop string's cut)
    finish_reason: str  # "stop" or "length"
    accepted_drafts: int
    rejected_drafts: int

    @property
    def completion_tokens(self) -> int:
        return len(self.tokens)


@dataclass
class Scoring:
    """Log-probabilities of a token sequence under the model (echo / logprobs), computed on the
    engine thread: a forward there must not overlap a decoding step's gated adapters."""

    ids: list[int]
    top: int  # alternatives per position
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)


def score(model, ids: list[int], top: int, mask_id: int) -> tuple[list[float | None], list[dict[int, float]]]:
    """(log-probability of each token given the ones before it, None for the first; the `top` most
    likely tokens at each position with theirs)."""
    lp = torch.log_softmax(text_logits(model, ids, 1, mask_id), -1)  # [T - 1, V] predicting tokens 1..T-1
    target = torch.tensor(ids[1:], device=lp.device)
    token_lp = [None] + lp.gather(1, target[:, None])[:, 0].tolist()
    tops: list[dict[int, float]] = [{}]
    if top:
        values, indices = lp.topk(top, -1)
        tops += [dict(zip(i.tolist(), v.tolist())) for i, v in zip(indices, values)]
    else:
        tops += [{} for _ in range(len(ids) - 1)]
    return token_lp, tops


def _key(config: DecodeConfig) -> DecodeConfig:
    """What a session is shared by: every setting but the per-request length and stop strings."""
    return dataclasses.replace(config, max_new_tokens=1, stop=())


class Engine:
    def __init__(self, lm: LoadedModel, extras: dict, max_batch: int, max_queue: int, metrics: Metrics):
        self.lm, self.extras, self.metrics = lm, extras, metrics
        self.max_batch, self.max_queue = max_batch, max_queue
        self.waiting: deque[Request] = deque()
        self.sessions: dict[DecodeConfig, Session] = {}
        self.running: dict[tuple[DecodeConfig, int], Request] = {}
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="pardec-engine", daemon=True)
        self.scoring: deque[Scoring] = deque()

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Finish no more: every waiting and running request ends with an error event."""
        self.stopping = True
        self.wake.set()
        self.thread.join(timeout)

    def check(self, prompt: list[int], config: DecodeConfig) -> None:
        """Refuse what cannot be decoded, before it queues: an empty prompt, one the context cannot hold
        with max_tokens more."""
        check_prompt(prompt, config, context_limit(self.lm.model), max_new_tokens=config.max_new_tokens)

    def submit(self, requests: list[Request]) -> None:
        """Queue requests (the choices of one API call) together, or refuse them all (QueueFull)."""
        with self.lock:
            if self.stopping or len(self.waiting) + len(requests) > self.max_queue:
                raise QueueFull()
            for r in requests:
                r.tracker = TextTracker(
                    self.lm.tokenizer, 1, r.config.stop, lambda _i, d, r=r: r.emit("text", d)
                )
                self.waiting.append(r)
            self.metrics.waiting.set(len(self.waiting))
        self.wake.set()

    def submit_scoring(self, job: Scoring) -> None:
        with self.lock:
            if self.stopping:
                raise QueueFull()
            self.scoring.append(job)
        self.wake.set()

    def _score(self) -> None:
        while self.scoring:
            job = self.scoring.popleft()
            try:
                result = score(self.lm.model, job.ids, job.top, self.lm.mask_id)
                job.loop.call_soon_threadsafe(job.events.put_nowait, ("scored", result))
            except Exception as e:  # a failed scoring answers its request, not the server
                job.loop.call_soon_threadsafe(job.events.put_nowait, ("error", f"scoring failed: {e}"))

    def cancel(self, request: Request) -> None:
        request.cancelled = True
        self.wake.set()

    # The engine thread.

    def _session(self, key: DecodeConfig) -> Session:
        if key not in self.sessions:
            self.sessions[key] = Session(
                self.lm.decoder, key, self.lm.mask_id, self.lm.stop_ids,
                on_commit=lambda i, new, key=key: self._on_commit(key, i, new), extras=self.extras,
            )  # fmt: skip
        return self.sessions[key]

    def _on_commit(self, key: DecodeConfig, index: int, new: list[int]) -> int | None:
        req = self.running[(key, index)]
        now = time.perf_counter()
        if req.first_token is None:
            req.first_token = now
            self.metrics.ttft.observe(now - req.created)
        elif req.last_token is not None:
            self.metrics.itl.observe((now - req.last_token) / len(new))
        req.last_token = now
        return req.tracker.commit(0, new)

    def _admit(self) -> None:
        with self.lock:
            while self.waiting and len(self.running) < self.max_batch:
                req = self.waiting.popleft()
                if req.cancelled:
                    continue
                key = _key(req.config)
                session = self._session(key)
                try:
                    index = session.add(req.prompt, req.config.max_new_tokens)
                except PardecError as e:
                    req.emit("error", str(e))
                    continue
                self.running[(key, index)] = req
                self.metrics.requests.inc()
            self.metrics.waiting.set(len(self.waiting))
            self.metrics.running.set(len(self.running))

    def _finish(self, key: DecodeConfig, index: int, result: GenerationResult) -> None:
        req = self.running.pop((key, index))
        req.tracker.flush(0)
        accepted = rejected = 0
        for fed, acc in result.drafts_per_step:
            accepted, rejected = accepted + acc, rejected + fed - acc
            self.metrics.record_drafts(fed, acc)
        done = Finished(req.tracker.text(0), tuple(req.tracker.ids[0]), result.finish, accepted, rejected)
        req.emit("done", done)

    def _run(self) -> None:
        while not self.stopping:
            for (key, index), req in list(self.running.items()):
                if req.cancelled:
                    self.sessions[key].cancel(index)
                    del self.running[(key, index)]
            self._score()
            self._admit()
            busy = [(k, s) for k, s in self.sessions.items() if s.active]
            # Sessions without rows go (one per distinct seed or sampling setting would pile up).
            self.sessions = dict(busy)
            if not busy:
                self.metrics.running.set(0)
                self.wake.wait(0.5)
                self.wake.clear()
                continue
            for key, session in busy:
                try:
                    for index, result in session.step():
                        self._finish(key, index, result)
                except Exception as e:  # a failed step ends its session's requests, not the server
                    for (k, i), req in list(self.running.items()):
                        if k == key:
                            req.emit("error", f"decoding failed: {e}")
                            del self.running[(k, i)]
                    del self.sessions[key]
            self.metrics.running.set(len(self.running))
        with self.lock:
            for req in list(self.waiting) + list(self.running.values()):
                req.emit("error", "the server is shutting down")
            self.waiting.clear()
            self.running.clear()
