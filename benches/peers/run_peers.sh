#!/usr/bin/env bash
# Both HPEC peers on the GPU machine: the two builds in parallel, then SNICIT (run_snicit.sh: modes
# SNICIT, XY, SNIG-port), then the original SNIG (run_snig.sh). Same settings as those scripts
# (common.sh); PEERS picks them (default "snicit snig"). Results: PEER lines on stdout and in
# $OUT/peers.txt, logs under $OUT. Exit status: 0 when every build and run passed, else the last
# failure's (2: a build or data step, 3: a run failed or missed the truth).
#   OUT=$OUT BIN=./target/gpu/spartac benches/peers/run_peers.sh
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${OUT:?set OUT to the folder for logs and results}"
PEERS=${PEERS:-snicit snig}
PHASES=${PHASES:-build data run}
rc=0
if [[ " $PHASES " == *" build "* ]]; then
  pids=()
  for p in $PEERS; do PHASES=build "$here/run_$p.sh" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
fi
rest=$(echo " $PHASES " | sed 's/ build / /g')
if [[ -n ${rest// /} ]]; then
  for p in $PEERS; do PHASES="$rest" "$here/run_$p.sh" || rc=$?; done
fi
exit "$rc"
