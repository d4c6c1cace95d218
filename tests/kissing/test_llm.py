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

FIXTURE = Path(__file__).parents[1] / "fixtures" / "kissing_replay.json"


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


# ---------------------------------------------------------------------------------------------
# Code extraction


def test_extract_takes_the_last_program_fence_and_ignores_thinking():
    from hw3lib.kissing.loops import extract_python_code

    reply = ("<think>\n```python\ndef run_code():\n    return draft\n```\n</think>\n"
             "Helper:\n```python\nimport numpy as np\n```\nFirst try:\n```python\ndef run_code():\n    return 1\n```\n"
             "Final:\n```py\ndef run_code():\n    return 2\n```\nDone.")
    extraction = extract_python_code(reply)
    assert extraction.code == "def run_code():\n    return 2\n" and extraction.error is None
    assert extraction.num_blocks == 3


def test_extract_falls_back_to_the_longest_and_to_unlabelled_fences():
    from hw3lib.kissing.loops import extract_python_code

    assert extract_python_code("```python\nx = 1\n```\n```python\ny = [1, 2, 3]\n```").code == "y = [1, 2, 3]\n"
    assert extract_python_code("```\npoints = [[1]]\n```").code == "points = [[1]]\n"
    # a labelled fence wins over an unlabelled one
    assert extract_python_code("```\npoints = 0\n```\n```python\nz = 2\n```").code == "z = 2\n"


def test_extract_explains_missing_or_truncated_code():
    from hw3lib.kissing.loops import extract_python_code

    none = extract_python_code("<think>```python\ndef run_code(): pass\n```</think>I think D11 works.")
    assert none.code is None and "could not find a ```python code block" in none.error
    cut = extract_python_code("Here it is:\n```python\ndef run_code():\n    return [")
    assert cut.code is None and "cut off" in cut.error
    unclosed_think = extract_python_code("<think>\nstill thinking ```python\nx=1\n```")
    assert unclosed_think.code is None


def test_prompts_file_has_every_section_and_fills():
    from hw3lib.kissing.loops import load_prompts, task_prompt

    prompts = load_prompts()
    assert {"system", "task", "hybrid_task", "feedback_valid", "feedback_invalid", "feedback_no_code",
            "feedback_hybrid", "best_program", "starter"} <= set(prompts)
    text = task_prompt(prompts, dimension=11, timeout_s=30, hybrid=True, polish_seconds=2.5)
    assert "Z^11" in text and "within 30 seconds" in text and "spends 2.5 seconds" in text
    assert "def run_code():" in text and "$" not in text.replace("$dimension", "")


# ---------------------------------------------------------------------------------------------
# Loops driven by the scripted replay (CI reaches no LLM)

EXPECTED_STATUS = ["valid", "exception", "invalid", "valid", "valid"]
EXPECTED_SCORES = [22.0, 0.0, 0.0, 220.0, 438.0]


def _read_log(run_dir: Path) -> dict:
    return json.loads((run_dir / "conversation_log.json").read_text())


@pytest.fixture(scope="module")
def agentic_run(tmp_path_factory):
    from hw3lib.kissing.loops import agentic_refinement

    run_dir = tmp_path_factory.mktemp("agentic")
    responder = ScriptedResponder(FIXTURE)
    result = agentic_refinement(responder, run_dir, iterations=5, timeout_s=30, history_turns=2)
    return result, responder, run_dir


def test_agentic_scores_and_files(agentic_run):
    from hw3lib.core.io import read_jsonl

    result, responder, run_dir = agentic_run
    assert result.scores == EXPECTED_SCORES
    assert result.best_scores == [22.0, 22.0, 22.0, 220.0, 438.0]
    assert (result.best_score, result.best_iteration) == (438.0, 5)
    assert sorted(p.name for p in (run_dir / "candidates").glob("*.py")) == [f"iter_{i:03d}.py" for i in range(1, 6)]
    # the points of each valid candidate are kept for the hybrid loop (iterations 1, 4, 5 are valid)
    assert sorted(p.name for p in (run_dir / "candidates").glob("*_points.json")) == [
        "iter_001_points.json", "iter_004_points.json", "iter_005_points.json"]
    rows = read_jsonl(run_dir / "evaluations.jsonl")
    assert [r["status"] for r in rows] == EXPECTED_STATUS
    assert [r["num_points"] for r in rows] == [22, 0, 242, 220, 438]
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4, 5]
    assert (run_dir / "best_program.py").read_text() == (run_dir / "candidates" / "iter_005.py").read_text()
    assert responder.remaining == 0


def test_agentic_feedback_carries_the_exact_evaluator_messages(agentic_run):
    _, responder, run_dir = agentic_run
    log = _read_log(run_dir)
    steps = log["steps"]
    # What the model saw before reply i+1 is the feedback on reply i, verbatim from the evaluator.
    for i, step in enumerate(steps[:-1]):
        sent_next = responder.requests[i + 1]
        assert sent_next[-1] == {"role": "user", "content": step["feedback"]}
        assert step["evaluation"]["message"] in step["feedback"]
    assert "NameError: name 'combinations' is not defined" in steps[1]["feedback"]
    assert "min squared distance 2 (points 0 and 22) < max squared norm 4" in steps[2]["feedback"]
    assert "VALID, score 220" in steps[3]["feedback"] and "MORE points" in steps[3]["feedback"]
    assert steps[-1]["feedback"] is None  # nothing is sent after the last iteration
    # history_turns=2: request 4 carries system, task and the exchanges of iterations 2 and 3 only,
    # so the best program (iteration 1) is quoted in the feedback on iteration 3.
    assert [m["role"] for m in responder.requests[3]] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "Your best program so far" in steps[2]["feedback"] and "v[i] = 2 * sign" in steps[2]["feedback"]
    assert "Your best program so far" not in steps[1]["feedback"]
    # replies go back without their <think> block
    assert all("<think>" not in m["content"] for request in responder.requests for m in request)


def test_agentic_log_holds_every_message_reply_usage_and_evaluation(agentic_run):
    _, responder, run_dir = agentic_run
    log = _read_log(run_dir)
    fixture = json.loads(FIXTURE.read_text())["responses"]
    roles = [m["role"] for m in log["messages"]]
    assert roles == ["system", "user"] + ["assistant", "user"] * 4 + ["assistant"]
    assert [m["index"] for m in log["messages"]] == list(range(len(roles)))
    for step, recorded, request in zip(log["steps"], fixture, responder.requests):
        assert step["reply"]["content"] == recorded["content"]  # full reply, thinking included
        assert step["reply"]["prompt_tokens"] == recorded["usage"]["prompt_tokens"]
        assert [log["messages"][i]["content"] for i in step["sent"]] == [m["content"] for m in request]
        assert set(step["evaluation"]) >= {"num_points", "dimension", "validity", "eval_time", "combined_score",
                                           "message"}
    assert log["usage"]["calls"] == 5
    assert log["usage"]["prompt_tokens"] == sum(r["usage"]["prompt_tokens"] for r in fixture)
    assert log["usage"]["completion_tokens"] == sum(r["usage"]["completion_tokens"] for r in fixture)
    assert log["best"] == {"score": 438.0, "iteration": 5, "candidate": "candidates/iter_005.py"}
    assert log["finished"] is not None


def test_agentic_report_is_computed_from_the_log(agentic_run):
    from hw3lib.kissing.report import jumps

    _, _, run_dir = agentic_run
    report = (run_dir / "report.md").read_text()
    log = _read_log(run_dir)
    assert [(j["iteration"], j["gain"]) for j in jumps(log)] == [(1, 22.0), (4, 198.0), (5, 218.0)]
    assert "## Final score\n\n**438**" in report
    assert "| 4 | valid | 220 | 220 | 220 |" in report and "| 2 | exception | 0 | 0 | 22 |" in report
    assert "The largest jump (+218, from 220 to 438) came at iteration 5 after the feedback on iteration 4" in report
    assert "Of 5 iterations, 3 produced a valid program; 1 ended in an exception, 1 ended in an invalid set" in report
    assert "The first valid set came at iteration 1 (22 points)." in report
    assert "144 short of the classical bound 582" in report
    assert "After feedback on a failed program, the next program was valid 1 of 2 time(s)." in report
    assert "### Iteration 4: 22 -> 220 (+198)" in report
    png = run_dir / "score_vs_iteration.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "(score_vs_iteration.png)" in report


def test_report_follows_the_log_not_fixed_numbers(agentic_run, tmp_path):
    """Edit the logged scores: the regenerated report must follow."""
    import shutil

    from hw3lib.kissing.report import write_report

    _, _, run_dir = agentic_run
    copy = tmp_path / "edited"
    shutil.copytree(run_dir, copy)
    log = _read_log(copy)
    log["steps"][4]["score"] = log["steps"][4]["best_score"] = 300.0
    (copy / "conversation_log.json").write_text(json.dumps(log))
    report = write_report(copy).read_text()
    assert "**300**" in report and "The largest jump (+198, from 22 to 220) came at iteration 4" in report


def test_best_of_n_selects_the_best_valid_sample(tmp_path):
    from hw3lib.kissing.loops import best_of_n

    responder = ScriptedResponder(FIXTURE)
    result = best_of_n(responder, tmp_path, n=5, timeout_s=30)
    assert result.scores == EXPECTED_SCORES and (result.best_score, result.best_iteration) == (438.0, 5)
    # every sample saw exactly the same prompt: system + task
    assert all(request == responder.requests[0] for request in responder.requests)
    assert [m["role"] for m in responder.requests[0]] == ["system", "user"]
    log = _read_log(tmp_path)
    assert all(step["sent"] == [0, 1] and step["feedback"] is None for step in log["steps"])
    report = (tmp_path / "report.md").read_text()
    assert "best_of_n run" in report and "**438**" in report


def test_hybrid_polishes_valid_outputs_with_local_search(tmp_path):
    from hw3lib.kissing.loops import hybrid
    from hw3lib.kissing.verify import verify

    responder = ScriptedResponder(FIXTURE)
    result = hybrid(responder, tmp_path, 5, timeout_s=30, polish_seconds=60, polish_iterations=100, seed=3)
    log = _read_log(tmp_path)
    steps = log["steps"]
    assert [s["evaluation"]["combined_score"] for s in steps] == EXPECTED_SCORES
    assert [s["polish"]["status"] for s in steps] == ["valid", "skipped", "skipped", "valid", "valid"]
    for step in steps:
        polish = step["polish"]
        if polish["status"] != "valid":
            assert step["score"] == 0.0 and polish["points_file"] is None
            continue
        # the polished set on disk is re-verified here, independently of the loop
        saved = json.loads((tmp_path / polish["points_file"]).read_text())
        verdict = verify(saved["points"])
        assert verdict.valid and verdict.num_points == polish["num_points"] == polish["score"]
        assert polish["initial_points"] == step["evaluation"]["num_points"]
        assert polish["score"] >= step["evaluation"]["combined_score"]
        assert step["score"] == max(polish["score"], step["evaluation"]["combined_score"])
    # the 22 axis points sit in the 5302-vector shell of squared norm 4: the search must add points;
    # the 220 roots are the whole squared-norm-2 shell: nothing to add
    assert steps[0]["polish"]["score"] > 22 and steps[3]["polish"]["score"] == 220
    assert result.best_score == max(s["score"] for s in steps)
    # both numbers go back to the model
    assert "Local search on your output" in responder.requests[1][-1]["content"]
    assert f"22 -> {steps[0]['polish']['num_points']} points" in responder.requests[1][-1]["content"]
    assert json.loads((tmp_path / "best_points.json").read_text())["points"] == json.loads(
        (tmp_path / steps[result.best_iteration - 1]["polish"]["points_file"]).read_text())["points"]
    report = (tmp_path / "report.md").read_text()
    assert "| polished |" in report and "Local search added" in report


def test_best_of_n_concurrent_requests_keep_every_sample(tmp_path):
    from hw3lib.kissing.loops import best_of_n

    responder = ScriptedResponder(FIXTURE)
    result = best_of_n(responder, tmp_path, n=5, timeout_s=30, workers=3)
    # which reply lands on which sample depends on thread timing; the set of scores does not
    assert sorted(result.scores) == sorted(EXPECTED_SCORES) and result.best_score == 438.0
    assert len(responder.requests) == 5


def test_a_logged_run_replays_to_the_same_scores(agentic_run, tmp_path):
    from hw3lib.kissing.loops import agentic_refinement

    result, _, run_dir = agentic_run
    again = agentic_refinement(ScriptedResponder.from_conversation_log(run_dir / "conversation_log.json"),
                               tmp_path, iterations=5, timeout_s=30, history_turns=2)
    assert again.scores == result.scores
    assert _read_log(tmp_path)["usage"]["completion_tokens"] == _read_log(run_dir)["usage"]["completion_tokens"]


def test_run_directory_is_not_silently_overwritten(agentic_run, tmp_path):
    import shutil

    from hw3lib.kissing.loops import agentic_refinement

    _, _, run_dir = agentic_run
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    one = {"responses": ["```python\npoints = [[3] + [0] * 10]\n```"]}
    with pytest.raises(FileExistsError, match="already holds a run"):
        agentic_refinement(ScriptedResponder(one), copy, iterations=1, timeout_s=30)
    result = agentic_refinement(ScriptedResponder(one), copy, iterations=1, timeout_s=30, overwrite=True)
    assert result.scores == [1.0]
    assert sorted(p.name for p in (copy / "candidates").iterdir()) == ["iter_001.py", "iter_001_points.json"]


def test_live_client_drives_the_loop_over_http():
    """The agentic loop through a real HTTP round trip: a 500 is retried and the feedback is POSTed."""
    import tempfile

    from hw3lib.kissing.loops import agentic_refinement

    program = "```python\ndef run_code():\n    return [[2] + [0] * 10, [-2] + [0] * 10], 11\n```"
    actions = [(500, {"error": "warming up"}), (200, completion(program, 900, 60)), (200, completion("no code"))]
    with CannedServer(actions) as server, tempfile.TemporaryDirectory() as run_dir:
        client = make_client(server.url, [], backoff_s=0.0)
        result = agentic_refinement(client, run_dir, iterations=2, timeout_s=30)
        log = _read_log(Path(run_dir))
    assert result.scores == [2.0, 0.0]
    bodies = [r["body"] for r in server.requests]
    assert len(bodies) == 3 and bodies[0] == bodies[1]  # the retried request is identical
    assert "VALID, score 2" in bodies[2]["messages"][-1]["content"]
    assert log["steps"][0]["reply"]["attempts"] == 2
    assert (log["usage"]["calls"], log["usage"]["prompt_tokens"], log["usage"]["retries"]) == (2, 911, 1)


def test_no_code_reply_is_scored_zero_and_explained(tmp_path):
    from hw3lib.kissing.loops import agentic_refinement

    responder = ScriptedResponder({"responses": [
        {"content": "I would use the D11 lattice.", "finish_reason": "stop"},
        {"content": "```python\ndef run_code():\n    return [[2] + [0] * 10, [-2] + [0] * 10], 11\n```"}]})
    result = agentic_refinement(responder, tmp_path, iterations=2, timeout_s=30)
    assert result.scores == [0.0, 2.0]
    log = _read_log(tmp_path)
    assert log["steps"][0]["evaluation"]["status"] == "no_code" and log["steps"][0]["candidate"] is None
    assert "could not find a ```python code block" in responder.requests[1][-1]["content"]
    assert "1 ended in no code block" in (tmp_path / "report.md").read_text()


def test_replay_too_short_stops_with_a_clear_error_and_keeps_the_log(tmp_path):
    from hw3lib.kissing.loops import agentic_refinement

    responder = ScriptedResponder({"responses": ["```python\npoints = [[1] + [0] * 10]\n```"]})
    with pytest.raises(LLMError, match="has 1 responses but the loop asked for response 2"):
        agentic_refinement(responder, tmp_path, iterations=3, timeout_s=30)
    assert len(_read_log(tmp_path)["steps"]) == 1


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_evaluate_and_verify(tmp_path):
    from typer.testing import CliRunner

    from hw3lib.cli import app

    runner = CliRunner()
    program = tmp_path / "starter.py"
    program.write_text(json.loads(FIXTURE.read_text())["responses"][0]["content"].split("```python\n")[1].split("```")[0])
    result = runner.invoke(app, ["kissing", "evaluate", str(program), "--timeout", "30"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.output[: result.output.rindex("}") + 1])
    assert (metrics["num_points"], metrics["validity"], metrics["combined_score"]) == (22, 1.0, 22.0)
    assert "valid: 22 points" in result.output

    bad = tmp_path / "bad.py"
    bad.write_text("def run_code():\n    return [[1] + [0] * 10, [2] + [0] * 10]\n")
    result = runner.invoke(app, ["kissing", "evaluate", str(bad)])
    assert result.exit_code == 0 and '"validity": 0.0' in result.output and "min squared distance 1" in result.output

    result = runner.invoke(app, ["kissing", "evaluate", str(tmp_path / "nope.py")])
    assert result.exit_code == 2 and "no such program file" in result.output

    points = tmp_path / "points.json"
    # |(2,0) - (0,2)|^2 = 8, |(2,0) - (1,1)|^2 = 2 < max norm^2 4: invalid, closest pair (0, 2)
    points.write_text(json.dumps({"points": [[2] + [0] * 10, [0, 2] + [0] * 9, [1, 1] + [0] * 9]}))
    result = runner.invoke(app, ["kissing", "verify", str(points)])
    verdict = json.loads(result.output[: result.output.rindex("}") + 1])
    assert result.exit_code == 0 and (verdict["valid"], verdict["score"]) == (False, 0)
    assert (verdict["min_sq_distance"], verdict["max_sq_norm"], verdict["offending_pair"]) == (2, 4, [0, 2])
    # without the third point the set is valid: min squared distance 8 >= 4
    points.write_text(json.dumps([[2] + [0] * 10, [0, 2] + [0] * 9]))
    result = runner.invoke(app, ["kissing", "verify", str(points)])
    assert result.exit_code == 0 and '"score": 2' in result.output and '"min_sq_distance": 8' in result.output
    result = runner.invoke(app, ["kissing", "verify", str(tmp_path / "missing.json")])
    assert result.exit_code == 2 and "no such points file" in result.output


def test_cli_discover_with_replay(tmp_path):
    from typer.testing import CliRunner

    from hw3lib.cli import app

    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["kissing", "discover", "--loop", "agentic", "--iterations", "5",
                                      "--out", str(out), "--replay", str(FIXTURE), "--timeout", "30"])
    assert result.exit_code == 0, result.output
    assert "best score 438 (iteration 5); scores per iteration: 22, 0, 0, 220, 438" in result.output
    assert (out / "report.md").is_file() and len(_read_log(out)["steps"]) == 5
    result = CliRunner().invoke(app, ["kissing", "discover", "--loop", "greedy", "--out", str(out)])
    assert result.exit_code == 2 and "choose one of agentic, best_of_n, hybrid" in result.output


@pytest.mark.parametrize("history_turns, expected_roles", [
    (1, ["system", "user", "assistant", "user"]),
    (None, ["system", "user", "assistant", "user", "assistant", "user"]),
])
def test_history_window_sizes(tmp_path, history_turns, expected_roles):
    from hw3lib.kissing.loops import agentic_refinement

    replies = [f"```python\npoints = [[{k}] + [0] * 10]\n```" for k in (1, 2, 3)]
    responder = ScriptedResponder({"responses": replies})
    agentic_refinement(responder, tmp_path, iterations=3, timeout_s=30, history_turns=history_turns)
    assert [m["role"] for m in responder.requests[2]] == expected_roles
    assert responder.requests[2][-1]["content"].startswith("Evaluation of your program: VALID, score 1")
    # all three score 1, so iteration 1 stays the best; with one turn of history it has left the
    # window by the third request and is quoted in the feedback
    quoted = "Your best program so far" in responder.requests[2][-1]["content"]
    assert quoted == (history_turns == 1)


def test_history_must_keep_the_latest_feedback(tmp_path):
    from hw3lib.kissing.loops import agentic_refinement

    with pytest.raises(ValueError, match="history_turns must be >= 1"):
        agentic_refinement(ScriptedResponder({"responses": ["x"]}), tmp_path, iterations=1, history_turns=0)
