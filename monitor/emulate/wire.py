"""SGLang 0.5.23's request and response bodies, for the emulated servers (no I/O, no scheduling).

Requests (what the real server reads, `entrypoints/http_server.py`, `openai/protocol.py`):
  POST /generate              `text` or `input_ids`, `sampling_params` {max_new_tokens (128), ignore_eos},
                              `stream`, `rid`, `log_metrics`, `bootstrap_host/port/room` (PD, set by the gateway)
  POST /v1/completions        `prompt`, `max_tokens` (16), `ignore_eos`, `stream`, `stream_options`
  POST /v1/chat/completions   `messages`, `max_completion_tokens` or `max_tokens`, `ignore_eos`, `stream`,
                              `stream_options` {include_usage, continuous_usage_stats}
Responses: native chunks `data: {"text", "output_ids", "meta_info"}` with cumulative text (SGLang's default,
`incremental_streaming_output` off) and a final `data: [DONE]`; OpenAI `text_completion` /
`chat.completion.chunk` objects, `usage` on the last chunk only when `stream_options.include_usage`.

The emulator has no tokenizer: a text prompt counts one token per whitespace-separated word (exact for the
word-level tokenizer `monitor.emulate.bench_serving.build_tokenizer` writes), `input_ids` one per id; a chat
prompt adds CHAT_TEMPLATE_TOKENS per message. Output token k is the word `w{1000 + k % 1000}`.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_NEW_TOKENS = 128  # sampling_params.py
DEFAULT_COMPLETION_MAX_TOKENS = 16  # CompletionRequest.max_tokens
CHAT_TEMPLATE_TOKENS = 4  # role markers a chat template adds per message
CACHE_BLOCK = 32  # prefix-cache granularity (tokens)
EOS_TOKEN_ID = 2  # `matched` of a stop finish
WEIGHT_VERSION = "default"


class WireError(ValueError):
    """A request body the real server would refuse (400); the message says which field."""


@dataclass
class ClientRequest:
    """One request as a client (or the gateway, for a PD half) sent it."""

    endpoint: str  # /generate | /v1/completions | /v1/chat/completions
    prompt_tokens: int
    max_new_tokens: int | None  # None: until the model stops (chat without a limit)
    ignore_eos: bool
    stream: bool
    rid: str
    blocks: tuple[int, ...] = ()  # prefix-cache keys of the prompt's full blocks
    include_usage: bool = False
    continuous_usage: bool = False
    model: str | None = None
    log_metrics: bool = True
    bootstrap_host: str | None = None
    bootstrap_port: int | None = None
    bootstrap_room: int | None = None
    structured: bool = False
    created_wall: int = field(default_factory=lambda: int(time.time()))


def _obj(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise WireError(f"the body must be a JSON object, got {type(body).__name__}")
    return body


def _int(body: dict[str, Any], key: str, default: int | None, minimum: int = 0) -> int | None:
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise WireError(f"`{key}` must be an integer >= {minimum}, got {v!r}")
    return v


def _bool(body: dict[str, Any], key: str, default: bool = False) -> bool:
    v = body.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise WireError(f"`{key}` must be true or false, got {v!r}")
    return v


def _blocks(items: list[Any]) -> tuple[int, ...]:
    """Chained hashes of the full CACHE_BLOCK-token blocks: equal prefixes give equal leading keys."""
    out, h = [], 0
    for i in range(0, len(items) - CACHE_BLOCK + 1, CACHE_BLOCK):
        h = hash((h, tuple(items[i:i + CACHE_BLOCK])))
        out.append(h)
    return tuple(out)


def _prompt(value: Any, what: str) -> tuple[int, tuple[int, ...]]:
    """(tokens, cache blocks) of one prompt: a string of words or a list of token ids."""
    if isinstance(value, str):
        words = value.split()
        return len(words), _blocks(words)
    if isinstance(value, list) and value and all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        return len(value), _blocks(value)
    if isinstance(value, list) and value and all(isinstance(x, (str, list)) for x in value):
        raise WireError(f"`{what}` holds a batch of {len(value)} prompts; the emulator serves one prompt per request")
    raise WireError(f"`{what}` must be a non-empty string or list of token ids")


def _bootstrap(body: dict[str, Any], req: ClientRequest) -> ClientRequest:
    host = body.get("bootstrap_host")
    if host is not None and not isinstance(host, str):
        raise WireError(f"`bootstrap_host` must be a string, got {host!r}")
    req.bootstrap_host = host
    req.bootstrap_port = _int(body, "bootstrap_port", None)
    req.bootstrap_room = _int(body, "bootstrap_room", None)
    return req


def _rid(body: dict[str, Any]) -> str:
    rid = body.get("rid")
    if rid is None:
        return uuid.uuid4().hex
    if not isinstance(rid, str) or not rid:
        raise WireError(f"`rid` must be a non-empty string, got {rid!r}")
    return rid


def _usage_options(body: dict[str, Any]) -> tuple[bool, bool]:
    opts = body.get("stream_options")
    if opts is None:
        return False, False
    if not isinstance(opts, dict):
        raise WireError(f"`stream_options` must be an object, got {opts!r}")
    return _bool(opts, "include_usage"), _bool(opts, "continuous_usage_stats")


def _structured(body: dict[str, Any]) -> bool:
    fmt = body.get("response_format")
    return bool(body.get("regex") or body.get("json_schema") or body.get("ebnf")
                or (isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema")))


def parse_generate(body: Any) -> ClientRequest:
    """The body of SGLang's native `POST /generate`."""
    body = _obj(body)
    if "text" in body and body["text"] is not None:
        tokens, blocks = _prompt(body["text"], "text")
    elif "input_ids" in body and body["input_ids"] is not None:
        tokens, blocks = _prompt(body["input_ids"], "input_ids")
    else:
        raise WireError("either `text` or `input_ids` should be provided")
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise WireError(f"`sampling_params` must be an object, got {params!r}")
    req = ClientRequest(
        endpoint="/generate", prompt_tokens=tokens, blocks=blocks,
        max_new_tokens=_int(params, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS),
        ignore_eos=_bool(params, "ignore_eos"), stream=_bool(body, "stream"), rid=_rid(body),
        log_metrics=_bool(body, "log_metrics", True),
        structured=bool(params.get("regex") or params.get("json_schema") or params.get("ebnf")))
    return _bootstrap(body, req)


def parse_completions(body: Any) -> ClientRequest:
    body = _obj(body)
    if body.get("prompt") is None:
        raise WireError("`prompt` is required")
    tokens, blocks = _prompt(body["prompt"], "prompt")
    include, continuous = _usage_options(body)
    req = ClientRequest(
        endpoint="/v1/completions", prompt_tokens=tokens, blocks=blocks,
        max_new_tokens=_int(body, "max_tokens", DEFAULT_COMPLETION_MAX_TOKENS),
        ignore_eos=_bool(body, "ignore_eos"), stream=_bool(body, "stream"), rid=_rid(body),
        include_usage=include, continuous_usage=continuous, model=_model(body), structured=_structured(body))
    return _bootstrap(body, req)


def parse_chat(body: Any) -> ClientRequest:
    body = _obj(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError("`messages` must be a non-empty list")
    words: list[str] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise WireError(f"`messages[{i}]` must be an object with a `role`")
        content = m.get("content")
        if isinstance(content, str):
            words += content.split()
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    words += part["text"].split()
        elif content is not None:
            raise WireError(f"`messages[{i}].content` must be a string or a list of parts")
        words += [f"<|{m['role']}|>"] * CHAT_TEMPLATE_TOKENS
    include, continuous = _usage_options(body)
    limit = _int(body, "max_completion_tokens", None)
    if limit is None:
        limit = _int(body, "max_tokens", None)
    req = ClientRequest(
        endpoint="/v1/chat/completions", prompt_tokens=len(words), blocks=_blocks(words), max_new_tokens=limit,
        ignore_eos=_bool(body, "ignore_eos"), stream=_bool(body, "stream"), rid=_rid(body),
        include_usage=include, continuous_usage=continuous, model=_model(body), structured=_structured(body))
    return _bootstrap(body, req)


def _model(body: dict[str, Any]) -> str | None:
    m = body.get("model")
    return m if isinstance(m, str) else None


PARSERS = {"/generate": parse_generate, "/v1/completions": parse_completions, "/v1/chat/completions": parse_chat}


# --- responses -------------------------------------------------------------------------------------
class _Output:
    """Output words `w1000`..`w1999` (each 5 characters, one space between): the text of the first n tokens
    is a slice, so cumulative chunks cost a copy, not a join per chunk."""

    def __init__(self) -> None:
        self.text = ""
        self.ids: list[int] = []

    def grow(self, n: int) -> None:
        size = max(n, 2 * len(self.ids), 4096)
        self.ids = [1000 + k % 1000 for k in range(size)]
        self.text = " ".join(f"w{i}" for i in self.ids)


_OUT = _Output()
_WIDTH = 6


def output_ids(n: int) -> list[int]:
    if n > len(_OUT.ids):
        _OUT.grow(n)
    return _OUT.ids[:max(n, 0)]


def output_text(n: int) -> str:
    """The text of the first `n` output tokens (cumulative, as SGLang streams it)."""
    if n <= 0:
        return ""
    if n > len(_OUT.ids):
        _OUT.grow(n)
    return _OUT.text[:_WIDTH * n - 1]


def delta_text(start: int, end: int) -> str:
    """Text of output tokens start..end-1 as a chunk appends it to the text before (leading space)."""
    if end <= start:
        return ""
    full = output_text(end)
    return full[_WIDTH * start - 1:] if start > 0 else full


def finish_reason(kind: str | None, length: int, message: str = "", status: int = 0) -> dict[str, Any] | None:
    """`length`: FINISH_LENGTH's count (the completion tokens; 0 for a PD prefill server's finish)."""
    if kind is None:
        return None
    if kind == "length":
        return {"type": "length", "length": length}
    if kind == "stop":
        return {"type": "stop", "matched": EOS_TOKEN_ID}
    out: dict[str, Any] = {"type": "abort", "message": message or "Abort in waiting queue"}
    if status:
        out["status_code"] = status
    return out


@dataclass(frozen=True)
class Progress:
    """What the server knows of one request when it sends a chunk."""

    rid: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    finish: str | None = None  # stop | length | abort
    abort_message: str = ""
    abort_status: int = 0
    timing: dict[str, float] = field(default_factory=dict)  # meta_info latencies and timestamps at finish
    spec: dict[str, float] = field(default_factory=dict)
    finish_length: int | None = None  # FINISH_LENGTH's count when not the completion tokens (PD prefill: 0)

    def meta_info(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": self.rid,
            "finish_reason": finish_reason(
                self.finish, self.completion_tokens if self.finish_length is None else self.finish_length,
                self.abort_message, self.abort_status),
            "prompt_tokens": self.prompt_tokens,
            "weight_version": WEIGHT_VERSION,
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
        }
        meta.update(self.timing)
        meta.update(self.spec)
        return meta


def native_chunk(p: Progress) -> dict[str, Any]:
    return {"text": output_text(p.completion_tokens), "output_ids": output_ids(p.completion_tokens),
            "meta_info": p.meta_info()}


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def usage(p: Progress) -> dict[str, Any]:
    return {"prompt_tokens": p.prompt_tokens, "total_tokens": p.prompt_tokens + p.completion_tokens,
            "completion_tokens": p.completion_tokens, "prompt_tokens_details": None, "reasoning_tokens": 0,
            "completion_tokens_details": None}


def _matched(p: Progress) -> int | None:
    return EOS_TOKEN_ID if p.finish == "stop" else None


def completion_chunk(req: ClientRequest, p: Progress, sent: int, model: str) -> dict[str, Any]:
    choice = {"index": 0, "text": delta_text(sent, p.completion_tokens), "logprobs": None,
              "finish_reason": p.finish, "matched_stop": _matched(p)}
    chunk: dict[str, Any] = {"id": p.rid, "object": "text_completion", "created": req.created_wall,
                             "model": model, "choices": [choice], "usage": None}
    if req.continuous_usage:
        chunk["usage"] = usage(p)
    return chunk


def completion_usage_chunk(req: ClientRequest, p: Progress, model: str) -> dict[str, Any]:
    u = {k: v for k, v in usage(p).items() if v is not None}  # model_dump_json(exclude_none=True)
    return {"id": p.rid, "object": "text_completion", "created": req.created_wall, "model": model, "choices": [],
            "usage": u}


def completion_response(req: ClientRequest, p: Progress, model: str) -> dict[str, Any]:
    choice = {"index": 0, "text": output_text(p.completion_tokens), "logprobs": None, "finish_reason": p.finish,
              "matched_stop": _matched(p)}
    return {"id": p.rid, "object": "text_completion", "created": req.created_wall, "model": model,
            "choices": [choice], "usage": usage(p), "metadata": {"weight_version": WEIGHT_VERSION}}


def chat_chunk(req: ClientRequest, p: Progress, model: str, *, role: bool = False, content: str | None = None,
               finish: str | None = None) -> dict[str, Any]:
    """One `chat.completion.chunk` as SGLang's `build_sse_content` writes it (msgspec, defaults omitted)."""
    delta: dict[str, Any] = {"reasoning_content": None}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
              "matched_stop": EOS_TOKEN_ID if finish == "stop" else None}
    chunk: dict[str, Any] = {"id": p.rid, "object": "chat.completion.chunk", "created": req.created_wall,
                             "model": model, "choices": [choice]}
    if req.continuous_usage and content:
        chunk["usage"] = usage(p)
    return chunk


def chat_usage_chunk(req: ClientRequest, p: Progress, model: str) -> dict[str, Any]:
    return {"id": p.rid, "object": "chat.completion.chunk", "created": req.created_wall, "model": model,
            "choices": [], "usage": usage(p)}


def chat_response(req: ClientRequest, p: Progress, model: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": output_text(p.completion_tokens), "reasoning_content": None}
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": p.finish,
              "matched_stop": _matched(p)}
    return {"id": p.rid, "object": "chat.completion", "created": req.created_wall, "model": model,
            "choices": [choice], "usage": usage(p), "metadata": {"weight_version": WEIGHT_VERSION}}


def openai_error(message: str, status: int = 400, kind: str = "BadRequestError") -> dict[str, Any]:
    """SGLang's OpenAI ErrorResponse."""
    return {"object": "error", "message": message, "type": kind, "param": None, "code": status}


def native_error(message: str, status: int = 400) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": status, "retryable": False}}
