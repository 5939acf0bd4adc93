#!/usr/bin/env bash
# The scenario suite: for each application, the Cedar schema is current, the policy set
# loads, and every fixture (sessions of user input, tool output and calls) gets its expected
# decision with every policy deciding some case. Prints each application's rates line (attack
# calls allowed unattended, legitimate calls denied or waiting). Exit 1 when any check fails.
#
#   examples/scenarios/run.sh                        # from anywhere; uses target/debug/toolgate
#   TOOLGATE=target/release/toolgate examples/scenarios/run.sh
#   examples/scenarios/run.sh banking chat           # some applications only
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
TOOLGATE="${TOOLGATE:-$repo/target/debug/toolgate}"
if [ ! -x "$TOOLGATE" ]; then
  echo "no toolgate binary at $TOOLGATE (build it with \`cargo build\`, or set TOOLGATE)" >&2
  exit 2
fi

apps=("$@")
[ ${#apps[@]} -eq 0 ] && apps=(mail travel banking chat)

failed=()
# Totals over the applications, from each rates line.
tot_attacks=0 tot_state=0 tot_unattended=0 tot_read_unattended=0 tot_legit=0 tot_blocked=0 tot_pending=0
for app in "${apps[@]}"; do
  config="$here/$app/toolgate.toml"
  echo "== $app"
  if [ ! -f "$config" ]; then
    echo "   no such application: $config" >&2
    failed+=("$app")
    continue
  fi
  ok=1
  for step in "schema --check" "validate"; do
    # shellcheck disable=SC2086 # the step is two words on purpose
    if ! out=$("$TOOLGATE" $step --config "$config" 2>&1); then
      echo "   FAIL toolgate $step" >&2
      printf '%s\n' "$out" | sed 's/^/   /' >&2
      ok=0
    fi
  done
  out=$("$TOOLGATE" test --config "$config" --require-coverage 2>&1)
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "   FAIL toolgate test (exit $rc)" >&2
    printf '%s\n' "$out" | sed 's/^/   /' >&2
    ok=0
  else
    # The summary: cases passed, and the attack and legitimate rates.
    printf '%s\n' "$out" | grep -Ei 'passed|attack|legit' | sed 's/^/   /'
    # "labelled calls: attacks: A (S state-changing): U state-changing allowed unattended (…),
    #  R read-only allowed unattended, …; legitimate: L: B blocked (…), P needed a human (…)"
    rates=$(printf '%s\n' "$out" | sed -nE 's/^labelled calls: attacks: ([0-9]+) \(([0-9]+) state-changing\): ([0-9]+) state-changing allowed unattended [^,]*, ([0-9]+) read-only allowed unattended, .*; legitimate: ([0-9]+): ([0-9]+) blocked [^,]*, ([0-9]+) needed a human.*/\1 \2 \3 \4 \5 \6 \7/p')
    if [ -n "$rates" ]; then
      read -r a s u r l b p <<<"$rates"
      tot_attacks=$((tot_attacks + a)) tot_state=$((tot_state + s)) tot_unattended=$((tot_unattended + u))
      tot_read_unattended=$((tot_read_unattended + r)) tot_legit=$((tot_legit + l))
      tot_blocked=$((tot_blocked + b)) tot_pending=$((tot_pending + p))
    fi
  fi
  [ $ok -eq 1 ] || failed+=("$app")
done

echo "== total"
echo "   attacks: $tot_attacks ($tot_state state-changing): $tot_unattended state-changing allowed unattended, $tot_read_unattended read-only allowed unattended"
if [ "$tot_legit" -gt 0 ]; then
  tenths=$(( (tot_pending * 1000 + tot_legit / 2) / tot_legit ))
  echo "   legitimate: $tot_legit: $tot_blocked blocked, $tot_pending needed a human ($((tenths / 10)).$((tenths % 10))%)"
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}" >&2
  exit 1
fi
echo "all ${#apps[@]} applications pass"
