"""The canonical order's collator (`digest.collation`, ICU's C API through ctypes) gives the sort
keys PyICU gave over the same ICU, byte for byte, on a seeded corpus of ties (`bench/collation.py`'s:
case, accents composed and decomposed, digits, punctuation, quotes, non-Latin scripts, emoji) and
the golden fixtures' ids. The golden revisions themselves are tests/test_revision.py's."""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from pathlib import Path

import pytest

from digest.collation import CollationUnavailable, RootCollator
from digest.turns import id_sort_key

ROOT = Path(__file__).resolve().parents[1]

# Recorded with PyICU 2.17 (`Collator.createInstance(Locale.getRoot())`, normalization on) over the
# same ICU, on `corpus(3000, seed=7)`: the sha256 of every id's sort key in corpus order, and of the
# ids in the order (sort key, then code point).
PYICU = {
    72: (
        "3ffdf1e67c28cfc80c2be365f23b92fe886e57908666ed5957c0ebc79efbba49",
        "bbe4291948a668da262db1599fb3e4d97daa9a0bb8694d604152b3b43bd4c415",
    ),
}


def _corpus() -> list[str]:
    spec = importlib.util.spec_from_file_location("bench_collation", ROOT / "bench" / "collation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.corpus(3000, 7)


def test_sort_keys_are_pyicus_byte_for_byte_on_a_corpus_of_ties():
    collator = RootCollator()
    assert collator.version in PYICU, f"no PyICU record for ICU {collator.version}: record one (see PYICU)"
    ids = _corpus()
    assert len(ids) == 3015
    keys = [collator.sort_key(i) for i in ids]
    order = sorted(ids, key=lambda i: (collator.sort_key(i), i))

    assert hashlib.sha256(b"".join(keys)).hexdigest() == PYICU[collator.version][0]
    assert hashlib.sha256("\n".join(order).encode("utf-8", "surrogatepass")).hexdigest() == PYICU[collator.version][1]


def test_keys_as_pyicu_returned_them_for_the_edge_cases():
    key = RootCollator().sort_key
    assert key("a") == bytes.fromhex("2a0105010500")  # its terminating zero included
    assert key("") == bytes.fromhex("010100")
    assert key("\x00a") == key("a\x00") == key("a")  # U+0000 is ignorable
    assert key("\ud800") == bytes.fromhex("fe101a100105010500")  # a lone surrogate goes as its code unit
    assert key("caf\u00e9") == key("cafe\u0301")  # normalization on: canonically equivalent, equal
    long = "\u00df" * 3000  # a key longer than the per-thread buffer
    assert key(long).startswith(key("\u00df" * 10)[:20]) and len(key(long)) > 1024


def test_threads_get_the_keys_one_thread_gets():
    ids = [f"turn-{n}-\u00e9\u4e2d" * (n % 7 + 1) for n in range(400)]
    expected = [id_sort_key(i) for i in ids]
    results: list[list[bytes]] = []

    def work() -> None:
        results.append([id_sort_key(i) for i in ids])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 4


def test_a_missing_library_says_what_to_install(tmp_path):
    with pytest.raises(CollationUnavailable, match="libicu72"):
        RootCollator(folders=(str(tmp_path),))
