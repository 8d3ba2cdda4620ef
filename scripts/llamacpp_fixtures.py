#!/usr/bin/env python
"""Record the llama.cpp fixtures of ``tests/fixtures/llamacpp/`` from the real server (the project's build).

    python scripts/llamacpp_fixtures.py [--out tests/fixtures/llamacpp]

Starts ``llama-server`` (``runners.engine.llamacpp``) on Gemma-3-270M F32 alone, with its Q8_0 draft
(``draft-simple``, γ = 5) and with n-gram lookup then the draft (``ngram-simple,draft-simple``), sends the embedded
prompts' first turns as the backend does (streamed, ``timings_per_token``, ``return_tokens``), and writes each raw
``/completion`` body, ``/metrics`` before and after it, ``/slots``, ``/tokenize`` answers and the log line that
reports the port. The fake server of the tests replays them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runners.engine.llamacpp import TOKENIZER_PROBES, ServerLoop, spec_args
from runners.engine.llamacpp import binary as binaries
from runners.engine.llamacpp.files import pair_files
from runners.engine.llamacpp.server import LISTENING, Server
from specbench.config import JobConfig, compose
from specbench.models import load_tokenizer
from specbench.tasks import encode_turn, load_task_facts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/llamacpp")
    ap.add_argument("--prompts", type=int, default=3)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = {"alone": ("gemma3-270m_gemma3-270m-int8", "ar"), "draft": ("gemma3-270m_gemma3-270m-int8", "specdecode"),
                "hybrid": ("gemma3-270m_hybrid-lookup-int8", "specdecode")}
    meta: dict = {"recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "settings": {}}
    for name, (pair, method) in settings.items():
        config = JobConfig.from_mapping(compose([f"pair={pair}", f"method={method}", "backend=llamacpp", "gamma=5"]))
        tok = load_tokenizer(config.pair.target, config.cache_dir)
        build = binaries.ensure(config.backend.version)
        draft = config.pair.draft.model if config.speculative else None
        target_file, draft_file = pair_files(build, config.pair.target, draft, "model", "Q8_0")
        argv = ["-m", target_file.path, "-t", "2", "-tb", "2", "-np", "1", "-c", "4096", "--no-cache-prompt",
                "--metrics", "--no-webui", "--no-cache-idle-slots"]
        if config.speculative:
            argv += spec_args(config, draft_file.path if draft_file else None, 2)
        with Server(build.server, argv) as server:
            loop = ServerLoop(server, config.gamma if config.speculative else None, False, False)
            prompts, _ = load_task_facts(config.task)
            for i, prompt in enumerate(prompts[: args.prompts]):
                ids, _ = encode_turn(tok, [], prompt.turns[0], config.task.prompt_format)
                metrics_before = server.get("/metrics")[1]
                conn = server.connection()
                conn.request("POST", "/completion", body=json.dumps(loop.payload(ids, 64)),
                             headers={"Content-Type": "application/json"})
                body = conn.getresponse().read().decode("utf-8")
                conn.close()
                (out / f"{name}_{i}.sse").write_text(body)
                (out / f"{name}_{i}.metrics_before.txt").write_text(metrics_before)
                (out / f"{name}_{i}.metrics_after.txt").write_text(server.get("/metrics")[1])
                (out / f"{name}_{i}.prompt.json").write_text(json.dumps(ids))
            (out / f"{name}.slots.json").write_text(json.dumps(server.get("/slots")[1], indent=1)[:20000])
            tokenize = {t: server.post("/tokenize", {"content": t, "add_special": False})["tokens"]
                        for t in TOKENIZER_PROBES}
            (out / "tokenize.json").write_text(json.dumps(tokenize, ensure_ascii=False, indent=1))
            listening = LISTENING.search(server.log())
            meta["settings"][name] = {"pair": pair, "method": method, "flags": argv[2:] if argv[0] == "-m" else argv,
                                      "listening_line": listening.group(0) if listening else None}
        meta["build"] = build.describe()
        meta["target_file"] = target_file.describe()
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
