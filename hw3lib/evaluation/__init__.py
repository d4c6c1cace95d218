"""Evaluation: zero-shot accuracy (`evaluate`), Best-of-N metrics (`best_of_n`), the zero-shot
failure review (`zero_shot_review`) and `hw3 eval` (`cli`).
"""
