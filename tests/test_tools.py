"""Tool-use envs (Weather, Movie, Academia, Sheet, TODOList) and BIRD-style text-to-SQL.

Covers the call syntax and its error texts, answer grading, each service's tools and state
grading, the oracles on every test split, and SQL safety (writes rejected, long queries
interrupted, the database unchanged) including the local BIRD loader.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import agentgym_envs
from agentgym_envs.agents import OracleAgent, RandomAgent, run_episode
from agentgym_envs.tools.answers import Gold, normalize_text, read_number
from agentgym_envs.tools.bird import load_bird, parse_sql_response
from agentgym_envs.tools.dbutil import ReadOnlySQL, QueryError, fingerprint
from agentgym_envs.tools.sheet import SheetService, create_workbook
from agentgym_envs.tools.tasks import ENVS, ITEMS_PER_ENV
from agentgym_envs.tools.toolkit import Call, ToolError, parse_call, parse_response, python_literal

TOOL_IDS = [f"AgentGym/{name}-v0" for name in ENVS]


def act(env: gym.Env, tool: str, **arguments) -> tuple[str, dict]:
    obs, _, _, _, info = env.step(f"Thought: test.\n\nAction: {Call(tool, arguments).render()}")
    return obs, info


# ---- registration and splits ---------------------------------------------------------------------


def test_ids_are_registered_with_no_extra_dependencies() -> None:
    for env_id in TOOL_IDS:
        spec = agentgym_envs.get_task(env_id)
        assert spec.family == "tools" and spec.extra == "tools" and spec.requires == ()
        assert gym.spec(env_id).max_episode_steps == spec.max_turns
    assert agentgym_envs.get_task("AgentGym/BIRD-v0").max_turns == 1


@pytest.mark.parametrize("env_id", TOOL_IDS)
def test_splits_have_20_test_items_and_more_train_items_in_the_env_block(env_id: str) -> None:
    spec = agentgym_envs.get_task(env_id)
    offset = ENVS[spec.subtask][0]
    test, train = spec.split("test"), spec.split("train")
    assert len(test) == 20 and len(train) >= 400 and not set(test) & set(train)
    assert all(offset <= i < offset + ITEMS_PER_ENV for i in test + train)


# ---- call syntax and argument checking -------------------------------------------------------------


def test_parse_response_accepts_the_react_forms() -> None:
    same_line = parse_response('Thought: look it up.\nAction: search_movie with Action Input: {"movie_name": "X"}')
    assert parse_call(same_line.action) == Call("search_movie", {"movie_name": "X"})
    split_lines = parse_response(
        'Thought: t\nAction: get_elevation\nAction Input: {\n "latitude": 1.5,\n "longitude": 2\n}\nObservation: made '
        'up'
    )
    assert parse_call(split_lines.action) == Call("get_elevation", {"latitude": 1.5, "longitude": 2})
    fenced = parse_response("Action:\n`get_projects` with Action Input: ```json\n{}\n```")
    assert parse_call(fenced.action) == Call("get_projects", {})
    assert parse_call(parse_response("get_user_current_date").action) == Call("get_user_current_date", {})


def test_parse_errors_explain_the_format() -> None:
    assert "more than one 'Action:'" in parse_response("Action: a\nAction: b").error
    assert "No 'Action:' line" in parse_response("Thought: hmm\nstill thinking").error
    with pytest.raises(ToolError, match="not valid JSON"):
        parse_call('get_elevation with Action Input: {"latitude": 1,')
    with pytest.raises(ToolError, match="must be a JSON object"):
        parse_call("get_elevation with Action Input: [1, 2]")
    with pytest.raises(ToolError, match="is not a tool name"):
        parse_call("craft 4 stick using 2 oak planks")


def test_tool_argument_errors_come_back_as_observations() -> None:
    env = gym.make("AgentGym/Movie-v0", detailed_instruction=True).unwrapped
    env.reset(options={"split": "test", "index": 0})
    cases = {
        'Action: search_movi with Action Input: {"movie_name": "x"}':
            "unknown tool 'search_movi'. Did you mean search_movie?",
        'Action: get_movie_details with Action Input: {"movie_id": "12"}':
            "argument 'movie_id' must be an integer, got a string",
        'Action: get_movie_details with Action Input: {"movie_id": true}': "must be an integer, got a boolean",
        "Action: get_movie_details with Action Input: {}": "missing required argument 'movie_id'",
        'Action: get_movie_details with Action Input: {"movie_id": 1, "lang": "en"}': "unknown argument(s) 'lang'",
        'Action: get_movie_details with Action Input: {"movie_id": 99999}': "no film with id 99999",
        'Action: search_movie with Action Input: {"movie_name": "x"}': "at least 2 characters",
    }
    for response, expected in cases.items():
        obs, _, terminated, _, info = env.step(response)
        assert expected in obs and obs.startswith("Error:") and info["valid_action"] is False and not terminated
    env.close()


def test_function_calling_forms_are_accepted() -> None:
    """What function-calling models write: Hermes/Qwen <tool_call> tags and OpenAI's call object."""
    expected = Call("get_movie_details", {"movie_id": 1})
    for response in (
        '<tool_call>\n{"name": "get_movie_details", "arguments": {"movie_id": 1}}\n</tool_call>',
        'Let me look.\n<tool_call>{"name": "get_movie_details", "arguments": {"movie_id": 1}}</tool_call>',
        '{"name": "get_movie_details", "arguments": "{\\"movie_id\\": 1}"}',
    ):
        assert parse_call(parse_response(response).action) == expected, response
    assert parse_call(parse_response('<tool_call>{"name": "get_projects"}</tool_call>').action) == Call("get_projects")
    assert "No 'Action:' line" in parse_response('Thought: no call\n{"answer": 3}').error  # JSON, but not a call


@pytest.mark.parametrize("env_id", [i for i in TOOL_IDS if "BIRD" not in i])
def test_tool_schemas_are_what_the_argument_checks_enforce(env_id: str) -> None:
    """Each tool's OpenAI function schema is valid JSON Schema and accepts exactly the calls the env accepts."""
    jsonschema = pytest.importorskip("jsonschema")
    env = gym.make(env_id).unwrapped
    env.reset(options={"split": "test", "index": 0})
    schemas = {schema["function"]["name"]: schema for schema in env.tool_schemas()}
    rng = np.random.default_rng(0)
    try:
        assert list(schemas)[-1] == "finish" and len(schemas) == len(env.service.TOOLS) + 1
        for name, schema in schemas.items():
            assert schema["type"] == "function" and schema["function"]["description"]
            validator = jsonschema.Draft202012Validator(schema["function"]["parameters"])
            validator.check_schema(schema["function"]["parameters"])
            tool = env.service.tool(name)
            valid = {param.name: env.service.example_value(param, rng) for param in tool.params}
            variants = [valid, {**valid, "unexpected": 1}, {k: v for k, v in valid.items() if k != "answer"}]
            variants += [{**valid, param.name: value} for param in tool.params
                         for value in (None, "text", 7, 2.5, True, [], {}, 2**60)]
            variants += [{k: v for k, v in valid.items() if k != param.name} for param in tool.params]
            for arguments in variants:
                try:
                    tool.check_arguments(arguments)
                    accepted = True
                except ToolError:
                    accepted = False
                assert validator.is_valid(arguments) == accepted, (name, arguments)
    finally:
        env.close()


# ---- answer grading -----------------------------------------------------------------------------


def test_answer_grading_reads_numbers_texts_lists_and_booleans() -> None:
    assert Gold(21.4, "number", tolerance=0.05).matches("21.4 °C") and Gold(21.4, "number", tolerance=0.05).matches(
        21.43
    )
    assert not Gold(21.4, "number", tolerance=0.05).matches("between 20 and 22")
    assert read_number("1,250 km") == 1250.0 and Gold(1250, "number", tolerance=1).matches("1,250 km")
    assert Gold("The Silent River").matches("silent river.") and not Gold("Silent River").matches("Silent Rivers")
    assert Gold(["Ana Costa", "Omar Patel"], "list").matches("Omar Patel, Ana Costa")
    assert Gold(["Ana Costa", "Omar Patel"], "list").matches(["omar patel", "ana costa"])
    assert not Gold(["Ana Costa", "Omar Patel"], "list").matches(["Ana Costa"])
    assert (
        Gold(True, "bool").matches("Yes, it does.")
        and Gold(False, "bool").matches(False)
        and not Gold(True, "bool").matches("no")
    )
    assert normalize_text("São  Paulo!") == "sao paulo"


# ---- oracles ------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", TOOL_IDS)
def test_oracle_solves_every_test_item_within_the_turn_cap(env_id: str) -> None:
    env = gym.make(env_id)
    items = agentgym_envs.get_task(env_id).split("test")
    results = [run_episode(env, OracleAgent(), int(item)) for item in items]
    env.close()
    success = np.mean([r.success for r in results])
    assert success >= 0.95, f"{env_id}: oracle success {success:.2f}"
    assert all(r.reward == pytest.approx(float(r.success)) for r in results)


@pytest.mark.parametrize("env_id", TOOL_IDS)
def test_random_agent_rarely_succeeds(env_id: str) -> None:
    env = gym.make(env_id)
    agent = RandomAgent(seed=1)
    results = [run_episode(env, agent, int(item)) for item in agentgym_envs.get_task(env_id).split("test")[:20]]
    env.close()
    assert np.mean([r.success for r in results]) <= 0.2


AGENTGYM_TOOL_IDS = [f"AgentGym/{name}-v0" for name in ENVS if name != "BIRD"]


@pytest.mark.parametrize("env_id", AGENTGYM_TOOL_IDS)
def test_tool_conversations_open_as_agentgyms_tool_clients(env_id: str) -> None:
    env = gym.make(env_id)
    obs, info = env.reset(options={"split": "test", "index": 0})
    instruction = info["instruction"]
    assert instruction.startswith("You are an autonomous intelligent agent. You can use actions to help people solve "
                                  "problems.\nWe detail name, description, input(parameters) and output(returns) of "
                                  "each action as follows:\nName: ")
    if "Sheet" in env_id:  # AgentGym's Sheet server has no check_valid_actions, and its finish() takes no answer
        assert "check_valid_actions" not in instruction
        assert "\n\nName: finish()\nDescription: Return an answer and finish the task\n" in instruction
    else:
        assert ("\n\nName: check_valid_actions()\nDescription: Get supported actions for current tool.\nReturns:\n"
                "- actions (Type: array): Supported actions for current tool.\n\nName: finish(answer)\n") in instruction
    assert 'If you are finished, you will call "finish" action.' in instruction
    assert instruction.endswith("You need to give your thought together with your action!\n\nYour response must be "
                                "in the format of:\nThought: [your thought]\n\nAction: [your action] with Action "
                                "Input: [your action input]\n")
    assert info["acknowledgement"] == "Ok."
    question = env.unwrapped.current.question
    assert obs == (f"Now new trial starts.\nYou should perform actions to accomplish the goal: {question}\n"
                   "Give me one action.")
    env.close()


def test_weather_instruction_lists_tools_as_agentgym_does() -> None:
    env = gym.make("AgentGym/Weather-v0")
    _, info = env.reset(options={"split": "test", "index": 0})
    name_line = "\n\nName: get_historical_temp(latitude, longitude, start_date, end_date)\nDescription: "
    assert name_line in info["instruction"]
    assert "\nParameters:\n- latitude (Type: number): " in info["instruction"]
    assert ('\n\nIf you want to get the latitude and longitude information of a city, you must call '
            '"get_latitude_longitude"! Do not generate it by yourself which maybe wrong.') in info["instruction"]
    env.close()


def test_agentgym_rules_by_default_and_ours_with_detailed_instruction() -> None:
    """AgentGym: the Action Input is Python (single quotes, True), a tool result equal to the gold wins (without
    finish), any action containing "finish" ends; ours (detailed_instruction=True): JSON, "Error: ...", only finish."""
    from agentgym_envs.tools.answers import Gold

    env = gym.make("AgentGym/Weather-v0").unwrapped
    env.reset(options={"split": "test", "index": 0})
    env.current.gold = Gold(env.service.today.isoformat())  # a question: "what is today's date?"
    obs, reward, terminated, _, info = env.step("Action: get_user_current_date with Action Input: {}")
    assert reward == 1.0 and info["success"] and not terminated  # AgentGym's subgoal: the tool's result
    obs, reward, terminated, _, info = env.step("Action: get_user_current_date with Action Input: {'x': 'finish'}")
    assert terminated and reward == 0.0 and info["success"]  # "finish" anywhere in the action ends it
    ours = gym.make("AgentGym/Weather-v0", detailed_instruction=True).unwrapped
    ours.reset(options={"item_id": env.item_id})
    obs, reward, terminated, _, info = ours.step("Action: get_user_current_date with Action Input: {}")
    assert reward == 0.0 and not terminated
    obs, _, _, _, info = ours.step("Action: get_user_current_date with Action Input: {'a': 1}")
    assert obs.startswith("Error: The Action Input of get_user_current_date is not valid JSON")
    assert not info["valid_action"]


def test_tool_replies_are_wrapped_as_agentgyms_servers_do() -> None:
    env = gym.make("AgentGym/Weather-v0")
    env.reset(options={"split": "test", "index": 6})
    obs, _, terminated, _, info = env.step("I will look up the date first.")
    assert obs == ('Format error, please response in the format of  "Action: [your action] with Action Input: '
                   "[your action input]") and not info["valid_action"] and not terminated
    obs, _, _, _, info = env.step("Thought: Which tools?\n\nAction: check_valid_actions with Action Input: {}")
    assert obs.startswith("Observation: You can use following valid actions: ['get_user_current_date', ")
    assert obs.endswith(", 'check_valid_actions', 'finish']\nGive me one action.") and info["valid_action"]
    today = env.unwrapped.service.today.isoformat()
    obs, _, _, _, _ = env.step("Thought: The date.\n\nAction: get_user_current_date with Action Input: {}")
    assert obs == f"Observation: {today}\nGive me one action."
    obs, _, _, _, info = env.step('Thought: Where?\n\nAction: get_latitude_longitude with Action Input: {"city": "x"}')
    assert obs.startswith("Observation: ERROR | ") and obs.endswith("\nGive me one action.")
    assert not info["valid_action"]
    obs, _, terminated, _, info = env.step("Thought: Hm.\n\nAction: fly_to with Action Input: {}")
    assert obs == "Observation: ERROR | Invalid action: fly_to.\nGive me one action." and not terminated
    obs, _, terminated, _, info = env.step('Thought: JSON.\n\nAction: get_user_current_date with Action Input: '
                                           '{"x": true}')  # JSON's true is no Python literal
    assert obs == ("Observation: ERROR | Exception(Parameters in action input are not valid, please change your "
                   "action input.)\nGive me one action.") and not terminated
    gold = env.unwrapped.current.gold.value
    obs, reward, terminated, _, info = env.step(f'Thought: Done.\n\nAction: finish with Action Input: '
                                                f'{{"answer": {gold}}}')
    assert obs == f"Observation: {gold}\nGive me one action." and terminated and reward == 1.0 and info["success"]
    env.close()


def test_question_tasks_end_with_a_graded_finish() -> None:
    env = gym.make("AgentGym/Weather-v0", detailed_instruction=True)
    env.reset(options={"split": "test", "index": 6})  # the distance template
    obs, reward, terminated, _, info = env.step('Action: finish with Action Input: {"answer": "far"}')
    assert terminated and reward == 0.0 and not info["success"] and "not correct (expected" in obs
    env.reset(options={"split": "test", "index": 6})
    gold = env.unwrapped.current.gold.value
    obs, reward, terminated, _, info = env.step(f'Action: finish with Action Input: {{"answer": "{gold} km"}}')
    assert terminated and reward == 1.0 and info["success"]
    env.close()


# ---- Weather --------------------------------------------------------------------------------------


def test_weather_separates_history_from_forecast() -> None:
    env = gym.make("AgentGym/Weather-v0", detailed_instruction=True).unwrapped
    env.reset(options={"split": "test", "index": 0})
    today = act(env, "get_user_current_date")[0]
    lyon = json.loads(act(env, "get_latitude_longitude", name="lyon")[0])["results"][0]
    where = {"latitude": lyon["latitude"], "longitude": lyon["longitude"]}
    obs, info = act(env, "get_historical_temp", **where, start_date=today, end_date=today)
    assert not info["valid_action"] and "historical data ends yesterday" in obs
    forecast = json.loads(act(env, "get_temp_forecast", **where, start_date=today, end_date=today)[0])["daily"][0]
    current = json.loads(act(env, "get_current_temp", **where, current_date=today)[0])
    assert (
        current == forecast and current["temperature_min"] <= current["temperature_mean"] <= current["temperature_max"]
    )
    obs, info = act(env, "get_current_temp", **where, current_date="2020-01-01")
    assert "must be today's date" in obs
    assert "within 50 km" in act(env, "get_elevation", latitude=0.0, longitude=0.0)[0]
    assert act(env, "get_air_quality_level", air_quality_index=120)[0] == "moderate"
    env.close()


# ---- Movie and Academia ---------------------------------------------------------------------------


def test_movie_search_and_credits_are_consistent() -> None:
    env = gym.make("AgentGym/Movie-v0", detailed_instruction=True).unwrapped
    env.reset(options={"split": "test", "index": 0})
    hit = json.loads(act(env, "search_movie", movie_name="of")[0])["results"][0]
    cast = json.loads(act(env, "get_movie_cast", movie_id=hit["id"])[0])
    person = cast[0]
    films = json.loads(act(env, "get_person_cast", person_id=person["person_id"])[0])
    assert any(f["movie_id"] == hit["id"] and f["character"] == person["character"] for f in films)
    crew = json.loads(act(env, "get_movie_crew", movie_id=hit["id"])[0])
    assert sum(1 for c in crew if c["job"] == "Director") == 1
    env.close()


def test_academia_graphs_must_be_loaded_and_names_are_suggested() -> None:
    env = gym.make("AgentGym/Academia-v0", detailed_instruction=True).unwrapped
    env.reset(options={"split": "test", "index": 2})
    title = env.current.plan[1].call.arguments["node"]
    obs, info = act(env, "paper_node_check", node=title)
    assert not info["valid_action"] and "call load_paper_net first" in obs
    act(env, "load_paper_net")
    obs, info = act(env, "paper_node_check", node=title[:-1])
    assert not info["valid_action"] and f"Did you mean '{title}'" in obs
    node = json.loads(act(env, "paper_node_check", node=title)[0])
    neighbours = json.loads(act(env, "neighbour_check", graph="PaperNet", node=title)[0])
    assert node["citation_count"] == len(neighbours["cited_by"])
    obs, info = act(env, "neighbour_check", graph="CitationNet", node=title)
    assert "must be one of" in obs
    env.reset(options={"split": "test", "index": 2})
    assert "call load_paper_net first" in act(env, "paper_node_check", node=title)[0]  # loading is per episode
    env.close()


# ---- Sheet --------------------------------------------------------------------------------------


@pytest.fixture
def sheet() -> SheetService:
    service = SheetService(
        create_workbook(
            {
                "Sales": [["Product", "Units"], ["Lamp", 5], ["Desk", 12], ["Mug", 7]],
                "Notes": [["Note"], ["keep me"]],
            }
        )
    )
    service.open_sheet("sales")
    return service


def test_sheet_tools_edit_the_store(sheet: SheetService) -> None:
    sheet.sort_sheet_by_col(2, "des")
    assert sheet.get_all_values() == [["Product", "Units"], ["Desk", 12], ["Mug", 7], ["Lamp", 5]]
    assert sheet.update_cell_by_formula("SUM", "B2", "B4", "B5") == 24
    sheet.insert_rows([["Pen", 3]], 2)
    sheet.delete_batch_data("row", [3])
    sheet.insert_cols([["Price", 1.5, 2, 3, 4.25]], 3)
    assert sheet.get_all_values() == [
        ["Product", "Units", "Price"],
        ["Pen", 3, 1.5],
        ["Mug", 7, 2],
        ["Lamp", 5, 3],
        ["", 24, 4.25],
    ]
    assert sheet.filter_rows(2, ">=", 5) == {
        "rows": [
            {"row": 3, "values": ["Mug", 7, 2]},
            {"row": 4, "values": ["Lamp", 5, 3]},
            {"row": 5, "values": ["", 24, 4.25]},
        ]
    }
    with pytest.raises(ToolError, match="must be 2 rows of 2 values"):
        sheet.update_range("A1", "B2", [["x", "y"]])
    with pytest.raises(ToolError, match="like 'B3'"):
        sheet.update_cell("3B", 1)
    assert sheet.grid_of("Notes") == [["Note"], ["keep me"]]


def test_sheet_edits_are_graded_on_the_whole_workbook() -> None:
    env = gym.make("AgentGym/Sheet-v0", detailed_instruction=True)
    env.reset(options={"split": "test", "index": 0})  # a sort task on the first sheet
    base = env.unwrapped
    sheets = base.service.sheet_names()
    act(base, "open_sheet", sheet_name=sheets[1])
    act(base, "update_cell", position="A2", value="vandalised")  # collateral damage on another sheet
    for _ in range(6):
        obs, reward, terminated, truncated, info = env.step(base.oracle_action())  # the oracle repairs it
        if terminated or truncated:
            break
    assert info["success"] and terminated

    env.reset(options={"split": "test", "index": 0})
    obs, reward, terminated, _, info = env.step("Action: finish with Action Input: {}")
    assert terminated and reward == 0.0 and "does not match" in obs
    env.close()


# ---- TODOList -------------------------------------------------------------------------------------


def test_todo_changes_are_graded_on_state_and_the_oracle_replans() -> None:
    env = gym.make("AgentGym/TODOList-v0", detailed_instruction=True)
    env.reset(options={"split": "test", "index": 3})  # mark a named task as done
    base = env.unwrapped
    plan_write = next(s.call for s in base.current.plan if s.call.tool == "complete_task")
    project_id = base.service.db.execute(
        "SELECT project_id FROM tasks WHERE id = ?", (plan_write.arguments["task_id"],)
    ).fetchone()[0]
    obs, info = act(base, "create_task", project_id=project_id, content="An unrelated chore")
    assert info["valid_action"] and not info["success"]
    obs, info = act(base, "complete_task", task_id=plan_write.arguments["task_id"])
    assert "is completed" in obs and not info["success"]  # the extra task makes the state wrong
    obs, info = act(base, "complete_task", task_id=plan_write.arguments["task_id"])
    assert not info["valid_action"] and "already completed" in obs
    obs, _, terminated, _, info = env.step("Action: finish with Action Input: {}")
    assert terminated and not info["success"]

    env.reset(options={"split": "test", "index": 3})
    obs, info = act(base, "update_task", task_id=plan_write.arguments["task_id"], due_date="2030-01-01")
    assert info["valid_action"]
    assert (
        "due_date must be a date"
        in act(base, "update_task", task_id=plan_write.arguments["task_id"], due_date="next friday")[0]
    )
    for _ in range(8):
        obs, reward, terminated, truncated, info = env.step(base.oracle_action())
        if terminated or truncated:
            break
    assert not info["success"]  # the due date change cannot be undone by the plan's writes: graded as a failure
    env.close()


def test_todo_state_tasks_finish_as_soon_as_the_data_is_right() -> None:
    env = gym.make("AgentGym/TODOList-v0", detailed_instruction=True)
    obs, info = env.reset(options={"split": "test", "index": 6})  # add a project to favourites
    assert obs.startswith("Task: ") and "favourites" in obs
    base = env.unwrapped
    write = base.current.plan[-1].call
    obs, reward, terminated, _, info = env.step(f"Action: {write.render()}")
    assert terminated and reward == 1.0 and info["success"] and "The task is complete." in obs
    env.close()


# ---- BIRD: SQL safety -----------------------------------------------------------------------------


@pytest.fixture
def bird() -> gym.Env:
    env = gym.make("AgentGym/BIRD-v0", sql_timeout=0.5, detailed_instruction=True).unwrapped
    env.reset(options={"split": "test", "index": 0})
    yield env
    env.close()


WRITES = [
    "DELETE FROM customers",
    "UPDATE products SET unit_price = 0",
    "INSERT INTO categories VALUES (99, 'x')",
    "DROP TABLE orders",
    "CREATE TABLE t (a)",
    "CREATE TEMP TABLE t (a)",
    "ALTER TABLE customers ADD COLUMN x",
    "ATTACH DATABASE ':memory:' AS other",
    "PRAGMA query_only = OFF",
    "BEGIN",
    "VACUUM",
    "WITH x AS (SELECT 1) DELETE FROM customers",
    "SELECT load_extension('evil')",
]


def test_bird_rejects_writes_and_leaves_the_database_unchanged(bird: gym.Env) -> None:
    db = bird.runner(bird.current.db_id).db
    before = fingerprint(db)
    for sql in WRITES:
        obs, reward, terminated, _, info = bird.step(f"Action:\n```sql\n{sql}\n```")
        assert obs.startswith("Error: Only SELECT queries are allowed"), (sql, obs)
        assert info["valid_action"] is False and reward == 0.0 and not terminated
    obs, *_ = bird.step("Action: SELECT 1; DELETE FROM customers")
    assert "exactly one SQL statement" in obs
    assert fingerprint(db) == before
    assert db.execute("SELECT COUNT(*) FROM customers").fetchone()[0] == 3000


def test_bird_interrupts_long_queries(bird: gym.Env) -> None:
    for sql in (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c",
        "SELECT COUNT(*) FROM order_items AS a, order_items AS b, order_items AS c",
    ):
        started = time.perf_counter()
        obs, _, terminated, _, info = bird.step(f"Action: {sql}")
        elapsed = time.perf_counter() - started
        assert "interrupted" in obs and "0.5 s time limit" in obs and not info["valid_action"] and not terminated
        assert elapsed < 3.0
    obs, reward, terminated, _, info = bird.step(bird.oracle_action())  # the connection still works
    assert terminated and info["success"] and reward == 1.0


def test_bird_reports_invalid_sql_and_oversized_values(bird: gym.Env) -> None:
    assert 'near "SELEC": syntax error' in bird.step("Action: SELEC * FROM customers")[0]
    assert "no such table: nope" in bird.step("Action: SELECT * FROM nope")[0]
    assert "too big" in bird.step("Action: SELECT randomblob(2000000000)")[0]
    assert "The result is too large" in bird.step("Action: SELECT zeroblob(99999) FROM order_items")[0]  # ~3 GB refused


def test_read_only_guard_on_a_plain_connection() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (a)")
    db.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(10)])
    db.commit()
    guard = ReadOnlySQL(db, timeout=0.2, max_rows=5)
    result = guard.run("SELECT a FROM t ORDER BY a")
    assert result.rows == [(i,) for i in range(5)] and result.truncated and result.columns == ["a"]
    with pytest.raises(QueryError, match="read-only"):
        guard.run("UPDATE t SET a = 0")
    assert db.execute("SELECT SUM(a) FROM t").fetchone()[0] == 45


def test_bird_grades_result_sets(bird: gym.Env) -> None:
    gold_sql = bird.current.sql
    bird.reset(options={"split": "test", "index": 0})
    obs, reward, terminated, _, info = bird.step(
        f"Action: SELECT * FROM ({gold_sql}) UNION ALL SELECT * FROM ({gold_sql})"
    )
    assert info["success"]  # duplicated rows: the same set
    bird.reset(options={"split": "test", "index": 0})
    obs, reward, terminated, _, info = bird.step(f"Action: SELECT *, 1 FROM ({gold_sql})")
    assert terminated and reward == 0.0 and "not correct" in obs  # an extra column is a different result


def test_parse_sql_response_forms() -> None:
    assert parse_sql_response("Thought: t\n\nAction:\n```sql\nSELECT a\nFROM t\n```").action == "SELECT a\nFROM t"
    assert parse_sql_response("Action: SELECT 1").action == "SELECT 1"
    assert parse_sql_response("I will run:\n```sql\nSELECT 2;\n```").action == "SELECT 2;"
    assert parse_sql_response("SELECT x\nFROM y").action == "SELECT x\nFROM y"
    assert parse_sql_response("Thought: no query yet").error
    assert "more than one" in parse_sql_response("Action: SELECT 1\nAction: SELECT 2").error


def test_bird_schema_and_evidence_are_shown_with_our_instruction() -> None:
    env = gym.make("AgentGym/BIRD-v0", detailed_instruction=True)
    obs, info = env.reset(options={"split": "test", "index": 1})
    assert (
        info["db_id"] == "university" and "CREATE TABLE enrollments" in obs and "REFERENCES sections(section_id)" in obs
    )
    assert "Question: " in obs and "Evidence: " in obs and "ONE SQLite SELECT" in info["instruction"]
    env.close()


def test_bird_speaks_sqlgym_by_default() -> None:
    env = gym.make("AgentGym/BIRD-v0")
    obs, info = env.reset(options={"split": "test", "index": 1})
    assert info["instruction"].startswith("Given you a description of a SQlite database system, I will ask you a "
                                          "question, then you should help me operate the SQLite database with SQL")
    assert info["instruction"].endswith("Your SQL should be in one line. Every time you can only execute one SQL "
                                        "statement.")
    assert info["acknowledgement"] == "Ok."
    question = env.unwrapped.current.question
    assert obs.startswith("university contains tables such as ") and obs.endswith(f".\n\n{question}")
    assert " is the primary key. " in obs and "Evidence" not in obs and "CREATE TABLE" not in obs
    assert "The section_id of enrollments is the foreign key of section_id of sections." in obs
    sql = env.unwrapped.current.sql
    obs, reward, terminated, _, info = env.step(f"Thought: The gold query.\n\nAction: ```sql\n{sql}\n```")
    assert terminated and reward == 1.0 and info["success"] and obs.startswith("[(") and len(obs) <= 103
    env.reset(options={"split": "test", "index": 1})
    obs, reward, terminated, truncated, info = env.step("Action: ```sql\nSELECT * FROM no_such_table\n```")
    assert obs == "no such table: no_such_table" and reward == 0.0 and not info["valid_action"]
    assert terminated  # SqlGym ends the episode on an error too
    env.close()


def test_bird_refuses_as_sqlite_does_by_default_and_in_our_words_on_request() -> None:
    """SqlGym runs the statement on a read-only connection: SQLite's and Python's own words, every step
    ends the episode, an empty statement is ``[]``; ``extra_feedback=True`` explains and lets the turn cap decide."""
    cases = {
        "DROP TABLE enrollments": ("attempt to write a readonly database", "Only SELECT queries are allowed"),
        "SELECT 1; SELECT 2": ("You can only execute one statement at a time.", "Give exactly one SQL statement"),
        "": ("[]", "The SQL statement is empty."),
    }
    plain = gym.make("AgentGym/BIRD-v0").unwrapped
    ours = gym.make("AgentGym/BIRD-v0", extra_feedback=True, max_episode_steps=3).unwrapped
    for sql, (upstream, explained) in cases.items():
        plain.reset(options={"split": "test", "index": 1})
        obs, reward, terminated, _, info = plain.step(f"Thought: try.\n\nAction: ```sql\n{sql}\n```")
        assert obs == upstream and reward == 0.0 and terminated, (sql, obs)
        ours.reset(options={"split": "test", "index": 1})
        obs, reward, terminated, _, info = ours.step(f"Thought: try.\n\nAction: ```sql\n{sql}\n```")
        assert obs.startswith(explained) and not terminated and not info["valid_action"], (sql, obs)
    plain.reset(options={"split": "test", "index": 1})
    assert plain.step("```sql\nCREATE TEMP TABLE t (a)\n```")[0] == "[]"  # SQLite lets TEMP tables be
    plain.reset(options={"split": "test", "index": 1})  # a new connection, as SqlGym's reset: the table is gone
    assert plain.step("```sql\nSELECT * FROM t\n```")[0] == "no such table: t"
    assert plain.runner("university").db.execute("SELECT COUNT(*) FROM enrollments").fetchone()[0] > 0
    plain.close()
    ours.close()


def test_bird_describes_composite_keys_as_sqlgym_reads_birds_tables_json() -> None:
    """BIRD's tables.json lists a composite key as a nested list, which SqlGym's ``column_id in primary_keys``
    never matches: no column named; ``full_primary_keys=True`` names them."""
    for full, sentence in ((False, "grade.  is the primary key."), (True, "grade. student_id, section_id is the")):
        env = gym.make("AgentGym/BIRD-v0", full_primary_keys=full)
        obs, _ = env.reset(options={"split": "test", "index": 1})
        assert "Table enrollments has columns such as student_id, section_id, " + sentence in obs
        env.close()


def test_sqlgym_describes_a_real_database_in_words(tmp_path: Path) -> None:
    _fake_bird(tmp_path)
    env = gym.make("AgentGym/BIRD-v0", bird_dir=str(tmp_path))
    obs, _ = env.reset(options={"item_id": 0})
    assert obs == ("toy_shop contains tables such as toys. Table toys has columns such as id, name, price. id is the "
                   "primary key.\n\nWhich toy is the cheapest?")
    obs, reward, terminated, _, _ = env.step("Action: ```sql\nSELECT name FROM toys ORDER BY price LIMIT 1\n```")
    assert obs == "[('yo-yo',)]" and reward == 1.0 and terminated
    env.close()


# ---- BIRD: the real dev set from a local path -------------------------------------------------------


def _fake_bird(root: Path) -> Path:
    folder = root / "dev_databases" / "toy_shop"
    folder.mkdir(parents=True)
    db = sqlite3.connect(folder / "toy_shop.sqlite")
    db.executescript(
        "CREATE TABLE toys (id INTEGER PRIMARY KEY, name TEXT, price REAL);"
        "INSERT INTO toys VALUES (1, 'kite', 12.5), (2, 'yo-yo', 3.0), (3, 'robot', 45.0);"
    )
    db.commit()
    db.close()
    questions = [
        {
            "question_id": 0,
            "db_id": "toy_shop",
            "question": "Which toy is the cheapest?",
            "evidence": "cheapest refers to MIN(price)",
            "SQL": "SELECT name FROM toys ORDER BY price LIMIT 1",
            "difficulty": "simple",
        },
        {
            "question_id": 1,
            "db_id": "toy_shop",
            "question": "How many toys cost more than 10?",
            "evidence": "",
            "SQL": "SELECT COUNT(*) FROM toys WHERE price > 10",
            "difficulty": "simple",
        },
    ]
    (root / "dev.json").write_text(json.dumps(questions))
    return folder / "toy_shop.sqlite"


def test_bird_loader_plays_a_local_dev_set_read_only(tmp_path: Path) -> None:
    db_file = _fake_bird(tmp_path)
    digest = hashlib.sha256(db_file.read_bytes()).hexdigest()
    examples = load_bird(tmp_path)
    assert [e.question_id for e in examples] == [0, 1] and examples[0].db_path == db_file
    env = gym.make("AgentGym/BIRD-v0", bird_dir=str(tmp_path), detailed_instruction=True)
    obs, info = env.reset()
    assert info["split"] == "test" and info["item_id"] in (0, 1) and "CREATE TABLE toys" in obs
    obs, *_ = env.unwrapped.step("Action: DELETE FROM toys")
    assert "read-only" in obs
    results = [run_episode(env, OracleAgent(), i) for i in (0, 1)]
    assert all(r.success for r in results)
    env.reset(options={"item_id": 1})
    obs, reward, *_ = env.step("Action: SELECT COUNT(*) FROM toys")
    assert reward == 0.0 and "3" in obs
    env.close()
    assert hashlib.sha256(db_file.read_bytes()).hexdigest() == digest


def test_bird_loader_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="dev.json"):
        load_bird(tmp_path)
    (tmp_path / "dev.json").write_text(json.dumps([{"db_id": "gone", "question": "?", "SQL": "SELECT 1"}]))
    with pytest.raises(FileNotFoundError, match="gone.sqlite"):
        load_bird(tmp_path)


def test_tool_declarations_agree_with_the_code() -> None:
    """tools.json holds the declarations; the limits and names the services enforce must match them."""
    from agentgym_envs.tools import academia, movie, todo, weather

    services = (weather.WeatherService, movie.MovieService, academia.AcademiaService, SheetService, todo.TodoService)
    for service in services:
        for tool in service.TOOLS:
            assert callable(getattr(service, tool.name)), tool.name
            assert "{max_days}" not in tool.description
    ranged = [t for t in weather.WeatherService.TOOLS if "start_date" in {p.name for p in t.params}]
    assert ranged and all(f"at most {weather.MAX_RANGE_DAYS} days" in t.description for t in ranged)
    graph = next(p for t in academia.AcademiaService.TOOLS for p in t.params if p.name == "graph")
    assert graph.choices == academia.GRAPHS


# ---- issue 35: wide results, wide sheets ----------------------------------------------------------------
def _peak_python_mb(run) -> float:
    import tracemalloc

    tracemalloc.start()
    try:
        run()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak / 2**20


@pytest.mark.parametrize("columns, rows", [(900, 200), (250, 200), (40, 2_000)])
def test_wide_sql_results_are_refused_before_they_take_more_than_64_mb(columns: int, rows: int) -> None:
    """One row of 900 zeroblob(99999) columns is 90 MB; 200 of them, fetched as one batch, were ~18 GB."""
    guard = ReadOnlySQL(sqlite3.connect(":memory:", check_same_thread=False))
    wide = ", ".join(["zeroblob(99999)"] * columns)
    sql = f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows}) SELECT {wide} FROM n"

    def run() -> None:
        with pytest.raises(QueryError, match="too many columns|too large"):
            guard.run(sql)

    assert _peak_python_mb(run) < 100
    guard.close()


def test_bird_refuses_a_wide_result_in_its_observation() -> None:
    # its own env with a roomy time limit: the size guard must answer, not the clock of a loaded machine
    bird = gym.make("AgentGym/BIRD-v0", sql_timeout=30, detailed_instruction=True).unwrapped
    try:
        bird.reset(options={"split": "test", "index": 0})
        wide = ", ".join(["zeroblob(99999)"] * 900)
        obs, _, _, _, info = bird.step(f"Action: SELECT {wide} FROM order_items")
        assert "too many columns" in obs, obs[:300]
        obs, _, _, _, info = bird.step(f"Action: SELECT {', '.join(['zeroblob(99999)'] * 200)} FROM order_items")
        assert "too large" in obs, obs[:300]
    finally:
        bird.close()


def test_sheet_rows_and_columns_stay_within_a_to_z(sheet: SheetService) -> None:
    before = sheet.get_all_values()
    with pytest.raises(ToolError, match="at most 200 rows and 26 columns"):
        sheet.insert_rows([list(range(7_900))], 2)
    with pytest.raises(ToolError, match="at most 200 rows and 26 columns"):
        sheet.insert_rows([["x"]] * 300, 2)
    with pytest.raises(ToolError, match="at most 26 columns"):
        sheet.insert_cols([["h"]] * 30, 1)
    assert sheet.get_all_values() == before
    sheet.insert_rows([list(range(26))], 2)  # a full row fits
    assert max(len(row) for row in sheet.get_all_values()) == 26
    with pytest.raises(ToolError, match="at most 26 columns"):
        sheet.insert_cols([["h"]], 1)


def test_agentgyms_examples_line_is_kept_without_upstreams_example() -> None:
    """docs/envs/tools.md: the line is AgentGym's; its worked example (for upstream's web APIs) is left out."""
    for detailed in (False, True):
        env = gym.make("AgentGym/Weather-v0", detailed_instruction=detailed)
        _, info = env.reset(options={"split": "test", "index": 0})
        assert ("Please refer to the format of examples below" in info["instruction"]) is not detailed
        assert "Here is an example" not in info["instruction"]
        env.close()


def test_todo_is_graded_at_finish_on_the_whole_state_by_default() -> None:
    """AgentGym's TODO server: a change is won at finish answering "done" with the whole state right; a question also
    needs the state unchanged. Ours (detailed_instruction=True): a change ends as soon as the data is right."""
    spec = agentgym_envs.get_task("AgentGym/TODOList-v0")
    env = gym.make("AgentGym/TODOList-v0").unwrapped
    checked = {"change": 0, "question": 0}
    for item in spec.split("test")[:12]:
        env.reset(options={"item_id": item})
        change = env.current.gold is None
        plan = [s for s in env.current.plan if s.call.tool != "finish"]
        for s in plan:  # the expert's calls: the data is right, nothing ends yet
            _, reward, terminated, _, _ = env.step(f"Action: {env._render(s.call)}")
            assert reward == 0.0 and not terminated
        if change:
            assert env._state_reached()
            _, reward, terminated, _, info = env.step("Action: finish with Action Input: {'answer': 'ok'}")
            assert terminated and reward == 0.0 and not info["success"]  # the subgoal is "done"
            env.reset(options={"item_id": item})
            for s in plan:
                env.step(f"Action: {env._render(s.call)}")
            _, reward, terminated, _, info = env.step("Action: finish with Action Input: {'answer': 'done'}")
            assert terminated and reward == 1.0 and info["success"]
            ours = gym.make("AgentGym/TODOList-v0", detailed_instruction=True).unwrapped
            ours.reset(options={"item_id": item})
            for s in plan:
                _, reward, terminated, _, _ = ours.step(f"Action: {s.call.render()}")
            assert terminated and reward == 1.0
        else:
            writes = [t for t in env.service.TOOLS if t.name == "complete_task"]
            task_id = next(r[0] for r in env.service.db.execute("SELECT id FROM tasks WHERE is_completed = 0"))
            assert writes
            env.step(f"Action: complete_task with Action Input: {{'task_id': {task_id}}}")  # the state changes
            answer = python_literal(env.current.gold.agentgym_subgoal)
            _, reward, terminated, _, info = env.step(f"Action: finish with Action Input: {{'answer': {answer}}}")
            assert terminated and reward == 0.0 and not info["success"]  # right answer, state changed
        checked["change" if change else "question"] += 1
    assert checked["change"] and checked["question"]


#: Python literals JSON has no form for, and an int past Python's int-to-text limit (a hex literal reads as one)
PYTHON_ONLY_LITERALS = ['b"ab"', "{1, 2}", "1j", "...", "[b'x', {3}]", "{'k': 2j}", "0x" + "f" * 4000]


@pytest.mark.parametrize("env_id", AGENTGYM_TOOL_IDS)
def test_python_only_literals_in_every_argument_are_invalid_actions(env_id: str) -> None:
    """Bytes, sets, complex numbers, Ellipsis and too-long ints in any argument of any tool (and in finish's answer)
    are an invalid action or a tool's answer, never an exception out of the env (issue 61, item 14)."""
    env = gym.make(env_id, max_episode_steps=1000)
    env.reset(options={"split": "test", "index": 0})
    service = env.unwrapped.service
    calls = [(tool.name, param.name) for tool in (*service.TOOLS, service.tool("finish")) for param in tool.params]
    for (tool, name), literal in ((c, v) for c in calls for v in PYTHON_ONLY_LITERALS):
        env.reset(options={"split": "test", "index": 0})
        observation, _, _, _, info = env.step(f"Action: {tool} with Action Input: {{'{name}': {literal}}}")
        assert "action_error" not in info, (tool, name, literal, observation)
        if tool != "finish":  # finish shows a printable answer as upstream prints it (Sheet's reads none)
            assert not info["valid_action"] and "ERROR | " in observation, (tool, name, literal, observation)
    env.close()


def test_python_only_literals_are_named_in_the_error() -> None:
    env = gym.make("AgentGym/Weather-v0")
    env.reset(options={"split": "test", "index": 0})
    expected = {'b"ab"': "got bytes b'ab'.", "{1, 2}": "got a set {1, 2}.", "1j": "got a complex number 1j.",
                "...": "got the literal Ellipsis.", "0x" + "f" * 4000: "cannot be used: it holds an integer of more "
                "than 4300 digits, too long to print."}
    for literal, ending in expected.items():
        observation, *_ = env.step(f"Action: get_latitude_longitude with Action Input: {{'name': {literal}}}")
        assert observation.startswith("Observation: ERROR | get_latitude_longitude: argument 'name' ")
        assert observation.endswith(f"{ending}\nGive me one action."), observation
    observation, _, terminated, _, info = env.step("Action: finish with Action Input: {'answer': 0x%s}" % ("f" * 4000))
    assert "integer of more than 4300 digits" in observation and not terminated and not info["valid_action"]
    env.close()


def test_a_long_run_of_white_space_is_read_in_linear_time() -> None:
    """AgentGym's response rule on a 60,000-space run inside the call's line (it was quadratic: a second for 20,000
    spaces); the result is upstream's regular expressions' (tests/test_tool_response_equivalence.py)."""
    import re

    from agentgym_envs.tools.toolkit import agentgym_tool_action, python_call_parts

    response = "Thought: go.\nAction: get" + " " * 60_000 + "date with Action Input: {}"
    start = time.perf_counter()
    action = agentgym_tool_action(response)
    head, arguments = python_call_parts(action)
    assert time.perf_counter() - start < 0.2
    upstream = re.search(r"\s*(.*?)\s*with\s*Action Input:\s*(.*?)$", response[-200:])
    assert action.endswith(f"{upstream.group(1)} with Action Input: {{}}")
    assert head == "get" + " " * 60_000 + "date" and arguments == {}
    env = gym.make("AgentGym/Weather-v0")
    env.reset(options={"split": "test", "index": 0})
    start = time.perf_counter()  # responses are capped at 16,000 characters: 15,000 spaces took 0.9 s
    observation, *_ = env.step(response.replace(" " * 60_000, " " * 15_000))
    assert time.perf_counter() - start < 0.2 and "Invalid action" in observation
    env.close()
