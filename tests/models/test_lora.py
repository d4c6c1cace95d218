"""LoRA through peft (hw3lib.models.lora, `lora_rank > 0` in any run config): only the adapters train and
the base weights stay bit-identical; the merged weights are peft's `merge_and_unload` under the base model's
names; the engine serves them after a push; a GRPO run checkpoints the adapter and resumes exactly; and
`lora_rank=0` (the default) changes nothing."""

from __future__ import annotations

import json

import pytest
import torch

from hw3lib.grpo.config import GRPOConfig
from hw3lib.models.load import load_model_and_tokenizer, load_training_policy
from hw3lib.models.lora import is_lora, merged_weights


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("HW3_RUNS_DIR", str(tmp_path / "runs"))


def lora_cfg(**overrides) -> GRPOConfig:
    """The smoke profile on the untrained tiny model (float32, CPU) with rank-4 adapters."""
    return GRPOConfig.for_profile("smoke", **{"model": "tiny", "warm_start_steps": 0, "lora_rank": 4, **overrides})


def randomize_adapters(policy, seed: int = 0) -> None:
    """B starts at zero (the adapter adds nothing): give every adapter a visible update."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.05 * torch.randn(parameter.shape, generator=generator))


def language_model_loss(policy, seed: int = 0) -> torch.Tensor:
    ids = torch.randint(0, policy.config.vocab_size, (4, 24), generator=torch.Generator().manual_seed(seed))  # [B, T]
    logits = policy(input_ids=ids, use_cache=False).logits  # [B, T, V]
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())


def test_only_the_adapters_train_and_the_base_weights_stay_bit_identical(tmp_path):
    """Two AdamW steps with weight decay, through the run lifecycle's optimizer (hw3lib.core.lifecycle)."""
    from hw3lib.core.lifecycle import TrainingRun

    cfg = lora_cfg(weight_decay=0.1, learning_rate=1e-2)
    policy, tokenizer = load_training_policy("tiny", cfg)
    base, _ = load_model_and_tokenizer("tiny")
    assert is_lora(policy)
    run = TrainingRun(cfg, tmp_path / "run", None, policy, tokenizer, fresh_state={"grpo_step": 0, "elapsed_s": 0.0})
    adapters = {name: p for name, p in policy.named_parameters() if ".lora_" in name}
    trained = [p for group in run.optimizer.param_groups for p in group["params"]]
    assert len(trained) == len(adapters) == 2 * 7 * base.config.num_hidden_layers  # A and B of 7 projections
    assert {id(p) for p in trained} == {id(p) for p in adapters.values()}
    before = {name: p.detach().clone() for name, p in adapters.items()}

    for step in range(2):
        run.optimizer.zero_grad()
        language_model_loss(policy, seed=step).backward()
        run.optimizer.step()

    frozen = {name: p for name, p in policy.named_parameters() if ".lora_" not in name}
    assert all(not p.requires_grad and p.grad is None for p in frozen.values())
    base_weights = base.state_dict()
    for name, parameter in frozen.items():  # base_model.model.<name with .base_layer> -> the base's name
        plain = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
        assert torch.equal(parameter, base_weights[plain]), name
    assert all(not torch.equal(p, before[name]) for name, p in adapters.items())


def test_merged_weights_are_merge_and_unload_under_the_base_names():
    import copy

    cfg = lora_cfg()
    policy, _ = load_training_policy("tiny", cfg)
    randomize_adapters(policy)
    base_shapes = {name: tensor.shape for name, tensor in load_model_and_tokenizer("tiny")[0].state_dict().items()}
    frozen_before = {name: p.detach().clone() for name, p in policy.named_parameters()}

    merged = dict(merged_weights(policy))
    expected = copy.deepcopy(policy).merge_and_unload().state_dict()
    assert {name: tensor.shape for name, tensor in merged.items()} == base_shapes
    assert merged.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(merged[name], expected[name], rtol=0, atol=1e-6, msg=name)
    q_proj = "model.layers.0.self_attn.q_proj.weight"
    assert (merged[q_proj] - base_weights_of(policy)[q_proj]).abs().max() > 1e-3  # the update is really in
    assert all(torch.equal(p, frozen_before[name]) for name, p in policy.named_parameters())  # nothing mutated
    assert not any(t.requires_grad for t in merged.values())


def base_weights_of(policy) -> dict[str, torch.Tensor]:
    """The frozen base weights inside a LoRA policy, under the base model's names."""
    return {name.removeprefix("base_model.model.").replace(".base_layer.", "."): p
            for name, p in policy.named_parameters() if ".lora_" not in name}


def test_the_engine_serves_the_merged_weights_after_a_push():
    """The training engine is a plain copy (never the LoRA module itself); after a push its log-probs of its
    own greedy continuations equal the trainer's, and before it they are the base model's."""
    from hw3lib.generation import policy_weights_for_engine, training_engine
    from hw3lib.tasks.data import format_prompt, make_arithmetic_problems
    from tests.grpo.test_loop_vllm import logprob_gap

    cfg = lora_cfg()
    policy, tokenizer = load_training_policy("tiny", cfg)
    base, _ = load_model_and_tokenizer("tiny")
    randomize_adapters(policy)
    engine = training_engine(cfg, policy, tokenizer, "tiny")
    assert engine.model is not policy and not is_lora(engine.model)
    prompts = [format_prompt("r1_zero", r["question"]) for r in make_arithmetic_problems(4, seed=11, max_operand=4)]
    with torch.no_grad():
        stale = logprob_gap(engine, policy, tokenizer, prompts)
        assert logprob_gap(engine, base, tokenizer, prompts) < 1e-4  # not pushed yet: the base model
        engine.load_weights(policy_weights_for_engine(policy, cfg.dtype))
        pushed = logprob_gap(engine, policy, tokenizer, prompts)
    assert pushed < 1e-4 and stale > 0.1, (pushed, stale)


def test_a_lora_grpo_run_resumes_exactly_from_its_adapter_checkpoint():
    """1 GRPO step + resume + 1 == 2 straight (metrics and adapter weights), with KL monitoring against the
    base with adapters disabled; the checkpoint holds the adapter, not the model; the engine (a bf16 copy)
    follows the policy after the push."""
    from safetensors.torch import load_file

    from hw3lib.grpo.loop import train
    from tests.grpo.test_loop import tiny_cfg, without_timings
    from tests.grpo.test_loop_vllm import logprob_gap

    settings = dict(lora_rank=4, learning_rate=2e-3, monitor_kl=True, n_eval_examples=4, eval_every=1,
                    checkpoint_every=1)
    gaps = []

    def callback(info):  # before step 2's update: step 1's push has landed in the engine's own copy
        if info["grpo_step"] == 2 and not gaps:
            assert info["engine"].model is not info["policy"]
            with torch.no_grad():
                gaps.append(logprob_gap(info["engine"], info["policy"], info["engine"].tokenizer, ["1 + 2 ="]))

    straight = train(tiny_cfg("lora_straight", **settings), callback=callback)
    assert gaps and gaps[0] < 1e-4, gaps  # float32 engine copy: the same numbers
    assert straight.train_rows[0]["train/kl_k3"] == pytest.approx(0.0, abs=1e-6)  # no update yet: pi == base
    assert straight.train_rows[-1]["train/kl_k3"] > 0.0
    train(tiny_cfg("lora_split", **{**settings, "n_grpo_steps": 1}))
    split = train(tiny_cfg("lora_split", **settings), resume=True)
    assert without_timings(split.metrics) == without_timings(straight.metrics)

    saved = {run.run_dir: run.checkpoint / "policy" for run in (straight, split)}
    for folder in saved.values():
        assert (folder / "adapter_config.json").is_file() and not (folder / "model.safetensors").exists()
        assert json.loads((folder / "adapter_config.json").read_text())["r"] == 4
    adapters = [load_file(folder / "adapter_model.safetensors") for folder in saved.values()]
    assert adapters[0].keys() == adapters[1].keys() and len(adapters[0]) > 0
    assert all(torch.equal(adapters[0][k], adapters[1][k]) for k in adapters[0])
    assert any(torch.count_nonzero(t) for k, t in adapters[0].items() if "lora_B" in k)  # trained


def test_lora_rank_zero_changes_nothing(tmp_path):
    """The default: the plain model, every weight trained, the engine wraps it, state_dict() names pushed,
    and a config saved before the LoRA fields existed still resumes."""
    from hw3lib.core.lifecycle import field_defaults
    from hw3lib.core.runs import config_differences
    from hw3lib.generation import policy_weights_for_engine, training_engine

    cfg = lora_cfg(lora_rank=0)
    policy, tokenizer = load_training_policy("tiny", cfg)
    assert not is_lora(policy) and all(p.requires_grad for p in policy.parameters())
    assert training_engine(cfg, policy, tokenizer, "tiny").model is policy
    pushed = dict(policy_weights_for_engine(policy, "float32"))
    state = policy.state_dict()
    assert pushed.keys() == state.keys() and all(pushed[k].data_ptr() == state[k].data_ptr() for k in state)

    old = {k: v for k, v in GRPOConfig().to_dict().items() if not k.startswith("lora_")}
    assert config_differences(old, GRPOConfig().to_dict(), defaults=field_defaults(GRPOConfig())) == []
    assert GRPOConfig.from_dict(json.loads(json.dumps(lora_cfg().to_dict()))) == lora_cfg()


@pytest.mark.parametrize("changes, words", [
    ({"lora_rank": -1}, "lora_rank=-1"),
    ({"lora_dropout": 1.0}, "lora_dropout=1.0"),
    ({"lora_target_modules": ()}, "lora_target_modules=()"),
])
def test_bad_lora_settings_are_refused_by_name(changes, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        GRPOConfig(**changes)


def test_lora_with_gradient_checkpointing_gives_the_same_adapter_gradients():
    """Frozen embeddings mean the checkpointed layers' inputs need no gradient: non-reentrant checkpointing
    still backpropagates into the adapters, with the same numbers."""
    gradients = []
    for checkpointing in (False, True):
        policy, _ = load_training_policy("tiny", lora_cfg(gradient_checkpointing=checkpointing))
        randomize_adapters(policy)  # B = 0 would give A no gradient
        policy.train()
        language_model_loss(policy).backward()
        gradients.append({name: p.grad for name, p in policy.named_parameters() if p.requires_grad})
    plain, checkpointed = gradients
    assert plain.keys() == checkpointed.keys() and all(g is not None for g in checkpointed.values())
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=1e-5, atol=1e-6, msg=name)


def test_sft_and_expert_iteration_train_lora_and_resume_after_ctrl_c():
    """The other two loops load the policy the same way: a Ctrl-C'd LoRA run resumed from its adapter
    checkpoint logs the same metrics as a straight one."""
    from hw3lib.sft.expert_iteration import expert_iteration
    from hw3lib.sft.loop import train_sft
    from tests.grpo.test_loop import without_timings
    from tests.sft.test_expert_iteration import tiny_cfg as ei_cfg
    from tests.sft.test_loop import tiny_cfg as sft_cfg

    def interrupt(info):
        if info.get("step") == 3 or info.get("round") == 2:
            raise KeyboardInterrupt

    for kind, run, make_cfg in (("sft", train_sft, sft_cfg), ("ei", expert_iteration, ei_cfg)):
        straight = run(make_cfg(f"{kind}_straight", lora_rank=4, learning_rate=1e-2))
        with pytest.raises(KeyboardInterrupt):
            run(make_cfg(f"{kind}_ctrl_c", lora_rank=4, learning_rate=1e-2), callback=interrupt)
        resumed = run(make_cfg(f"{kind}_ctrl_c", lora_rank=4, learning_rate=1e-2), resume=True)
        assert without_timings(resumed.metrics) == without_timings(straight.metrics)
        assert (resumed.checkpoint / "policy" / "adapter_model.safetensors").is_file()
