"""Write ``splits.json`` (and optionally the test configs as WebArena JSON) from ``catalog.py``.

    python -m agentgym_envs.webarena.build_splits [--configs DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentgym_envs.core.tasks import write_splits
from agentgym_envs.webarena.catalog import embedded_tasks, splits


def main() -> None:
    """Write ``splits.json``; with ``--configs DIR``, also every embedded task as WebArena's JSON config."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", help="also write every task as <DIR>/<task_id>.json (WebArena's layout)")
    args = parser.parse_args()
    print(f"wrote {write_splits(__file__, splits())}")
    if args.configs:
        out = Path(args.configs)
        out.mkdir(parents=True, exist_ok=True)
        for task_id, config in embedded_tasks().items():
            (out / f"{task_id}.json").write_text(json.dumps(config, indent=2) + "\n")
        print(f"wrote {len(embedded_tasks())} configs to {out}")


if __name__ == "__main__":
    main()
