"""Question sets over the fictional encyclopedia, one per dataset the paper evaluates on.

What each set reproduces (the kind of question, not the text):

* **NQ**: single-hop factoid questions about well-known entities, written like search-engine
  queries (lower case, no question mark).
* **TriviaQA**: single-hop trivia, mostly "which X did A and B?" clue questions whose clues all
  come from one passage, plus plain factoid questions.
* **PopQA**: PopQA's relation templates ("What is X's occupation?") over long-tail entities
  (the least mentioned quarter of each kind).
* **HotpotQA**: 80% bridge questions (two hops through a bridge entity), 20% comparisons of two
  entities (which is older / larger, and yes/no questions).
* **2Wiki**: compositional (two hops), comparison, bridge-comparison (two hops on each side)
  and inference questions (paternal grandfather = father of the father, mother-in-law, ...).
* **Musique**: chains of 2, 3 and 4 hops (5:3:2), composed from single-hop questions.
* **Bamboogle**: two-hop compositions worded with relative clauses.

Every question records its supporting passages (one per hop: the entity, the relation, the
passage that states it, and a search query for it), a ``program`` the scripted agents execute,
and, for multi-hop questions, the phrases no single document may contain together (the anchor
and the answer, or the two compared entities). Candidates that fail any check are dropped, so a
multi-hop question cannot be answered from one document.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

from agentgym_envs.search.articles import Encyclopedia
from agentgym_envs.search.data import Question, contains_phrase, normalize_text
from agentgym_envs.search.schema import KINDS, OCCUPATIONS, PHRASES, Relation, relation, relations_of
from agentgym_envs.search.tasks import SUBTASKS, TEST_SIZES, TRAIN_SIZE
from agentgym_envs.search.world import Entity

# The question wordings are data (``phrases.json``, with the article phrase tables).
#: relation name -> the two hops that infer it (``INFERENCE["paternal grandfather"] == ("father", "father")``).
INFERENCE: dict[str, tuple[str, str]] = {name: tuple(hops) for name, hops in PHRASES["inference"].items()}
#: (kind, attribute) -> (question when the smaller value wins, question when the larger wins)
COMPARISONS: dict[tuple[str, str], tuple[str, str]] = {
    (kind, key): tuple(wordings) for kind, key, wordings in PHRASES["comparisons"]
}
#: (kind, attribute) -> yes/no question whether two entities share the value.
SAME: dict[tuple[str, str], str] = {(kind, key): question for kind, key, question in PHRASES["same"]}
#: (kind, path, attribute, pick) -> question (2Wiki bridge comparison); pick "same" is yes/no.
BRIDGE_COMPARISONS: list[tuple[str, tuple[str, ...], str, str, str]] = [
    (kind, tuple(path), key, pick, question) for kind, path, key, pick, question in PHRASES["bridge_comparisons"]
]


class Rejected(Exception):
    """A candidate question failed a check; the generator draws another."""


def plural(noun: str) -> str:
    """The plural of a noun (``-es`` after ch, sh, s and x)."""
    return noun + ("es" if noun.endswith(("ch", "sh", "s", "x")) else "s")


def capitalize(text: str) -> str:
    """``text`` with its first letter in upper case (the rest kept)."""
    return text[:1].upper() + text[1:]


@dataclass
class _Hop:
    entity: Entity
    key: str


class QuestionFactory:
    """Draws checked questions of every dataset style from one encyclopedia."""

    def __init__(self, encyclopedia: Encyclopedia):
        self.enc = encyclopedia
        self.world = encyclopedia.world
        self.norm_docs = [normalize_text(f"{d.title} {d.text}") for d in encyclopedia.documents]
        postings: dict[str, list[int]] = {}
        for index, text in enumerate(self.norm_docs):
            for token in set(text.split()):
                postings.setdefault(token, []).append(index)
        self.postings = {token: set(ids) for token, ids in postings.items()}
        self.by_kind: dict[str, list[Entity]] = {kind: self.world.of_kind(kind) for kind in KINDS}
        self.popularity = {
            e.id: len(self.docs_with([e.name])) - len(encyclopedia.article_docs[e.id]) for e in self.world.entities
        }
        self.head: dict[str, list[Entity]] = {}
        self.tail: dict[str, list[Entity]] = {}
        for kind, entities in self.by_kind.items():
            ranked = sorted(entities, key=lambda e: (self.popularity[e.id], e.id))
            quarter = max(1, len(ranked) // 4)
            self.tail[kind] = ranked[:quarter]
            self.head[kind] = ranked[len(ranked) // 2 :]
        self.doc_facts: dict[int, list[str]] = {}
        for (_, key), doc in encyclopedia.fact_doc.items():
            self.doc_facts.setdefault(doc, []).append(key)
        self.seen: set[str] = set()

    # ---- checks -------------------------------------------------------------------------------
    def docs_with(self, phrases: list[str]) -> list[int]:
        """Indices of the documents that contain every phrase (as whole normalised words)."""
        candidates: set[int] | None = None
        for phrase in phrases:
            tokens = normalize_text(phrase).split()
            if not tokens:
                return []
            for token in tokens:
                posting = self.postings.get(token, set())
                candidates = set(posting) if candidates is None else candidates & posting
                if not candidates:
                    return []
        return sorted(i for i in candidates or () if all(contains_phrase(self.norm_docs[i], p) for p in phrases))

    def _hop(self, entity: Entity, key: str) -> dict[str, Any]:
        rel = relation(entity.kind, key)
        doc = self.enc.documents[self.enc.fact_doc[(entity.id, key)]]
        return {
            "entity": entity.name,
            "kind": entity.kind,
            "relation": key,
            "doc_id": doc.id,
            "value": self.world.value_text(entity, key),
            "query": f"{entity.name} {rel.keyword}".strip(),
        }

    def answers(self, entity: Entity, key: str) -> list[str]:
        """Every accepted answer of a fact: as the articles write it, plus a number's plain form and units, or an
        occupation's synonyms.
        """
        rel = relation(entity.kind, key)
        text = self.world.value_text(entity, key)
        if key == "occupation":
            return list(OCCUPATIONS[text])
        if rel.target == "number":
            plain = str(entity.facts[key])
            forms = [text] + ([plain] if plain != text else [])
            return forms + [f"{form} {unit}" for form in (text, plain) for unit in rel.unit]
        return [text]

    def _finish(
        self,
        subtask: str,
        text: str,
        answers: list[str],
        qtype: str,
        hops: list[tuple[Entity, str]],
        program: dict[str, Any],
        apart: list[str] | None = None,
        **extra: Any,
    ) -> Question:
        """Check a candidate and wrap it as a ``Question``; raises ``Rejected`` when a check fails."""
        norm_question = normalize_text(text)
        if norm_question in self.seen:
            raise Rejected("duplicate")
        if program["op"] == "chain" and any(contains_phrase(norm_question, a) for a in answers):
            raise Rejected("answer in question")
        if program["op"] == "chain" and any(
            contains_phrase(norm_question, entity.name) for entity, _ in hops[1:] if entity.name != hops[0][0].name
        ):
            raise Rejected("a bridge entity is named in the question")
        support = [self._hop(entity, key) for entity, key in hops]
        if len({h["doc_id"] for h in support}) != len(support):
            raise Rejected("two hops in one passage")
        if apart is not None and self.docs_with(apart):
            raise Rejected("one document holds everything")
        self.seen.add(norm_question)
        metadata = {"type": qtype, "hops": len(support), "support": support, "program": program, **extra}
        if apart is not None:
            metadata["apart"] = apart
        return Question(f"{subtask.lower()}-{len(self.seen)}", text, answers, metadata)

    # ---- single hop ---------------------------------------------------------------------------
    def _askable(self, entity: Entity) -> list[Relation]:
        return [r for r in relations_of(entity.kind) if r.askable and r.key in entity.facts]

    def single(self, subtask: str, rng: random.Random, pool: dict[str, list[Entity]], style: str) -> Question:
        """A one-fact question (NQ, TriviaQA, PopQA style) about a random entity of ``pool``."""
        kind = rng.choice([k for k in KINDS if pool[k]])
        entity = rng.choice(pool[kind])
        rels = self._askable(entity)
        if not rels:
            raise Rejected("no facts")
        rel = rng.choice(rels)
        template = rel.popqa if style == "popqa" and rel.popqa else rel.ask
        if style == "popqa" and not rel.popqa:
            raise Rejected("no PopQA template")
        text = template.format(x=entity.ref)
        if style == "nq":  # NQ questions are real search queries: lower case, no question mark
            text = text.rstrip("?").lower().replace("in what year", "when")
        program = {"op": "chain", "start": entity.name, "start_kind": entity.kind, "relations": [rel.key]}
        return self._finish(
            subtask,
            text,
            self.answers(entity, rel.key),
            "single",
            [(entity, rel.key)],
            program,
            popularity=self.popularity[entity.id],
        )

    def clue(self, subtask: str, rng: random.Random) -> Question:
        """A trivia clue question: name the entity that satisfies 2-3 facts of one passage."""
        kind = rng.choice([k for k in KINDS if k != "treaty"])
        entity = rng.choice(self.by_kind[kind])
        doc = rng.choice(self.enc.article_docs[entity.id])
        keys = [k for k in self.doc_facts.get(doc, []) if relation(kind, k).clue]
        if len(keys) < 2:
            raise Rejected("too few clues")
        keys = rng.sample(keys, min(len(keys), rng.choice((2, 2, 3))))
        noun = entity.facts["occupation"] if kind == "person" else KINDS[kind].noun
        clues = [relation(kind, k).clue.format(v=self.world.value_text(entity, k)) for k in keys]
        text = f"Which {noun} {', '.join(clues[:-1])}{',' if len(clues) > 2 else ''} and {clues[-1]}?"
        wanted = {k: entity.facts[k] for k in keys}
        matches = [
            e
            for e in self.by_kind[kind]
            if all(e.facts.get(k) == v for k, v in wanted.items())
            and (kind != "person" or e.facts["occupation"] == noun)
        ]
        if len(matches) != 1:
            raise Rejected("clues not unique")
        program = {
            "op": "identify",
            "kind": kind,
            "noun": noun,
            "clues": {k: self.world.value_text(entity, k) for k in keys},
        }
        return self._finish(subtask, text, [entity.name], "clue", [(entity, keys[0])], program)

    # ---- chains -------------------------------------------------------------------------------
    def walk(self, rng: random.Random, length: int, start_kinds: tuple[str, ...] | None = None) -> list[_Hop]:
        """A random path of ``length`` facts; all but the last lead to another entity."""
        kinds = start_kinds or tuple(k for k in KINDS if k not in ("country",))
        entity = rng.choice(self.by_kind[rng.choice(kinds)])
        visited = {entity.id}
        hops: list[_Hop] = []
        for step in range(length):
            last = step == length - 1
            options = [r for r in self._askable(entity) if last or r.is_entity]
            if not last:
                options = [r for r in options if int(entity.facts[r.key]) not in visited]
            if not options:
                raise Rejected("dead end")
            rel = rng.choice(options)
            hops.append(_Hop(entity, rel.key))
            if not last:
                entity = self.world.entities[int(entity.facts[rel.key])]
                visited.add(entity.id)
        if (
            relation(hops[-1].entity.kind, hops[-1].key).is_entity
            and int(hops[-1].entity.facts[hops[-1].key]) in visited
        ):
            raise Rejected("cycle")
        return hops

    def chain(self, subtask: str, rng: random.Random, length: int, qtype: str, wording: str = "np") -> Question:
        """A multi-hop question: a random path of ``length`` facts, asked as one nested phrase."""
        hops = self.walk(rng, length)
        start = hops[0].entity
        phrase = start.ref
        for hop in hops[:-1]:
            rel = relation(hop.entity.kind, hop.key)
            template = rel.clause if wording == "clause" and rel.clause and rng.random() < 0.7 else rel.np
            phrase = template.format(x=phrase)
        last = relation(hops[-1].entity.kind, hops[-1].key)
        text = capitalize(last.ask.format(x=phrase))
        answers = self.answers(hops[-1].entity, hops[-1].key)
        program = {"op": "chain", "start": start.name, "start_kind": start.kind, "relations": [h.key for h in hops]}
        return self._finish(
            subtask, text, answers, qtype, [(h.entity, h.key) for h in hops], program, apart=[start.name, answers[0]]
        )

    def inference(self, subtask: str, rng: random.Random) -> Question:
        """A question about a relative of a relative (a grandparent, an uncle ...), 2WikiMultihopQA's inference type."""
        label, keys = rng.choice(list(INFERENCE.items()))
        person = rng.choice(self.by_kind["person"])
        if keys[0] not in person.facts:
            raise Rejected("no such relative")
        middle = self.world.entities[int(person.facts[keys[0]])]
        if keys[1] not in middle.facts:
            raise Rejected("no such relative")
        answer = self.world.value_text(middle, keys[1])
        program = {"op": "chain", "start": person.name, "start_kind": "person", "relations": list(keys)}
        return self._finish(
            subtask,
            f"Who is the {label} of {person.name}?",
            [answer],
            "inference",
            [(person, keys[0]), (middle, keys[1])],
            program,
            apart=[person.name, answer],
        )

    # ---- comparisons --------------------------------------------------------------------------
    def _pair(self, rng: random.Random, kind: str, usable: Callable[[Entity], bool]) -> tuple[Entity, Entity]:
        pool = [e for e in rng.sample(self.by_kind[kind], min(60, len(self.by_kind[kind]))) if usable(e)]
        if len(pool) < 2:
            raise Rejected("no pair")
        return pool[0], pool[1]

    def comparison(self, subtask: str, rng: random.Random, yes_no: float = 0.3) -> Question:
        """A comparison of two entities: which is older, larger ... or, ``yes_no`` of the time, whether they share a
        fact.
        """
        if rng.random() < yes_no:
            (kind, key), template = rng.choice(list(SAME.items()))
            a, b = self._pair(rng, kind, lambda e: key in e.facts)
            if rng.random() < 0.5:  # make about half of the pairs share the value
                same = [e for e in self.by_kind[kind] if e.id != a.id and e.facts.get(key) == a.facts[key]]
                if not same:
                    raise Rejected("no partner")
                b = rng.choice(same)
            answer = "yes" if a.facts[key] == b.facts[key] else "no"
            program = {"op": "same", "kind": kind, "entities": [a.name, b.name], "path": [], "attribute": key}
            return self._finish(
                subtask,
                template.format(a=a.ref, b=b.ref),
                [answer],
                "comparison",
                [(a, key), (b, key)],
                program,
                apart=[a.name, b.name],
            )
        (kind, key), templates = rng.choice(list(COMPARISONS.items()))
        a, b = self._pair(rng, kind, lambda e: key in e.facts)
        if a.facts[key] == b.facts[key]:
            raise Rejected("tie")
        pick = rng.choice(("min", "max"))
        winner = (
            min((a, b), key=lambda e: int(e.facts[key]))
            if pick == "min"
            else max((a, b), key=lambda e: int(e.facts[key]))
        )
        template = templates[0 if pick == "min" else 1]
        program = {
            "op": "compare",
            "kind": kind,
            "entities": [a.name, b.name],
            "path": [],
            "attribute": key,
            "pick": pick,
        }
        return self._finish(
            subtask,
            template.format(a=a.ref, b=b.ref),
            [winner.name],
            "comparison",
            [(a, key), (b, key)],
            program,
            apart=[a.name, b.name],
        )

    def bridge_comparison(self, subtask: str, rng: random.Random) -> Question:
        """A comparison of two entities through a bridge entity each (whose director was born first ...), or whether
        the two bridges share a fact.
        """
        kind, path, key, pick, template = rng.choice(BRIDGE_COMPARISONS)

        def end(entity: Entity) -> Entity | None:
            for step in path:
                if step not in entity.facts:
                    return None
                entity = self.world.entities[int(entity.facts[step])]
            return entity if key in entity.facts else None

        a, b = self._pair(rng, kind, lambda e: end(e) is not None)
        end_a, end_b = end(a), end(b)
        assert end_a is not None and end_b is not None
        if end_a.id == end_b.id:
            raise Rejected("same bridge entity")
        hops = [(a, path[0]), (end_a, key), (b, path[0]), (end_b, key)]
        program = {
            "op": "compare" if pick != "same" else "same",
            "kind": kind,
            "entities": [a.name, b.name],
            "path": list(path),
            "attribute": key,
        }
        if pick == "same":
            answer = "yes" if end_a.facts[key] == end_b.facts[key] else "no"
        else:
            if end_a.facts[key] == end_b.facts[key]:
                raise Rejected("tie")
            values = {a.name: int(end_a.facts[key]), b.name: int(end_b.facts[key])}
            answer = (min if pick == "min" else max)(values, key=values.get)
            program["pick"] = pick
        return self._finish(
            subtask,
            template.format(a=a.ref, b=b.ref),
            [answer],
            "bridge_comparison",
            hops,
            program,
            apart=[a.name, b.name],
        )

    # ---- datasets -----------------------------------------------------------------------------
    def plan(self, subtask: str, rng: random.Random, index: int) -> Callable[[], Question]:
        """Pick the type of the next question (so the mix holds whatever the rejection rates)."""
        roll = rng.random()
        if subtask == "NQ":
            return lambda: self.single(subtask, rng, self.head, "nq")
        if subtask == "TriviaQA":
            return (
                (lambda: self.clue(subtask, rng))
                if roll < 0.7
                else (lambda: self.single(subtask, rng, self.head, "plain"))
            )
        if subtask == "PopQA":
            return lambda: self.single(subtask, rng, self.tail, "popqa")
        if subtask == "HotpotQA":
            return (
                (lambda: self.chain(subtask, rng, 2, "bridge"))
                if roll < 0.8
                else (lambda: self.comparison(subtask, rng))
            )
        if subtask == "2Wiki":
            if roll < 0.4:
                return lambda: self.chain(subtask, rng, 2, "compositional")
            if roll < 0.65:
                return lambda: self.comparison(subtask, rng, yes_no=0.4)
            if roll < 0.85:
                return lambda: self.bridge_comparison(subtask, rng)
            return lambda: self.inference(subtask, rng)
        if subtask == "Musique":
            length = (2, 2, 2, 2, 2, 3, 3, 3, 4, 4)[index % 10]
            return lambda: self.chain(subtask, rng, length, "chain")
        if subtask == "Bamboogle":
            return lambda: self.chain(subtask, rng, 2, "compositional", wording="clause")
        raise ValueError(f"unknown sub-task {subtask!r}")

    def question_set(self, subtask: str, count: int, seed: int) -> list[Question]:
        """The questions of a sub-task: drawn in the sub-task's mix of types, each candidate an answerable question or
        rejected and drawn again.

        Args:
            subtask: the sub-task (NQ, HotpotQA, ...).
            count: how many questions.
            seed: the draw's seed (the same seed gives the same questions).

        Returns:
            The questions, with ids ``<subtask>-<n>``.
        """
        rng = random.Random(f"agentgym-search-questions-{seed}-{subtask}")
        questions: list[Question] = []
        while len(questions) < count:
            make = self.plan(subtask, rng, len(questions))
            for _ in range(2000):
                try:
                    question = make()
                except Rejected:
                    continue
                question.id = f"{subtask.lower()}-{len(questions)}"
                questions.append(question)
                break
            else:
                raise RuntimeError(f"could not draw {subtask} question {len(questions)}: every candidate was rejected")
        return questions


def generate_questions(
    encyclopedia: Encyclopedia, seed: int = 0, train_size: int = TRAIN_SIZE
) -> dict[str, list[Question]]:
    """Every sub-task's questions: the first ``TEST_SIZES[s]`` are its test split, the rest train."""
    factory = QuestionFactory(encyclopedia)
    return {subtask: factory.question_set(subtask, TEST_SIZES[subtask] + train_size, seed) for subtask in SUBTASKS}
