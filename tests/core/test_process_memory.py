"""The benchmarks' memory figures (hw3lib.core.process_memory)."""

import pytest

from hw3lib.core.process_memory import peak_rss, status_bytes


def test_peak_is_at_least_the_current_resident_set_and_grows_with_an_allocation():
    before = peak_rss()
    block = bytearray(64 * 2**20)  # 64 MiB, touched page by page
    for i in range(0, len(block), 4096):
        block[i] = 1
    assert status_bytes("VmRSS") <= peak_rss()
    assert peak_rss() >= before and peak_rss() >= 64 * 2**20


def test_an_unknown_field_is_an_error_that_names_it():
    with pytest.raises(RuntimeError, match="no VmNothing"):
        status_bytes("VmNothing")
