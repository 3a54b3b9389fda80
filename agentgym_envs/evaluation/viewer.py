"""``agentgym view RUN``: one self-contained HTML page to read a run's trajectories.

Everything is inline (CSS, JS, the episodes as JSON), so the page opens from disk, is safe to mail
or attach to an issue, and loads nothing from the network. The data is inserted into the page with
``textContent`` only, so model output can never become markup. Filters: free-text search (over the
conversation, item id and sub-task), env id, sub-task, outcome, turn budget and, for training
logs, the training step. Each reply shows the action the env parsed from it where that is not the
whole reply (the record's ``parsed_actions``; older records show the reply alone), the turns a token
limit cut, a reply the episode ended on before the env got it, and why the episode ended.
"""

from __future__ import annotations

import json
import os
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from agentgym_envs.agents import ACKNOWLEDGEMENT
from agentgym_envs.core.jsonl import finite_json
from agentgym_envs.evaluation.records import load_run

VIEW_FILE = "trajectories.html"

# Fields the page needs; the rest of a record (timing, ...) is dropped to keep the page small.
VIEW_FIELDS = ("env_id", "subtask", "item_id", "sample", "max_turns", "agent", "messages", "prompt_messages",
               "final_observation", "rewards", "valid", "cut", "prefix_actions", "parsed_actions", "return", "turns",
               "tokens", "info", "step", "mode")

STYLE = """
:root {
  --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700; --ink: #1f2328; --muted: #656d76; --line: #d0d7de; --bg: #f6f8fa;
  --sans: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
  --mono: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
}
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 var(--sans); color: var(--ink); background: #fff; }
header {
  position: sticky; top: 0; z-index: 2; background: #fff; border-bottom: 1px solid var(--line); padding: 12px 20px;
}
h1 { font-size: 18px; margin: 0 0 8px; }
.controls { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; }
.controls input, .controls select {
  font: inherit; padding: 5px 8px; border: 1px solid var(--line); border-radius: 6px; background: #fff;
}
.controls input[type=search] { width: 320px; }
.stats { margin-top: 8px; color: var(--muted); }
.stats b { color: var(--ink); }
main { padding: 12px 20px 40px; max-width: 1200px; }
details.episode { border: 1px solid var(--line); border-radius: 8px; margin: 8px 0; background: #fff; }
details.episode > summary {
  cursor: pointer; padding: 8px 12px; display: flex; gap: 12px; align-items: center; list-style: none;
}
details.episode > summary::-webkit-details-marker { display: none; }
details.episode[open] > summary {
  border-bottom: 1px solid var(--line); background: var(--bg); border-radius: 8px 8px 0 0;
}
.badge {
  display: inline-block; min-width: 64px; text-align: center; padding: 1px 8px; border-radius: 12px;
  color: #fff; font-weight: 600; font-size: 12px;
}
.badge.success { background: var(--ok); } .badge.failure { background: var(--bad); }
.meta { color: var(--muted); font-size: 13px; }
.title { font-weight: 600; }
.conversation { padding: 10px 12px; }
.msg {
  margin: 8px 0; padding: 8px 10px; border-radius: 6px; white-space: pre-wrap; word-break: break-word;
  font: 13px/1.4 var(--mono);
}
.msg .role { display: block; font: 600 12px/1.4 var(--sans); color: var(--muted); margin-bottom: 4px; }
.msg.task { background: #fff8c5; border: 1px solid #eac54f; max-height: 260px; overflow: auto; }
.msg.assistant { background: #ddf4ff; border: 1px solid #54aeff; margin-left: 40px; }
.msg.assistant.invalid { border-left: 4px solid var(--bad); }
.msg.assistant.cut { border-right: 4px solid var(--warn); }
.msg .parsed {
  display: block; margin-top: 6px; padding-top: 4px; border-top: 1px dashed #54aeff; font-weight: 600;
}
.msg .parsed .role { display: inline; }
.flag { color: var(--warn); font-weight: 600; }
.end { margin: 8px 0; color: var(--muted); font-style: italic; }
.msg.user { background: var(--bg); border: 1px solid var(--line); }
.reward { float: right; font-weight: 600; }
.reward.pos { color: var(--ok); } .reward.invalid { color: var(--bad); }
.empty { color: var(--muted); padding: 20px 0; }
button.more {
  font: inherit; padding: 6px 14px; border: 1px solid var(--line); border-radius: 6px; background: var(--bg);
  cursor: pointer;
}
"""

#: Assistant turns that acknowledge the instruction in AgentGym's opening (not actions of the agent).
ACKNOWLEDGEMENTS = sorted({ACKNOWLEDGEMENT, "Ok."})

SCRIPT = "const ACKS = " + json.dumps(ACKNOWLEDGEMENTS) + ";\n" + r"""
const episodes = JSON.parse(document.getElementById('episodes').textContent);
const PAGE = 100;
let limit = PAGE;
const $ = (id) => document.getElementById(id);
const shortEnv = (id) => id.replace(/^AgentGym\//, '');

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;  // text only: model output never becomes markup
  return e;
}

// a hand-edited or foreign record (no info, messages that are not a list, ...) is read with defaults,
// so it renders as far as it goes and never stops the page
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const asList = (v) => Array.isArray(v) ? v : [];
episodes.forEach((ep, i) => {
  if (!isObject(ep.info)) ep.info = {};
  ep.messages = asList(ep.messages).filter(isObject)
    .map(m => ({role: String(m.role),
                content: typeof m.content === 'string' ? m.content : JSON.stringify(m.content ?? '')}));
  ep._rewarded = Array.isArray(ep.rewards);
  ep.rewards = asList(ep.rewards).map(Number);
  ep.prefix_actions = asList(ep.prefix_actions);
  if (!Array.isArray(ep.valid)) ep.valid = null;
  ep.cut = asList(ep.cut).map(Number);
  // older records have no parsed_actions: their turns show the reply alone
  ep.parsed_actions = Array.isArray(ep.parsed_actions) ? ep.parsed_actions : null;
  if (typeof ep.prompt_messages !== 'number') ep.prompt_messages = undefined;
  if (ep.final_observation !== null && ep.final_observation !== undefined) {
    ep.final_observation = String(ep.final_observation);
  }
  ep.env_id = String(ep.env_id ?? '?');
});

episodes.forEach((ep, i) => {
  ep._index = i;
  const parsed = (ep.parsed_actions || []).filter(a => typeof a === 'string');
  const parts = [ep.env_id, ep.subtask || '', 'item ' + ep.item_id, ...ep.messages.map(m => m.content), ...parsed];
  ep._text = parts.join('\n').toLowerCase();
});

function byValue(a, b) {
  return typeof a === 'number' ? a - b : String(a).localeCompare(String(b));
}

function fillSelect(id, values, label, prefix = '') {
  const select = $(id);
  select.appendChild(el('option', '', label)).value = '';
  [...new Set(values)].filter(v => v !== undefined && v !== null).sort(byValue).forEach(v => {
    const option = el('option', '', prefix + String(v));
    option.value = String(v);
    select.appendChild(option);
  });
  if (select.options.length <= 2) select.style.display = 'none';  // one value: nothing to filter
}
fillSelect('env', episodes.map(e => e.env_id), 'all envs');
fillSelect('subtask', episodes.map(e => e.subtask || '-'), 'all sub-tasks');
fillSelect('budget', episodes.map(e => e.max_turns), 'all turn budgets', 'max turns ');
fillSelect('step', episodes.map(e => e.step), 'all training steps', 'step ');

function matches(ep) {
  const query = $('search').value.trim().toLowerCase();
  if (query && !query.split(/\s+/).every(word => ep._text.includes(word))) return false;
  if ($('env').value && ep.env_id !== $('env').value) return false;
  if ($('subtask').value && (ep.subtask || '-') !== $('subtask').value) return false;
  if ($('budget').value && String(ep.max_turns) !== $('budget').value) return false;
  if ($('step').value && String(ep.step) !== $('step').value) return false;
  const outcome = $('outcome').value;
  if (outcome && (ep.info.success ? 'success' : 'failure') !== outcome) return false;
  return true;
}

// why an episode ended (the record's info.stop_reason), as the end of its conversation says it
const STOPS = {
  terminated: 'the env ended the episode',
  max_turns: 'the turn budget was used up',
  env_truncated: 'the env truncated the episode before the turn budget',
  turn_tokens: 'a reply hit the per-turn token limit',
  context: "the conversation no longer fit the model's context",
  env_error: 'the env raised an error',
};

// the flags of an action turn: cut by a token limit, not played, invalid, and its reward
function turnTag(ep, turn, msg) {
  const flags = [];
  const unplayed = turn > ep.rewards.length;  // the episode ended on this reply (a limit): the env never got it
  if (ep.cut.includes(turn)) {
    msg.classList.add('cut');
    flags.push(unplayed && ep.info.stop_reason === 'context' ? 'cut at the context limit' : 'cut at the token limit');
  }
  if (unplayed) {
    if (ep._rewarded) flags.push('not sent to the env');
    return el('span', 'reward invalid', flags.join('  '));
  }
  const reward = Number(ep.rewards[turn - 1]);
  const valid = !ep.valid || ep.valid[turn - 1] !== false;
  if (!valid) msg.classList.add('invalid');
  if (!valid) flags.push('invalid action');
  const cls = 'reward' + (reward > 0 ? ' pos' : '') + (valid ? '' : ' invalid');
  return el('span', cls, [...flags, 'reward ' + reward.toFixed(3)].join('  '));
}

// what the env played for this reply, where the parser took something other than the whole reply
function parsedLine(ep, turn, reply) {
  if (!ep.parsed_actions || turn > ep.parsed_actions.length || turn > ep.rewards.length) return null;
  const action = ep.parsed_actions[turn - 1];
  if (typeof action === 'string' && action.trim() === reply.trim()) return null;  // the reply was the bare action
  const line = el('span', 'parsed');
  line.appendChild(el('span', 'role', 'parsed action:'));
  line.appendChild(document.createTextNode(' '));
  if (typeof action !== 'string') line.appendChild(el('span', 'flag', 'none (the env found no action in this reply)'));
  else line.appendChild(action === '' ? el('span', 'flag', '(empty)') : document.createTextNode(action));
  return line;
}

function conversation(ep) {
  const box = el('div', 'conversation');
  let turn = 0;
  const messages = ep.messages || [];
  // AgentGym's opening is instruction, acknowledgement, first observation; the merged one a single turn
  // (records name it in prompt_messages; older logs are recognised by the acknowledgement)
  const opening = ep.prompt_messages
    || (messages.length > 2 && messages[1].role === 'assistant' && ACKS.includes(messages[1].content) ? 3 : 1);
  messages.forEach((m, i) => {
    if (i < opening) {
      const task = el('div', 'msg task');
      // an episode started after the oracle's first k actions (prefix_actions) has them in its prompt too
      const start = opening - 2 * ep.prefix_actions.length;
      const label = i >= start ? (m.role === 'assistant' ? 'replayed oracle action' : 'observation (oracle prefix)')
        : start === 1 ? 'task: instruction and first observation'
        : ['task: instruction', 'acknowledgement', 'task: first observation'][i];
      task.appendChild(el('span', 'role', label));
      task.appendChild(document.createTextNode(m.content));
      box.appendChild(task);
      return;
    }
    const isAction = m.role === 'assistant';
    const msg = el('div', 'msg ' + (isAction ? 'assistant' : 'user'));
    const role = el('span', 'role', isAction ? 'action ' + (++turn) : 'observation');
    if (isAction) role.appendChild(turnTag(ep, turn, msg));
    msg.appendChild(role);
    msg.appendChild(document.createTextNode(m.content === '' ? '(empty response)' : m.content));
    const parsed = isAction ? parsedLine(ep, turn, m.content) : null;
    if (parsed) msg.appendChild(parsed);
    box.appendChild(msg);
  });
  const stop = ep.info.stop_reason;
  if (ep.final_observation !== null && ep.final_observation !== undefined) {  // the env's answer to the last action
    const last = el('div', 'msg user');
    // the last reply was played and the answer no longer fit the context: the model never saw it
    const unseen = stop === 'context' && ep.rewards.length === turn;
    last.appendChild(el('span', 'role', unseen ? 'observation (final: it did not fit the context)'
                                                : 'observation (final)'));
    last.appendChild(document.createTextNode(ep.final_observation));
    box.appendChild(last);
  }
  if (stop) box.appendChild(el('div', 'end', 'ended: ' + (STOPS[stop] || String(stop))));
  return box;
}

function card(ep) {
  const details = el('details', 'episode');
  details.dataset.index = ep._index;
  details.dataset.success = ep.info.success ? 'true' : 'false';
  const summary = el('summary');
  const outcome = ep.info.success ? 'success' : 'failure';
  summary.appendChild(el('span', 'badge ' + outcome, outcome));
  const name = shortEnv(ep.env_id) + (ep.subtask ? ' / ' + ep.subtask : '') + '  item ' + ep.item_id;
  summary.appendChild(el('span', 'title', name));
  const parts = ['sample ' + ep.sample, ep.turns + '/' + ep.max_turns + ' turns',
                 'return ' + Number(ep.return).toFixed(3)];
  if (ep.tokens !== null && ep.tokens !== undefined) parts.push(ep.tokens + ' tokens');
  if (ep.step !== undefined) parts.push('step ' + ep.step + (ep.mode ? ' (' + ep.mode + ')' : ''));
  if (ep.info.stop_reason) parts.push(ep.info.stop_reason);
  if (ep.cut.length) parts.push(ep.cut.length + (ep.cut.length === 1 ? ' turn' : ' turns') + ' cut');
  summary.appendChild(el('span', 'meta', parts.join(' · ')));
  details.appendChild(summary);
  details.addEventListener('toggle', () => {  // conversations are built on first open: big runs stay fast
    if (details.open && details.children.length === 1) details.appendChild(conversation(ep));
  });
  return details;
}

function render() {
  const shown = episodes.filter(matches);
  const list = $('list');
  list.replaceChildren();
  shown.slice(0, limit).forEach(ep => {
    try {
      list.appendChild(card(ep));
    } catch (error) {  // one record the page cannot show: say so there, and go on with the others
      list.appendChild(el('div', 'empty', 'episode ' + ep._index + ' could not be shown: ' + error));
    }
  });
  if (!shown.length) list.appendChild(el('div', 'empty', 'No episode matches these filters.'));
  const solved = shown.filter(e => e.info.success).length;
  $('count').textContent = shown.length;
  $('total').textContent = episodes.length;
  $('rate').textContent = shown.length ? (100 * solved / shown.length).toFixed(1) + '%' : '-';
  $('more').style.display = shown.length > limit ? '' : 'none';
}

const refilter = () => { limit = PAGE; render(); };
$('search').addEventListener('input', refilter);
['env', 'subtask', 'budget', 'step', 'outcome'].forEach(id => $(id).addEventListener('change', refilter));
$('more').addEventListener('click', () => { limit += PAGE; render(); });
render();
"""

# A jinja2 template with autoescaping: ``title`` (a folder name) is escaped; the style and script are
# ours, and the data is JSON made safe for a <script> element by ``page_data``, so those three are marked safe.
PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>{{ style | safe }}</style></head>
<body>
<header>
<h1>{{ title }}</h1>
<div class="controls">
<input id="search" type="search" placeholder="search actions, observations, item ids..." autocomplete="off">
<select id="env"></select><select id="subtask"></select><select id="budget"></select><select id="step"></select>
<select id="outcome"><option value="">all outcomes</option>
<option value="success">success</option><option value="failure">failure</option></select>
</div>
<div class="stats"><b id="count">0</b> of <b id="total">0</b> episodes shown ·
success rate of shown <b id="rate">-</b></div>
</header>
<main><div id="list"></div><button id="more" class="more" type="button">show more</button></main>
<script id="episodes" type="application/json">{{ data | safe }}</script>
<script>{{ script | safe }}</script>
</body></html>
"""


def page_data(records: list[dict[str, Any]]) -> str:
    """The episodes as JSON that is safe inside a <script> element (no "</script>" can close it early) and strict
    (a NaN or infinity, which ``JSON.parse`` rejects with every episode, is a string the page reads as a number)."""
    slim = [{key: record.get(key) for key in VIEW_FIELDS if key in record} for record in records]
    text = json.dumps(finite_json(slim), ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    for raw, escaped in (("</", "<\\/"), ("<!--", "<\\u0021--"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return text


@lru_cache(maxsize=1)
def page_template() -> jinja2.Template:
    """The viewer's page as an autoescaped jinja2 template (an unknown name is an error, not blank)."""
    return jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined).from_string(PAGE)


def render_html(records: list[dict[str, Any]], title: str) -> str:
    """The viewer page of a run: one self-contained HTML file (data, style and script inline).

    Args:
        records: the trajectory records to show.
        title: the page's title.

    Returns:
        The HTML text.
    """
    return page_template().render(title=title, style=STYLE, data=page_data(records), script=SCRIPT)


def write_viewer(run: str | os.PathLike, out: str | os.PathLike | None = None) -> Path:
    """Write the viewer of a run folder (or a trajectories .jsonl) and return its path."""
    source = Path(run)
    records = load_run(source)
    if not records:
        raise ValueError(f"{source} holds no trajectories (no trajectories*.jsonl records); an eval run writes them, "
                         "a training run only with --log_trajectories true")
    target = Path(out) if out is not None else (source if source.is_dir() else source.parent) / VIEW_FILE
    title = f"Trajectories of {source.resolve().name}"
    write_page(target, render_html(records, title), through_devices=out is not None)
    return target


def write_page(target: Path, text: str, through_devices: bool = False) -> None:
    """Write ``text`` to ``target`` as a new file that replaces whatever entry is there, never through it: a run
    folder received from someone else may hold a ``trajectories.html`` symlink to a file of ours, which a plain
    write would overwrite. ``through_devices``: a path the user named that is a device or a pipe (``/dev/stdout``)
    is written in place instead (replacing it would need root and break it).

    Raises:
        ValueError: ``target`` is a folder.
        OSError: the file could not be written (a full disk, a read-only folder); nothing half-written is left.
    """
    if target.is_dir() and not target.is_symlink():
        raise ValueError(f"{target} is a folder; give the path of the HTML file to write (e.g. {target / VIEW_FILE})")
    if through_devices and target.exists() and not target.is_file() and not target.is_dir():
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(text)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    # a new file (O_EXCL, no link followed) with the mode a plain write gives (0666 less the umask)
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        with open(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, target)  # replaces a symlink itself, not the file it points at
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
