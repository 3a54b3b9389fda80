"""The trajectory viewer in real headless Chromium: filters, search, conversations, safety, and a screenshot."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import agentgym_envs  # noqa: F401
from agentgym_envs.agents import make_agent
from agentgym_envs.evaluation import evaluate
from agentgym_envs.evaluation.viewer import write_viewer
from agentgym_envs.web import chromium_missing_reason

pytestmark = pytest.mark.skipif(chromium_missing_reason() is not None, reason=str(chromium_missing_reason()))

DEPTH1 = "AgentGym/TextCraft-Depth1-v0"
DEPTH2 = "AgentGym/TextCraft-Depth2-v0"
HOSTILE = "</script><img id=pwned src=x onerror=\"document.title='pwned'\"><b>not bold</b>"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """The oracle under budgets too short for some items: depth 1 (K=2, 2 turns: 4 of 8 solved) and depth 2
    (4 turns: 2 of 4 solved under AgentGym's one-unit crafts), in one log."""
    root = tmp_path_factory.mktemp("viewer")
    lines = []
    for name, env_id, samples, turns in (("depth1", DEPTH1, 2, 2), ("depth2", DEPTH2, 1, 4)):
        agent = make_agent("oracle")
        evaluate(agent, [env_id], root / name, n_samples=samples, max_turns=[turns], limit=4, progress=False)
        agent.close()
        lines += (root / name / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    records[0]["messages"][3]["content"] = HOSTILE  # model output that looks like markup (after the opening)
    run = root / "mixed"
    run.mkdir()
    (run / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return run


@pytest.fixture(scope="module")
def browser():
    from agentgym_envs.web.browser import Browser, BrowserConfig

    chromium = Browser(BrowserConfig(window_size=(1200, 900)))
    yield chromium
    chromium.close()


def open_episode(driver, card):
    """Click an episode open; its conversation is built on the (asynchronous) toggle event."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    card.find_element(By.TAG_NAME, "summary").click()
    return WebDriverWait(driver, 10).until(lambda _: card.find_elements(By.CLASS_NAME, "conversation"))[0]


def test_page_is_self_contained(run_dir) -> None:
    page = write_viewer(run_dir).read_text(encoding="utf-8")
    assert not re.search(r"(src|href)\s*=", page.split('<script id="episodes"')[0])  # no external assets
    assert "http://" not in page and "https://" not in page
    assert page.count("</script>") == 2  # the hostile message cannot close the data element


def test_a_folder_name_that_looks_like_markup_stays_text(run_dir, tmp_path) -> None:
    """The page is a jinja2 template with autoescaping: the title comes from the run folder's name."""
    hostile = tmp_path / "<img src=x onerror=alert(1)>"
    hostile.mkdir()
    (hostile / "trajectories.jsonl").write_text((run_dir / "trajectories.jsonl").read_text(encoding="utf-8"))
    page = write_viewer(hostile).read_text(encoding="utf-8")
    assert "<title>Trajectories of &lt;img src=x onerror=alert(1)&gt;</title>" in page
    assert "<img src=x" not in page


def test_filters_search_and_conversation_in_chromium(run_dir, browser, tmp_path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    records = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    driver = browser.driver
    driver.get(write_viewer(run_dir).as_uri())

    def shown() -> list:
        return driver.find_elements(By.CSS_SELECTOR, "#list details.episode")

    def count() -> int:
        return int(driver.find_element(By.ID, "count").text)

    assert count() == len(records) == len(shown()) == 12
    assert driver.find_element(By.ID, "env").is_displayed()

    Select(driver.find_element(By.ID, "env")).select_by_value(DEPTH2)
    assert count() == 4 and all("TextCraft-Depth2-v0 / Depth2" in card.text for card in shown())
    assert driver.find_element(By.ID, "rate").text == "50.0%"

    Select(driver.find_element(By.ID, "env")).select_by_value("")
    Select(driver.find_element(By.ID, "outcome")).select_by_value("failure")
    failures = [r for r in records if not r["info"]["success"]]
    assert len(failures) == 6 and count() == 6
    assert all(card.get_attribute("data-success") == "false" and "failure" in card.text for card in shown())

    Select(driver.find_element(By.ID, "outcome")).select_by_value("")
    Select(driver.find_element(By.ID, "subtask")).select_by_value("Depth1")
    assert count() == 8 and driver.find_element(By.ID, "rate").text == "50.0%"
    Select(driver.find_element(By.ID, "subtask")).select_by_value("")
    budget = Select(driver.find_element(By.ID, "budget"))
    assert [option.text for option in budget.options] == ["all turn budgets", "max turns 2", "max turns 4"]
    budget.select_by_value("4")
    assert count() == 4 and all("/4 turns" in card.text for card in shown())
    budget.select_by_value("")
    assert not driver.find_element(By.ID, "step").is_displayed()  # evaluation logs have no training steps

    search = driver.find_element(By.ID, "search")
    search.send_keys("not bold")
    assert count() == 1
    card = shown()[0]
    conversation = open_episode(driver, card)
    opening = conversation.find_elements(By.CSS_SELECTOR, ".msg.task")  # instruction, acknowledgement, observation
    assert len(opening) == 3 and "Crafting commands" in opening[2].text and "acknowledgement" in opening[1].text
    first_action = conversation.find_element(By.CSS_SELECTOR, ".msg.assistant")
    assert HOSTILE in first_action.text and "action 1" in first_action.text and "reward" in first_action.text
    assert driver.find_elements(By.ID, "pwned") == [] and driver.title != "pwned"  # shown as text, never run
    observations = conversation.find_elements(By.CSS_SELECTOR, ".msg.user")
    assert len(observations) == records[0]["turns"]

    search.clear()
    search.send_keys("zzz-no-such-text")
    assert count() == 0 and "No episode matches" in driver.find_element(By.ID, "list").text


def test_screenshot_of_a_solved_episode(run_dir, browser, tmp_path) -> None:
    from PIL import Image
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver = browser.driver
    driver.get(write_viewer(run_dir).as_uri())
    Select(driver.find_element(By.ID, "outcome")).select_by_value("success")
    open_episode(driver, driver.find_elements(By.CSS_SELECTOR, "#list details.episode")[0])
    shot = tmp_path / "viewer.png"
    assert driver.save_screenshot(str(shot))
    with Image.open(shot) as image:
        assert image.format == "PNG" and image.size[0] >= 1000 and image.size[1] >= 600
        colors = image.convert("RGB").getcolors(maxcolors=1 << 20)
        assert len(colors) > 50  # text, badges and message boxes, not an empty page
        green_badge = sum(n for n, (r, g, b) in colors if g > 100 and r < 60 and b < 90)
        assert green_badge > 200  # the "success" badges are drawn


def test_a_bad_record_does_not_stop_the_page(run_dir, browser, tmp_path) -> None:
    """A record without info (or with odd fields) renders with defaults; the episodes after it render too."""
    from selenium.webdriver.common.by import By

    records = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    del records[0]["info"]
    records[1]["info"] = None
    records[2]["messages"] = "not a list"
    records[3]["rewards"] = None
    records[4]["messages"] = [None, {"role": "user", "content": {"a": 1}}, "x"]
    run = tmp_path / "bad"
    run.mkdir()
    (run / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    driver = browser.driver
    driver.get(write_viewer(run).as_uri())
    cards = driver.find_elements(By.CSS_SELECTOR, "#list details.episode")
    assert int(driver.find_element(By.ID, "count").text) == len(records) == len(cards)
    for card in cards[:6]:
        assert open_episode(driver, card)
    assert not driver.find_elements(By.CSS_SELECTOR, "#list div.empty")


def test_non_finite_numbers_do_not_empty_the_page(run_dir, browser, tmp_path) -> None:
    """Python's json writes NaN bare and ``JSON.parse`` rejects it: the page still shows every episode."""
    from selenium.webdriver.common.by import By

    records = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    records[0]["return"] = float("nan")
    records[1]["rewards"] = [float("inf")] * len(records[1]["rewards"])
    run = tmp_path / "nan"
    run.mkdir()
    (run / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    driver = browser.driver
    driver.get(write_viewer(run).as_uri())
    assert int(driver.find_element(By.ID, "total").text) == len(records)
    assert "return NaN" in driver.find_elements(By.CSS_SELECTOR, "#list details.episode")[0].text


def test_a_turn_cut_by_the_token_limit_is_marked(run_dir, browser, tmp_path) -> None:
    """Issue 49: the viewer says which turns a token limit cut (the record's ``cut``), and which turns of the prompt
    an oracle prefix replayed (``prefix_actions``)."""
    from selenium.webdriver.common.by import By

    records = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    records[0]["cut"] = [1]
    # an episode that started after the oracle's first action (reverse curriculum): that turn is part of its prompt
    opening = records[1]["prompt_messages"]
    records[1]["messages"][opening:opening] = [{"role": "assistant", "content": "Action: inventory"},
                                               {"role": "user", "content": "Inventory: []"}]
    records[1]["prompt_messages"], records[1]["prefix_actions"] = opening + 2, ["Action: inventory"]
    run = tmp_path / "cut"
    run.mkdir()
    (run / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    driver = browser.driver
    driver.get(write_viewer(run).as_uri())
    cards = driver.find_elements(By.CSS_SELECTOR, "#list details.episode")
    texts = [open_episode(driver, card).text for card in cards[:2]]
    assert texts[0].count("cut at the token limit") == 1 and "cut at the token limit" not in texts[1]
    assert "replayed oracle action" not in texts[0] and texts[1].count("replayed oracle action") == 1
    assert "observation (oracle prefix)" in texts[1] and "task: first observation" in texts[1]


def test_parsed_actions_unplayed_turns_and_context_cuts_are_shown(run_dir, browser, tmp_path) -> None:
    """Issue 49: each reply shows the action the env parsed from it (the record's ``parsed_actions``, from
    ``info["parsed_action"]``), a reply a limit ended the episode on is marked unplayed, a context cut is named
    as one; a record from before ``parsed_actions`` shows its replies alone."""
    from selenium.webdriver.common.by import By

    played = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()][1]
    sent = [reply.split("Action:")[-1].strip() for reply in played["actions"]]  # the oracle's ReAct replies
    assert played["parsed_actions"] == sent and all(a != r for a, r in zip(sent, played["actions"]))
    old = {key: value for key, value in played.items() if key != "parsed_actions"}
    unparsed = {**played, "parsed_actions": [None, *sent[1:]], "valid": [False, *played["valid"][1:]]}
    cut_reply = "Thought: I will think for a very long"
    turn_tokens = {**played, "messages": [*played["messages"], {"role": "user", "content": played["final_observation"]},
                                          {"role": "assistant", "content": cut_reply}],
                   "final_observation": None, "cut": [played["turns"] + 1], "turns": played["turns"] + 1,
                   "info": {**played["info"], "stop_reason": "turn_tokens"}}
    context = {**played, "info": {**played["info"], "stop_reason": "context"}}
    run = tmp_path / "parsed"
    run.mkdir()
    records = [played, old, unparsed, turn_tokens, context]
    (run / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    driver = browser.driver
    driver.get(write_viewer(run).as_uri())
    boxes = [open_episode(driver, card) for card in driver.find_elements(By.CSS_SELECTOR, "#list details.episode")]

    def parsed(box) -> list[str]:
        return [line.text for line in box.find_elements(By.CSS_SELECTOR, ".msg.assistant .parsed")]

    assert parsed(boxes[0]) == [f"parsed action: {action}" for action in sent]
    assert parsed(boxes[1]) == [] and "ended: the env ended the episode" in boxes[1].text  # an older record
    assert parsed(boxes[2])[0] == "parsed action: none (the env found no action in this reply)"
    assert "invalid action" in boxes[2].find_element(By.CSS_SELECTOR, ".msg.assistant.invalid").text
    last = boxes[3].find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1]
    assert cut_reply in last.text and "cut at the token limit  not sent to the env" in last.text
    assert "cut" in last.get_attribute("class") and len(parsed(boxes[3])) == len(sent)
    assert "ended: a reply hit the per-turn token limit" in boxes[3].text
    assert "observation (final: it did not fit the context)" in boxes[4].text
    assert "ended: the conversation no longer fit the model's context" in boxes[4].text
