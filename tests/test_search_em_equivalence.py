"""Deep Search's exact match against Search-R1's ``qa_em.py`` (``normalize_answer``, ``em_check``),
re-implemented here from the original, over generated answer / gold pairs: case, articles, ASCII
and Unicode punctuation, accents, NFKC forms, LaTeX wrappers, whitespace, several golds and golds
that normalise to nothing."""

from __future__ import annotations

import random
import re
import string

from agentgym_envs.search.data import exact_match


# ---- upstream, re-implemented ---------------------------------------------------------------------
def up_normalize_answer(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def up_em_check(prediction, golden_answers):
    if isinstance(golden_answers, str):
        golden_answers = [golden_answers]
    normalized_prediction = up_normalize_answer(prediction)
    return int(any(up_normalize_answer(g) == normalized_prediction for g in golden_answers))


# ---- generated pairs ------------------------------------------------------------------------------
GOLDS = [
    "Kestrel", "The Beatles", "1843", "Antonín Dvořák", "São Paulo", "Crème brûlée", "an apple a day",
    "U.S.A.", "Rock 'n' roll", "1,000,000", "3.14", "Jean-Paul Sartre", "A Tale of Two Cities", "x²",
    "ﬁnance", "Ｔｏｋｙｏ", "Wrocław", "the", "—", "Mötley Crüe", "Ørsted", "50%", "C++", "yes", "no",
    "Tōkyō", "naïve", "Hello, World!", "e = mc^2", "the Who", "An", "Straße", "İstanbul", "ǅemal", "Ω",
]
WRAPS = [
    lambda s: s, str.upper, str.lower, str.title, lambda s: f"  {s}  ", lambda s: f"{s}.", lambda s: f'"{s}"',
    lambda s: f"“{s}”", lambda s: f"‘{s}’", lambda s: f"\\boxed{{{s}}}", lambda s: f"\\text{{{s}}}",
    lambda s: f"**{s}**", lambda s: f"the {s}", lambda s: f"a {s}", lambda s: f"{s} —", lambda s: f"{s}…",
    lambda s: s.replace(" ", "  "), lambda s: s.replace("-", " "), lambda s: s.replace("-", "–"),
    lambda s: "".join(c for c in __import__("unicodedata").normalize("NFKD", s) if ord(c) < 128),
    lambda s: __import__("unicodedata").normalize("NFKC", s), lambda s: s + " (disambiguation)", lambda s: "",
    lambda s: s[:-1], lambda s: f"«{s}»", lambda s: f"$\\text{{{s}}}$",
]


def pairs(n: int = 20_000, seed: int = 38):
    rng = random.Random(seed)
    for _ in range(n):
        golds = rng.sample(GOLDS, rng.choice([1, 1, 2, 3]))
        base = rng.choice(golds) if rng.random() < 0.8 else rng.choice(GOLDS)
        prediction = base
        for _ in range(rng.choice([1, 1, 2])):
            prediction = rng.choice(WRAPS)(prediction)
        yield prediction, golds


def search_agreement(lenient: bool = False) -> tuple[int, int]:
    agree = total = 0
    for prediction, golds in pairs():
        total += 1
        agree += bool(exact_match(prediction, golds, lenient=lenient)) == bool(up_em_check(prediction, golds))
    return agree, total


def test_exact_match_equals_search_r1s_em_check() -> None:
    agree, total = search_agreement()
    lenient_agree, _ = search_agreement(lenient=True)
    print(f"search EM: {agree}/{total} agree ({agree / total:.4%}); lenient_answers=True: {lenient_agree / total:.4%}")
    assert agree / total >= 0.995
    assert lenient_agree < agree  # the opt-in is a real change


def test_empty_answers_follow_em_check_and_lenient_refuses_them() -> None:
    assert exact_match("", ["the"]) and up_em_check("", ["the"])  # a gold that normalises to nothing
    assert exact_match("—", ["Kestrel", "—"])
    assert not exact_match("", ["the"], lenient=True)
    assert not exact_match("", ["Kestrel"])
    assert exact_match("\\boxed{Dvořák}", ["Dvorak"], lenient=True)
    assert not exact_match("\\boxed{Dvořák}", ["Dvorak"])
    assert exact_match("Antonín Dvořák.", ["antonín dvořák"])
