"""The corpus (tests/corpus/): every function differentiated in forward and reverse
mode through the helpers and checked against finite differences; a refusal must be
the expected error type with a message that says what to write instead."""

import pytest
from corpus.functions import ENTRIES
from corpus.harness import CORRECT, WRONG, run

pytestmark = pytest.mark.needs_enzyme


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_corpus_entry(entry):
    result = run(entry)
    wrong = [o for o in result.outcomes if o.status == WRONG]
    assert not wrong, f"silently wrong: {[(o.mode, o.detail) for o in wrong]}"
    if entry.expect is None:
        bad = [(o.mode, o.status, o.detail) for o in result.outcomes if o.status != CORRECT]
        assert not bad, bad
    else:
        assert result.as_expected(), [(o.mode, o.status, o.detail) for o in result.outcomes]


def test_corpus_size_and_pass_rate():
    assert len(ENTRIES) >= 60
    assert len({e.name for e in ENTRIES}) == len(ENTRIES)
    refused = [e for e in ENTRIES if e.expect is not None]
    assert len(refused) <= 0.05 * len(ENTRIES)
