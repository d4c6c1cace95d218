"""The course's maths as pure tensor functions: SFT (`sft`), GRPO (`grpo`), per-token log-probs (`logprobs`),
and where they meet a model and an optimizer: the one SFT optimizer step (`sft_step`).

No I/O and no hw3lib import outside this folder; every function has hand-worked numbers and a
float64 gradient check in tests/.
"""
