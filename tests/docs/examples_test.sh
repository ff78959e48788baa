#!/usr/bin/env bash
# Runs every file in examples/ against the demo checkpoint, as a user would:
# a generated demo-150m (scripts/demo's model: random weights, Mistral-7B's
# tokenizer) served by a scheduler and a worker streaming it on every pass.
# The Batch files go through `nightshift submit`/`watch`/`results`, and
# sentiment.jsonl once more through examples/batch-api.mjs (the official
# openai npm package against the HTTP Batch API). Each output must be
# well-formed: one succeeded row per request, in input order, labels scored
# over exactly the request's label set, generations within max_tokens.
#
#   tests/docs/examples_test.sh
#
# NIGHTSHIFT_BIN_DIR (default REPO/build/bin) names the binaries' directory.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${NIGHTSHIFT_BIN_DIR:-$repo/build/bin}
export PATH="$bin:$PATH" NIGHTSHIFT_CONFIG=/nonexistent

tmp=$(mktemp -d "${TMPDIR:-/tmp}/nightshift-examples.XXXXXX")
pids=()
cleanup() {
  local status=$?
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if ((status != 0)); then
    for log in "$tmp"/*.log; do
      [[ -f $log ]] || continue
      echo "--- the last lines of $log" >&2
      tail -n 20 "$log" >&2
    done
  fi
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
cd "$tmp"

echo "== generating the demo checkpoint (demo-150m)"
nightshift make-checkpoint --preset demo-150m --tokenizer "$repo/tests/data/tokenizers/mistral7b" \
  --seed 1 --out models/demo-150m --quiet

echo "== starting a scheduler and a worker"
nightshift-scheduler --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --db nightshift.db \
  >scheduler.out 2>scheduler.log &
pids+=($!)
for _ in $(seq 300); do
  grep -qs "^http listening on" scheduler.out && break
  kill -0 "${pids[0]}" || { echo "the scheduler stopped" >&2; exit 1; }
  sleep 0.1
done
export NIGHTSHIFT_SCHEDULER
NIGHTSHIFT_SCHEDULER=$(sed -n 's/.* listening on \([^ ]*\) (database.*/\1/p' scheduler.out)
http=$(sed -n 's/^http listening on //p' scheduler.out)
[[ -n $NIGHTSHIFT_SCHEDULER && -n $http ]] || { echo "no addresses in scheduler.out" >&2; exit 1; }
nightshift-worker --scheduler "$NIGHTSHIFT_SCHEDULER" --id examples --model-root models \
  --streaming always --state-dir state 2>worker.log &
pids+=($!)
for _ in $(seq 600); do
  [[ $(nightshift workers 2>/dev/null) == *demo-150m* ]] && break
  kill -0 "${pids[1]}" || { echo "the worker stopped" >&2; exit 1; }
  sleep 0.5
done
[[ $(nightshift workers) == *demo-150m* ]] || { echo "the worker never advertised demo-150m" >&2; exit 1; }

# check.py INPUT RESULTS [ERRORS]: the results of INPUT are well-formed.
cat > check.py <<'PY'
import json, math, sys

requests = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
errors = [json.loads(l) for l in open(sys.argv[3]) if l.strip()] if len(sys.argv) > 3 else []
problems = []
def problem(what):
    problems.append(what)

if errors:
    problem("%d error rows: %s" % (len(errors), errors[:2]))
if [r["custom_id"] for r in rows] != [q["custom_id"] for q in requests]:
    problem("custom_ids %s, expected %s in input order" % (
        [r["custom_id"] for r in rows], [q["custom_id"] for q in requests]))
for q, r in zip(requests, rows):
    cid, want = q["custom_id"], q["body"]
    if r.get("error") is not None or not r.get("response") or r["response"]["status_code"] != 200:
        problem("%s did not succeed: %s" % (cid, r))
        continue
    body = r["response"]["body"]
    choice = body["choices"][0]
    if body["object"] != "text_completion" or body["model"] != want["model"]:
        problem("%s: object %s, model %s" % (cid, body["object"], body["model"]))
    if "labels" in want:
        labels = body.get("labels") or []
        if [l["label"] for l in labels] != want["labels"]:
            problem("%s: labels %s, expected %s" % (cid, [l["label"] for l in labels], want["labels"]))
            continue
        total = sum(l["prob"] for l in labels)
        if abs(total - 1) > 1e-6:
            problem("%s: label probabilities sum to %r" % (cid, total))
        if any(not (l["logprob"] <= 0 and math.isfinite(l["logprob"])) for l in labels):
            problem("%s: a logprob is not a finite value <= 0: %s" % (cid, labels))
        best = max(labels, key=lambda l: l["prob"])["label"]
        if choice["text"] != best or choice["finish_reason"] != "label":
            problem("%s: choice %r (%s), the most likely label is %r" % (
                cid, choice["text"], choice["finish_reason"], best))
    else:
        completion = body["usage"]["completion_tokens"]
        if not isinstance(choice["text"], str) or not 0 <= completion <= want["max_tokens"]:
            problem("%s: %d tokens (max_tokens %d), text %r" % (
                cid, completion, want["max_tokens"], choice["text"]))
        if choice["finish_reason"] not in ("stop", "length"):
            problem("%s: finish_reason %s" % (cid, choice["finish_reason"]))
if problems:
    print("\n".join("FAIL " + p for p in problems))
    sys.exit(1)
print("ok: %d rows" % len(rows))
PY

for name in sentiment few-shot generation; do
  echo "== examples/$name.jsonl through the CLI"
  id=$(nightshift submit "$repo/examples/$name.jsonl")
  timeout 600 nightshift watch "$id" --plain >"watch-$name.log"
  tail -n 1 "watch-$name.log"
  nightshift results "$id" -o "$name.results.jsonl"
  python3 check.py "$repo/examples/$name.jsonl" "$name.results.jsonl"
done

echo "== examples/batch-api.mjs (the openai npm package) with examples/sentiment.jsonl"
if [[ ! -f $repo/tests/openai/node_modules/openai/package.json ]]; then
  echo "the openai npm package is not installed in tests/openai/node_modules: run scripts/bootstrap" >&2
  exit 1
fi
mkdir node && cp "$repo/examples/batch-api.mjs" node/ && ln -s "$repo/tests/openai/node_modules" node/node_modules
(cd node && NIGHTSHIFT_BASE_URL="http://$http/v1" timeout 600 node batch-api.mjs "$repo/examples/sentiment.jsonl")
[[ ! -e node/sentiment.errors.jsonl ]] || { echo "batch-api.mjs wrote an error file" >&2; exit 1; }
python3 check.py "$repo/examples/sentiment.jsonl" node/sentiment.output.jsonl

echo "examples: every example ran and its results are well-formed"
