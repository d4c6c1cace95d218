"""Supervised fine-tuning: configs (`config`), the SFT runner (`loop`), expert iteration
(`expert_iteration`), notebook 05's SFT/EI experiments (`experiments`), and `hw3 sft` /
`hw3 expert-iteration` (`cli`).
"""
