"""Models: resolving a name to weights and loading them (`load`), the tiny offline Qwen3 model
(`tiny`), the SFT warm starts (`warmstart`), CPU attention (`attention`) and hw3lib's own
nanoGPT-style transformer (`nanogpt`).
"""
