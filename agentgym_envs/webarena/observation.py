"""The WebArena observation: Chromium's accessibility tree with a bracketed id per node.

``render_tree`` walks the CDP ``Accessibility.getFullAXTree`` nodes from the root and keeps what an
agent can read or act on: ignored nodes, inline text boxes, unnamed generic containers and static
text repeating its parent's name are dropped (their children move up). Ids are numbered in
document order (1, 2, 3, ...) rather than taken from Chromium's internal ids, so the same page
always gets the same ids, and each id maps to the DOM node (``backendDOMNodeId``) actions target.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Roles that never help an agent on their own (their children are kept).
SKIPPED_ROLES = {"InlineTextBox", "LineBreak", "none", "presentation", "ListMarker", "MenuListPopup"}
#: Roles dropped when they have no name (pure layout containers).
UNNAMED_SKIPPED = {"generic", "group", "Section", "div", "paragraph", "LayoutTable", "LayoutTableRow",
                   "LayoutTableCell",
                   "list", "listitem", "rowgroup", "banner", "contentinfo", "Abbr", "strong", "emphasis", "LabelText",
                   "time", "article"}
#: Properties shown after a node's name, in WebArena's ``key: value`` style.
SHOWN_PROPERTIES = ("focused", "required", "checked", "selected", "expanded", "disabled", "level", "readonly",
                    "invalid")
#: Roles the agent can type into.
TEXT_ROLES = {"textbox", "searchbox", "spinbutton", "combobox", "TextField", "textField"}


@dataclass
class Node:
    id: int
    role: str
    name: str
    backend_id: int | None
    depth: int
    properties: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """The node as one line of the tree text: ``[id] role 'name'`` and its properties."""
        text = f"[{self.id}] {self.role} {self.name!r}"
        extras = " ".join(f"{k}: {v}" for k, v in self.properties.items())
        return f"{text} {extras}" if extras else text


@dataclass
class Tree:
    nodes: list[Node]

    def text(self) -> str:
        """The accessibility tree as the agent reads it: one line per node, indented by tabs to its depth."""
        return "\n".join("\t" * node.depth + node.line() for node in self.nodes)

    def by_id(self, node_id: int) -> Node | None:
        """The node the agent calls ``[node_id]`` (ids count from 1), or None when there is no such node."""
        return self.nodes[node_id - 1] if 1 <= node_id <= len(self.nodes) else None

    def find(self, role: str, name: str) -> Node | None:
        """The first node with exactly this role and name (used by scripted solutions)."""
        return next((n for n in self.nodes if n.role == role and n.name == name), None)


def _value(field_value: Any) -> Any:
    return field_value.get("value") if isinstance(field_value, dict) else field_value


def render_tree(ax_nodes: list[dict[str, Any]], max_nodes: int = 3000) -> Tree:
    """The pruned, numbered tree of a page (at most ``max_nodes`` nodes)."""
    if not ax_nodes:
        return Tree([])
    by_id = {node["nodeId"]: node for node in ax_nodes}
    child_ids = {c for node in ax_nodes for c in node.get("childIds", [])}
    root = next((n for n in ax_nodes if n["nodeId"] not in child_ids), ax_nodes[0])
    kept: list[Node] = []
    stack: list[tuple[dict[str, Any], int, str]] = [(root, 0, "")]
    while stack and len(kept) < max_nodes:
        node, depth, parent_name = stack.pop()
        role = str(_value(node.get("role")) or "")
        name = " ".join(str(_value(node.get("name")) or "").split())
        keep = not node.get("ignored") and role not in SKIPPED_ROLES
        if keep and not name and role in UNNAMED_SKIPPED:
            keep = False
        if keep and role == "StaticText" and (not name or name in parent_name):
            keep = False  # repeats its parent's name or a text field's value
        child_depth, child_parent = depth, parent_name
        if keep:
            properties: dict[str, Any] = {}
            value = _value(node.get("value"))
            if value not in (None, "") and role in TEXT_ROLES | {"slider", "progressbar"}:
                properties["value"] = value
            for prop in node.get("properties", []):
                if prop.get("name") in SHOWN_PROPERTIES:
                    shown = _value(prop.get("value"))
                    if shown not in (False, "false", None, ""):
                        properties[prop["name"]] = shown
            kept.append(Node(len(kept) + 1, role, name, node.get("backendDOMNodeId"), depth, properties))
            child_depth, child_parent = depth + 1, f"{name}\n{properties.get('value', '')}"
        children = [by_id[c] for c in node.get("childIds", []) if c in by_id]
        stack.extend((child, child_depth, child_parent) for child in reversed(children))
    return Tree(kept)
