"""TextWorld's PDDL engine for ALFWorld games, reorganised for fast resets and steps.

ALFWorld's text mode runs every game through TextWorld's ``PddlEnv``: Fast Downward grounds the
PDDL problem, its C library keeps the state and applies actions, TextWorld's grammar writes the
text. We use the same pieces (``PddlState``, ``GameLogic``, the grammar, ``libdownward``) but
avoid the three costs that make ``PddlEnv`` slow for RL:

* ``PddlEnv`` grounds the problem twice per ``load`` and twice again per ``reset`` (about 1 s
  each); we ground once per game, keep the result in memory (a few games) and on disk (gzip, in
  the cache directory), and hand it to the C library on every reset (about 10 ms);
* ``PddlEnv`` parses every admissible command through the grammar on every step; ALFWorld's
  command templates are plain (``take {o} from {r}``), so we format them directly;
* the grammar itself (a 400-line file parsed by TatSu) is parsed once per distinct grammar, and
  the small expressions TextWorld's text generator re-parses on every derivation (the symbols of
  a feedback rule, the conditions of its alternatives) are parsed once per process: we wrap the
  two TextWorld parse functions in caches (``_install_parse_caches``). This is pure memoisation
  of parsing immutable strings (a fresh copy of the parsed symbols is handed out every time), so
  it only changes speed, for every TextWorld PDDL game in the process: about 10x per step.

The planner (Fast Downward's search, used by the oracle) runs on the same grounded task on demand.
The C library is global state per loaded copy, so every engine owns its own copy (from a small
pool, because loading one means copying a 33 MB file).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import sys
import threading
from collections import Counter, OrderedDict, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from agentgym_envs.core import require

#: Fast Downward's translator is not re-entrant (module-level options, ``sys.argv``, ``sys.stdout``).
_TRANSLATOR_LOCK = threading.RLock()
_MEMORY_TRANSLATIONS: OrderedDict[str, "Translation"] = OrderedDict()
MEMORY_TRANSLATIONS = 2
_LOGICS: OrderedDict[str, Any] = OrderedDict()
_LIBRARY_POOL: list[Any] = []
LIBRARY_POOL_SIZE = 4

_TASK_RULE = re.compile(r'("rhs"\s*:\s*"Your task is to: )([^"]*?)(\.?")')
_GOAL_PLACEHOLDER = "AGENTGYM GOAL"


def _modules() -> tuple[Any, Any, Any]:
    """(textworld, fast_downward, textworld.envs.pddl.logic), or a clear pip hint."""
    textworld = require("textworld", extra="alfworld")
    fast_downward = require("fast_downward", extra="alfworld")
    with _translator_argv():
        pddl_logic = require("textworld.envs.pddl.logic", extra="alfworld")
    _install_parse_caches()
    return textworld, fast_downward, pddl_logic


_CACHES_INSTALLED = False


def _install_parse_caches() -> None:
    """Memoise TextWorld's parsing of grammar symbols and condition queries (see the module docstring)."""
    global _CACHES_INSTALLED
    if _CACHES_INSTALLED:
        return
    import copy
    from functools import lru_cache

    import textworld.logic
    import textworld.envs.pddl.textgen as textgen

    parse_symbols = textgen._parse_and_convert

    @lru_cache(maxsize=4096)
    def parsed_symbols(text: str, rule_name: str) -> Any:
        return parse_symbols(text, rule_name=rule_name)

    def cached_parse_symbols(text: Any, rule_name: str = "symbols", **kwargs: Any) -> Any:
        if not kwargs.get("trace"):
            kwargs.pop("trace", None)
        if kwargs or not isinstance(text, str):
            return parse_symbols(text, rule_name=rule_name, **kwargs)
        return copy.deepcopy(parsed_symbols(text, rule_name))  # symbols get a context attached later

    parse_query = textworld.logic.Rule.parse_conjunctive_query.__func__
    cached_query = lru_cache(maxsize=4096)(lambda cls, expr: parse_query(cls, expr))  # rules are only read

    with _TRANSLATOR_LOCK:
        if not _CACHES_INSTALLED:
            textgen._parse_and_convert = cached_parse_symbols
            textworld.logic.Rule.parse_conjunctive_query = classmethod(cached_query)
            _CACHES_INSTALLED = True


@contextmanager
def _translator_argv() -> Iterator[None]:
    """Fast Downward's translator reads ``sys.argv`` when imported and overwrites it when run."""
    saved = sys.argv
    sys.argv = ["translate.py", "domain", "task"]
    try:
        yield
    finally:
        sys.argv = saved


# ---- grounding (PDDL -> SAS) with caches ---------------------------------------------------------
@dataclass
class Translation:
    """A grounded game: Fast Downward's parsed task and its SAS encoding."""

    task: Any
    sas: bytes


def _parse_task(domain: str, problem: str) -> Any:
    from fast_downward.translate import normalize
    from fast_downward.translate.pddl_parser import lisp_parser, parsing_functions

    task = parsing_functions.parse_task(lisp_parser.parse_nested_list(domain.split("\n")),
                                        lisp_parser.parse_nested_list(problem.split("\n")))
    normalize.normalize(task)
    return task


def translate(domain: str, problem: str, cache_dir: Path | None, for_planning: bool = False) -> Translation:
    """Ground a game once: from memory, else from the disk cache, else with Fast Downward (~1 s).

    ``for_planning`` asks for Fast Downward's optimised encoding (unreachable facts and irrelevant
    variables pruned), which its search needs to plan in a second rather than minutes; the game
    state itself uses the full encoding, which keeps every fact the text is written from.
    """
    _, fast_downward, _ = _modules()
    kind = "plan" if for_planning else "play"
    key = hashlib.sha256(f"fd-20.6.4\0{kind}\0{domain}\0{problem}".encode()).hexdigest()
    with _TRANSLATOR_LOCK:
        if key in _MEMORY_TRANSLATIONS:
            _MEMORY_TRANSLATIONS.move_to_end(key)
            return _MEMORY_TRANSLATIONS[key]
        path = None if cache_dir is None else cache_dir / "sas" / key[:2] / f"{key}.sas.gz"
        with _translator_argv():
            sas = None
            if path is not None and path.exists():
                try:
                    sas = gzip.decompress(path.read_bytes())
                except (OSError, EOFError):
                    sas = None
            if sas is not None:
                task = _parse_task(domain, problem)
            else:
                task, text = fast_downward.pddl2sas(domain, problem, optimize=for_planning)
                sas = text.encode("utf-8")
                if path is not None:
                    _write_atomic(path, gzip.compress(sas, compresslevel=6))
        translation = Translation(task, sas)
        _MEMORY_TRANSLATIONS[key] = translation
        while len(_MEMORY_TRANSLATIONS) > MEMORY_TRANSLATIONS:
            _MEMORY_TRANSLATIONS.popitem(last=False)
        return translation


def _write_atomic(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp{os.getpid()}.{threading.get_ident()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:  # a read-only cache only costs speed
        pass


def split_goal(grammar: str) -> tuple[str, str]:
    """(grammar with the goal sentence replaced by a placeholder, the goal sentence)."""
    match = _TASK_RULE.search(grammar)
    if match is None:
        return grammar, ""
    return grammar[: match.start(2)] + _GOAL_PLACEHOLDER + grammar[match.end(2):], match.group(2)


def _game_logic(domain: str, grammar: str) -> Any:
    """TextWorld's ``GameLogic`` (actions + grammar), parsed once per distinct domain and grammar."""
    _, _, pddl_logic = _modules()
    key = hashlib.sha256(f"{domain}\0{grammar}".encode()).hexdigest()
    with _TRANSLATOR_LOCK:
        if key not in _LOGICS:
            _LOGICS[key] = pddl_logic.GameLogic(domain=domain, grammar=grammar)
            while len(_LOGICS) > 8:
                _LOGICS.popitem(last=False)
        _LOGICS.move_to_end(key)
        return _LOGICS[key]


# ---- the C library ------------------------------------------------------------------------------
def _acquire_library() -> Any:
    _, fast_downward, _ = _modules()
    with _TRANSLATOR_LOCK:
        if _LIBRARY_POOL:
            return _LIBRARY_POOL.pop()
    return fast_downward.load_lib()


def _release_library(lib: Any) -> None:
    _, fast_downward, _ = _modules()
    lib.cleanup()
    with _TRANSLATOR_LOCK:
        if len(_LIBRARY_POOL) < LIBRARY_POOL_SIZE:
            _LIBRARY_POOL.append(lib)
            return
    fast_downward.close_lib(lib)


def _forget_propositions(entity_ids: set[str]) -> None:
    """Drop a finished game's facts from TextWorld's global ``Proposition`` memo.

    TextWorld memoises every ``Proposition`` ever built (``mementos``) and never lets go, so a
    process that plays thousands of generated games (each with its own object names) would grow
    by megabytes per game. Propositions compare by value, so forgetting them is safe: an engine
    still playing that game simply builds equal ones again.
    """
    if not entity_ids:
        return
    from mementos.core import _memento_cache
    from textworld.logic import Proposition

    with _TRANSLATOR_LOCK:
        stale = [key for key in list(_memento_cache)
                 if isinstance(key, tuple) and len(key) == 3 and key[0] is Proposition
                 and any(arg[0] in entity_ids for arg in key[2])]
        for key in stale:
            _memento_cache.pop(key, None)


# ---- ALFWorld's display names -------------------------------------------------------------------
def display_names(ids: list[str]) -> dict[str, str]:
    """ALFWorld's naming rule: ``cabinet_bar__plus_00_dot_68...`` -> ``cabinet 3``.

    The name is the part before the first ``_bar_`` (``sinkbasin`` / ``bathtubbasin`` for basins);
    instances of a name are numbered over the sorted ids, the first id getting the highest
    number, so a real ALFWorld game shows the same names here as in ALFWorld.
    """
    def base(entity: str) -> str | None:
        if "_bar_" not in entity:
            return None
        name = entity.split("_bar_", 1)[0]
        return name + "basin" if "basin" in entity else name

    ordered = sorted(ids)
    counts = Counter(b for b in map(base, ordered) if b is not None)
    numbers = {name: list(range(1, count + 1)) for name, count in counts.items()}
    names = {}
    for entity in ordered:
        name = base(entity)
        names[entity] = entity if name is None else f"{name} {numbers[name].pop()}"
    return names


# ---- the engine -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Command:
    """One admissible command and the grounded action it triggers."""

    text: str
    action: Any


class AlfredEngine:
    """One ALFWorld game on TextWorld's PDDL engine: load, reset, step, admissible commands, plan."""

    def __init__(self, cache_dir: Path | None = None):
        self.cache_dir = cache_dir
        self._lib: Any = None
        self._game_key: str | None = None
        self._replan_loaded = False
        self.goal = ""

    # -- lifecycle
    def load(self, game: dict[str, Any]) -> None:
        """Prepare a game (a ``.tw-pddl`` dict); cheap when the same game is loaded again."""
        textworld, _, _ = _modules()
        from textworld.generator.game import EntityInfo

        domain, problem = game["pddl_domain"], game["pddl_problem"]
        key = hashlib.sha256(f"{domain}\0{problem}\0{game['grammar']}".encode()).hexdigest()
        if key == self._game_key:
            return
        self._forget_game()
        grammar, self.goal = split_goal(game["grammar"])
        self._logic = _game_logic(domain, grammar)
        self._translation = translate(domain, problem, self.cache_dir)
        self._domain, self._problem = domain, problem
        task = self._translation.task
        names = display_names([o.name for o in task.objects])
        self._infos: dict[str, Any] = {}
        for obj in task.objects:
            info = EntityInfo(obj.name, obj.type_name)
            info.name, info.definite, info.indefinite = names[obj.name], "the", "a"
            self._infos[obj.name] = info
        self._templates = {name: self._plain_template(name, action.template) for name,
                           action in self._logic.actions.items()}
        if self._lib is None:
            self._lib = _acquire_library()
        self._game_key = key
        self._replan_loaded = False
        self._state = None

    def reset(self) -> str:
        """Start the loaded game; returns the first observation (the room and the task)."""
        self._state = self._new_state()
        self._refresh()
        look = self._derive("#look.feedback#", {})
        return f"{look}\n\nYour task is to: {self.goal}." if self.goal else look

    def step(self, command: str) -> str | None:
        """Apply an admissible command and return the engine's feedback; ``None`` if not admissible."""
        chosen = self._commands.get(command)
        if chosen is None:
            return None
        action = chosen.action
        self._state.apply(action)
        variables = {ph.name: self._infos[var.name] for ph, var in action.mapping.items()}
        feedback = self._derive(action.feedback_rule, variables, action.mapping)
        self._refresh()
        return feedback

    def close(self) -> None:
        """Give the C library back (safe to call twice)."""
        self._forget_game()
        if self._lib is not None:
            lib, self._lib = self._lib, None
            self._state = None
            self._game_key = None
            _release_library(lib)

    def _forget_game(self) -> None:
        """Release what the current game left in TextWorld's global memo (its uniquely named facts)."""
        translation = getattr(self, "_translation", None)
        if translation is not None:
            _forget_propositions({o.name for o in translation.task.objects if "_bar_" in o.name})
        self._translation = None
        self._state = None
        self._game_key = None

    # -- queries
    @property
    def admissible_commands(self) -> list[str]:
        """The commands the game accepts now, sorted."""
        return self._sorted_commands

    @property
    def won(self) -> bool:
        """Whether the task's goal is reached."""
        return bool(self._lib.check_goal())

    def plan(self) -> list[str]:
        """Fast Downward's plan from the current state to the goal (admissible command texts)."""
        if not self._replan_loaded:
            planning = translate(self._domain, self._problem, self.cache_dir, for_planning=True)
            self._lib.load_sas_replan(planning.sas)
            self._replan_loaded = True
        return list(self._state.replan(self._infos))

    def facts(self) -> set[tuple[str, ...]]:
        """The true facts, with display names: ``("inreceptacle", "apple 1", "countertop 2")``."""
        return {(f.name, *(self._infos[v.name].name if v.name in self._infos else v.name for v in f.arguments))
                for f in self._state.facts}

    def entity_names(self) -> dict[str, str]:
        """Display name -> PDDL type (object, receptacle, ...) of every entity of the game."""
        return {info.name: info.type for info in self._infos.values() if info.type in ("object", "receptacle")}

    # -- internals
    def _new_state(self) -> Any:
        textworld, _, pddl_logic = _modules()
        from textworld.logic import Proposition, Variable

        translation = self._translation
        task = translation.task
        state = pddl_logic.PddlState.__new__(pddl_logic.PddlState)
        # the same initialisation as PddlState.__init__, minus the grounding done in translate()
        state._facts, state._vars_by_name = defaultdict(set), {}
        state._vars_by_type, state._var_counts = defaultdict(set), Counter()
        state._logic, state.downward_lib = self._logic, self._lib
        state.pddl_problem, state.task, state.sas, state.sas_replan = None, task, translation.sas, None
        state._actions = {a.name: a for a in task.actions}
        with _TRANSLATOR_LOCK:  # the GameLogic (and its type hierarchy) is shared between engines
            for type_ in task.types:
                try:
                    self._logic.types.add(textworld.logic.Type(type_.name, type_.supertype_names))
                except ValueError:
                    pass
        self._lib.load_sas(translation.sas)
        self._replan_loaded = False
        state.name2type = {o.name: o.type_name for o in task.objects}
        initial = []
        for atom in task.init:
            if getattr(atom, "predicate", "=") != "=" and hasattr(atom, "args"):
                initial.append(Proposition(atom.predicate, [Variable(arg, state.name2type[arg]) for arg in atom.args]))
        state.add_facts(initial)
        size = self._lib.get_state_size()
        atoms = (pddl_logic.Atom * size)()
        self._lib.get_state(atoms)
        # only the true atoms become facts: PddlState also builds (then drops) a Proposition for each
        # of the ~30k negated atoms, and TextWorld memoises every Proposition forever
        state.add_facts([atom.get_fact(state.name2type) for atom in atoms if not atom.name.startswith("NegatedAtom")])
        return state

    @staticmethod
    def _plain_template(name: str, template: str) -> str | None:
        """The template as a ``str.format`` pattern, or ``None`` if it needs the grammar."""
        if name == "gotolocation":
            return "go to {r}"  # ALFWorld's "go to [{r.name | receptacleatlocation(r, lend)}]" names r
        return None if ("[" in template or "#" in template) else template

    def _refresh(self) -> None:
        commands: dict[str, Command] = {}
        for action in self._state.all_applicable_actions():
            values = {ph.name: self._infos[var.name].name for ph, var in action.mapping.items()}
            template = self._templates.get(action.name)
            if template is None:
                variables = {ph.name: self._infos[var.name] for ph, var in action.mapping.items()}
                template = self._derive(action.command_template, variables, action.mapping)
            text = template.format(**values)
            commands.setdefault(text, Command(text, action))
        self._commands = commands
        self._sorted_commands = sorted(commands)

    def _derive(self, rule: str, variables: dict[str, Any], mapping: dict | None = None) -> str:
        context = {
            "state": self._state,
            "facts": list(self._state.facts),
            "variables": variables,
            "mapping": mapping or {},
            "entity_infos": self._infos,
        }
        return self._logic.grammar.derive(rule, context).replace(_GOAL_PLACEHOLDER, self.goal)
