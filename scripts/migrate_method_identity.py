"""One-off migration (issue 51, item 3): every committed record states its own identity, so ``analysis`` keeps no
frozen copy of the defaults older records ran under.

Records written before jobs wrote ``method_key``, ``method_display`` and ``hetero_display`` (issue 42), and replayed
rows written before the replay wrote them and ``method_params``, were keyed and named by ``analysis.settings``'
frozen tables (``conf/method`` and ``conf/hetero`` as they stood when the key was introduced). This script writes
into each such line what today's code writes for it, from the line's own ``method`` / ``method_params`` / ``hetero``
and its job's ``summary.json`` (the ``hetero`` node), and leaves every other field as it is:

* a job's record (``records.jsonl``): ``method_key`` (``specbench.config.method.method_key``, as
  ``runners.jobs.build.Job`` keys it), ``method_display`` (the method node's ``display``, else its YAML's) and
  ``hetero_display`` (``specbench.config.method.hetero_display``);
* a replayed row (``replay.jsonl``): ``method_key``, ``method_display`` and ``method_params`` as
  ``runners.replay.grid.load_method`` gives them for the row's label (``NAME:key=value``); the references (oracles,
  best fixed γ) ``None``, ``None``, ``{}``, as the replay writes them.

It was run once, when every knob and display of ``conf/method`` and ``conf/hetero`` equalled the frozen tables (so
today's rule and the frozen one key every record alike: each committed table regenerated identically; see the
commit). Idempotent: a line that already has ``method_key`` (``None`` included) is left alone, so a second run
changes nothing, whatever the YAML files say by then; a file is rewritten only when a line changed.

    python scripts/migrate_method_identity.py results/committed/<folder> ...   # --check: only count
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runners.replay.grid import BEST_FIXED_PROMPT, BEST_FIXED_TASK, load_method
from runners.replay.oracle import AGREEMENT_ORACLE, ORACLE
from specbench.config.method import NOT_KNOBS, HeteroConfig, hetero_display, method_key, yaml_display
from specbench.records import REPLAY_FILE

REFERENCES = (ORACLE, AGREEMENT_ORACLE, BEST_FIXED_PROMPT, BEST_FIXED_TASK)


def _summary_config(job_dir: Path) -> dict[str, Any]:
    path = job_dir / "summary.json"
    if not path.is_file():
        return {}
    config = json.loads(path.read_text(encoding="utf-8")).get("config")
    return config if isinstance(config, dict) else {}


def record_identity(record: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """What a job writes today for ``record`` (module docstring), from the record and its job's resolved config."""
    node = config.get("method") if isinstance(config.get("method"), Mapping) else {}
    params = record.get("method_params")
    if not isinstance(params, Mapping):
        params = {k: v for k, v in node.items() if k not in NOT_KNOBS}
    method, rule = record["method"], record.get("hetero")
    hetero_node = config.get("hetero") if isinstance(config.get("hetero"), Mapping) else None
    typed = HeteroConfig.from_mapping(hetero_node) if hetero_node is not None else None
    return {"method_params": dict(params),
            "method_key": method_key(method, params, rule, hetero_node),
            "method_display": node.get("display") or yaml_display(method),
            "hetero_display": hetero_display(rule, typed)}


def replay_identity(row: Mapping[str, Any]) -> dict[str, Any]:
    """What the replay writes today for a row of ``row["method"]`` (module docstring)."""
    if row["method"] in REFERENCES:
        return {"method_key": None, "method_display": None, "method_params": {}}
    spec = load_method(row["method"])
    return {"method_key": spec.key, "method_display": spec.display, "method_params": dict(spec.params)}


def _with(line: dict[str, Any], identity: Mapping[str, Any], after: str) -> dict[str, Any]:
    """``line`` with ``identity``'s fields set, new ones placed right after ``after`` (the record's order)."""
    out: dict[str, Any] = {}
    for key, value in line.items():
        out[key] = identity.get(key, value)
        if key == after:
            out.update({k: v for k, v in identity.items() if k not in line})
    out.update({k: v for k, v in identity.items() if k not in out})
    return out


def migrate_file(path: Path, check: bool) -> tuple[int, int]:
    """(lines, lines migrated) of one ``records.jsonl`` / ``replay.jsonl``; rewritten unless ``check``."""
    replay = path.name == REPLAY_FILE
    config = {} if replay else _summary_config(path.parent)
    text = path.read_text(encoding="utf-8")
    out, changed = [], 0
    for line in text.splitlines():
        row = json.loads(line) if line.strip() else None
        if not isinstance(row, dict) or "method_key" in row:
            out.append(line)
            continue
        identity = replay_identity(row) if replay else record_identity(row, config)
        # as each writer writes: a job's record (``Record.to_json``), a replayed row (``record_io.write_jsonl``)
        line = _with(row, identity, "method" if replay else "method_params")
        out.append(json.dumps(line, ensure_ascii=replay, allow_nan=False))
        changed += 1
    if changed and not check:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("\n".join(out) + ("\n" if text.endswith("\n") else ""), encoding="utf-8")
        os.replace(tmp, path)
    return len(out), changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="count what would change; write nothing")
    args = parser.parse_args(argv)
    total = 0
    for folder in args.folders:
        files = sorted([*folder.rglob("records.jsonl"), *folder.rglob(REPLAY_FILE)])
        lines = migrated = 0
        for path in files:
            n, m = migrate_file(path, args.check)
            lines, migrated = lines + n, migrated + m
        total += migrated
        print(f"{folder}: {len(files)} files, {lines} lines, {migrated} migrated")
    return 0 if not (args.check and total) else 1


if __name__ == "__main__":
    raise SystemExit(main())
