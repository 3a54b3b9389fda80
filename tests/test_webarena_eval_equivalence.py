"""WebArena's string and URL checks against ``evaluation_harness/evaluators.py`` (StringEvaluator's
``clean_answer``/``exact_match``/``must_include``, URLEvaluator's "GOLD in PRED",
HTMLContentEvaluator's content checks), re-implemented here from the original, over generated
answers and URLs. nltk (WebArena's ``word_tokenize``) is not installed: the re-implementation
below splits words as the Treebank tokenizer does for the cases generated here (numbers with
inner separators stay whole, sentence punctuation and currency signs stand alone)."""

from __future__ import annotations

import collections
import html
import random
import urllib.parse

from agentgym_envs.webarena import evaluation


# ---- upstream, re-implemented ---------------------------------------------------------------------
def up_clean_answer(answer):
    answer = answer.strip()
    if answer.startswith("'") and answer.endswith("'"):
        answer = answer[1:-1]
    elif answer.startswith('"') and answer.endswith('"'):
        answer = answer[1:-1]
    return answer.lower()


def up_word_tokenize(text):
    out = []
    for piece in text.split():
        while piece and piece[0] in "\"“‘«([{$#":
            out.append(piece[0])
            piece = piece[1:]
        tail = []
        while piece and piece[-1] in ".,;:!?\"”’»')]}%":
            tail.insert(0, piece[-1])
            piece = piece[:-1]
        if piece:
            out.append(piece)
        out += tail
    return out


def up_exact_match(ref, pred):
    return float(up_clean_answer(pred) == up_clean_answer(ref))


def up_must_include(ref, pred, tokenize=False):
    clean_ref, clean_pred = up_clean_answer(ref), up_clean_answer(pred)
    if tokenize and len(clean_ref) == 1 and len(up_word_tokenize(clean_ref)) == 1:
        return float(clean_ref in up_word_tokenize(clean_pred))
    return float(clean_ref in clean_pred)


def up_string_evaluator(answer, reference_answers):
    pred = up_clean_answer(answer)
    score = 1.0
    for approach, value in reference_answers.items():
        if approach == "exact_match":
            score *= up_exact_match(ref=value, pred=pred)
        elif approach == "must_include":
            for must_value in value:
                score *= up_must_include(ref=must_value, pred=pred, tokenize=(len(value) == 1))
    return score


def up_url_evaluator(page_url, reference_url):
    def clean_url(url):
        return str(url).rstrip("/")

    def parse_url(url):
        parsed = urllib.parse.urlparse(url)
        return parsed.netloc + parsed.path, urllib.parse.parse_qs(parsed.query)

    pred = clean_url(page_url)
    ref_urls = [clean_url(u) for u in reference_url.split(" |OR| ")]
    ref_base_paths, ref_queries = [], collections.defaultdict(set)
    for url in ref_urls:
        base_path, query = parse_url(url)
        ref_base_paths.append(base_path)
        for k, v in query.items():
            ref_queries[k].update(v)
    pred_base_paths, pred_query = parse_url(pred)
    base_score = float(any(ref_base_path in pred_base_paths for ref_base_path in ref_base_paths))
    query_score = 1.0
    for k, possible_values in ref_queries.items():
        query_score *= float(any(v in pred_query.get(k, []) for v in possible_values))
    return base_score * query_score


def up_html_content(selected_element, required_contents):
    selected_element = html.unescape(selected_element)
    if "exact_match" in required_contents:
        return up_exact_match(ref=required_contents["exact_match"], pred=selected_element)
    score = 1.0
    for content in required_contents["must_include"]:
        options = content.split(" |OR| ")
        score *= float(any(up_must_include(ref=c, pred=selected_element, tokenize=False) for c in options))
    return score


# ---- generated cases ------------------------------------------------------------------------------
REFERENCES = ["12.99", "1263.97", "$42.99", "2", "0", "1", "Complete", "Canceled", "-79.9436", "40.4406",
              "Vertex Ceramic Mug", "3 min |OR| 5 min", "N/A", "USB-C", "it's", "a", "Emma Lopez", "2021-03-05", "5%"]
ANSWER_FORMS = [
    "{r}", "{R}", "'{r}'", '"{r}"', " {r} ", "{r}.", "${r}", "The answer is {r}", "{r} in all", "about {r}!",
    "1,{r}", "-{r}", "{r}0", "x{r}", "{r}, {r}", "“{r}”", "{n}", "({r})", "{r}%", "it is '{r}'", "",
]


def string_cases(n: int = 6000, seed: int = 38):
    rng = random.Random(seed)
    for _ in range(n):
        ref = rng.choice(REFERENCES)
        answer = rng.choice(ANSWER_FORMS).format(r=ref, R=ref.upper(), n=rng.choice(REFERENCES))
        kind = rng.choice(["exact_match", "must_include", "must_include2"])
        if kind == "exact_match":
            yield answer, {"exact_match": ref}
        elif kind == "must_include":
            yield answer, {"must_include": [ref]}
        else:
            yield answer, {"must_include": [ref, rng.choice(REFERENCES)]}


URL_REFS = ["http://h:1/search?q=yoga mat", "http://h:1/search?q=yoga%20mat&cat=3", "http://h:1/a |OR| http://h:1/b",
            "http://h:1/directions?from=A%26B&to=C", "http://h:1/Product/7", "http://h:1/s?q=-79.9436",
            "http://h:1/orders/", "http://h:1/s?q=x |OR| http://h:1/s?q=y"]


def url_cases(n: int = 4000, seed: int = 38):
    rng = random.Random(seed)
    forms = [
        lambda u: u, lambda u: u + "/", lambda u: u.replace(" ", "+"), lambda u: u.replace(" ", "%20"),
        lambda u: u.lower(), lambda u: u.upper(), lambda u: u + ("&" if "?" in u else "?") + "page=2",
        lambda u: u.replace("/search", "/search/results"), lambda u: u.replace("h:1", "g:1"),
        lambda u: u.replace("%26", "%2526"), lambda u: u.replace("%20", "%2520"), lambda u: u.replace("?", "/?"),
        lambda u: u.replace("yoga", "Yoga"), lambda u: u.replace("-79", "79"), lambda u: u.split("?")[0],
        lambda u: urllib.parse.unquote(u),
    ]
    for _ in range(n):
        ref = rng.choice(URL_REFS)
        pred = rng.choice(ref.split(" |OR| "))
        for _ in range(rng.choice([1, 1, 2])):
            pred = rng.choice(forms)(pred)
        yield pred.replace(" ", "%20"), ref


def html_cases(n: int = 2000, seed: int = 38):
    rng = random.Random(seed)
    for answer, refs in string_cases(n, seed):
        text = rng.choice([answer, html.escape(answer), answer.replace("&", "&amp;"), f"<b>{answer}</b>"])
        if "exact_match" in refs:
            yield text, refs
        else:
            yield text, {"must_include": [" |OR| ".join(refs["must_include"])]}


def agreement(lenient: bool = False, module=evaluation) -> dict[str, tuple[int, int]]:
    def count(pairs):
        agree = total = 0
        for ours, upstream in pairs:
            total += 1
            agree += bool(ours) == bool(upstream)
        return agree, total

    kw = {"lenient": lenient} if lenient or module is evaluation else {}
    return {
        "string_match": count((module.string_match(a, r, **kw), up_string_evaluator(a, r)) for a, r in string_cases()),
        "url_match": count((module.url_match(p, r, **kw), up_url_evaluator(p, r)) for p, r in url_cases()),
        "program_html": count((module.content_match(t, r, **kw), up_html_content(t, r)) for t, r in html_cases()),
    }


def test_webarena_checks_equal_webarenas_evaluators() -> None:
    result = agreement()
    lenient = agreement(lenient=True)
    for name, (agree, total) in result.items():
        print(f"webarena {name}: {agree}/{total} agree ({agree / total:.4%}); lenient_matching: "
              f"{lenient[name][0] / total:.4%}")
        assert agree / total >= 0.995, name
    assert all(lenient[name][0] < result[name][0] for name in result)  # the opt-in is a real change
