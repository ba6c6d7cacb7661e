#!/usr/bin/env bash
# SNICIT (IDEA-CUHK/SNICIT, HPEC 2023) on the GPU machine, on the networks and inputs spartac
# runs: builds the carried .peers/SNICIT artifact ("SDGC" executable: modes SNICIT, XY (the XY-2021
# champion), SNIG (its SNIG-2020 port), BF (BF-2019)) with nvcc for sm_90, writes the data with
# spartac, runs each mode, and prints one line per run:
#   PEER snicit mode=SNICIT net=1024x120 rep=1 ms=10.812 categories=950 expected=950 check=count pass=1 ...
# ms is the inference time SNICIT itself prints ("<MODE> info: runtime"; summed over its batch
# rounds when BATCH < 60000); reading files and its one-off weight preprocessing are outside it.
#
# Run from the repository root on the GPU machine, carrying .peers and the spartac binary:
#   OUT=$OUT BIN=./target/gpu/spartac benches/peers/run_snicit.sh
# Settings: see common.sh (OUT, BIN, WORK, NETS, SEED, LIMIT, PHASES, NVCC, ARCH) and
#   MODES      modes to run (default "SNICIT XY SNIG"; BF also exists, slow)
#   THRESHOLD  SNICIT/XY threshold layer t (default 30, the artifact's default and the paper's choice)
#   BATCH      SNICIT/XY input batch, a divisor of 60000 (default 60000, the artifact's default)
#   REPEAT     runs per network and mode (default 3; each is a fresh process)
# Checks: SNIG and BF compare every image's category with the truth (the program prints the number
# of differing images). SNICIT and XY only count their categories (the artifact compares the count
# with the official data set's and prints nothing else); our copy prints that count and this script
# compares it with the truth's count.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SRC=${SRC:-$ROOT/.peers/SNICIT}
MODES=${MODES:-SNICIT XY SNIG}
THRESHOLD=${THRESHOLD:-30}
BATCH=${BATCH:-60000}
REPEAT=${REPEAT:-3}
(( IMAGES % BATCH == 0 )) || die "BATCH=$BATCH does not divide $IMAGES"
for m in $MODES; do [[ $m =~ ^(SNICIT|XY|SNIG|BF)$ ]] || die "unknown mode $m (SNICIT XY SNIG BF)"; done

B="$WORK/snicit"
EXE="$B/SDGC"
NEURONS=$(net_neurons)
gpu_line

if has_phase build; then
  flags="-std=c++17 --extended-lambda -O3 -w -arch=$ARCH"
  stamp="$(cat "$SRC/PEER_COMMIT") $(sha256sum "$PEERS_DIR/cuda13_compat.h" "$PEERS_DIR/common.sh" "$0" | cut -c1-16 | tr '\n' ' ') $flags $("$NVCC" --version | tail -n 1)"
  if [[ -x $EXE && -f $B/stamp && $(cat "$B/stamp") == "$stamp" ]]; then
    echo "PEER snicit build=cached exe=$EXE" | tee -a "$OUT/peers.txt"
  else
    copy_peer_tree "$SRC" "$B/src"
    # Print the category count the artifact computes (it only compares it with the official one).
    for f in "$B/src/src/SDGC/SNICIT/SNICIT.hpp" "$B/src/src/SDGC/XY/XY.hpp"; do
      sed -i 's/^\( *\)if (feature == feature_golden\[_neuron\]) {/\1std::cout << "PEER-CATEGORIES " << feature << std::endl;\n&/' "$f"
      grep -q 'PEER-CATEGORIES' "$f" || die "could not add the category count print to $f (upstream changed?)"
    done
    # shellcheck disable=SC2086
    nvcc_build snicit "$OUT/snicit_build.log" "$EXE" $flags -include "$PEERS_DIR/cuda13_compat.h" \
      -I "$B/src/3rd-party" -I "$B/src/src/SDGC" "$B/src/main/SDGC.cu" $(stdcxxfs_flag)
    echo "$stamp" > "$B/stamp"
  fi
fi
[[ -x $EXE ]] || die "no SNICIT build at $EXE (run with PHASES including build)"

# The artifact reads ../dataset/SDGC/{tsv_weights/neuronN/nN-lK.tsv, MNIST/sparse-images-N.tsv,
# MNIST/neuronN-lL-categories.tsv} and caches its preprocessed weights in ../scheduled_bm/neuronN/
# (keyed by N only), all relative to the working directory: one run folder per data set.
run_dir() { echo "$B/run-n$1-s$SEED"; }
layout() {
  local n=$1 d data
  d=$(run_dir "$n"); data=$(data_dir "$n")
  mkdir -p "$d/bin" "$d/dataset/SDGC/tsv_weights" "$d/dataset/SDGC/MNIST" "$d/scheduled_bm"
  ln -sfn "$data" "$d/dataset/SDGC/tsv_weights/neuron$n"
  ln -sf "$data/sparse-images-$n.tsv" "$d/dataset/SDGC/MNIST/sparse-images-$n.tsv"
  for l in $(net_layers_for "$n"); do
    ln -sf "$data/neuron$n-l$l-categories.tsv" "$d/dataset/SDGC/MNIST/neuron$n-l$l-categories.tsv"
  done
}

# SNICIT's and XY's first run on a data set turns all 1920 layer files into its schedule cache
# (the same for both modes). Done here by one untimed warm-up run, so that a run cut off halfway
# cannot leave a partial cache behind for the measured runs (an incomplete cache is rebuilt).
prepare_schedule() {
  local n=$1 d l0 t0 files
  d=$(run_dir "$n")
  [[ -f $d/scheduled_bm/.done-n$n ]] && return 0
  rm -rf "$d/scheduled_bm/neuron$n"
  l0=$(net_layers_for "$n" | head -n 1)
  t0=$(now)
  local rc=0
  (cd "$d/bin" && timeout "$BUILD_LIMIT" "$EXE" -m SNICIT -n "$n" -l "$l0" -t "$THRESHOLD" -b "$BATCH") \
    > "$OUT/snicit_schedule_n$n.log" 2>&1 || rc=$?
  files=$(find "$d/scheduled_bm/neuron$n" -name "n$n-*-l*.tsv" 2>/dev/null | wc -l)
  (( files == 2 * GEN_LAYERS )) || die "SNICIT's weight preprocessing for $n neurons stopped with $files of $((2 * GEN_LAYERS)) cache files, rc=$rc (see $OUT/snicit_schedule_n$n.log)"
  touch "$d/scheduled_bm/.done-n$n"
  # (the cache is complete; a failure of the warm-up inference itself shows again in the runs)
  echo "PEER snicit schedule n=$n seconds=$(elapsed "$t0") warmup_rc=$rc (one-off weight preprocessing + a warm-up ${n}x$l0 run, untimed)" | tee -a "$OUT/peers.txt"
}

if has_phase data; then
  for n in $NEURONS; do prepare_data "$n"; layout "$n"; prepare_schedule "$n"; done
fi

if has_phase run; then
  for net in $NETS; do
    n=${net%x*}; l=${net#*x}
    d=$(run_dir "$n")
    truth="$(data_dir "$n")/neuron$n-l$l-categories.tsv"
    [[ -f $truth && -e $d/dataset/SDGC/tsv_weights/neuron$n ]] || die "no data for $net (run with PHASES including data)"
    expected=$(grep -c . "$truth" || true)
    for mode in $MODES; do
      for rep in $(seq 1 "$REPEAT"); do
        log="$OUT/snicit_${mode}_${net}_r$rep.log"
        t0=$(now)
        rc=0
        (cd "$d/bin" && timeout "$LIMIT" "$EXE" -m "$mode" -n "$n" -l "$l" -t "$THRESHOLD" -b "$BATCH") > "$log" 2>&1 || rc=$?
        wall=$(elapsed "$t0")
        case $mode in
          SNICIT|XY)
            ms=$(awk -v m="$mode info: runtime" 'index($0, m) { s = $0; sub(/.*runtime /, "", s); sub(/ms.*/, "", s); t += s; k++ } END { if (k) printf "%.3f", t; else print "NA" }' "$log")
            got=$(awk '/^PEER-CATEGORIES / { s += $2; k++ } END { if (k) print s; else print "NA" }' "$log")
            pass=0; [[ $rc == 0 && $got == "$expected" ]] && pass=1
            result="categories=$got expected=$expected check=count"
            extra="t=$THRESHOLD b=$BATCH"
            ;;
          SNIG|BF)
            ms=$(awk -v m="$mode info: runtime" 'index($0, m) { s = $0; sub(/.*runtime /, "", s); sub(/ ms.*/, "", s); t += s; k++ } END { if (k) printf "%.3f", t; else print "NA" }' "$log")
            wrong=$(awk -F': ' '/Number of different categories/ { print $2 }' "$log" | tail -n 1)
            pass=0; [[ $rc == 0 && $wrong == 0 ]] && grep -q 'CHALLENGE PASSED' "$log" && pass=1
            result="wrong=${wrong:-NA} expected=$expected check=exact"
            extra="b=60000"
            ;;
        esac
        record "PEER snicit mode=$mode net=$net rep=$rep ms=$ms $result pass=$pass rc=$rc wall_s=$wall $extra log=$(basename "$log")"
      done
    done
  done
fi
summarize
