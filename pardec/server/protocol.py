"""The OpenAI wire format's request bodies, validated (a bad field is a 400, never a 500)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")  # fields pardec does not use (user, logit_bias, ...)

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)  # OpenAI's default
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=8)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        stops = [v] if isinstance(v, str) else list(v or [])
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("stop takes at most 4 non-empty strings")
        return stops

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_Common):
    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False  # the prompt comes back before the completion (with its logprobs if asked)
    logprobs: int | None = Field(default=None, ge=0, le=5)  # the most likely alternatives per token
    max_tokens: int | None = Field(default=None, ge=0)  # 0 with echo: score the prompt only

    @model_validator(mode="after")
    def _consistent(self):
        if self.max_tokens == 0 and not self.echo:
            raise ValueError("max_tokens 0 needs echo (it only scores the prompt)")
        if self.stream and self.logprobs is not None:
            raise ValueError("logprobs are not streamed: ask without stream")
        return self

    @field_validator("prompt")
    @classmethod
    def _not_empty(cls, v):
        if isinstance(v, list) and not v:
            raise ValueError("prompt is empty")
        return v

    def prompts(self) -> list[str | list[int]]:
        """One entry per prompt: text, or token ids."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if all(isinstance(x, int) for x in p):
            return [list(p)]
        return list(p)


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str


class ChatRequest(_Common):
    messages: list[Message] = Field(min_length=1)
