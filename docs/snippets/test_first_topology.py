"""The first-topology tutorial's test: fixed input in, exact output out."""
from collections import Counter

from first_topology import WordCount

from stormpy.testing import complete_topology


def test_word_count():
    result = complete_topology(WordCount, {"sentences": [["the cow"], ["the moon"]]}, timeout_secs=30)
    assert sorted(result.emitted("split")) == [["cow"], ["moon"], ["the"], ["the"]]
    last_count = {word: n for word, n in result.emitted("count")}
    assert last_count == {"the": 2, "cow": 1, "moon": 1}
    assert result.acked == {"sentences": 2} and result.failed == {"sentences": 0}


def test_every_word_counted_once():
    lines = [["a b a"], ["b c"]]
    result = complete_topology(WordCount, {"sentences": lines}, timeout_secs=30)
    assert Counter(w for [w] in result.emitted("split")) == Counter({"a": 2, "b": 2, "c": 1})
