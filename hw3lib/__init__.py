"""hw3lib: the thin helper package behind the hw3 workbook.

RL post-training of small language models on verifiable math: data and rewards
(`hw3lib.data`, `hw3lib.rewards`), the GRPO/SFT maths as pure tensor functions
(`hw3lib.sft`, `hw3lib.grpo`), rollout engines (`hw3lib.generation`), evaluation
and Best-of-N (`hw3lib.evaluation`), the training loop (`hw3lib.train`) and the
kissing-number discovery tools (`hw3lib.kissing`).

Submodules are imported on demand so `import hw3lib` stays fast.
"""

__version__ = "0.1.0"
