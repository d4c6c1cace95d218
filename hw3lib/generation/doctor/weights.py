"""The weights the doctor pushes, and how far two engine outputs are apart.

The cycle pushes the model plus seeded noise (`noisy_weights`: a clearly different model, so the log-probs must
move), then the original weights (`cast_weights`: the log-probs must come back); both at the engine's dtype, one
tensor at a time, as the training loop pushes them.
"""

from __future__ import annotations

NOISE_SCALE, NOISE_SEED = 0.5, 1  # the pushed weights: a clearly different model (tiny: log-probs move ~0.25)


def trainer_policy(model: str):
    """(the policy, its tokenizer): the model as a training run loads it, float32 on the CPU (the trainer's master
    weights; the T=1 log-probs check moves it to the device for its forward passes)."""
    from hw3lib.models.load import load_model_and_tokenizer

    policy, tokenizer = load_model_and_tokenizer(model, device="cpu", dtype="float32")
    return policy.eval(), tokenizer


def policy_weights(policy) -> dict:
    """The policy's float32 weights by their checkpoint names (what its `state_dict()` holds), detached."""
    return {name: tensor.detach() for name, tensor in policy.state_dict().items()}


def original_weights(model: str) -> dict:
    """The model's float32 weights by their checkpoint names (what a policy's `state_dict()` holds)."""
    return policy_weights(trainer_policy(model)[0])


def cast_weights(weights: dict, dtype: str):
    """(name, tensor) pairs at the engine's dtype, one copy at a time (as the training loop pushes them)."""
    import torch

    target = getattr(torch, dtype)
    for name, tensor in weights.items():
        yield name, tensor.to(target)


def weight_bytes(weights: dict, dtype: str) -> int:
    """The weights' size at the engine's dtype (tied tensors, e.g. lm_head and the embedding, counted once)."""
    import torch

    unique = {tensor.data_ptr(): tensor.numel() for tensor in weights.values()}
    return sum(unique.values()) * torch.empty((), dtype=getattr(torch, dtype)).element_size()


def noisy_weights(weights: dict, dtype: str, scale: float = NOISE_SCALE, seed: int = NOISE_SEED):
    """(name, tensor) pairs: each tensor plus seeded Gaussian noise at `scale` x its std, at the engine's dtype.
    Constant tensors (norm weights at init) have std 0 and pass unchanged."""
    import torch

    generator, target = torch.Generator().manual_seed(seed), getattr(torch, dtype)
    for name, tensor in weights.items():
        if tensor.is_floating_point() and tensor.numel() > 1:
            tensor = tensor + scale * tensor.std() * torch.randn(tensor.shape, generator=generator)
        yield name, tensor.to(target)


def logprob_change(before: list[dict], after: list[dict]) -> tuple[float, int]:
    """(the largest |change| of a sampled token's log-prob, over the positions both continuations have;
    how many continuations' tokens differ)."""
    largest, changed = 0.0, 0
    for old, new in zip(before, after):
        changed += old["token_ids"] != new["token_ids"]
        for a, b in zip(old["logprobs"], new["logprobs"]):
            largest = max(largest, abs(a - b))
    return largest, changed
