"""GRPO training: its config (`config`), the loop (`loop`), one optimizer step (`step`), reading a
run back (`results`), asynchronous GRPO on Ray (`async_loop`, `replay`, `async_report`) and
`hw3 train` (`cli`).
"""
