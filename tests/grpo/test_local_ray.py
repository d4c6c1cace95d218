"""start_local_ray: a start that a busy machine timed out is shut down and tried again (CI lost a whole
notebook to Ray's fixed 30 s raylet wait while four walks shared two cores)."""
import pytest
import ray

from hw3lib.grpo.local_ray import LocalRayError, start_local_ray

TIMEOUT = Exception("The current node timed out during startup. This could happen because some of the raylet "
                    "failed to startup or the GCS has become overloaded.")  # Ray 2.60's words


def _fake_ray(monkeypatch, outcomes):
    """ray.init raises each of `outcomes` in turn (None: it starts); returns the log of calls in order."""
    calls = []
    outcomes = list(outcomes)

    def fake_init(**kwargs):
        calls.append(("init", kwargs))
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append(("shutdown", None)))
    return calls


def test_a_timed_out_start_is_shut_down_and_retried_until_ray_starts(monkeypatch, capsys):
    calls = _fake_ray(monkeypatch, [TIMEOUT, TIMEOUT, None])
    start_local_ray(num_cpus=2, attempts=3, pause_s=0, log_to_driver=True)
    assert [name for name, _ in calls] == ["init", "shutdown", "init", "shutdown", "init"]
    assert calls[-1][1] == {"num_cpus": 2, "include_dashboard": False, "configure_logging": False,
                            "log_to_driver": True}
    out = capsys.readouterr().out
    assert "attempt 1 of 3" in out and "attempt 2 of 3" in out


def test_every_attempt_timing_out_ends_in_one_clear_error(monkeypatch):
    calls = _fake_ray(monkeypatch, [TIMEOUT, TIMEOUT])
    with pytest.raises(LocalRayError, match="did not start in 2 attempts.*too busy") as error:
        start_local_ray(attempts=2, pause_s=0)
    assert error.value.__cause__ is None and error.value.__suppress_context__
    assert [name for name, _ in calls] == ["init", "shutdown", "init", "shutdown"]


def test_any_other_error_is_raised_at_once(monkeypatch):
    calls = _fake_ray(monkeypatch, [ValueError("bad num_cpus")])
    with pytest.raises(ValueError, match="bad num_cpus"):
        start_local_ray(attempts=3, pause_s=0)
    assert [name for name, _ in calls] == ["init"]
