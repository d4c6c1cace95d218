"""The doctor's `T=1 log-probs` check: the engine's log-probs of its own T=1 samples against the trainer's.

Every GRPO step divides the trainer's probability of each sampled token by the one the engine reported
(the importance ratio; hw3lib.grpo). The greedy checks cannot show a sampler that reports the log-prob of
another distribution, or of another position: that biases every ratio silently. So the engine samples the
doctor's prompts as a GRPO rollout does -- temperature 1, `SAMPLED_N` samples per prompt, a seed,
`SAMPLED_MIN_TOKENS` -- twice with the same seed, and the trainer (the float32 policy on the device, under the
run's autocast: `hw3lib.maths.logprobs.response_log_probs`) scores the same tokens. FAIL when:

- the mean |engine - trainer| over the tokens past the first `SAMPLED_MIN_TOKENS` exceeds `SAMPLED_TOL` (1e-3
  in float32; `SAMPLED_TOL_LOW` = 0.05 in bf16, a first setting: bf16 rounding of a correct engine stays near
  0.01). The first positions are left out because there the engine reports the distribution with EOS banned
  (`min_tokens`), which the trainer's log-probs do not apply;
- the same seed gave different tokens, or no prompt's samples differ (the seeds were ignored or shared);
- a sample is shorter than `SAMPLED_MIN_TOKENS` or has EOS inside them (`min_tokens` ignored).

hw3lib pins vLLM's V1 model runner (hw3lib.generation.vllm_engine); the check runs whichever is in use, so
`VLLM_USE_V2_MODEL_RUNNER=1 hw3 doctor` tests V2 on the machine.
"""

from __future__ import annotations

from hw3lib.generation.doctor.report import FAIL, OK

SAMPLED_N = 4  # samples per prompt, as a GRPO group
SAMPLED_MIN_TOKENS = 4
SAMPLED_SEED = 3
SAMPLED_TOL = {"float32": 1e-3}  # bound on the mean |engine - trainer| log-prob; other dtypes: SAMPLED_TOL_LOW
SAMPLED_TOL_LOW = 0.05


def sampling_config(max_tokens: int):
    """The rollout-like sampling the check uses (module docstring)."""
    from hw3lib.generation import SamplingConfig

    return SamplingConfig(n=SAMPLED_N, temperature=1.0, max_tokens=max_tokens, min_tokens=SAMPLED_MIN_TOKENS,
                          stop=(), seed=SAMPLED_SEED)


def trainer_log_probs(policy, tokenizer, prompts, groups, *, device: str, dtype: str, max_model_len: int) -> list:
    """The trainer's log-prob of every sampled token: for each prompt, for each sample, a list of floats. One forward
    per sample (`response_log_probs` at T=1), the float32 policy on `device` under the training loops' autocast."""
    import torch

    from hw3lib.generation.base import encode_prompts
    from hw3lib.maths.logprobs import autocast_for, response_log_probs

    encoded = encode_prompts(tokenizer, list(prompts), max_model_len)  # as the engines encode them
    policy.to(device)
    scored = []
    try:
        with torch.inference_mode(), autocast_for(dtype, device):
            for prompt_ids, group in zip(encoded, groups):
                rows = []
                for sample in group:
                    ids = torch.tensor([prompt_ids + list(sample.token_ids)[:-1]], device=device)  # [1, P + T - 1]
                    labels = torch.tensor([list(sample.token_ids)], device=device)  # [1, T]
                    rows.append(response_log_probs(policy, ids, labels)["log_probs"][0].float().tolist())
                scored.append(rows)
    finally:
        policy.to("cpu")  # the GPU's memory is the engine's again for the sleep and memory readings
        _release_trainer_memory(device)
    return scored


def _release_trainer_memory(device: str) -> None:
    """Hand back what the trainer's forwards left in torch's cache, cuBLAS's workspaces included."""
    import torch

    from hw3lib.generation import free_cached_memory

    if device == "cuda" and hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
        torch._C._cuda_clearCublasWorkspaces()
    free_cached_memory()


def sampled_verdict(groups, again, trainer: list, *, eos_ids, dtype: str) -> tuple[str, str, dict]:
    """(status, detail, figures) of the check (module docstring) from the engine's samples, the same call's
    repeat and the trainer's log-probs (`trainer_log_probs`)."""
    tokens = [[tuple(sample.token_ids) for sample in group] for group in groups]
    problems = []
    if tokens != [[tuple(sample.token_ids) for sample in group] for group in again]:
        problems.append("the same seed gave different tokens")
    distinct = sum(len(set(group)) > 1 for group in tokens)
    if not distinct:
        problems.append(f"the {SAMPLED_N} samples of every prompt are identical (the seeds are shared)")
    early = [sample for group in tokens for sample in group
             if len(sample) < SAMPLED_MIN_TOKENS or set(sample[:SAMPLED_MIN_TOKENS]) & set(eos_ids)]
    if early:
        problems.append(f"{len(early)} samples end inside min_tokens={SAMPLED_MIN_TOKENS}")
    diffs = [abs(a - b) for group, scores in zip(groups, trainer) for sample, row in zip(group, scores)
             for a, b in list(zip(sample.logprobs, row))[SAMPLED_MIN_TOKENS:]]
    mean = sum(diffs) / len(diffs) if diffs else float("nan")
    tolerance = SAMPLED_TOL.get(dtype, SAMPLED_TOL_LOW)
    if not diffs:
        problems.append(f"no sample is longer than {SAMPLED_MIN_TOKENS} tokens")
    elif not mean <= tolerance:
        problems.append("the engine's log-probs are not the trainer's: every importance ratio would be biased "
                        "(if VLLM_USE_V2_MODEL_RUNNER=1 is set, unset it: hw3lib pins the V1 runner)")
    detail = (f"{len(tokens)} prompts x {SAMPLED_N} samples at T=1, seed {SAMPLED_SEED}: mean |engine - trainer| "
              f"{mean:.2g} over {len(diffs)} tokens past the first {SAMPLED_MIN_TOKENS} (bound {tolerance:g}), max "
              f"{max(diffs, default=float('nan')):.2g}; {distinct} of {len(tokens)} prompts drew different samples")
    figures = {"mean_abs_diff": mean if diffs else None, "max_abs_diff": max(diffs, default=None),
               "tokens_compared": len(diffs)}
    if problems:
        return FAIL, f"{detail}: {'; '.join(problems)}", figures
    return OK, f"{detail}; the seed reproduces them, min_tokens held", figures


def check_sampled(cycle, prompts, *, max_tokens: int, max_model_len: int) -> None:
    """Sample `prompts`, repeat, score with the trainer and record the `T=1 log-probs` line (a step of
    `hw3lib.generation.doctor.cycle.Cycle.run`, whose engine, policy and tokenizer it uses)."""
    sampling = sampling_config(max_tokens)
    groups = cycle.engine.generate(list(prompts), sampling)
    again = cycle.engine.generate(list(prompts), sampling)
    trainer = trainer_log_probs(cycle.policy, cycle.tokenizer, prompts, groups, device=cycle.device,
                                dtype=cycle.dtype, max_model_len=max_model_len)
    eos = cycle.tokenizer.eos_token_id
    status, detail, figures = sampled_verdict(groups, again, trainer, eos_ids={eos} if eos is not None else set(),
                                              dtype=cycle.dtype)
    cycle.outputs["sampled"] = [{"token_ids": sample.token_ids, "logprobs": sample.logprobs, "trainer": row}
                                for group, scores in zip(groups, trainer) for sample, row in zip(group, scores)]
    cycle.figures["sampled"] = figures
    cycle.report.add("T=1 log-probs", status, detail)
