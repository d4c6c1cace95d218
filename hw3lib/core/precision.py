"""Mixed precision by master weights: float32 masters that AdamW steps, a bf16 working copy that the
microbatches run through, refreshed once per optimizer step.

The classic design (Micikevicius et al., 2018, "Mixed precision training"; Megatron-LM's `main_grad`):

- The policy module holds the **float32 master weights**. AdamW's moments are float32 and step them;
  checkpoints hold them. (A bf16 model stepped by AdamW directly loses most updates at lr ~1e-5: the
  step is below half a bf16 ulp of a typical weight.)
- `MasterWeights.model` is a **working copy**: a second module tree, built once, whose matrix weights
  (every Linear weight: attention and MLP projections, the output head) are bf16 copies of the masters.
  Small vectors (norm weights, biases) are the master tensors themselves, shared.
- The forward and backward run through the working copy **under bf16 autocast** (hw3lib.maths.logprobs.
  autocast_for, as before). Autocast never casts a tensor already in bf16, so it now casts only
  activations; the matmuls see the very bf16 weights its per-microbatch cast of the masters produced
  before. The forward is the same computation as autocast over the float32 masters.
- Each bf16 weight's gradient is added into its master's float32 `.grad` as soon as it is complete (a
  post-accumulate hook) and then freed: gradients **accumulate over the microbatches in float32**, as
  autocast's cast-back gave them.
- `refresh()` after each optimizer step copies the masters into the working copy: **one cast of the
  weights per optimizer step**, where autocast cast every master in every microbatch's forward (128 times
  per step at the course's 128 microbatches). What stays per microbatch is the gradients' way back: adding
  a bf16 weight gradient into a float32 accumulator converts it (on a CPU, `add_` with a bf16 operand is a
  conversion pass and an add), as autocast's cast-back did -- the price of accumulating in float32. Fewer,
  larger microbatches pay it fewer times (hw3lib.core.memory.training_micro_batch); on a GPU a matmul that
  writes its float32 result straight into the accumulator (`torch.mm(..., out_dtype=torch.float32)`, CUDA
  only in torch 2.13; Megatron's fused weight-gradient accumulation) would remove it.
- The rollout engine receives the working copy's bf16 tensors (`engine_weights`): no second cast.

**Embeddings** are looked up from the float32 master (`MasterEmbedding`): rows are gathered, so the
residual stream starts in float32 exactly as under autocast (an embedding is not an autocast op), and the
backward adds the looked-up rows' gradients straight into the master's float32 `.grad` (`index_add_`).
torch's dense embedding backward instead zero-fills a vocabulary-sized float32 tensor and adds all of it,
in every microbatch (151,936 x 1,024 floats at Qwen3's vocabulary, a quarter of Qwen3-0.6B). A tied output
head keeps its bf16 copy like every other matrix; its gradient and the embedding's land in the same master
`.grad`, which is allocated once per optimizer step by the first gradient that reaches it.

Precisions: with `dtype="float32"` the working copy shares every master (nothing to cast or refresh) and
only the embedding lookup differs. A policy with frozen weights (LoRA, hw3lib.models.lora) is used as it is,
under autocast: its adapters are small and its frozen base is handled by peft.

Memory: the bf16 copy (2 bytes per parameter) lives for the whole run, where autocast held the same copies
only during each forward/backward (its cast cache); at the training peak the two are the same size. A bf16
weight gradient lives only until its hook has added it to the master's.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

LOW_PRECISION = {"bfloat16": torch.bfloat16, "float16": torch.float16}


class _GatherRows(torch.autograd.Function):
    """`weight[ids]` whose backward adds the rows' gradients into `weight.grad` in place (no dense gradient)."""

    @staticmethod
    def forward(ctx, ids: torch.Tensor, weight: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.weight, ctx.padding_idx = weight, padding_idx
        return nn.functional.embedding(ids, weight)  # [..., H]

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (ids,) = ctx.saved_tensors
        weight = ctx.weight
        rows = ids.reshape(-1)  # [n]
        grad = grad.reshape(rows.numel(), -1).to(weight.dtype)  # [n, H]
        if ctx.padding_idx is not None:  # nn.Embedding's rule: the padding row gets no gradient
            grad = grad.masked_fill((rows == ctx.padding_idx).unsqueeze(1), 0.0)  # [n, H]
        with torch.no_grad():
            if weight.grad is None:  # the first gradient of this optimizer step to reach the weight
                weight.grad = torch.zeros_like(weight)
            weight.grad.index_add_(0, rows, grad)
        return None, None, None


class MasterEmbedding(nn.Module):
    """An `nn.Embedding`'s lookup from the float32 master weight, with `_GatherRows`' in-place backward."""

    def __init__(self, weight: nn.Parameter, padding_idx: int | None) -> None:
        super().__init__()
        self.weight, self.padding_idx = weight, padding_idx
        self.num_embeddings, self.embedding_dim = weight.shape

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if not (torch.is_grad_enabled() and self.weight.requires_grad):
            return nn.functional.embedding(ids, self.weight)  # [..., H]
        return _GatherRows.apply(ids, self.weight, self.padding_idx)  # [..., H]


class MasterWeights:
    """The float32 policy (`master`) and the module its microbatches run through (`model`); see the module
    docstring. `dtype` is the run's precision ("float32", "bfloat16", "float16")."""

    def __init__(self, policy: nn.Module, dtype: str) -> None:
        self.master, self.dtype = policy, dtype
        self.pairs: list[tuple[nn.Parameter, nn.Parameter]] = []  # (float32 master, its low-precision copy)
        if any(not p.requires_grad for p in policy.parameters()):
            self.model = policy  # LoRA: used as it is, under autocast
            return
        self.model = self._working_copy(LOW_PRECISION.get(dtype))
        for master, low in self.pairs:
            low.register_post_accumulate_grad_hook(_add_to_master(master))

    def _working_copy(self, low: torch.dtype | None) -> nn.Module:
        modules = list(self.master.modules())
        linear = {id(m.weight) for m in modules if isinstance(m, nn.Linear)}
        memo = {}  # deepcopy's memo, pre-filled: each master maps to itself or to its bf16 copy
        for p in self.master.parameters():
            if low is not None and id(p) in linear:
                copied = nn.Parameter(p.detach().to(low), requires_grad=True)
                self.pairs.append((p, copied))
                memo[id(p)] = copied
            else:
                memo[id(p)] = p
        model = copy.deepcopy(self.master, memo)  # modules and buffers copied; parameters as mapped
        masters = {id(copied): master for master, copied in self.pairs}
        for name, module in list(model.named_modules()):
            if isinstance(module, nn.Embedding):
                weight = masters.get(id(module.weight), module.weight)  # a tied head's master, not its copy
                parent, _, attribute = name.rpartition(".")
                setattr(model.get_submodule(parent), attribute, MasterEmbedding(weight, module.padding_idx))
        return model

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy the masters into the working copy (after each optimizer step): the one cast per step."""
        for master, low in self.pairs:
            low.copy_(master)

    def engine_weights(self, dtype: str | None = None):
        """(name, tensor) pairs of the master's `state_dict` in `dtype` (default the run's) for a rollout
        engine, one tensor at a time: the working copy's own tensor where it holds one in that dtype (the
        tied embedding's is the head's copy: the same values), else a cast of the master (a float32 master
        passes through uncopied)."""
        target = getattr(torch, dtype or self.dtype)
        copies = {master.data_ptr(): low for master, low in self.pairs if low.dtype == target}
        for name, tensor in self.master.state_dict().items():
            low = copies.get(tensor.data_ptr())
            yield name, low.detach() if low is not None else tensor.detach().to(target)


def _add_to_master(master: nn.Parameter):
    """A post-accumulate-grad hook for `master`'s low-precision copy: add its gradient into the master's
    float32 `.grad` (allocated by the first one of an optimizer step) and free it."""

    def hook(low: nn.Parameter) -> None:
        if master.grad is None:
            master.grad = low.grad.to(master.dtype)
        else:
            master.grad.add_(low.grad)
        low.grad = None

    return hook
