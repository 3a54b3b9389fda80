"""WebArena family: every test task's scripted solution succeeds, wrong answers and untouched states
score 0, episodes are isolated, bad input gets feedback, the evaluators follow their documented
rules, and WebArena's own config files load and play against a (here: local) deployment.

One Chromium is shared by the whole module (``browser=`` kwarg) to keep the family's tests fast.
"""

from __future__ import annotations

import json
import threading
import time

import gymnasium as gym
import pytest

import agentgym_envs
from agentgym_envs.web import chromium_missing_reason

pytestmark = pytest.mark.skipif(chromium_missing_reason() is not None, reason=str(chromium_missing_reason()))
selenium = pytest.importorskip("selenium")

from agentgym_envs.webarena import evaluation  # noqa: E402
from agentgym_envs.webarena.catalog import LAYOUT, embedded_tasks, splits  # noqa: E402

FAMILY_ID = "AgentGym/WebArena-v0"
TEST_ITEMS = agentgym_envs.get_task(FAMILY_ID).split("test")


@pytest.fixture(scope="module")
def browser():
    from agentgym_envs.web.browser import Browser, BrowserConfig

    shared = Browser(BrowserConfig(page_load_timeout=10))
    yield shared
    shared.close()


@pytest.fixture(scope="module")
def env(browser):
    environment = gym.make(FAMILY_ID, browser=browser)
    yield environment
    environment.close()


def act(action: str) -> str:
    return f"Let me think. The next action I will perform is ```{action}```"


def run_solution(env, item_id: int, replace_stop: str | None = None, drop_stop: bool = False):
    obs, info = env.reset(options={"item_id": item_id})
    base = env.unwrapped
    solution = base.task_config(item_id)["solution"]
    total = 0.0
    for index in range(len(solution)):
        is_stop = solution[index].startswith("stop")
        if is_stop and drop_stop:
            return total, info, obs
        response = base.oracle_action() if not (is_stop and replace_stop is not None) else act(f"stop [{replace_stop}]")
        obs, reward, terminated, truncated, info = env.step(response)
        total += reward
        assert info["valid_action"], f"item {item_id} step {index} ({response}) was rejected: {obs[:400]}"
        if terminated:
            break
    return total, info, obs


# ---- the task set -----------------------------------------------------------------------------------
def test_splits_match_the_catalog_and_the_paper() -> None:
    assert agentgym_envs.core.load_splits("webarena") == splits()
    counts = {sub: len(agentgym_envs.get_task(f"AgentGym/WebArena-{sub}-v0").split("test"))
              for sub in ("Shopping", "CMS", "Maps", "GitLab", "Reddit")}
    assert counts == {"Shopping": 15, "CMS": 15, "Maps": 10, "GitLab": 5, "Reddit": 5}
    assert len(TEST_ITEMS) == 50 and sum(n for _, n, _, _ in LAYOUT.values()) >= 300
    tasks = embedded_tasks()
    intents = [tasks[i]["intent"] for i in tasks]
    assert len(intents) == len(set(intents)), "two tasks share an intent"
    for config in tasks.values():
        assert config["solution"] and config["solution"][-1].startswith("stop")
        assert set(config["eval"]["eval_types"]) <= {"string_match", "url_match", "program_html", "db_state"}
        assert config["start_url"].startswith("__")


def test_every_evaluator_type_is_in_the_test_split() -> None:
    kinds = {kind for item in TEST_ITEMS for kind in embedded_tasks()[item]["eval"]["eval_types"]}
    matches = {k for item in TEST_ITEMS for k in (embedded_tasks()[item]["eval"]["reference_answers"] or {})}
    assert kinds == {"string_match", "url_match", "program_html", "db_state"}
    assert matches == {"exact_match", "must_include", "fuzzy_match"}


# ---- solutions and wrong answers ----------------------------------------------------------------------
@pytest.mark.parametrize("item_id", TEST_ITEMS)
def test_scripted_solution_earns_reward_one(env, item_id: int) -> None:
    total, info, obs = run_solution(env, item_id)
    assert info["success"] and total == 1.0, f"item {item_id}: {info.get('evaluation_failures')} {obs[:300]}"


@pytest.mark.parametrize("item_id", TEST_ITEMS)
def test_wrong_answer_or_untouched_state_earns_zero(env, item_id: int) -> None:
    env.reset(options={"item_id": item_id})
    obs, reward, terminated, truncated, info = env.step(act("stop [I could not find it, maybe 123456]"))
    assert terminated and reward == 0.0 and not info["success"] and info["evaluation_failures"], obs


def test_right_navigation_with_a_wrong_final_answer_earns_zero(env) -> None:
    total, info, _ = run_solution(env, TEST_ITEMS[0], replace_stop="$1.00")
    assert total == 0.0 and not info["success"]


def test_state_task_is_scored_at_the_turn_cap_without_stop(browser) -> None:
    env = gym.make("AgentGym/WebArena-Shopping-v0", browser=browser)
    try:
        item = next(i for i in TEST_ITEMS if embedded_tasks()[i]["eval"]["eval_types"] == ["db_state"] and i < 15)
        total, info, _ = run_solution(env, item, drop_stop=True)
        truncated = False
        while not truncated:
            _, reward, terminated, truncated, info = env.step(act("scroll [down]"))
            total += reward
            assert not terminated
        assert total == 1.0 and info["success"]
    finally:
        env.close()


STATE_SITES = ("Reddit", "CMS", "GitLab")


def state_changing_items() -> list[tuple[str, int]]:
    """Test items of the sites whose tasks change the site's state, evaluated on that state alone (no answer)."""
    found = []
    for site in STATE_SITES:
        env_id = f"AgentGym/WebArena-{site}-v0"
        for item in agentgym_envs.get_task(env_id).split("test"):
            config = embedded_tasks()[item]
            if "string_match" not in config["eval"]["eval_types"] and config["solution"][-1].startswith("stop"):
                found.append((env_id, item))
    return found


@pytest.mark.parametrize("budget_change", [0, -1], ids=["budget-is-the-solution", "budget-below-it"])
def test_state_tasks_are_scored_at_the_budget_they_run_under(browser, budget_change: int) -> None:
    """The oracle's actions without the final stop, under a budget of exactly their count (far below the cap of 15):
    the final state is scored on the last turn of that budget; one turn short, the task is not done."""
    items = state_changing_items()
    assert len(items) >= 9, items
    results = []
    for env_id, item in items:
        steps = len(embedded_tasks()[item]["solution"]) - 1
        env = gym.make(env_id, browser=browser, max_episode_steps=steps + budget_change)
        try:
            env.reset(options={"item_id": item})
            total, truncated, turns = 0.0, False, 0
            while not truncated:
                _, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
                total, turns = total + reward, turns + 1
                assert not terminated
            results.append((item, turns, total, info["success"]))
        finally:
            env.close()
    expected = 1.0 if budget_change == 0 else 0.0
    assert all(total == expected and success == (expected == 1.0) for _, _, total, success in results), results


def test_a_served_state_task_is_scored_at_its_budget() -> None:
    """Through ``agentgym serve``: the served env is made with the episode's budget and scores the final state at
    it, as a local one does."""
    pytest.importorskip("fastapi")
    from agentgym_envs.server.app import LocalServer
    from agentgym_envs.server.hosts import RemoteEnvFactory

    env_id, item = state_changing_items()[0]
    steps = len(embedded_tasks()[item]["solution"]) - 1
    with LocalServer([env_id]) as server:
        env = RemoteEnvFactory(server.url)(env_id, max_episode_steps=steps)
        try:
            env.reset(options={"item_id": item})
            total, truncated = 0.0, False
            while not truncated:
                _, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
                total += reward
                assert not terminated
            assert total == 1.0 and info["success"]
        finally:
            env.close()


# ---- isolation --------------------------------------------------------------------------------------
def test_episode_state_does_not_leak(env) -> None:
    base = env.unwrapped
    add_to_cart = next(i for i in TEST_ITEMS if embedded_tasks()[i]["intent_template"] == "add_to_cart")
    total, _, _ = run_solution(env, add_to_cart)
    assert total == 1.0
    driver = base.browser.driver
    driver.execute_script("document.cookie = 'leak=1; path=/'; localStorage.setItem('leak', '1');")
    env.step(act("new_tab"))  # an extra tab must not survive either (the episode is over: rejected, harmless)
    env.reset(options={"item_id": add_to_cart})
    assert base._servers["shopping"].app.query("SELECT COUNT(*) FROM cart")[0][0] == 0
    assert driver.execute_script("return document.cookie") == ""
    assert driver.execute_script("return localStorage.getItem('leak')") is None
    assert len(driver.window_handles) == 1
    obs, *_ = env.step(act("goto [http://localhost:7770/cart]"))
    assert "You have no items in your shopping cart" in obs


def test_same_item_gives_the_same_observations(env) -> None:
    first = run_solution(env, TEST_ITEMS[16])
    second = run_solution(env, TEST_ITEMS[16])
    assert first[2] == second[2]


# ---- bad input ----------------------------------------------------------------------------------------
def test_bad_actions_get_feedback(env) -> None:
    env.reset(options={"item_id": 0})
    cases = {
        "click [12]": "No action found",
        act("click [99999]"): "There is no element [99999]",
        act("type [5] [hello] [1]"): "not a text field",
        act("fly [3]"): "Unknown action",
        act("type [5]"): "Usage: type",
        act("scroll [left]"): "Usage: scroll",
        act("tab_focus [7]"): "There is no tab 7",
        act("press [Hyper+Q]"): "Unknown key combination",
        act("goto [http://example.com/]"): "closed network",
        act("goto [http://127.0.0.1:1/]"): "closed network",
    }
    for response, expected in cases.items():
        started = time.perf_counter()
        obs, reward, terminated, truncated, info = env.step(response)
        assert expected in obs and not info["valid_action"] and reward == 0.0 and not terminated, (response, obs[:300])
        assert time.perf_counter() - started < 5
        assert "OBJECTIVE:" in obs or response == "click [12]"


def test_select_with_unknown_option_lists_the_options(env) -> None:
    item = next(i for i in TEST_ITEMS if embedded_tasks()[i]["intent_template"] == "disable_product")
    env.reset(options={"item_id": item})
    base = env.unwrapped
    for _ in range(3):  # Products, search, Edit
        env.step(base.oracle_action())
    combobox = base._tree.find("combobox", "Status")
    obs, _, _, _, info = env.step(act(f"type [{combobox.id}] [Archived] [0]"))
    assert not info["valid_action"] and "'Enabled', 'Disabled'" in obs


def test_browser_actions_work(env) -> None:
    obs, _ = env.reset(options={"item_id": 0})
    base = env.unwrapped
    link = base._tree.find("link", "My Orders")
    obs, *_ = env.step(act(f"hover [{link.id}]"))
    obs, *_ = env.step(act(f"click [{link.id}]"))
    assert "URL: http://localhost:7770/orders" in obs
    obs, *_ = env.step(act("scroll [down]"))
    obs, *_ = env.step(act("go_back"))
    assert "URL: http://localhost:7770/\n" in obs
    obs, *_ = env.step(act("go_forward"))
    assert "URL: http://localhost:7770/orders" in obs
    obs, *_ = env.step(act("new_tab"))
    assert "Tab 1 (current)" in obs
    obs, *_ = env.step(act("goto [__SHOPPING__/cart]"))
    assert "Shopping Cart" in obs
    obs, *_ = env.step(act("tab_focus [0]"))
    assert "Tab 0 (current)" in obs and "My Orders" in obs
    obs, *_ = env.step(act("close_tab"))
    assert "Tab 0 (current): Shopping Cart" in obs
    obs, *_ = env.step(act("close_tab"))  # the last tab: replaced by a blank one, never the session's end
    assert "URL: about:blank" in obs
    obs, *_ = env.step(act("goto [http://localhost:7770/]"))
    searchbox = env.unwrapped._tree.find("searchbox", "Search the store")
    env.step(act(f"type [{searchbox.id}] [yoga mat] [0]"))
    obs, _, _, _, info = env.step(act("press [Enter]"))
    assert info["valid_action"] and "search?q=yoga+mat" in obs


def test_typing_a_long_text_is_bounded_and_says_so(env) -> None:
    """15,000 characters typed key by key took 45 s; type enters at most MAX_TYPED_CHARS, with a note."""
    import re

    env.reset(options={"item_id": 0})
    searchbox = env.unwrapped._tree.find("searchbox", "Search the store")
    started = time.perf_counter()
    obs, _, _, _, info = env.step(act(f"type [{searchbox.id}] [{'A' * 15_000}] [0]"))
    assert time.perf_counter() - started < 15
    note = re.search(r"Only the first (\d+) of the text's 15000 characters were typed", obs)
    assert info["valid_action"] and note, obs[-300:]
    typed = env.unwrapped.browser.driver.execute_script("return document.activeElement.value")
    assert typed == "A" * int(note.group(1))


def test_the_hostile_check_types_its_payloads(env) -> None:
    """The hostile check puts each payload in every bracketed argument, the text of a type among them."""
    from agentgym_envs.testing import hostile_actions

    actions = hostile_actions("```type [12] [yoga mat] [1]```")
    assert actions["long string: in bracket 2"] == f"```type [12] [{'A' * 15_000}] [1]```"
    assert actions["long string: in brackets"] == f"```type [12] [yoga mat] [{'A' * 15_000}]```"


def test_a_page_that_never_loads_times_out_with_a_note(browser) -> None:
    env = gym.make("AgentGym/WebArena-Maps-v0", browser=browser, page_load_timeout=1.5)
    release = threading.Event()
    try:
        env.reset(options={"split": "test", "index": 0})
        app = env.unwrapped._servers["map"].app
        original = app.answer  # every route's handler runs through it (in Starlette's thread pool)

        def hanging(handler, request, *path_params):
            if request.path == "/directions":
                release.wait(30)
            return original(handler, request, *path_params)

        app.answer = hanging
        started = time.perf_counter()
        obs, reward, terminated, truncated, info = env.step(act("goto [http://localhost:3000/directions]"))
        assert time.perf_counter() - started < 10
        assert "did not finish loading within 1.5 seconds" in obs and not terminated
        release.set()
        obs, _, _, _, info = env.step(act("goto [http://localhost:3000/]"))
        assert info["valid_action"] and "Search places" in obs
    finally:
        release.set()
        env.close()


def test_a_crashed_browser_is_restarted(env) -> None:
    env.reset(options={"item_id": 0})
    base = env.unwrapped
    old_processes = base.browser._processes()
    assert len(old_processes) > 1
    base.browser.driver.service.process.kill()  # chromedriver dies; Chromium is orphaned, not dead
    base.browser.driver.service.process.wait(5)
    obs, _, _, _, info = env.step(act("scroll [down]"))
    assert info.get("browser_restarted") and "One Stop Market" in obs
    deadline = time.monotonic() + 5
    while any(p.is_running() and p.status() != "zombie" for p in old_processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    left_running = any(p.is_running() and p.status() != "zombie" for p in old_processes)
    assert not left_running, "the old Chromium was left running"
    total, info, _ = run_solution(env, 0)
    assert total == 1.0


# ---- evaluators (no browser) ----------------------------------------------------------------------------
def test_string_match_rules() -> None:
    """WebArena's checks by default: cleaned (stripped, outer quotes, lower case) equality, substrings."""
    assert evaluation.exact_match(" 'Complete' ", "complete") and not evaluation.exact_match(" Complete. ", "complete")
    assert not evaluation.exact_match("It is complete", "complete")
    assert evaluation.must_include("The total was $1,263.97 in all", "263.97")
    assert not evaluation.must_include("The total was $1,263.97 in all", "1263.97")
    assert not evaluation.string_match("3 min or 4 min", {"must_include": ["3 min |OR| 5 min"]})  # no |OR| here
    # the project's lenient checks (lenient_matching=True)
    assert evaluation.lenient_exact_match(" Complete. ", "complete")
    assert evaluation.lenient_must_include("The total was $1,263.97 in all", "1263.97")
    assert evaluation.string_match("3 min or 4 min", {"must_include": ["3 min |OR| 5 min"]}, lenient=True)
    assert evaluation.fuzzy_match("I think it's the Vertex ceramic mug!", "Vertex Ceramic Mug")
    assert evaluation.fuzzy_match("Vertex Ceramic Mugs", "Vertex Ceramic Mug")  # ratio rule
    assert not evaluation.fuzzy_match("Harbor Ceramic Mug", "Vertex Ceramic Mug")
    assert evaluation.fuzzy_match("N/A", "N/A") and not evaluation.fuzzy_match("Vertex", "N/A")
    assert evaluation.tokens("at -79.9436, well-known") == ["at", "-79.9436", "well", "known"]


def test_answer_matching_cannot_be_gamed_by_listing_everything() -> None:
    page_dump = "Harbor Ceramic Mug, Vertex Ceramic Mug, Summit Steel Kettle, Alpine Glass Jar, Coastal Linen Towel"
    assert not evaluation.fuzzy_match(page_dump, "Vertex Ceramic Mug")  # contains the tokens, but is no answer
    # a one-character reference, alone in its list, must be a word token (WebArena's rule)
    assert not evaluation.string_match("There are 10 orders", {"must_include": ["0"]})
    assert not evaluation.string_match("It was in 2021", {"must_include": ["1"]})
    assert evaluation.string_match("Just 1 order, in 2021", {"must_include": ["1"]})
    assert evaluation.string_match("It was in 2021", {"must_include": ["21"]})  # longer references are substrings
    assert not evaluation.lenient_must_include("There are 10 orders", "0")  # lenient: any one-token reference
    assert not evaluation.lenient_must_include("It was in 2021", "21")
    assert not evaluation.lenient_must_include("at 79.9436", "-79.9436")  # the minus sign is kept


def test_url_match_rules() -> None:
    reference = "http://h:1/search?q=yoga mat"
    assert evaluation.url_match("http://h:1/search?q=yoga+mat&page=1", reference.replace(" ", "%20"))
    assert evaluation.url_match("http://h:1/search/results/?q=yoga%20mat",
                                reference)  # the path contains the reference's
    assert not evaluation.url_match("http://h:1/search/?q=Yoga%20Mat", reference)  # values are case-sensitive
    assert not evaluation.url_match("http://h:1/search?q=yoga", reference)
    assert evaluation.url_match("http://h:1/b", "http://h:1/a |OR| http://h:1/b")
    assert not evaluation.url_match("http://h:1/s?q=a%2526b", "http://h:1/s?q=a%26b")  # decoded once
    # lenient_matching=True: equal path, case-insensitive, every reference value equal
    assert evaluation.url_match("http://h:1/search/?q=Yoga%20Mat", reference, lenient=True)
    assert not evaluation.url_match("http://h:1/search/results?q=yoga%20mat", reference, lenient=True)
    assert not evaluation.url_match("http://h:1/s?q=a%2526b", "http://h:1/s?q=a%26b", lenient=True)
    assert evaluation.url_match("http://h:1/s?q=a%26b", "http://h:1/s?q=a%26b", lenient=True)


def test_evaluate_requires_every_evaluator_and_rejects_helper_functions() -> None:
    config = {"eval": {"eval_types": ["string_match", "url_match"], "reference_answers": {"exact_match": "5"},
                       "reference_url": "__SHOPPING__/cart", "program_html": []}}
    resolve = lambda address: address.replace("__SHOPPING__", "http://h:1")  # noqa: E731
    args = (resolve, lambda url, js: None, None)
    assert evaluation.evaluate(config, "5", "http://h:1/cart", *args)[0] == 1.0
    assert evaluation.evaluate(config, "5", "http://h:1/", *args)[0] == 0.0
    assert evaluation.evaluate(config, "6", "http://h:1/cart", *args)[0] == 0.0
    assert evaluation.evaluate(config, "5.", "http://h:1/cart", *args)[0] == 0.0  # WebArena's exact match
    assert evaluation.evaluate(config, "5.", "http://h:1/Cart/", *args, lenient=True)[0] == 1.0  # lenient_matching
    helper = {"eval": {"eval_types": ["program_html"], "program_html": [
        {"url": "last", "locator": "func:get_query_text(__page__, 'main')",
         "required_contents": {"must_include": ["x"]}}]}}
    score, failures = evaluation.evaluate(helper, "", "http://h:1/", resolve, lambda url, js: "x", None)
    assert score == 0.0 and "not supported" in failures[0]


# ---- real WebArena configs ---------------------------------------------------------------------------
def test_webarena_config_files_play_against_a_deployment(tmp_path, browser) -> None:
    """WebArena's config format, loaded from disk, played against a site at a configured URL."""
    from agentgym_envs.webarena.server import SiteServer
    from agentgym_envs.webarena.shopping import ShoppingSite

    deployment = SiteServer(ShoppingSite())
    configs = [
        {"task_id": 7, "sites": ["shopping"], "require_login": True, "storage_state": None, "start_url": "__SHOPPING__",
         "geolocation": None, "intent": "Search for yoga mats",
         "eval": {"eval_types": ["url_match"], "reference_answers": None,
         "reference_url": "__SHOPPING__/search?q=yoga mat", "url_note": "GOLD in PRED", "program_html": []}},
        {"task_id": 8, "sites": ["shopping"], "require_login": True, "storage_state": None,
         "start_url": "__SHOPPING__/cart",
         "geolocation": None, "intent": "Is my cart empty?", "eval": {"eval_types": ["string_match", "program_html"],
         "reference_answers": {"exact_match": "yes"}, "reference_url": "", "program_html": [
             {"url": "last", "locator": "document.querySelector('main').innerText",
              "required_contents": {"must_include": ["no items"]}}]}},
        {"task_id": 9, "sites": ["gitlab"], "start_url": "__GITLAB__", "intent": "not for this id",
         "eval": {"eval_types": []}},
        {"task_id": 10, "sites": ["shopping"], "start_url": "__SHOPPING__/orders |AND| __SHOPPING__/cart",
         "intent": "Two tabs",
         "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["2"]}, "reference_url": "",
                  "program_html": []}},
    ]
    for config in configs:
        (tmp_path / f"{config['task_id']}.json").write_text(json.dumps(config))
    env = gym.make("AgentGym/WebArena-Shopping-v0", config_path=str(tmp_path),
                   base_urls={"shopping": deployment.base_url}, browser=browser)
    try:
        assert env.unwrapped._splits == {"train": [], "test": [7, 8, 10]}
        obs, info = env.reset(options={"item_id": 7})
        assert f"URL: {deployment.base_url}/" in obs  # real deployments are shown at their own address
        searchbox = env.unwrapped._tree.find("searchbox", "Search the store")
        env.step(act(f"type [{searchbox.id}] [yoga mat] [1]"))
        _, reward, terminated, _, info = env.step(act("stop [done]"))
        assert terminated and reward == 1.0
        env.reset(options={"split": "test", "index": 1})
        _, reward, *_ = env.step(act("stop [yes]"))
        assert reward == 1.0
        obs, _ = env.reset(options={"item_id": 10})  # " |AND| ": one tab per start URL, the first focused
        assert "Tab 0 (current): My Orders" in obs and "Tab 1: Shopping Cart" in obs
        with pytest.raises(ValueError, match="base URLs"):
            gym.make("AgentGym/WebArena-GitLab-v0", config_path=str(tmp_path))
    finally:
        env.close()
        deployment.shutdown()


def test_a_closed_env_hands_its_browser_to_the_next_env() -> None:
    from agentgym_envs.web.browser import BROWSER_POOL

    BROWSER_POOL.clear()
    first = gym.make("AgentGym/WebArena-Maps-v0")
    first.reset(options={"split": "test", "index": 0})
    browser = first.unwrapped.browser
    browser.driver.execute_script("document.cookie = 'old=1; path=/'")
    first.close()
    assert BROWSER_POOL.idle == 1 and browser.running
    second = gym.make("AgentGym/WebArena-Maps-v0")
    try:
        second.reset(options={"split": "test", "index": 1})
        assert second.unwrapped.browser is browser and browser.launches == 1
        assert browser.driver.execute_script("return document.cookie") == ""
    finally:
        second.close()
        BROWSER_POOL.clear()
    assert not browser.running
