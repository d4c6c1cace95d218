"""Chat with an LLM for the kissing-number discovery loops: a live client and a scripted replayer.

`ChatClient` speaks the OpenAI chat-completions protocol with one plain HTTP POST to
`{base_url}/chat/completions` (httpx), so the same code drives a local `vllm serve Qwen/Qwen3-32B`
(the course's set-up) or any hosted provider. It retries 429, 5xx, timeouts and dropped
connections with exponential backoff (honouring `Retry-After`), fails fast with the server's own
message on other 4xx, and keeps token and cost accounting (`usage` from each response; cost from
optional per-1M-token prices).

`ScriptedResponder` has the same `chat(messages) -> ChatReply` interface and replays recorded
replies from a JSON file, so CI (which reaches no LLM) drives the very same loops.

Settings come from arguments, else the environment: `HW3_LLM_BASE_URL`, `HW3_LLM_MODEL`,
`HW3_LLM_API_KEY`, `HW3_LLM_PRICE_PROMPT` / `HW3_LLM_PRICE_COMPLETION` (USD per 1M tokens), each
falling back to the `OPENAI_*` name.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

import httpx

from hw3lib.kissing.messages import valid_unicode

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
"""HTTP statuses worth another try: timeouts, rate limits, overloaded or restarting servers."""


class LLMError(RuntimeError):
    """The LLM could not be reached or answered badly; the message says what to check."""


@dataclass(frozen=True)
class ChatReply:
    """One assistant reply with what it cost."""

    content: str
    """The assistant's text (Qwen3's <think> block included when the server does not split it)."""
    reasoning: str = ""
    """Thinking text when the server returns it separately (vLLM `--reasoning-parser qwen3`)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    """Wall time of the successful request (retries and backoff excluded)."""
    model: str = ""
    finish_reason: str | None = None
    """`stop`, or `length` when the reply hit max_tokens (and its code may be cut off)."""
    attempts: int = 1
    """HTTP attempts it took (1 = no retry)."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Usage:
    """Running totals over every reply a responder produced."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    retries: int = 0

    def add(self, reply: ChatReply) -> None:
        self.calls += 1
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens
        self.cost_usd += reply.cost_usd
        self.retries += reply.attempts - 1

    def to_dict(self) -> dict:
        return asdict(self)


class Responder(Protocol):
    """Anything the loops can talk to: a live `ChatClient` or a `ScriptedResponder`."""

    model: str
    usage: Usage

    def chat(self, messages: list[dict], **overrides: Any) -> ChatReply: ...


def _env(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


def _env_float(*names: str) -> float | None:
    value = _env(*names)
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        raise LLMError(f"${names[0]} (or ${names[-1]}) = {value!r} is not a number of USD per 1M tokens") from None


def cost_usd(prompt_tokens: int, completion_tokens: int, price_prompt_per_1m: float | None,
             price_completion_per_1m: float | None) -> float:
    """Dollar cost of one request from per-1M-token prices (0 when no price is set, e.g. a local vLLM)."""
    return (prompt_tokens * (price_prompt_per_1m or 0.0)
            + completion_tokens * (price_completion_per_1m or 0.0)) / 1_000_000


class ChatClient:
    """OpenAI-compatible chat client with retries, timeouts and token/cost accounting."""

    kind = "live"
    """What a run's log records as its `source`: a real model answered (see `responder_source`)."""

    def __init__(self, base_url: str | None = None, model: str | None = None, api_key: str | None = None, *,
                 temperature: float = 0.6, top_p: float | None = 0.95, max_tokens: int | None = 8192,
                 timeout_s: float = 600.0, max_retries: int = 4, backoff_s: float = 2.0,
                 max_backoff_s: float = 60.0, price_prompt_per_1m: float | None = None,
                 price_completion_per_1m: float | None = None, extra_body: dict | None = None,
                 transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        # Qwen3's recommended thinking-mode sampling is temperature 0.6, top_p 0.95 (its model card).
        base_url = base_url or _env("HW3_LLM_BASE_URL", "OPENAI_BASE_URL")
        if not base_url:
            raise LLMError("no LLM endpoint: pass base_url or set HW3_LLM_BASE_URL "
                           "(e.g. http://localhost:8000/v1 for `vllm serve Qwen/Qwen3-32B`)")
        if max_retries < 0 or timeout_s <= 0:
            raise LLMError(f"max_retries must be >= 0 and timeout_s > 0 (got {max_retries}, {timeout_s})")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key or _env("HW3_LLM_API_KEY", "OPENAI_API_KEY") or "EMPTY"
        self.temperature, self.top_p, self.max_tokens = temperature, top_p, max_tokens
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.price_prompt_per_1m = (price_prompt_per_1m if price_prompt_per_1m is not None
                                    else _env_float("HW3_LLM_PRICE_PROMPT", "OPENAI_PRICE_PROMPT"))
        self.price_completion_per_1m = (price_completion_per_1m if price_completion_per_1m is not None
                                        else _env_float("HW3_LLM_PRICE_COMPLETION", "OPENAI_PRICE_COMPLETION"))
        self.extra_body = dict(extra_body or {})
        self._sleep = sleep
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)), transport=transport,
            headers={"Authorization": f"Bearer {self.api_key}", "Content-Type": "application/json"})
        self.usage = Usage()
        self._lock = threading.Lock()
        self.model = model or _env("HW3_LLM_MODEL", "OPENAI_MODEL") or self._served_model()

    def __enter__(self) -> "ChatClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _served_model(self) -> str:
        """The first model the server lists (a `vllm serve` endpoint serves exactly one)."""
        data = self._request("GET", "/models", None)[0]
        models = data.get("data") if isinstance(data, dict) else None
        if not models or not isinstance(models[0], dict) or "id" not in models[0]:
            raise LLMError(f"{self.base_url}/models lists no model: pass model or set HW3_LLM_MODEL")
        return str(models[0]["id"])

    def _backoff(self, attempt: int, response: httpx.Response | None) -> float:
        delay = min(self.max_backoff_s, self.backoff_s * 2 ** attempt)
        retry_after = response.headers.get("retry-after") if response is not None else None
        if retry_after:
            try:
                delay = min(self.max_backoff_s, max(delay, float(retry_after)))
            except ValueError:
                pass  # an HTTP-date Retry-After: keep our own schedule
        return delay

    def _request(self, method: str, path: str, payload: dict | None) -> tuple[dict, int, float]:
        """(JSON body, attempts, latency of the successful attempt) after retries."""
        url = f"{self.base_url}{path}"
        last_error = ""
        for attempt in range(self.max_retries + 1):
            response = None
            start = time.perf_counter()
            try:
                response = self._http.request(method, url, json=payload)
            except httpx.TimeoutException:
                last_error = f"timed out after {self.timeout_s:g} s"
            except httpx.TransportError as exc:
                last_error = f"connection failed ({type(exc).__name__}: {exc})"
            else:
                latency = time.perf_counter() - start
                if response.status_code < 400:
                    try:
                        return response.json(), attempt + 1, latency
                    except json.JSONDecodeError:
                        raise LLMError(f"{method} {url} answered {response.status_code} with a body that is "
                                       f"not JSON: {response.text[:300]!r}") from None
                last_error = f"HTTP {response.status_code}: {response.text[:500]}"
                if response.status_code not in RETRYABLE_STATUS:
                    raise LLMError(f"{method} {url} failed with {last_error} (not retried: fix the request, "
                                   "model name or API key)")
            if attempt < self.max_retries:
                self._sleep(self._backoff(attempt, response))
        raise LLMError(f"{method} {url} failed after {self.max_retries + 1} attempts; last error: {last_error}. "
                       "Is the server up (vllm serve ...) and HW3_LLM_BASE_URL right?")

    def chat(self, messages: list[dict], *, temperature: float | None = None, max_tokens: int | None = None,
             seed: int | None = None) -> ChatReply:
        """Send `messages` ([{role, content}]) and return the first choice with its usage and cost."""
        # Text that reached the conversation from a program may hold lone surrogates: valid UTF-8 or no request.
        messages = [{**m, "content": valid_unicode(m["content"])} if isinstance(m.get("content"), str) else m
                    for m in messages]
        payload: dict[str, Any] = {"model": self.model, "messages": messages,
                                   "temperature": self.temperature if temperature is None else temperature}
        if self.top_p is not None:
            payload["top_p"] = self.top_p
        if (max_tokens or self.max_tokens) is not None:
            payload["max_tokens"] = max_tokens or self.max_tokens
        if seed is not None:
            payload["seed"] = seed
        payload.update(self.extra_body)
        data, attempts, latency = self._request("POST", "/chat/completions", payload)
        reply = parse_chat_response(data, attempts=attempts, latency_s=latency,
                                    price_prompt_per_1m=self.price_prompt_per_1m,
                                    price_completion_per_1m=self.price_completion_per_1m,
                                    source=f"{self.base_url}/chat/completions")
        with self._lock:  # best-of-N may call chat from several threads
            self.usage.add(reply)
        return reply


def parse_chat_response(data: Any, *, attempts: int = 1, latency_s: float = 0.0,
                        price_prompt_per_1m: float | None = None, price_completion_per_1m: float | None = None,
                        source: str = "response") -> ChatReply:
    """Turn an OpenAI-format chat-completion body into a ChatReply (LLMError naming what is missing)."""
    try:
        choice = data["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise LLMError(f"{source}: not a chat completion (no choices[0].message): {str(data)[:300]}") from None
    usage = data.get("usage") or {}
    prompt_tokens = int(usage.get("prompt_tokens") or 0)
    completion_tokens = int(usage.get("completion_tokens") or 0)
    return ChatReply(
        content=message.get("content") or "",
        reasoning=message.get("reasoning_content") or message.get("reasoning") or "",
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
        cost_usd=cost_usd(prompt_tokens, completion_tokens, price_prompt_per_1m, price_completion_per_1m),
        latency_s=latency_s, model=str(data.get("model") or ""), finish_reason=choice.get("finish_reason"),
        attempts=attempts)


class ScriptedResponder:
    """Replays recorded replies in order, with the same `chat` interface as `ChatClient`.

    The replay file is JSON: `{"model": ..., "responses": [{"content": ..., "usage": {"prompt_tokens": ..,
    "completion_tokens": ..}, "reasoning"?, "finish_reason"?, "latency_s"?}, ...]}` (a bare list of such
    entries, or of strings, works too). Every request is kept in `requests` so tests can check exactly
    what the loop sent.

    Its replies are recorded, not generated: a run driven by it is logged with `source: "replay"`
    and is a test of the plumbing, never a result (`hw3lib.kissing.deliverables` refuses to store it).
    """

    kind = "replay"

    def __init__(self, replay: str | os.PathLike | list | dict, *, price_prompt_per_1m: float | None = None,
                 price_completion_per_1m: float | None = None):
        self.source = str(replay) if isinstance(replay, (str, os.PathLike)) else "<in-memory replay>"
        data = _load_replay(replay) if isinstance(replay, (str, os.PathLike)) else replay
        entries = data.get("responses") if isinstance(data, dict) else data
        if not isinstance(entries, list) or not entries:
            raise LLMError(f"{self.source}: expected a non-empty list under 'responses'")
        self.model = str(data.get("model", "scripted")) if isinstance(data, dict) else "scripted"
        self.replies = [self._entry_to_reply(i, entry, price_prompt_per_1m, price_completion_per_1m)
                        for i, entry in enumerate(entries)]
        self.requests: list[list[dict]] = []
        self.usage = Usage()
        self._lock = threading.Lock()

    def _entry_to_reply(self, index: int, entry: Any, price_prompt: float | None,
                        price_completion: float | None) -> ChatReply:
        if isinstance(entry, str):
            entry = {"content": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            raise LLMError(f"{self.source}: responses[{index}] needs a string 'content'")
        usage = entry.get("usage") or {}
        prompt_tokens = int(usage.get("prompt_tokens", 0))
        completion_tokens = int(usage.get("completion_tokens", 0))
        return ChatReply(content=entry["content"], reasoning=entry.get("reasoning", ""),
                         prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                         cost_usd=cost_usd(prompt_tokens, completion_tokens, price_prompt, price_completion),
                         latency_s=float(entry.get("latency_s", 0.0)), model=self.model,
                         finish_reason=entry.get("finish_reason", "stop"))

    @classmethod
    def from_conversation_log(cls, path: str | os.PathLike) -> "ScriptedResponder":
        """Replay the replies of an earlier (e.g. live) run from its conversation_log.json."""
        log = _load_replay(path)
        try:
            replies = [step["reply"] for step in log["steps"]]
        except (KeyError, TypeError):
            raise LLMError(f"{path}: not a conversation_log.json (no steps[].reply)") from None
        entries = [{"content": r["content"], "reasoning": r.get("reasoning", ""), "finish_reason": r.get("finish_reason"),
                    "latency_s": r.get("latency_s", 0.0),
                    "usage": {"prompt_tokens": r.get("prompt_tokens", 0),
                              "completion_tokens": r.get("completion_tokens", 0)}} for r in replies]
        responder = cls({"model": log.get("model", "scripted"), "responses": entries})
        responder.source = str(path)
        return responder

    @property
    def remaining(self) -> int:
        return len(self.replies) - len(self.requests)

    def chat(self, messages: list[dict], **overrides: Any) -> ChatReply:
        with self._lock:
            index = len(self.requests)
            if index >= len(self.replies):
                raise LLMError(f"{self.source}: the replay has {len(self.replies)} responses but the loop asked "
                               f"for response {index + 1}; run fewer iterations or record more responses")
            self.requests.append([dict(m) for m in messages])
            reply = self.replies[index]
            self.usage.add(reply)
        return reply


def _load_replay(path: str | os.PathLike) -> Any:
    path = Path(path)
    if not path.is_file():
        raise LLMError(f"{path}: replay file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LLMError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None


def make_responder(replay: str | os.PathLike | None = None, **client_kwargs: Any) -> Responder:
    """A ScriptedResponder for `replay`, else a live ChatClient configured from arguments/environment."""
    if replay is not None:
        return ScriptedResponder(replay)
    return ChatClient(**client_kwargs)


def responder_source(responder: Any) -> str:
    """`live` (a `ChatClient`), `replay` (a `ScriptedResponder`) or `unknown` (anything else, e.g. a test double)."""
    kind = getattr(responder, "kind", None)
    return kind if kind in ("live", "replay") else "unknown"


def llm_configured() -> bool:
    """True when $HW3_LLM_BASE_URL names an endpoint (notebooks go live only then, else they replay)."""
    return bool(os.environ.get("HW3_LLM_BASE_URL"))
