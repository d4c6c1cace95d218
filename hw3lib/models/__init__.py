"""Models: resolving a name to weights and loading them (`load`), the tiny offline Qwen3 model
(`tiny`), the SFT warm starts (`warmstart`), CPU attention (`attention`), hw3lib's own
nanoGPT-style transformer (`nanogpt`) and LoRA adapters with their merged weights (`lora`).
"""
