"""Every fenced ``python`` and ``bash`` block of README.md and docs/**/*.md runs as written; their links
resolve, the README stays a short front page, and the docs site builds (``mkdocs build --strict``).

A reader copies these blocks first, so they must not rot. Each shell command and each Python block
is one test. The commands of a block run in order in one fresh folder, as a reader would type them
(a later command may use what an earlier one wrote, e.g. ``agentgym view`` of the run that
``agentgym eval`` just made). A few cannot run here: they need a GPU, a real web site or another
machine, or are long runs that other tests cover in a shortened form. ``RULES`` skips those with the
reason, or runs them shortened; every rule must still match a block, so the table cannot rot either.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(python|bash)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
#: what a command line may not contain for us to run it without a shell
SHELL_SYNTAX = re.compile(r"&&|\|\||[|;&<>`]|\$\(")
SHORT_EVAL = ["--limit", "1", "--n-samples", "1", "--max-turns", "1", "--max-turn-tokens", "8"]
LONG_RUN = "long run; covered by tests/test_trainer_example.py"


@dataclass(frozen=True)
class Snippet:
    """One shell command (continuation lines joined, comments dropped) or one whole Python block."""

    source: str  # "README.md:406": the line of the block's opening fence, so also the block's name
    language: str
    code: str


@dataclass(frozen=True)
class Rule:
    """How to treat the snippets that ``pattern`` finds: skip them (``skip`` is the reason) or run them
    with ``replace`` applied and ``append`` added, feeding ``stdin`` and accepting ``exit_codes``."""

    pattern: str
    skip: str | None = None
    replace: tuple[tuple[str, str], ...] = ()
    append: tuple[str, ...] = ()
    stdin: str | None = None
    exit_codes: tuple[int, ...] = (0,)
    serve: bool = False  # a server: start it, wait until it answers /v1/health, stop it
    needs: tuple[str, ...] = ()  # modules the snippet imports (skipped without them)

    def matches(self, snippet: Snippet) -> bool:
        return re.search(self.pattern, snippet.code) is not None


#: the docs' training examples load SmolLM2; the tests train them on the tiny random model of tests/tiny_model.py
SMOLLM2 = ("model = AutoModelForCausalLM.from_pretrained(default_model_path())\n"
           "tokenizer = AutoTokenizer.from_pretrained(default_model_path())")
TINY_MODEL = (f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
              "from tiny_model import tiny_model, tiny_tokenizer\n"
              "tokenizer = tiny_tokenizer(); model = tiny_model(tokenizer)")

RULES = [
    # the quick start's setup and jobs
    Rule(r"^bash scripts/setup\.sh && accelerate launch examples/grpo\.py$", skip=LONG_RUN),
    Rule(r"^bash scripts/setup\.sh && python -m pytest -q$",
         skip="runs the whole test suite, which is what CI does (.ci/run)"),
    Rule(r"^bash scripts/setup\.sh$", skip="installs system packages (a JRE, Chromium); CI runs it before the tests"),
    # blocks that need what a test machine does not have
    Rule(r"config_path=\"webarena/config_files\"", skip="needs a real WebArena deployment and its task configs"),
    Rule(r"AgentGRPOTrainer\(\"Qwen/Qwen2\.5-3B-Instruct\"",
         skip="downloads and trains a 3B model; covered by tests/test_trainer.py (a tiny model)"),
    Rule(r"/models/Qwen2\.5-3B-Instruct", skip="needs a model you download (/models/Qwen2.5-3B-Instruct)"),
    Rule(r"agentgym eval --endpoint", skip="needs an OpenAI-compatible server; covered by tests/test_eval.py"),
    Rule(r"^transformers serve ", skip="a server in the foreground; the route is covered by "
                                       "tests/test_first_day.py::test_transformers_serve_route"),
    Rule(r"agentgym view runs/eval/qwen3b", skip="views the Qwen run above (skipped); covered by tests/test_viewer.py"),
    Rule(r"--host 10\.0\.0\.5", skip="binds another machine's network interface"),
    Rule(r"AgentGym/Remote-v0", skip="needs `agentgym serve` running (on another machine); covered by "
                                     "tests/test_server.py"),
    # long runs: training, behaviour cloning, the learning experiment
    Rule(r"^python examples/grpo\.py --preset cpu-demo --max_steps 6", skip=LONG_RUN),
    Rule(r"^agentgym eval --model default --env AgentGym/TextCraft-Depth1-v0 --limit 4",
         skip="loads and samples SmolLM2 as tests/test_trainer_example.py::test_default_run_with_the_pypi_model "
              "does"),
    Rule(r"^agentgym view runs/eval/default-model", skip="views the evaluation above (skipped); covered by "
                                                        "tests/test_viewer.py"),
    Rule(r"^agentgym plot runs/grpo-", skip="plots a training run (long run); covered by "
                                            "tests/test_eval.py::test_training_plots_show_every_metric_and_env"),
    Rule(r"^accelerate launch examples/sft\.py", skip="long run; covered by tests/test_sft.py"),
    Rule(r"^accelerate launch examples/grpo\.py --preset cpu-demo --model_name_or_path runs/sft-oracle", skip=LONG_RUN),
    Rule(r"^python examples/agentevol\.py", skip="long run; covered by tests/test_sft.py (agentevol, shortened)"),
    Rule(r"^agentgym eval --model runs/scalinginter-",
         skip="evaluates a paper recipe's trained 7B model (a GPU run); tests/test_presets.py checks each command "
              "against its recipe"),
    Rule(r"^agentgym eval --model runs/turn-budget/",
         skip="tests the learning experiment's models (an hour to make); covered by tests/test_eval.py"),
    Rule(r"^python examples/turn_budget\.py",
         skip="the learning experiment (hours); covered by tests/test_turn_budget.py"),
    Rule(r"^python examples/learning\.py",
         skip="the pre-registered learning experiment (~100 min; the report needs its runs); covered by "
              "tests/test_learning.py"),
    Rule(r"^(OMP_NUM_THREADS=1 )?python benchmarks/bench_algorithms\.py",
         skip="the estimators compared (hours); covered by tests/test_algorithms.py (shortened)"),
    # shortened: a model's evaluation on one item, one turn; fewer expert episodes
    Rule(r"^agentgym eval --model default", append=tuple(SHORT_EVAL), needs=("transformers",)),
    Rule(r'pipeline\("text-generation"', replace=(("max_new_tokens=64", "max_new_tokens=8"),),
         needs=("transformers",)),
    Rule(r"evaluate_model\(\"default\"", replace=(("max_turns=[5, 10, 20])", "max_turns=[1], limit=1, "
                                                                           "max_turn_tokens=8)"),),
         needs=("transformers",)),
    Rule(r"^agentgym collect .*--n 300", replace=(("--n 300", "--n 3"),), needs=("datasets",)),
    Rule(r"KeepRule\(min_reward=0\.5\)", replace=(("450", "20"),), needs=("datasets",)),
    # a human at the terminal: one move, then the terminal closes (Ctrl-D ends the game with 130)
    Rule(r"^agentgym play AgentGym/TextCraft-Depth2-v0$", stdin="inventory\n", exit_codes=(130,)),
    Rule(r"^agentgym serve ", serve=True, needs=("fastapi", "uvicorn")),
    Rule(r"\"Qwen/Qwen3-0\.6B\"", skip="downloads Qwen3; covered by tests/test_trl_recipes.py (a tiny model, Qwen3's "
                                     "template)"),
    Rule(r"LLMJudge\(\"http://127\.0\.0\.1:8000/v1\"", skip="needs an OpenAI-compatible judge endpoint; covered by "
         "tests/test_judge.py (a fake endpoint on loopback)"),
    Rule(r"from_pretrained\(default_model_path\(\)\)", replace=((SMOLLM2, TINY_MODEL),), needs=("trl",)),
    Rule(r"check_text_env\(\"AgentGym/MyEnv-v0\"\)", replace=(("AgentGym/MyEnv-v0", "AgentGym/TextCraft-Depth1-v0"),)),
    Rule(r"AgentGym/WebArena-v0", needs=("selenium",)),
    Rule(r"--oracle_prefix_schedule", skip="long run; covered by tests/test_oracle_prefix.py (a tiny model, 2 steps)"),
    Rule(r"^accelerate launch examples/grpo\.py --preset cpu-demo --output_dir runs/curve",
         skip="long run; keeping every checkpoint is covered by tests/test_oracle_prefix.py (a tiny model)"),
    Rule(r"^python -m agentgym_trl\.learning_curve runs/curve",
         skip="evaluates the checkpoints of the run above (skipped); covered by tests/test_oracle_prefix.py"),
    Rule(r"scripts/behaviour_fingerprint\.py",
         skip="a 10-minute digest of the whole project; tests/test_fingerprint.py runs it on two parts"),
]


def commands_of(block: str) -> list[str]:
    """A bash block's commands: continuation lines joined, comment lines and trailing comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    commands = []
    for line in joined.splitlines():
        command = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if command:
            commands.append(command)
    return commands


def snippets() -> list[Snippet]:
    found = []
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            source = f"{document.relative_to(ROOT)}:{text[: match.start()].count(chr(10)) + 1}"
            language, body = match.group(1), match.group(2)
            if language == "python":
                found.append(Snippet(source, language, body))
            else:
                found += [Snippet(source, language, command) for command in commands_of(body)]
    return found


SNIPPETS = snippets()


def rule_for(snippet: Snippet) -> Rule:
    return next((rule for rule in RULES if rule.matches(snippet)), Rule(pattern=""))


def test_every_rule_still_matches_a_block() -> None:
    unused = [rule.pattern for rule in RULES if not any(rule.matches(snippet) for snippet in SNIPPETS)]
    assert not unused, f"rules that match no block any more (remove them): {unused}"
    assert len(SNIPPETS) > 20 and {snippet.language for snippet in SNIPPETS} == {"python", "bash"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """One working folder per block, shared by its commands in order."""
    made: dict[str, Path] = {}

    def folder(block: str) -> Path:
        if block not in made:
            made[block] = tmp_path_factory.mktemp(re.sub(r"\W+", "-", block))
        return made[block]

    return folder


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "AGENTGYM_BROWSER_POOL": "0"}


def program(argv: list[str]) -> list[str]:
    """The documented program run from this checkout with this interpreter."""
    name, rest = argv[0], argv[1:]
    if name == "agentgym":
        return [sys.executable, "-m", "agentgym_envs.cli", *rest]
    if name == "python":
        return [sys.executable, *rest]
    if name == "accelerate":
        return [sys.executable, "-m", "accelerate.commands.accelerate_cli", *rest]
    raise AssertionError(f"no way to run {name!r} here; add a rule for it to tests/test_docs.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_until_healthy(argv: list[str], cwd: Path, timeout: float = 120.0) -> None:
    """Start a documented ``agentgym serve`` on a free port; it must answer /v1/health, then it is stopped."""
    port = free_port()
    argv = [str(port) if previous == "--port" else arg for previous, arg in zip(["", *argv], argv)]
    server = subprocess.Popen(program(argv), cwd=cwd, env=environment(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            assert server.poll() is None, f"the server stopped: {server.stderr.read()[-2000:]}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/health", timeout=2) as answer:
                    assert answer.status == 200
                    return
            except OSError:
                assert time.monotonic() < deadline, "the server did not answer /v1/health in time"
                time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: f"{s.source} {s.code.splitlines()[0][:60]}")
def test_documented_code_runs(snippet: Snippet, folders) -> None:
    rule = rule_for(snippet)
    if rule.skip:
        pytest.skip(rule.skip)
    for module in rule.needs:
        pytest.importorskip(module)
    if "WebArena" in snippet.code:
        from agentgym_envs.web import chromium_missing_reason

        if chromium_missing_reason() is not None:
            pytest.skip(str(chromium_missing_reason()))
    code = snippet.code
    for old, new in rule.replace:
        assert old in code, f"the rule for {snippet.source} replaces {old!r}, which is no longer there"
        code = code.replace(old, new)
    cwd = folders(snippet.source)
    if snippet.language == "python":
        argv = [sys.executable, "-c", code]
    else:
        assert not SHELL_SYNTAX.search(code), f"{snippet.source}: {code!r} needs a shell; add a rule for it"
        if rule.serve:
            serve_until_healthy([*shlex.split(code), *rule.append], cwd)
            return
        argv = program([*shlex.split(code), *rule.append])
    done = subprocess.run(argv, cwd=cwd, env=environment(), input=rule.stdin or "", capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode in rule.exit_codes, (
        f"{snippet.source}: {code}\nexit {done.returncode}\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}")


# ---- links, the README as a front page, the site ------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """The anchor mkdocs' toc (and GitHub) gives a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return re.sub(r"\s+", "-", text)


def anchors_of(document: Path) -> set[str]:
    text = FENCE_ANY.sub("", document.read_text(encoding="utf-8"))
    return {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"^#{1,6} ", line)}


FENCE_ANY = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: str(d.relative_to(ROOT)))
def test_relative_links_resolve(document: Path) -> None:
    """Every link to a file of the repository (a page, a figure, code) exists, and so does its #anchor in a page."""
    text = FENCE_ANY.sub("", document.read_text(encoding="utf-8"))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        resolved = (document.parent / path).resolve() if path else document
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in anchors_of(resolved):
            broken.append(target)
    assert not broken, f"{document.relative_to(ROOT)}: broken links {broken}"


def test_links_stay_in_the_site() -> None:
    """A page of the site (docs/) links only to pages and figures in docs/: a relative link to a repository file
    (``../README.md``, ``../examples/...``) resolves in a checkout but is a 404 on the built site."""
    site = (ROOT / "docs").resolve()
    leaving = []
    for document in sorted(site.rglob("*.md")):
        for target in LINK.findall(FENCE_ANY.sub("", document.read_text(encoding="utf-8"))):
            path = target.partition("#")[0]
            if path and not re.match(r"^[a-z]+:", path) and site not in (document.parent / path).resolve().parents:
                leaving.append(f"{document.relative_to(ROOT)} -> {target}")
    assert not leaving, f"links that leave the site (name the file as `code` instead): {leaving}"


def test_readme_is_a_front_page() -> None:
    """At most ~250 lines, the two fresh-machine commands first, and a link to every docs page."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    first_block = FENCE.search(text).group(2)
    assert commands_of(first_block) == ["bash scripts/setup.sh && accelerate launch examples/grpo.py",
                                        "bash scripts/setup.sh && python -m pytest -q"]
    pages = {path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").rglob("*.md")} - {"docs/index.md"}
    assert not {page for page in pages if f"]({page})" not in text}, "docs pages the README does not list"


def test_every_page_is_in_the_site_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {path.relative_to(ROOT / "docs").as_posix() for path in (ROOT / "docs").rglob("*.md")}
    assert not {page for page in pages if f": {page}" not in nav}, "pages missing from mkdocs.yml's nav"


def test_the_site_builds_strict(tmp_path) -> None:
    """What CI checks of the site: ``mkdocs build --strict`` (broken links between pages, missing anchors, pages
    outside the navigation fail it)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "envs" / "textcraft" / "index.html").is_file()


def test_architecture_names_every_module() -> None:
    """Every module outside the family folders has its line in ARCHITECTURE.md (a family's own modules are
    described by the family row), as a path relative to its package (``core/http.py``) or by its name."""
    from agentgym_envs.registration import FAMILIES

    architecture = (ROOT / "ARCHITECTURE.md").read_text()
    unnamed = []
    for package in ("agentgym_envs", "agentgym_trl"):
        for module in sorted((ROOT / package).rglob("*.py")):
            relative = module.relative_to(ROOT / package)
            if relative.parts[0] in FAMILIES or module.name == "__init__.py":
                continue
            if f"`{relative.as_posix()}" not in architecture and f"`{module.name}`" not in architecture:
                unnamed.append(f"{package}/{relative.as_posix()}")
    assert not unnamed, f"ARCHITECTURE.md does not name {unnamed}"


def test_env_pages_are_generated_from_the_code() -> None:
    """Each family's ids, splits, turn caps, actions and rewards on its page are what the registry and the env
    classes' docstrings say (``python -m agentgym_envs.env_pages`` rewrites them)."""
    from agentgym_envs import env_pages
    from agentgym_envs.registration import FAMILIES

    assert {family for families in env_pages.family_pages().values() for family in families} == set(FAMILIES)
    assert env_pages.stale_pages() == [], "run python -m agentgym_envs.env_pages"


def result(name: str) -> dict:
    import json

    return json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text(encoding="utf-8"))


def test_quoted_numbers_are_the_result_files() -> None:
    """The numbers README.md and docs/*.md quote from benchmarks/results/*.json sit in marked quotes that
    ``python benchmarks/doc_numbers.py`` writes from those files: each is fresh, each marker names a known quote, and
    each quote is on the pages it belongs to (a result file re-made without the docs fails here)."""
    pytest.importorskip("scipy")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import doc_numbers

    problems = doc_numbers.stale_pages()
    assert not problems, "run `python benchmarks/doc_numbers.py`:\n" + "\n".join(problems)


def test_a_changed_result_makes_its_quote_stale(tmp_path, monkeypatch) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import doc_numbers

    for page in doc_numbers.PAGES:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text((ROOT / page).read_text(encoding="utf-8"), encoding="utf-8")
    robustness = json.loads((ROOT / "benchmarks" / "results" / "robustness.json").read_text())
    robustness["totals"]["steps"] += 1
    (tmp_path / "results").mkdir()
    for path in (ROOT / "benchmarks" / "results").glob("*.json"):
        (tmp_path / "results" / path.name).write_text(path.read_text())
    (tmp_path / "results" / "robustness.json").write_text(json.dumps(robustness))
    monkeypatch.setattr(doc_numbers, "RESULTS", tmp_path / "results")
    assert doc_numbers.stale_pages(tmp_path) == ["docs/development.md: out of date: robustness.totals"]
    assert doc_numbers.stale_pages(tmp_path, write=True) == [] == doc_numbers.stale_pages(tmp_path)
    assert "(3,844 steps)" in (tmp_path / "docs" / "development.md").read_text()


def test_the_accelerate_configs_send_gpu_users_to_trls_vllm() -> None:
    """Issue 62 item 10: examples/accelerate_configs/README.md's vLLM note says what docs/gpu.md says: on GPUs the
    ``[gpu]`` set and TRL's vLLM (colocate or server), the engine process of ``scripts/setup_vllm.sh`` on CPUs."""
    text = (ROOT / "examples" / "accelerate_configs" / "README.md").read_text()
    notes = {note.split(":", 1)[0]: note for note in re.split(r"\n- ", text) if note.startswith("vLLM, on ")}
    gpu, cpu = notes["vLLM, on GPUs"], notes["vLLM, on CPUs"]
    assert "`[gpu]`" in gpu and "--use_vllm true" in gpu and "colocate" in gpu and "server" in gpu
    assert "setup_vllm.sh" not in gpu.replace("no `scripts/setup_vllm.sh` there", "")
    assert "setup_vllm.sh" in cpu and "engine process" in cpu
