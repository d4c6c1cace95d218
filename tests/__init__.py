"""Tests, mirroring hw3lib's tree; test_grpo.py and test_sft.py keep the course's file names."""
