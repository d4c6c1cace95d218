"""Start the local Ray instance the async GRPO runs use: quiet, and patient with a busy machine.

Ray 2.60 gives a new node 30 seconds (a fixed number, not a setting) to register its raylet with the
GCS, then raises "The current node timed out during startup". On a 2-core machine that is also running
other notebooks (CI's four concurrent walks) the raylet's Python agents can take longer than that to
import, and a whole notebook failed on it. A timed-out start leaves nothing running worth keeping, so we
shut it down and try again, a few times, before reporting the cause in one message.
"""
from __future__ import annotations

import logging
import time

TOKEN_NOTICE = "Token authentication is enabled for this Ray cluster"
STARTUP_TIMEOUT_TEXT = "timed out during startup"


class LocalRayError(RuntimeError):
    """The local Ray instance did not start after every attempt."""


class _DropTokenNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return TOKEN_NOTICE not in record.getMessage()


def quiet_token_auth_notice() -> None:
    """Drop Ray's log line saying that it chose token authentication for a new local cluster (its default, which
    we keep): it landed in every notebook's output. Only that line: Ray's mode and every other message are
    untouched (setting RAY_AUTH_MODE ourselves would also silence it, but Ray caches the mode process-wide, and a
    later ray.init in the same process then disagrees with its own GCS)."""
    logger = logging.getLogger("ray._private.authentication.authentication_token_setup")
    if not any(isinstance(f, _DropTokenNotice) for f in logger.filters):
        logger.addFilter(_DropTokenNotice())


def start_local_ray(num_cpus: int = 2, attempts: int = 6, pause_s: float = 15.0, **init_options) -> None:
    """`ray.init(num_cpus=...)` for a local instance without the dashboard; a start that times out
    (see the module docstring) is shut down and retried up to `attempts` times in all, `pause_s` apart (a busy
    spell of the machine passes: CI's four walks once timed out three starts 5 s apart in a row). Any other error
    is raised as it is, at once."""
    import ray

    quiet_token_auth_notice()
    options = {"include_dashboard": False, "configure_logging": False, **init_options}
    for attempt in range(1, attempts + 1):
        try:
            ray.init(num_cpus=num_cpus, **options)
            return
        except Exception as error:  # Ray raises a bare Exception for this case
            if STARTUP_TIMEOUT_TEXT not in str(error):
                raise
            ray.shutdown()
            if attempt == attempts:
                raise LocalRayError(
                    f"Ray's local node did not start in {attempts} attempts (each waits 30 s for its raylet): "
                    "the machine is too busy; close other notebooks or training runs and run the cell again"
                ) from None
            print(f"Ray's local node timed out while starting (attempt {attempt} of {attempts}: the machine is "
                  "busy); trying again", flush=True)
            time.sleep(pause_s)
