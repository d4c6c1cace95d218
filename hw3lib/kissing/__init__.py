"""Kissing configurations in dimension 11: exact verification, sandboxed evaluation, search.

The problem: find nonzero integer vectors C in Z^11 with min_{x != y} ||x - y||^2 >=
max_x ||x||^2; then tau_11 >= |C|. Modules:

- `verify`: `verify(points, dimension=11) -> VerifyResult`, exact integer check (any int size); `verify_form`
  for the other published forms (rationals, the angle form with mixed norms, Z[sqrt2]).
- `records`: the published records (593, 600, 604) verified by `verify_form`, with timings.
- `evaluator`: `evaluate_program(path_or_source, timeout_s, memory_mb) -> dict`, the course's
  metrics for a candidate program run in a limited subprocess.
- `sandbox`: the bubblewrap sandbox (and the process fallback) `evaluator` runs programs in.
- `independent_set`: `grow_independent_set(...)`, the graph-only iterated local search.
- `constructions`: the starter (22 points), the D11 roots (220) and a code-based construction.
- `search`: `local_search(...)`, a seeded, resumable local search that grows valid sets.
- `llm`: the chat client (any OpenAI-compatible server) and a scripted responder for tests.
- `replies`: <think> stripping and code extraction from a model's reply.
- `report`: report.md and the score plot of a logged run (a replay is labelled as one).
- `loops`: the LLM-guided discovery loops (agentic, Best-of-N, hybrid), optionally from a stored configuration.
- `scaffold`: load a starting configuration (a record, ours) and describe its core-and-remainder scaffold.
- `core_remainder`: the core-and-remainder search (fixed norm-4 core, equilibrated remainder, Chebyshev LP).
- `core_families`, `core_frames`, `core_search`, `core_report`, `core_program`: our own core search (labelled
  supports, frames guided by the published composition, a cavity proxy, remainder scoring), its report, and
  program.py written from its best set.
- `geometry`: the largest free cap of a final set and its shell neighbourhood (why it stopped growing).
- `orbits`, `groups`, `weighted_independent_set`, `layered`, `orbit_search`: the exact search for unions of group
  orbits in the layered frame (poles, equator, tropics), over many groups, with a resumable log;
  `rational_forms`: when rational inner products admit integer coordinates; `orbit_requests`: an LLM's JSON
  request to that search (the `orbit` loop).
- `deliverables`: data/kissing_number/report.md from the search that wrote program.py, and storing a
  live run's conversation there (a replay is refused).
- `cli`: the `hw3 kissing ...` commands.

Imports point one way, from the bottom: verify, sandbox, independent_set, weighted_independent_set, orbits,
replies, llm -> evaluator, records, constructions, report, groups, orbit_requests -> scaffold, core_remainder,
search -> layered -> orbit_search, geometry, loops -> deliverables -> cli (tests/test_imports.py checks
there are no cycles).

Note: importing this package binds `hw3lib.kissing.verify` to the *function*; import the
dataclass as `from hw3lib.kissing import VerifyResult`.
"""

from hw3lib.kissing.evaluator import evaluate_program
from hw3lib.kissing.verify import VerifyResult, verify

__all__ = ["VerifyResult", "evaluate_program", "verify"]
