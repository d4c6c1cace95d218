"""Keyword inclusion on hw3lib's own transformer: the recipe (SFT then GRPO, `recipe`) and `hw3 keyword` (`cli`).

The task's data lives in `hw3lib.tasks.keyword_data`.
"""
