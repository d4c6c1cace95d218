"""The tasks: datasets and prompts (GSM8K, MATH-style jsonl, arithmetic, keywords) and their rewards.

`data` loads questions and formats prompts (templates in `prompts/`), `rewards` grades answers,
`keyword_data` builds the keyword-inclusion task, `math_synthetic` generates a MATH-format task
(boxed fractions, radicals, intervals, expressions) for the offline smoke profile. No model is imported here.
"""
