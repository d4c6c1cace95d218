"""The ground floor: the profile (smoke or full), file helpers, and a run folder's rules.

`profile` chooses smoke or full in one place; `io` holds atomic writes and jsonl reading with good
errors; `runs` decides what may happen to a run folder (reuse, resume, refuse) and keeps its
checkpoints. Nothing here imports any other part of hw3lib.
"""
