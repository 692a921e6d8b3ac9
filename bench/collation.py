"""Is the canonical order's collation (`digest.collation`: ICU's C API through ctypes, no compiler)
the one PyICU gave, and how near is it to Node's `localeCompare`? A seeded corpus of turn ids, all
tied on the timestamp, with case, accents (composed and decomposed), digits, punctuation, quotes and
apostrophes, spaces, and non-Latin scripts (Greek, Cyrillic, Hebrew, Arabic, Devanagari, Thai,
Hangul, kana, CJK, emoji, and characters of Unicode 14-16), plus the golden fixtures' ids.

Three arms on the same ids: the sort keys of `digest.collation.RootCollator` against PyICU's
(`Collator.createInstance(Locale.getRoot())`, normalization on: byte for byte, when PyICU is
installed), and the order against Node's `ids.sort((a, b) => a.localeCompare(b) || codepoints)`
(when `node` is on PATH: the original's runtime, with its own ICU).

Run: .venv/bin/python bench/collation.py [--ids 20000] [--seed 42] [--smoke]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from digest.collation import RootCollator  # noqa: E402

PIECES = [
    *"abcxyzABCXYZ",
    *"0123456789",
    "10", "9", "09", "1.5", "½", "²",
    *"-_.:/ '\"!#@",
    "\u2018", "\u2019", "\u201c", "\u201d", "\u05f3", "\u2013", "\u2014", "\u00a0",
    *"éÉèêëàâäÄÖöüÜßçñÑøØåÅæÆœŒıİ",
    "e\u0301", "E\u0301", "a\u0308", "o\u0308", "u\u0308", "c\u0327", "n\u0303", "a\u030a",
    *"αβγΑΒΓάέ", *"абвАБВёЁй", *"אבגש", *"ابتث", *"कखगक्ष", *"กขคเ", *"한국어", *"あいうアイウ", *"中文字漢",
    "\U0001f600", "\U0001f44d", "\U0001f44d\U0001f3fd",
    "\U0001fae8", "\U0001f6dd", "\U00011f00", "\U0001e030",  # Unicode 15, 14, 15, 15
    "\ufb01", "\u212b", "\u2126", "\uff21", "\uff41",  # compatibility forms
]  # fmt: skip


def corpus(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    ids = set()
    while len(ids) < count:
        ids.add("".join(rng.choice(PIECES) for _ in range(rng.randint(1, 6))))
    fixtures = ROOT / "tests" / "fixtures" / "revision-input.memory-backup.jsonl"
    for line in fixtures.read_text(encoding="utf-8").rstrip("\n").split("\n"):  # a document holds a U+2028
        ids.add(json.loads(line)["id"])
    return sorted(ids)


def node_order(ids: list[str]) -> list[str] | None:
    if shutil.which("node") is None:
        return None
    script = """
const ids = JSON.parse(require('fs').readFileSync(process.argv[1], 'utf8'));
const cp = (a, b) => { const x = Array.from(a), y = Array.from(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) { const d = x[i].codePointAt(0) - y[i].codePointAt(0); if (d) return d; }
  return x.length - y.length; };
ids.sort((a, b) => a.localeCompare(b) || cp(a, b));
process.stdout.write(JSON.stringify({ids, icu: process.versions.icu, unicode: process.versions.unicode}));
"""
    with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8", delete=False) as f:
        json.dump(ids, f, ensure_ascii=False)
    out = subprocess.run(["node", "-e", script, f.name], capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    print(f"node: ICU {result['icu']}, Unicode {result['unicode']}")
    return result["ids"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--smoke", action="store_true", help="2,000 ids")
    args = parser.parse_args()
    if args.smoke:
        args.ids = 2000
    ids = corpus(args.ids, args.seed)
    collator = RootCollator()
    started = time.perf_counter()
    keys = {i: collator.sort_key(i) for i in ids}
    per_key_us = (time.perf_counter() - started) / len(ids) * 1e6
    ours = sorted(ids, key=lambda i: (keys[i], i))
    digest = hashlib.sha256("\n".join(ours).encode("utf-8", "surrogatepass")).hexdigest()
    decomposed = sum(1 for i in ids if unicodedata.normalize("NFC", i) != i)
    tied = len(ids) - len(set(keys.values()))
    print(f"collation: {len(ids)} ids (seed {args.seed}; {decomposed} not in NFC), one timestamp for all; "
          f"ctypes over {collator.library} (ICU {collator.version}): {per_key_us:.1f} us a key; "
          f"ids the collator holds equal: {tied}; order sha256 {digest[:16]}")  # fmt: skip
    try:
        import icu
    except ImportError:
        print("PyICU: not installed (no byte-for-byte comparison)")
    else:
        pyicu = icu.Collator.createInstance(icu.Locale.getRoot())
        pyicu.setAttribute(icu.UCollAttribute.NORMALIZATION_MODE, icu.UCollAttributeValue.ON)
        differ = [i for i in ids if pyicu.getSortKey(i) != keys[i]]
        print(f"PyICU {icu.VERSION} over ICU {icu.ICU_VERSION}: sort keys differing {len(differ)} of {len(ids)}")
    node = node_order(ids)
    if node is not None:
        rank = {i: n for n, i in enumerate(node)}
        inversions = sum(1 for a, b in zip(ours, ours[1:]) if rank[a] > rank[b])
        moved = sum(1 for a, b in zip(ours, node) if a != b)
        print(f"node localeCompare: same order {ours == node}; ids at another place {moved} of {len(ids)}; "
              f"adjacent pairs in the other order {inversions}")  # fmt: skip
        if inversions:
            shown = [(a, b) for a, b in zip(ours, ours[1:]) if rank[a] > rank[b]][:8]
            print("  e.g. " + "; ".join(f"{a!r} < {b!r} here, not in Node" for a, b in shown))


if __name__ == "__main__":
    main()
