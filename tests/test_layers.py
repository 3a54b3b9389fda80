"""Dependencies follow the floors: every import of every module of ``agentgym_envs`` and ``agentgym_trl``
(read with ``ast``, so none is executed), checked against the house rules.

* A family (``agentgym_envs/<family>/``, the packages ``registration.FAMILIES`` lists) is a room:
  no module outside it imports it or anything in it, nothing at all is allowed. The rest of the
  project reaches a family only through the registry (``list_tasks`` / ``get_task`` /
  ``gym.make``) and the hooks the family declares on its ``TaskSpec`` (``weight``,
  ``foreign_action``, ``protocol``: a lazy ``"module:ATTRIBUTE"`` string, not an import).
* The trainer (``agentgym_trl``) imports no family (the rule above, said for it too).
* A family imports no other family, and none of the rooms above it: the server, evaluation, the
  scripted agents, the CLI, collection, the conformance checks and the trainer. It may import the
  core (``agentgym_envs.core``), the shared browser (``agentgym_envs.web``) and itself.
* The ground floor: the core imports nothing of the project but the core; the shared browser
  (``agentgym_envs.web``) the core and itself. ``agentgym_envs`` never imports the trainer.
* The upper rooms: the scripted agents below evaluation, collection and the server, all of them below
  the CLI; the server imports no family and not ``web/``.
* The trainer's config on its lowest floor (``TRAINER_GROUND``), and no import cycle anywhere,
  deferred imports (inside functions) included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agentgym_envs.registration import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agentgym_envs", "agentgym_trl")
#: Rooms above the families: a family must not import them.
ABOVE_FAMILIES = ("agentgym_envs.server", "agentgym_envs.evaluation", "agentgym_envs.agents", "agentgym_envs.cli",
                  "agentgym_envs.collect", "agentgym_envs.testing", "agentgym_trl")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module ``source`` (the text of ``module``) imports, absolute, with ``from x import y`` counted
    as both ``x`` and ``x.y`` (so ``from agentgym_envs import sciworld`` is seen)."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def imports_of(path: Path) -> set[str]:
    return imported_modules(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")


def family_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "agentgym_envs" and parts[1] in FAMILIES else None


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _project(module: str) -> bool:
    return within(module, "agentgym_envs") or within(module, "agentgym_trl")


def allowed_floors(importer: str) -> tuple[str, ...]:
    """What a module may import of the project: everything, except on the ground floor and in the env package."""
    if within(importer, "agentgym_envs.core"):
        return ("agentgym_envs.core",)
    if within(importer, "agentgym_envs.web"):
        return ("agentgym_envs.core", "agentgym_envs.web")
    if within(importer, "agentgym_envs"):
        return ("agentgym_envs",)
    return ("agentgym_envs", "agentgym_trl")


MODULES = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def test_every_module_is_read() -> None:
    assert len(MODULES) > 100 and len(FAMILIES) >= 10


@pytest.mark.parametrize("path", MODULES, ids=lambda path: module_name(path))
def test_imports_follow_the_floors(path: Path) -> None:
    importer = module_name(path)
    own_family = family_of(importer)
    wrong = []
    for imported in sorted(imports_of(path)):
        family = family_of(imported)
        if family is not None and family != own_family:
            wrong.append(f"{imported} (inside family {family!r})")
        if own_family is not None and any(within(imported, room) for room in ABOVE_FAMILIES):
            wrong.append(f"{imported} (a room above the families)")
        if _project(imported) and not any(within(imported, floor) for floor in allowed_floors(importer)):
            wrong.append(f"{imported} (a floor above {importer.rsplit('.', 1)[0]})")
    assert not wrong, f"{importer} imports {wrong}"


def test_the_reader_sees_every_form_of_import() -> None:
    """Relative imports, ``from package import family`` and plain imports all name the family."""
    source = "import agentgym_envs.maze.env\nfrom agentgym_envs import sciworld\nfrom ..wordle import words\n"
    found = imported_modules(source, "agentgym_envs.server.compat")
    assert {"agentgym_envs.maze.env", "agentgym_envs.sciworld", "agentgym_envs.wordle.words"} <= found
    assert imported_modules("from . import env\n", "agentgym_envs.maze", is_package=True) >= {"agentgym_envs.maze.env"}
    assert {family_of(module) for module in found} >= {"maze", "sciworld", "wordle"}
    assert family_of("agentgym_envs.core.tasks") is None


def test_the_floors_are_what_the_rules_say() -> None:
    assert allowed_floors("agentgym_envs.core.loop") == ("agentgym_envs.core",)
    assert allowed_floors("agentgym_envs.web.browser") == ("agentgym_envs.core", "agentgym_envs.web")
    assert not any(within("agentgym_envs.server.app", floor) for floor in allowed_floors("agentgym_envs.core.http"))
    assert not any(within("agentgym_trl.trainer", floor) for floor in allowed_floors("agentgym_envs.collect"))
    assert "agentgym_envs" in allowed_floors("agentgym_trl.rollout")


#: The trainer's lowest floor: its options and what they are checked against. ``config.py`` stands here (as TRL's
#: ``grpo_config.py`` imports only its base): no engine, agent, model or trainer module below the options.
#: The engines' declarations (``agentgym_trl/engines/__init__.py``, which loads an engine's module only to build
#: one) and ``engines/base.py`` stand here too: the config checks options against them.
TRAINER_GROUND = ("agentgym_trl.config", "agentgym_trl.curriculum", "agentgym_trl.data", "agentgym_trl.estimators",
                  "agentgym_trl.advantages", "agentgym_trl.fast_training", "agentgym_trl.item_draws",
                  "agentgym_trl.metrics", "agentgym_trl.reverse_curriculum", "agentgym_trl.engines",
                  "agentgym_trl.engines.base")


def module_path(module: str) -> Path:
    path = ROOT / module.replace(".", "/")
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


@pytest.mark.parametrize("module", TRAINER_GROUND)
def test_the_trainer_config_stands_on_the_lowest_floor(module: str) -> None:
    path = module_path(module)
    above = sorted(imported for imported in imports_of(path)
                   if within(imported, "agentgym_trl") and imported != "agentgym_trl"
                   and not any(within(imported, ground) for ground in TRAINER_GROUND))
    assert not above, f"{module} imports {above}, above the trainer's lowest floor"


#: What the engines wing may import of the trainer package: itself, and the value head's name (left out of a sync)
ENGINES_MAY_IMPORT = ("agentgym_trl.engines", "agentgym_trl.value_head")


@pytest.mark.parametrize("path", sorted((ROOT / "agentgym_trl" / "engines").glob("*.py")), ids=lambda p: p.stem)
def test_the_engines_wing_stands_below_the_trainer(path: Path) -> None:
    """The engines know no trainer, agent, rollout, config or command: everything above builds them through
    ``engines.make_generator``, and an engine is added in this folder alone."""
    above = sorted(imported for imported in imports_of(path)
                   if within(imported, "agentgym_trl") and imported != "agentgym_trl"
                   and not any(within(imported, allowed) for allowed in ENGINES_MAY_IMPORT))
    assert not above, f"{module_name(path)} imports {above}, above the engines wing"


#: What the training features may import of the trainer package: themselves, the features' own maths and records
#: (item draws, dynamic sampling, the reverse curriculum, the value head), and the floors below the trainer they read
#: (estimators, metrics, fast_training's masks, the rollout's and the scoring batch's records, the engines' types)
FEATURES_MAY_IMPORT = ("agentgym_trl.features", "agentgym_trl.item_draws", "agentgym_trl.dynamic_sampling",
                       "agentgym_trl.reverse_curriculum", "agentgym_trl.value_head", "agentgym_trl.estimators",
                       "agentgym_trl.metrics", "agentgym_trl.fast_training", "agentgym_trl.rollout",
                       "agentgym_trl.scoring", "agentgym_trl.engines")


@pytest.mark.parametrize("path", sorted((ROOT / "agentgym_trl" / "features").glob("*.py")), ids=lambda p: p.stem)
def test_the_features_stand_below_the_trainer(path: Path) -> None:
    """The features know no trainer module, config, command or stage: the trainer builds them from the
    declarations and hands itself to ``attach``, so a feature is added in its own module alone."""
    above = sorted(imported for imported in imports_of(path)
                   if within(imported, "agentgym_trl") and imported != "agentgym_trl"
                   and not any(within(imported, allowed) for allowed in FEATURES_MAY_IMPORT))
    assert not above, f"{module_name(path)} imports {above}, above the training features"


def test_the_trainer_names_no_feature() -> None:
    """The trainer reaches features only through the package's front (``active_features`` and the hooks)."""
    named = sorted(imported for imported in imports_of(ROOT / "agentgym_trl" / "trainer.py")
                   if within(imported, "agentgym_trl.features") and imported not in (
                       "agentgym_trl.features", *(f"agentgym_trl.features.{name}" for name in
                                                  ("TrainingFeature", "TrainStep", "active_features"))))
    assert not named, f"the trainer imports {named}: it dispatches, it names no feature"


@pytest.mark.parametrize("path", sorted((ROOT / "agentgym_envs" / "server").glob("*.py")), ids=lambda p: p.stem)
def test_the_server_knows_no_family_and_no_browser(path: Path) -> None:
    """What the server needs of a family (its weight, its clients' episode fields, its protocol's other departures)
    is declared on the family's TaskSpec and AgentGymProtocol: the server imports no family and not ``web/``."""
    wrong = sorted(m for m in imports_of(path) if family_of(m) is not None or within(m, "agentgym_envs.web"))
    assert not wrong, f"{module_name(path)} imports {wrong}"


#: The rooms above the families, by floor: the scripted agents below evaluation, collection and the server, and all
#: of them below the command line. A room may import rooms on its floor or below, never above.
UPPER_FLOORS = {"agentgym_envs.agents": 1, "agentgym_envs.evaluation": 2, "agentgym_envs.collect": 2,
                "agentgym_envs.server": 2, "agentgym_envs.cli": 3}
MODULE_NAMES = {module_name(path) for path in MODULES}


def project_edges(path: Path) -> set[str]:
    """The project modules ``path`` imports, anywhere in it (deferred imports inside functions too), each resolved
    to the module itself: ``from agentgym_trl import advantages`` is an edge to ``agentgym_trl.advantages``, not to
    the package."""
    importer = module_name(path)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]

    def known(name: str) -> str | None:
        parts = name.split(".")
        while parts and ".".join(parts) not in MODULE_NAMES:
            parts.pop()
        return ".".join(parts) or None

    edges: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            edges.update(known(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            edges.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULE_NAMES else known(base)
                         for alias in node.names)
    return {edge for edge in edges if edge is not None and edge != importer}


def floor_of(module: str) -> int | None:
    return next((floor for room, floor in UPPER_FLOORS.items() if within(module, room)), None)


@pytest.mark.parametrize("path", [p for p in MODULES if floor_of(module_name(p))], ids=lambda p: module_name(p))
def test_upper_rooms_import_only_their_floor_or_below(path: Path) -> None:
    floor = floor_of(module_name(path))
    above = sorted(edge for edge in project_edges(path) if (floor_of(edge) or 0) > floor)
    assert not above, f"{module_name(path)} (floor {floor}) imports {above} from a floor above"


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles a depth-first walk of the import graph meets (each as the modules around it)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == 1:
                cycles.append(path[path.index(imported):] + [imported])
            elif imported not in state:
                visit(imported, [*path, imported])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


def test_the_import_graph_has_no_cycle() -> None:
    """Every import counts, deferred ones too: a cycle hidden in a function still ties two rooms together."""
    cycles = import_cycles({module_name(path): project_edges(path) for path in MODULES})
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles[:5])


def test_a_deferred_import_that_closes_a_cycle_is_found() -> None:
    """The commands once imported ``add_env_option`` from the CLI inside a function, closing a cycle."""
    cli = ROOT / "agentgym_envs" / "cli.py"
    graph = {"agentgym_envs.cli": project_edges(cli), "agentgym_envs.evaluation.commands": {"agentgym_envs.cli"}}
    assert "agentgym_envs.evaluation.commands" in graph["agentgym_envs.cli"]
    assert import_cycles(graph) == [["agentgym_envs.cli", "agentgym_envs.evaluation.commands", "agentgym_envs.cli"]]


#: The trainer's top floor: what experiments (examples/, benchmarks/) build on. No module of either package imports it.
TRAINER_TOP = ("agentgym_trl.experiments",)


def test_nothing_in_the_packages_stands_on_the_experiments_module() -> None:
    below = sorted(f"{module_name(path)} -> {edge}" for path in MODULES for edge in project_edges(path)
                   if edge in TRAINER_TOP)
    assert not below, f"the experiments' module is the trainer's top floor, yet: {below}"
