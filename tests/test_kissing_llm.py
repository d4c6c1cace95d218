"""The LLM client against a tiny local OpenAI-format server, code extraction, the discovery loops
driven by the scripted replay fixture, the report generated from their logs, and the CLI."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hw3lib.kissing.llm import ChatClient, LLMError, ScriptedResponder, cost_usd, parse_chat_response

FIXTURE = Path(__file__).parent / "fixtures" / "kissing_replay.json"


# ---------------------------------------------------------------------------------------------
# A canned OpenAI-compatible server on 127.0.0.1


def completion(content: str, prompt_tokens: int = 11, completion_tokens: int = 7, **message) -> dict:
    return {"id": "chatcmpl-test", "object": "chat.completion", "model": "Qwen/Qwen3-32B",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content, **message}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


class CannedServer:
    """Answers each request with the next scripted action: (status, body[, headers]) or ("sleep", s).

    Records every request (method, path, headers, JSON body) for the assertions.
    """

    def __init__(self, actions: list):
        self.actions = list(actions)
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                return

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                server.requests.append({"method": self.command, "path": self.path,
                                        "auth": self.headers.get("Authorization"), "body": body})
                action = server.actions.pop(0) if server.actions else (500, {"error": "script exhausted"})
                if action[0] == "sleep":
                    time.sleep(action[1])  # longer than the client's timeout: it gives up first
                    action = (200, completion("too late"))
                status, payload, *headers = action
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    for key, value in (headers[0] if headers else {}).items():
                        self.send_header(key, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and hung up

            do_GET = do_POST = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def make_client(url: str, sleeps: list, **kwargs) -> ChatClient:
    kwargs.setdefault("model", "Qwen/Qwen3-32B")
    return ChatClient(url, api_key="sk-test", sleep=sleeps.append, **kwargs)


MESSAGES = [{"role": "user", "content": "Give me 11-dimensional points."}]


def test_chat_posts_openai_request_and_accounts_tokens_and_cost():
    with CannedServer([(200, completion("hello", 1000, 500, reasoning_content="hmm"))]) as server:
        sleeps: list = []
        with make_client(server.url, sleeps, price_prompt_per_1m=2.0, price_completion_per_1m=6.0,
                         temperature=0.6, max_tokens=128) as client:
            reply = client.chat(MESSAGES)
    request = server.requests[0]
    assert (request["method"], request["path"], request["auth"]) == ("POST", "/v1/chat/completions", "Bearer sk-test")
    assert request["body"]["model"] == "Qwen/Qwen3-32B"
    assert request["body"]["messages"] == MESSAGES
    assert (request["body"]["temperature"], request["body"]["max_tokens"]) == (0.6, 128)
    assert (reply.content, reply.reasoning, reply.finish_reason) == ("hello", "hmm", "stop")
    assert (reply.prompt_tokens, reply.completion_tokens, reply.total_tokens, reply.attempts) == (1000, 500, 1500, 1)
    # 1000 * $2/1M + 500 * $6/1M = 0.002 + 0.003
    assert reply.cost_usd == pytest.approx(0.005)
    assert (client.usage.calls, client.usage.prompt_tokens, client.usage.cost_usd) == (1, 1000, pytest.approx(0.005))
    assert sleeps == []


def test_chat_retries_500_then_succeeds_with_exponential_backoff():
    actions = [(500, {"error": "engine restarting"}), (429, {"error": "slow down"}), (200, completion("ok"))]
    with CannedServer(actions) as server:
        sleeps: list = []
        client = make_client(server.url, sleeps, backoff_s=0.5, max_retries=3)
        reply = client.chat(MESSAGES)
    assert reply.content == "ok" and reply.attempts == 3
    assert len(server.requests) == 3
    assert sleeps == [0.5, 1.0]  # backoff_s * 2**attempt
    assert client.usage.retries == 2


def test_retry_after_header_lengthens_the_backoff():
    with CannedServer([(429, {"error": "rate"}, {"Retry-After": "3"}), (200, completion("ok"))]) as server:
        sleeps: list = []
        make_client(server.url, sleeps, backoff_s=0.5).chat(MESSAGES)
    assert sleeps == [3.0]


def test_timeout_is_retried_then_succeeds():
    with CannedServer([("sleep", 1.5), (200, completion("after timeout"))]) as server:
        sleeps: list = []
        client = make_client(server.url, sleeps, timeout_s=0.3, backoff_s=0.0)
        reply = client.chat(MESSAGES)
    assert reply.content == "after timeout" and reply.attempts == 2
    assert len(server.requests) == 2


def test_gives_up_after_max_retries_with_the_last_error():
    with CannedServer([(503, {"error": "overloaded"})] * 3) as server:
        sleeps: list = []
        client = make_client(server.url, sleeps, max_retries=2, backoff_s=0.1)
        with pytest.raises(LLMError, match=r"after 3 attempts.*HTTP 503.*overloaded"):
            client.chat(MESSAGES)
    assert len(server.requests) == 3 and sleeps == [0.1, 0.2]


def test_client_errors_are_not_retried_and_show_the_server_message():
    with CannedServer([(400, {"error": "maximum context length is 40960 tokens"})]) as server:
        client = make_client(server.url, [])
        with pytest.raises(LLMError, match="HTTP 400.*maximum context length"):
            client.chat(MESSAGES)
    assert len(server.requests) == 1


def test_unreachable_server_fails_with_a_hint():
    client = ChatClient("http://127.0.0.1:9/v1", model="m", max_retries=1, sleep=lambda s: None, timeout_s=2)
    with pytest.raises(LLMError, match="connection failed.*HW3_LLM_BASE_URL"):
        client.chat(MESSAGES)


def test_settings_come_from_the_environment_and_model_from_the_server(monkeypatch):
    with CannedServer([(200, {"object": "list", "data": [{"id": "Qwen/Qwen3-32B"}]}),
                       (200, completion("hi"))]) as server:
        monkeypatch.setenv("HW3_LLM_BASE_URL", server.url + "/")
        monkeypatch.delenv("HW3_LLM_MODEL", raising=False)
        monkeypatch.delenv("OPENAI_MODEL", raising=False)
        monkeypatch.delenv("HW3_LLM_API_KEY", raising=False)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-from-openai-env")
        monkeypatch.setenv("HW3_LLM_PRICE_COMPLETION", "10")
        client = ChatClient()
        reply = client.chat(MESSAGES)
    assert client.model == "Qwen/Qwen3-32B"
    assert server.requests[0]["path"] == "/v1/models"
    assert server.requests[1]["auth"] == "Bearer sk-from-openai-env"
    assert reply.cost_usd == pytest.approx(7 * 10 / 1e6)


def test_missing_endpoint_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("HW3_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(LLMError, match="HW3_LLM_BASE_URL"):
        ChatClient(model="m")


def test_parse_chat_response_rejects_non_completions_and_tolerates_null_content():
    with pytest.raises(LLMError, match="no choices"):
        parse_chat_response({"error": "x"})
    reply = parse_chat_response({"choices": [{"message": {"content": None, "reasoning": "only thinking"},
                                              "finish_reason": "length"}]})
    assert (reply.content, reply.reasoning, reply.finish_reason, reply.total_tokens) == ("", "only thinking", "length", 0)


def test_cost_is_zero_without_prices():
    assert cost_usd(10**6, 10**6, None, None) == 0.0
    assert cost_usd(2 * 10**6, 10**6, 0.5, 1.5) == pytest.approx(2.5)


# ---------------------------------------------------------------------------------------------
# Scripted responder


def test_scripted_responder_replays_in_order_records_requests_and_stops_clearly(tmp_path):
    path = tmp_path / "replay.json"
    path.write_text(json.dumps({"model": "rec", "responses": [
        {"content": "a", "usage": {"prompt_tokens": 3, "completion_tokens": 4}}, "b"]}))
    responder = ScriptedResponder(path)
    assert responder.chat(MESSAGES).content == "a"
    assert responder.chat(MESSAGES + [{"role": "user", "content": "more"}]).content == "b"
    assert responder.requests[1][-1]["content"] == "more"
    assert (responder.usage.calls, responder.usage.prompt_tokens, responder.usage.completion_tokens) == (2, 3, 4)
    with pytest.raises(LLMError, match="has 2 responses but the loop asked for response 3"):
        responder.chat(MESSAGES)


def test_scripted_responder_reports_bad_files(tmp_path):
    with pytest.raises(LLMError, match="not found"):
        ScriptedResponder(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"responses": [\n  {"content": 1}\n]}')
    with pytest.raises(LLMError, match=r"responses\[0\] needs a string 'content'"):
        ScriptedResponder(bad)
    broken = tmp_path / "broken.json"
    broken.write_text('{"responses": [\n  oops\n]}')
    with pytest.raises(LLMError, match=r"broken.json:2: not valid JSON"):
        ScriptedResponder(broken)
