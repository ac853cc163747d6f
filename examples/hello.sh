#!/usr/bin/env bash
# hello.sh -- MW's Hello World: wake an actor, run, sleep, wake again and see
# that it resumed where it left off.  Needs build/mw (make) and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
MW=./build/mw
HOME_DIR=$(mktemp -d /tmp/mw-hello.XXXXXX)
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$HOME_DIR"' EXIT

TOKEN=$($MW init --home "$HOME_DIR" --json | sed -n 's/.*"agent_token":"\([^"]*\)".*/\1/p')
$MW serve --home "$HOME_DIR" --listen 127.0.0.1:0 >"$HOME_DIR/out" 2>"$HOME_DIR/log" &
PID=$!
for _ in $(seq 100); do grep -q listening "$HOME_DIR/out" && break; sleep 0.02; done
URL=$(sed -n 's/^listening on //p' "$HOME_DIR/out")

call() { curl -sS -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d "$2" "$URL/v1/$1"; }
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }

start=$(date +%s%N)
echo "1. wake arc for the first time"
W1=$(call wake '{"actor_id":"arc","context_hint":"hello"}')
echo "   resumed_from_prior: $(echo "$W1" | field resumed_from_prior)"
S1=$(echo "$W1" | field session_id | tr -d '"')

echo "2. run: arc remembers a greeting"
call run "{\"session_id\":\"$S1\",\"input\":{\"remember\":{\"key\":\"greeting\",\"value\":\"hello, world\"}}}" >/dev/null

echo "3. sleep, handing over a note for next time"
call sleep "{\"session_id\":\"$S1\",\"handover\":{\"next\":\"say the greeting back\"}}" >/dev/null

echo "4. wake arc again"
W2=$(call wake '{"actor_id":"arc"}')
echo "   resumed_from_prior: $(echo "$W2" | field resumed_from_prior)"
echo "   it remembers:       $(echo "$W2" | sed -n 's/.*"memory":{"greeting":\("[^"]*"\)}.*/\1/p')"
echo "   it was handed over: $(echo "$W2" | sed -n 's/.*"handover":\({"next":"[^"]*"}\).*/\1/p' | head -c 200)"
S2=$(echo "$W2" | field session_id | tr -d '"')
call sleep "{\"session_id\":\"$S2\"}" >/dev/null
end=$(date +%s%N)
echo "continuity proven in $(( (end - start) / 1000000 )) ms"
