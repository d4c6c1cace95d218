"""hw3lib: the thin helper package behind the hw3 workbook, one folder per stage of the course.

In course order (each folder's own docstring says what is inside):

- `core`        the profile (smoke or full), file helpers, run folders and checkpoints
- `tasks`       datasets, prompts and rewards (GSM8K, MATH, arithmetic, keywords)
- `maths`       the course's pure tensor functions: SFT, GRPO, per-token log-probs
- `models`      resolve a model name and load it; the tiny offline model, warm starts, own transformer
- `generation`  rollout engines (transformers, vLLM, hw3lib's own model)
- `evaluation`  zero-shot accuracy, Best-of-N, the failure review, validation, `hw3 eval`
- `grpo`        the GRPO loop, its config and step, async GRPO on Ray, `hw3 train`
- `sft`         the SFT runner and expert iteration, `hw3 sft`
- `keywords`    keyword inclusion on hw3lib's own transformer, `hw3 keyword`
- `experiments` the course's ablations as named grids, their reports and plots, `hw3 sweep`
- `kissing`     the 11-dimensional kissing problem: verifier, sandbox, search, LLM loops
- `workbook`    run every notebook, build the writeup
- `cli`         the `hw3` command, which gathers the folders' `cli` modules
- `adapters`    the courses' `run_*` test adapters (a student's tests/adapters.py is one import)

Submodules are imported on demand so `import hw3lib` stays fast.
"""

__version__ = "0.1.0"
