"""The llama.cpp worker's speculative-decoding options land in llama.cpp's parameters (no server is started)."""

from __future__ import annotations

import argparse

import pytest

xllamacpp = pytest.importorskip("xllamacpp")

from trinity.pool.llamacpp_worker import _speculative  # noqa: E402


def _args(**kw) -> argparse.Namespace:
    base = {"draft_model_path": None, "draft_max": 8, "draft_min": 0, "draft_p_min": 0.75, "ngram": False, "threads": 2}
    return argparse.Namespace(**{**base, **kw})


def test_no_option_leaves_speculative_decoding_off():
    params = xllamacpp.CommonParams()
    _speculative(params, _args(), xllamacpp)
    assert list(params.speculative.types) == [xllamacpp.common_speculative_type.COMMON_SPECULATIVE_TYPE_NONE]


def test_a_draft_model_and_its_limits_are_set():
    params = xllamacpp.CommonParams()
    _speculative(params, _args(draft_model_path="/m/draft.gguf", draft_max=5, threads=3), xllamacpp)
    kinds = xllamacpp.common_speculative_type
    assert list(params.speculative.types) == [kinds.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
    draft = params.speculative.draft
    assert draft.mparams.path == "/m/draft.gguf" and draft.n_max == 5 and draft.cpuparams.n_threads == 3


def test_ngram_drafting_needs_no_model():
    params = xllamacpp.CommonParams()
    _speculative(params, _args(ngram=True), xllamacpp)
    assert list(params.speculative.types) == [xllamacpp.common_speculative_type.COMMON_SPECULATIVE_TYPE_NGRAM_MOD]
    assert params.speculative.draft.mparams.path == ""
