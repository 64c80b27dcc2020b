#!/usr/bin/env bash
# Interoperability check: the real servox (the agent servo-actors replaces) against servo-actors'
# embedded optimizer, on loopback. See docs/interop.md for what it checks and what it found.
#
#   scripts/interop_servox.sh                 # every phase (about two minutes: the cancel waits ~60 s)
#   scripts/interop_servox.sh handshake       # only the named phases:
#                                             #   handshake probe-describe-param probe-sleep-data cancel
#
# It installs servox in a throwaway venv under a temporary directory (removed at exit), starts
# `servo-actors optimizer serve` with a scripted plan from scripts/interop_servox/, runs servox's
# control loop against it with servox's built-in `wait` connector, then checks the trace the
# optimizer recorded (GET /admin/state) against docs/protocol.md and prints PASS/FAIL per step.
# Exit status: 0 all PASS, 1 some FAIL, 2 it could not set up (install, start).
#
# Environment (all optional):
#   PYTHON                 interpreter for servo-actors and for servox's venv (default python3)
#   SERVOX_VERSION         servox version to install (default 25.3.0)
#   SERVOX_VENV            an existing venv with servox in it: used as is, not removed
#   INTEROP_KEEP=1         keep the work directory (plans, servox logs, recorded states) and say where
#   INTEROP_*_TIMEOUT      bounds, in seconds, on every wait: see the list below
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HERE="$ROOT/scripts/interop_servox"
PYTHON="${PYTHON:-python3}"
SERVOX_VERSION="${SERVOX_VERSION:-25.3.0}"
# servox 25.3.0 depends on typer 0.7, which breaks with click 8.2 (it passes arguments click 8.2
# removed); nothing else needs pinning: servox's own pins resolve to a working set.
SERVOX_PINS=("servox==$SERVOX_VERSION" "click<8.2")
SERVOX_VENV="${SERVOX_VENV:-}"
KEEP_WORK="${INTEROP_KEEP:-0}"

INSTALL_TIMEOUT="${INTEROP_INSTALL_TIMEOUT:-600}"     # pip install of servox
START_TIMEOUT="${INTEROP_START_TIMEOUT:-20}"          # optimizer prints its URL
HANDSHAKE_TIMEOUT="${INTEROP_HANDSHAKE_TIMEOUT:-60}"  # servox answers DESCRIBE, MEASURE, ADJUST
PROBE_TIMEOUT="${INTEROP_PROBE_TIMEOUT:-30}"          # a probe phase's two commands
INFLIGHT_TIMEOUT="${INTEROP_INFLIGHT_TIMEOUT:-30}"    # servox starts the MEASURE to cancel
CANCEL_TIMEOUT="${INTEROP_CANCEL_TIMEOUT:-150}"       # first progress post (~60 s) and what follows
AFTER_CANCEL_TIMEOUT="${INTEROP_AFTER_CANCEL_TIMEOUT:-20}"  # servox answers the next command
STOP_TIMEOUT="${INTEROP_STOP_TIMEOUT:-30}"            # a process exits after SIGTERM, else SIGKILL
KILL_GRACE="${INTEROP_KILL_GRACE:-5}"                 # the same, when cleaning up after a failure
POLL_INTERVAL="${INTEROP_POLL_INTERVAL:-0.2}"

APP="interop.test/servox"
ALL_PHASES=(handshake probe-describe-param probe-sleep-data cancel)
PHASES=("$@")
[ ${#PHASES[@]} -gt 0 ] || PHASES=("${ALL_PHASES[@]}")

# Loopback only, never through a proxy (httpx and urllib both honour *_proxy variables).
unset HTTP_PROXY HTTPS_PROXY ALL_PROXY http_proxy https_proxy all_proxy
export NO_PROXY="127.0.0.1,localhost" no_proxy="127.0.0.1,localhost"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/interop_servox.XXXXXX")"
OPT_PID=""
SX_PID=""
FAILS=0
TRACE=("$PYTHON" "$HERE/servox_trace.py")

# --- processes ------------------------------------------------------------------------------------

alive() {  # alive PID: running (a zombie the shell has not reaped yet counts as gone)
  local pid="$1" state
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  state="$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)"
  [ -n "$state" ] && [ "$state" != Z ]
}

STOP_RC=""
stop_pid() {  # stop_pid PID SIGNAL TIMEOUT: signal, wait up to TIMEOUT s, then SIGKILL; STOP_RC=exit code
  local pid="$1" sig="$2" timeout="$3" deadline
  STOP_RC=""
  [ -n "$pid" ] || return 0
  if alive "$pid"; then
    kill "-$sig" "$pid" 2>/dev/null
    deadline=$((SECONDS + ${timeout%.*}))
    while alive "$pid" && [ "$SECONDS" -lt "$deadline" ]; do sleep "$POLL_INTERVAL"; done
    if alive "$pid"; then
      echo "  (pid $pid ignored SIG$sig for ${timeout}s: SIGKILL)"
      kill -KILL "$pid" 2>/dev/null
    fi
  fi
  wait "$pid" 2>/dev/null
  STOP_RC=$?
}

# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if alive "$SX_PID"; then stop_pid "$SX_PID" TERM "$KILL_GRACE"; fi
  if alive "$OPT_PID"; then stop_pid "$OPT_PID" TERM "$KILL_GRACE"; fi
  if [ "$KEEP_WORK" = 1 ]; then
    echo "work directory kept: $WORK"
  else
    rm -rf "$WORK"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- reporting ------------------------------------------------------------------------------------

step() {  # step PASS|FAIL PHASE TEXT [DETAIL]
  [ "$1" = FAIL ] && FAILS=$((FAILS + 1))
  printf '  %-5s %s: %s\n' "$1" "$2" "$3"
  [ -z "${4:-}" ] || printf '          %s\n' "$4"
}

setup_failed() {
  echo "SETUP FAILED: $*" >&2
  exit 2
}

# --- set-up ---------------------------------------------------------------------------------------

"$PYTHON" -c 'import sys; sys.exit(not (3, 9) <= sys.version_info[:2] < (3, 13))' ||
  setup_failed "servox $SERVOX_VERSION needs Python 3.9-3.12; $PYTHON is $("$PYTHON" -V 2>&1)"
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c 'import servo_actors' 2>/dev/null ||
  setup_failed "cannot import servo_actors with $PYTHON (pip install -e $ROOT)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

if [ -n "$SERVOX_VENV" ]; then
  VENV="$SERVOX_VENV"
  [ -x "$VENV/bin/servo" ] || setup_failed "SERVOX_VENV=$VENV has no bin/servo"
else
  VENV="$WORK/venv"
  echo "installing ${SERVOX_PINS[*]} into a throwaway venv (up to ${INSTALL_TIMEOUT}s)..."
  "$PYTHON" -m venv "$VENV" || setup_failed "python -m venv failed"
  timeout "$INSTALL_TIMEOUT" "$VENV/bin/pip" install -q --disable-pip-version-check --timeout 60 \
    "${SERVOX_PINS[@]}" >"$WORK/pip.log" 2>&1 ||
    { tail -20 "$WORK/pip.log" >&2; setup_failed "pip install ${SERVOX_PINS[*]} failed (log above)"; }
fi

echo "versions:"
echo "  $("$PYTHON" -m servo_actors version 2>/dev/null | tail -1), $("$PYTHON" -V 2>&1)"
echo "  $("$VENV/bin/python" - <<'EOF'
from importlib.metadata import version
print(", ".join(f"{n} {version(n)}" for n in ("servox", "click", "typer", "httpx", "pydantic", "uvloop")))
EOF
)"

TOKEN="interop-$("$PYTHON" -c 'import secrets; print(secrets.token_hex(8))')"

# --- one phase: an optimizer with a plan, and servox against it -----------------------------------

OPT_URL=""
start_optimizer() {  # start_optimizer PHASE PLAN_FILE
  local dir="$WORK/$1" deadline
  mkdir -p "$dir"
  sed "s/@TOKEN@/$TOKEN/" "$2" >"$dir/plan.yaml"
  "$PYTHON" -m servo_actors optimizer serve --host 127.0.0.1 --port 0 --plan "$dir/plan.yaml" \
    >"$dir/optimizer.out" 2>"$dir/optimizer.log" &
  OPT_PID=$!
  deadline=$((SECONDS + START_TIMEOUT))
  OPT_URL=""
  while [ -z "$OPT_URL" ] && alive "$OPT_PID" && [ "$SECONDS" -lt "$deadline" ]; do
    OPT_URL="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$dir/optimizer.out" 2>/dev/null | head -1)"
    [ -n "$OPT_URL" ] || sleep "$POLL_INTERVAL"
  done
  [ -n "$OPT_URL" ] || { cat "$dir/optimizer.log" >&2; setup_failed "the optimizer did not start ($1)"; }
}

SX_STARTED_AT=""
start_servox() {  # start_servox PHASE
  local dir="$WORK/$1"
  SX_STARTED_AT="$(date +%s.%N)"
  # exec: $! is servox itself, so the signals below reach it and nothing else.
  (cd "$dir" && exec env -u OPSANI_URL -u OPSANI_TOKEN_FILE -u SERVO_UID \
    OPSANI_OPTIMIZER="$APP" OPSANI_TOKEN="$TOKEN" OPSANI_BASE_URL="$OPT_URL" PYTHONWARNINGS=ignore \
    "$VENV/bin/servo" --no-color -c "$HERE/servo.yaml" run >"$dir/servox.out" 2>"$dir/servox.log") &
  SX_PID=$!
}

WAIT_RC=""
wait_for() {  # wait_for CONDITION TIMEOUT: see servox_trace.py wait (0 held, 2 timed out, 3 servox gone)
  "${TRACE[@]}" wait "$OPT_URL" "$1" --pid "$SX_PID" --timeout "$2" --interval "$POLL_INTERVAL"
  WAIT_RC=$?
}

describe_wait() {  # describe_wait PHASE WHAT TIMEOUT: a PASS/FAIL line for the last wait_for
  case "$WAIT_RC" in
    0) step PASS "$1" "$2" ;;
    2) step FAIL "$1" "$2" "not within ${3}s" ;;
    3) step FAIL "$1" "$2" "servox exited first: $(grep -m1 -oE '(Attribute|Type|Key|Value|Runtime|Name)Error: .*' "$WORK/$1/servox.log" || echo 'see its log')" ;;
    *) step FAIL "$1" "$2" "servox_trace.py wait failed ($WAIT_RC)" ;;
  esac
}

SX_RC=""
SIGTERM_AT=""
finish_phase() {  # finish_phase PHASE: SIGTERM servox if it still runs, record the trace, stop the optimizer
  local phase="$1" dir="$WORK/$1"
  SIGTERM_AT=""
  if alive "$SX_PID"; then
    SIGTERM_AT="$(date +%s.%N)"
    stop_pid "$SX_PID" TERM "$STOP_TIMEOUT"
  else
    wait "$SX_PID" 2>/dev/null
    STOP_RC=$?
  fi
  SX_RC="$STOP_RC"
  SX_PID=""
  "${TRACE[@]}" state "$OPT_URL" "$dir/state.json" || step FAIL "$phase" "fetch /admin/state"
  stop_pid "$OPT_PID" TERM "$STOP_TIMEOUT"
  [ "$STOP_RC" = 0 ] || step FAIL "$phase" "optimizer exits 0 on SIGTERM" "exit code $STOP_RC"
  OPT_PID=""
  [ -s "$dir/state.json" ] || return
  local args=(check "$phase" "$dir/state.json" --servox-log "$dir/servox.log" --servox-rc "$SX_RC")
  [ -z "$SIGTERM_AT" ] || args+=(--sigterm-at "$SIGTERM_AT")
  "${TRACE[@]}" "${args[@]}"
  FAILS=$((FAILS + $?))  # check exits with its number of FAIL lines
}

cold_start_line() {  # how long servox took from exec to its HELLO arriving
  "$PYTHON" - "$WORK/$1/state.json" "$SX_STARTED_AT" <<'EOF'
import json, sys
history = json.load(open(sys.argv[1])).get("history") or []
hello = next((e for e in history if e.get("event") == "HELLO"), None)
if hello:
    print(f"  INFO  cold start (exec -> HELLO received): {(hello['at'] - float(sys.argv[2])) * 1000:.0f} ms")
EOF
}

# --- the phases -----------------------------------------------------------------------------------

phase_handshake() {
  local p=handshake
  echo "phase $p: DESCRIBE, MEASURE (2 s), ADJUST, SLEEP 1 s; then SIGTERM"
  start_optimizer "$p" "$HERE/plan_handshake.yaml"
  start_servox "$p"
  wait_for results=3 "$HANDSHAKE_TIMEOUT"
  describe_wait "$p" "servox answered DESCRIBE, MEASURE and ADJUST" "$HANDSHAKE_TIMEOUT"
  if [ "$WAIT_RC" = 0 ]; then
    wait_for polls=5 "$HANDSHAKE_TIMEOUT"  # the poll after the 1 s SLEEP
    describe_wait "$p" "servox polled again after the SLEEP" "$HANDSHAKE_TIMEOUT"
  fi
  finish_phase "$p"
  cold_start_line "$p"
}

phase_probe() {  # phase_probe PHASE PLAN: two commands; does servox survive the first?
  local p="$1"
  echo "phase $p: $(sed -n '1s/^# //p' "$2")"
  start_optimizer "$p" "$2"
  start_servox "$p"
  wait_for results=2 "$PROBE_TIMEOUT"  # judged by the check below: this wait only bounds the run
  finish_phase "$p"
}

phase_cancel() {
  local p=cancel
  echo "phase $p: MEASURE (70 s), POST /admin/cancel; its progress post (~60 s in) gets cancel"
  start_optimizer "$p" "$HERE/plan_cancel.yaml"
  start_servox "$p"
  wait_for inflight=MEASURE "$INFLIGHT_TIMEOUT"
  describe_wait "$p" "servox started the MEASURE" "$INFLIGHT_TIMEOUT"
  if [ "$WAIT_RC" = 0 ]; then
    if "${TRACE[@]}" cancel "$OPT_URL"; then
      step PASS "$p" "[ours] POST /admin/cancel armed a cancel of the MEASURE"
      echo "  waiting for servox's next progress post (up to ${CANCEL_TIMEOUT}s)..."
      wait_for cancel-settled "$CANCEL_TIMEOUT"
      case "$WAIT_RC" in
        0) step PASS "$p" "servox posted after the cancel, and went on" ;;
        3) echo "  INFO  $p: servox exited after the cancel" ;;
        *) step FAIL "$p" "servox posted after the cancel" "not within ${CANCEL_TIMEOUT}s" ;;
      esac
      if [ "$WAIT_RC" = 0 ]; then
        wait_for polls=4 "$AFTER_CANCEL_TIMEOUT"  # the DESCRIBE after the cancel, answered
        [ "$WAIT_RC" = 0 ] && echo "  INFO  $p: servox answered the DESCRIBE after the cancel"
      fi
    else
      step FAIL "$p" "[ours] POST /admin/cancel armed a cancel of the MEASURE"
    fi
  fi
  finish_phase "$p"
}

for phase in "${PHASES[@]}"; do
  case "$phase" in
    handshake) phase_handshake ;;
    probe-describe-param) phase_probe "$phase" "$HERE/plan_probe_describe_param.yaml" ;;
    probe-sleep-data) phase_probe "$phase" "$HERE/plan_probe_sleep_data.yaml" ;;
    cancel) phase_cancel ;;
    *) setup_failed "unknown phase '$phase' (phases: ${ALL_PHASES[*]})" ;;
  esac
done

if [ "$FAILS" -eq 0 ]; then
  echo "RESULT: PASS (phases: ${PHASES[*]})"
  exit 0
fi
echo "RESULT: FAIL ($FAILS failing step(s); phases: ${PHASES[*]})"
exit 1
