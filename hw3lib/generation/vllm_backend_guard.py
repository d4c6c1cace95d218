"""Keep vLLM's Transformers backend from changing the trainer's model classes (CS336 2026's OLMo-2).

vLLM 0.32 has no implementation of its own for some architectures (OLMo-2 among them, `Olmo2ForCausalLM`) and
serves them through its Transformers backend, which decorates the *transformers* model class in place for
torch.compile (`vllm.compilation.decorators.support_torch_compile`: a new base class, a new `__init__` and
`__call__`). Our engines run in the trainer's process (hw3lib.generation.vllm_engine), so the policy -- an
instance of that same class, built before the engine -- then fails on its next forward pass
(`'Olmo2Model' object has no attribute 'do_not_compile'`), and a model built after it would run through vLLM's
compile wrapper. The full profile's CPU rehearsal of `cs336-a5-2026` found this (`make test`).

`served_by_transformers_backend(path)` says when that applies; `classes_kept(module)` snapshots every class the
architecture's transformers module defines and puts back what vLLM changed once the engine is built. vLLM's own
model instance then runs its plain forward: correct only without compilation, so such engines start with
`enforce_eager=True` (on a GPU that costs OLMo-2 some decoding speed; correctness first).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from types import ModuleType

_SLOTS = ("__dict__", "__weakref__")  # per-class descriptors Python manages, never reassigned


def architectures(path: str) -> list[str]:
    """The architectures named in the model's config (`config.json`'s `architectures`)."""
    from transformers import AutoConfig

    return list(getattr(AutoConfig.from_pretrained(path), "architectures", None) or [])


def served_by_transformers_backend(path: str) -> bool:
    """Whether vLLM serves the model at `path` through its Transformers backend (no vLLM implementation)."""
    from vllm.model_executor.models import registry

    table = getattr(registry, "_TRANSFORMERS_SUPPORTED_MODELS", {})  # vLLM's own list of such architectures
    return any(arch in table for arch in architectures(path))


def architecture_modules(path: str) -> list[ModuleType]:
    """The transformers modules that define the model's architectures (e.g. transformers.models.olmo2.modeling_olmo2)."""
    import transformers

    found = [getattr(transformers, arch, None) for arch in architectures(path)]
    return [sys.modules[cls.__module__] for cls in found if isinstance(cls, type)]


@contextlib.contextmanager
def classes_kept(*modules: ModuleType) -> Iterator[None]:
    """Run the block, then restore every class defined in `modules` to what it was before it (bases and
    attributes: what was added is removed, what was replaced is put back)."""
    classes = [value for module in modules for value in vars(module).values()
               if isinstance(value, type) and value.__module__ == module.__name__]
    saved = {cls: (cls.__bases__, dict(vars(cls))) for cls in classes}
    try:
        yield
    finally:
        for cls, (bases, attributes) in saved.items():
            if cls.__bases__ != bases:
                cls.__bases__ = bases
            for name in set(vars(cls)) - set(attributes) - set(_SLOTS):
                delattr(cls, name)
            for name, value in attributes.items():
                if name not in _SLOTS and vars(cls).get(name) is not value:
                    setattr(cls, name, value)
