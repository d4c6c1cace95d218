"""One row per prompt template: the reward function that grades its responses and where they stop.

Every loop (GRPO, SFT validation, expert iteration, the experiment reports) looks a prompt up here,
so a template, its reward and its stop strings cannot drift apart:

| prompt | template | reward | stop |
|---|---|---|---|
| `r1_zero` | `prompts/r1_zero.prompt` | `r1_zero_reward_fn` (tags, then the answer) | `</answer>` |
| `question_only` | `prompts/question_only.prompt` | `question_only_reward_fn` (last box or number) | EOS or budget |
| `keyword` | `prompts/keyword.prompt` | `keyword_inclusion_reward_fn` (the course's: all keywords) | end of line |
| `keyword_sentence` | `prompts/keyword.prompt` | `keyword_sentence_reward_fn` (all keywords, one sentence) | end of line |

The two keyword rows read one template file (`hw3lib.tasks.data.TEMPLATE_OF`) and differ only in the
reward: `keyword` is the course's definition (the default), `keyword_sentence` adds a one-sentence
gate against the truncated keyword lists that inclusion alone rewards (hw3lib.keywords.hacking,
notebook 04 section 8).

$HW3_COURSE_GRADER=path/to/drgrpo_grader.py swaps in the course's own reward functions for the first two
rows (hw3lib.tasks.course_grader).
"""

from __future__ import annotations

from typing import Callable

# prompt -> (name of the reward function in hw3lib.tasks.rewards, stop strings)
PROMPT_TABLE: dict[str, tuple[str, tuple[str, ...]]] = {
    "r1_zero": ("r1_zero_reward_fn", ("</answer>",)),
    "question_only": ("question_only_reward_fn", ()),
    "keyword": ("keyword_inclusion_reward_fn", ("\n",)),
    "keyword_sentence": ("keyword_sentence_reward_fn", ("\n",)),
}
PROMPTS = tuple(PROMPT_TABLE)


def _row(prompt: str) -> tuple[str, tuple[str, ...]]:
    if prompt not in PROMPT_TABLE:
        raise ValueError(f"unknown prompt {prompt!r}: choose one of {', '.join(PROMPTS)}")
    return PROMPT_TABLE[prompt]


def reward_fn_for(prompt: str) -> Callable[[str, str], dict]:
    """The reward function that matches a prompt template (r1_zero's tags, a bare answer, or keyword
    inclusion -- alone, or in one sentence -- whose `gold` is the list of keywords).

    With $HW3_COURSE_GRADER set, the r1_zero and question_only rewards come from that file, the
    student's copy of the course's grader (hw3lib.tasks.course_grader); `hw3lib_reward_fn_for` always
    gives ours.
    """
    from hw3lib.tasks.course_grader import course_reward_fn

    return course_reward_fn(prompt) or hw3lib_reward_fn_for(prompt)


def hw3lib_reward_fn_for(prompt: str) -> Callable[[str, str], dict]:
    """hw3lib's own reward function for a prompt template, whatever $HW3_COURSE_GRADER says."""
    from hw3lib.tasks import rewards  # imported on first use: it loads the answer-equivalence machinery

    return getattr(rewards, _row(prompt)[0])


def stop_strings_for(prompt: str) -> tuple[str, ...]:
    """R1-Zero responses end at `</answer>`, keyword sentences at the end of their line; question-only
    responses run to EOS or the budget."""
    return _row(prompt)[1]
