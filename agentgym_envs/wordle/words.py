"""The word lists, built from installed packages (never invented, never downloaded at run time).

* Allowed guesses: every five-letter, all-lowercase, purely alphabetic entry of Webster's Second
  International (``web2``) and of the GNU Collaborative International Dictionary of English
  (``gcide``), both shipped by the ``english-words`` package.
* Answers: the allowed words that are common English (Zipf frequency >= 3.0 in the ``wordfreq``
  package: about once per million words or more), are listed lowercase in both dictionaries, and
  never appear capitalised in ``web2`` (which drops most proper names).

Item ids index the sorted answer list. Its SHA-256 is pinned below: if other versions of the
packages give another list, loading fails loudly instead of silently changing every item.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from functools import lru_cache
from pathlib import Path

from agentgym_envs.core import require
from agentgym_envs.core.cache import cache_root
from agentgym_envs.core.extras import distribution_version

WORD_LENGTH = 5
MIN_ZIPF = 3.0
#: Fingerprint of the answer list built from english-words 2.0.2 and wordfreq 3.1.1.
ANSWERS_SHA256 = "f23182f3db1b542c47a1858621c5b10928de9885d349d1db63239282eb99db13"
ANSWERS_COUNT = 1668


def _fingerprint(words: tuple[str, ...]) -> str:
    return hashlib.sha256("\n".join(words).encode()).hexdigest()


@lru_cache(maxsize=1)
def _dictionaries() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(web2 lowercase entries, capitalised web2 entries lowercased, gcide lowercased), 5 letters each."""
    english_words = require("english_words", extra="wordle")
    web2 = english_words.get_english_words_set(["web2"], lower=False, alpha=True)
    gcide = english_words.get_english_words_set(["gcide"], lower=True, alpha=True)
    web2 = {w for w in web2 if len(w) == WORD_LENGTH and w.isascii()}
    lowercase = frozenset(w for w in web2 if w.islower())
    capitalised = frozenset(w.lower() for w in web2 if not w.islower())
    gcide_words = frozenset(w for w in gcide if len(w) == WORD_LENGTH and w.isascii() and w.isalpha())
    return lowercase, capitalised, gcide_words


@lru_cache(maxsize=1)
def allowed_guesses() -> frozenset[str]:
    """Every word the game accepts as a guess (the answers included)."""
    return frozenset(_lists()["allowed"]) | frozenset(answers())


def _zipf(frequencies: dict[str, float], word: str) -> float:
    """wordfreq's Zipf value (log10 of frequency per billion words, 2 decimals) for a plain lowercase word."""
    frequency = frequencies.get(word, 0.0)
    return round(math.log10(frequency) + 9, 2) if frequency > 0 else 0.0


def _versions() -> str:
    english_words, wordfreq = (distribution_version(name, extra="wordle") for name in ("english-words", "wordfreq"))
    return f"english-words-{english_words}_wordfreq-{wordfreq}"


def _cache_file() -> Path:
    return cache_root() / "wordle" / f"words-{_versions()}.json"


def _build_lists() -> dict[str, list]:
    """Answers (with Zipf frequency) and allowed guesses from the packages; ~1.5 s, so cached on disk."""
    wordfreq = require("wordfreq", extra="wordle")
    frequencies = wordfreq.get_frequency_dict("en")
    lowercase, capitalised, gcide_words = _dictionaries()
    scored = ((w, _zipf(frequencies, w)) for w in sorted(lowercase & gcide_words) if w not in capitalised)
    return {"answers": [[w, z] for w, z in scored if z >= MIN_ZIPF], "allowed": sorted(lowercase | gcide_words)}


@lru_cache(maxsize=1)
def _lists() -> dict[str, list]:
    path = _cache_file()
    try:
        lists = json.loads(path.read_text())
        if not isinstance(lists.get("answers"), list) or not isinstance(lists.get("allowed"), list):
            raise ValueError("incomplete cache file")
    except (OSError, ValueError, AttributeError):
        lists = _build_lists()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(lists))
            os.replace(tmp, path)
        except OSError:  # a read-only home is fine: the lists are rebuilt next time
            pass
    return lists


@lru_cache(maxsize=1)
def _answers_with_frequency() -> tuple[tuple[str, float], ...]:
    entries = tuple((str(w), float(z)) for w, z in _lists()["answers"])
    words = tuple(w for w, _ in entries)
    if len(words) != ANSWERS_COUNT or _fingerprint(words) != ANSWERS_SHA256:
        raise RuntimeError(
            f"the installed english-words/wordfreq give a different Wordle answer list ({len(words)} words, "
            f"expected {ANSWERS_COUNT}); item ids would change meaning. Install the pinned versions: "
            "pip install 'agentgym-rl[wordle]'"
        )
    return entries


def answers() -> tuple[str, ...]:
    """The possible hidden words, sorted; item id = position."""
    return _answer_words()


@lru_cache(maxsize=1)
def _answer_words() -> tuple[str, ...]:
    return tuple(w for w, _ in _answers_with_frequency())


@lru_cache(maxsize=1)
def frequency_rank() -> dict[str, int]:
    """Answer -> rank by corpus frequency (0 = most common); the solver probes with common words first."""
    ranked = sorted(_answers_with_frequency(), key=lambda entry: (-entry[1], entry[0]))
    return {w: i for i, (w, _) in enumerate(ranked)}
