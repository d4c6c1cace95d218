"""The ground floor: the profile (smoke or full), file helpers, and a run folder's rules.

`profile` chooses smoke or full in one place; `config` holds the fields every run's config shares
(`RunConfig`); `lifecycle` is the one run lifecycle of GRPO, SFT and expert iteration (folder rules,
state, validation and checkpoints when due, Ctrl-C, `RunResult`); `runs` keeps checkpoints, RNG
states and the wandb link; `io` holds atomic writes and jsonl reading with good errors;
`writeup_keys` declares the keys the writeup reads; `cli_options` the training commands' shared
options. Nothing here imports any other part of hw3lib.
"""
