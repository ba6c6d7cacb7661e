#!/usr/bin/env bash
# SNIG (dian-lun-lin/SNIG, HPEC 2020 champion) on the GPU machine, on the networks and inputs spartac
# runs: builds the carried .peers/SNIG (`snig` and its `to_binary` converter) with nvcc for sm_90,
# writes the data with spartac (shared with run_snicit.sh under $WORK/data), converts it with SNIG's
# own to_binary, runs SNIG on one GPU and prints one line per run:
#   PEER snig mode=SNIG net=1024x120 batch=60000 rep=1 ms=67.0 wrong=0 expected=950 check=exact pass=1 ...
# ms is what SNIG prints as "Finish inference with X ms" (host clock around its task graph; the
# inputs are already in host memory, reading files is outside it). SNIG compares every image's
# category with the truth and prints the number of differing images (wrong).
#
# Run from the repository root on the GPU machine, carrying .peers and the spartac binary:
#   OUT=$OUT BIN=./target/gpu/spartac benches/peers/run_snig.sh
# Settings: see common.sh (OUT, BIN, WORK, NETS, SEED, LIMIT, PHASES, NVCC, ARCH) and
#   BATCHES   input batch sizes, divisors of 60000 (default "60000 5000": all at once, and SNIG's default)
#   MODE      SNIG (default) or another mode of its main (SNIGUpdate, SNIGCapturer, GPipe, BF, ...)
#   REPEAT    runs per network and batch (default 3)
#   THREADS   its kernel's thread dimension (default "2 512 1", its default); BUFFERS weight buffers (2)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SRC=${SRC:-$ROOT/.peers/SNIG}
BATCHES=${BATCHES:-60000 5000}
MODE=${MODE:-SNIG}
REPEAT=${REPEAT:-3}
THREADS=${THREADS:-2 512 1}
BUFFERS=${BUFFERS:-2}
for b in $BATCHES; do (( IMAGES % b == 0 )) || die "batch $b does not divide $IMAGES"; done

B="$WORK/snig"
NEURONS=$(net_neurons)
gpu_line

if has_phase build; then
  flags="-std=c++17 --extended-lambda -O2 -w -arch=$ARCH"   # its CMake release flags (-O2 -w) + sm_90
  stamp="$(cat "$SRC/PEER_COMMIT") $(sha256sum "$PEERS_DIR/cuda13_compat.h" "$PEERS_DIR/common.sh" "$0" | cut -c1-16 | tr '\n' ' ') $flags $("$NVCC" --version | tail -n 1)"
  if [[ -x $B/snig && -x $B/to_binary && -f $B/stamp && $(cat "$B/stamp") == "$stamp" ]]; then
    echo "PEER snig build=cached exe=$B/snig" | tee -a "$OUT/peers.txt"
  else
    copy_peer_tree "$SRC" "$B/src"
    common=(-include "$PEERS_DIR/cuda13_compat.h" -I "$B/src" -I "$B/src/3rd-party")
    # The two executables build in parallel (one translation unit each).
    # shellcheck disable=SC2086
    ( nvcc_build snig-to_binary "$OUT/snig_to_binary_build.log" "$B/to_binary" $flags "${common[@]}" \
        "$B/src/main/tsv_file_to_binary.cu" $(stdcxxfs_flag) ) &
    conv=$!
    # shellcheck disable=SC2086
    nvcc_build snig "$OUT/snig_build.log" "$B/snig" $flags -Xcompiler -fopenmp "${common[@]}" \
      "$B/src/main/main.cu" $(stdcxxfs_flag) -lgomp
    wait "$conv" || die "SNIG's to_binary did not build (see $OUT/snig_to_binary_build.log)"
    echo "$stamp" > "$B/stamp"
  fi
fi
[[ -x $B/snig && -x $B/to_binary ]] || die "no SNIG build under $B (run with PHASES including build)"

# SNIG runs on binary files that its to_binary writes from ../dataset/{weight/neuronN/nN-lK.tsv,
# MNIST/sparse-images-N.tsv, MNIST/neuronN-lL-categories.tsv} (relative to the working directory;
# always 1920 layers and the truth of 120, 480 and 1920 layers). The packed weight layout depends
# on the GPU's shared memory per block, so the conversion runs on the machine that runs SNIG.
run_dir() { echo "$B/run-n$1-s$SEED"; }
convert() {
  local n=$1 d data k l t0
  d=$(run_dir "$n"); data=$(data_dir "$n")
  [[ -f $d/.converted ]] && return 0
  rm -rf "$d"
  mkdir -p "$d/bin" "$d/dataset/weight/neuron$n" "$d/dataset/MNIST"
  for k in $(seq 1 "$GEN_LAYERS"); do ln -s "$data/n$n-l$k.tsv" "$d/dataset/weight/neuron$n/n$n-l$k.tsv"; done
  ln -s "$data/sparse-images-$n.tsv" "$d/dataset/MNIST/sparse-images-$n.tsv"
  for l in 120 480 1920; do
    if [[ -f $data/neuron$n-l$l-categories.tsv ]]; then
      ln -s "$data/neuron$n-l$l-categories.tsv" "$d/dataset/MNIST/neuron$n-l$l-categories.tsv"
    else
      # SNIG's to_binary opens the truth of all three layer counts; one not in NETS gets an
      # empty file, and no run is checked against it (.converted lists the real ones).
      : > "$d/dataset/MNIST/neuron$n-l$l-categories.tsv"
    fi
  done
  t0=$(now)
  (cd "$d/bin" && timeout "$BUILD_LIMIT" "$B/to_binary" -n "$n") > "$OUT/snig_to_binary_n$n.log" 2>&1 \
    || die "SNIG's to_binary failed for $n neurons (see $OUT/snig_to_binary_n$n.log)"
  # The layer counts whose truth file was real (not empty) at conversion time.
  for l in 120 480 1920; do
    if [[ -s $d/dataset/MNIST/neuron$n-l$l-categories.tsv ]]; then echo "$l"; fi
  done > "$d/.converted"
  echo "PEER snig data n=$n converted_seconds=$(elapsed "$t0")" | tee -a "$OUT/peers.txt"
}

if has_phase data; then
  for n in $NEURONS; do prepare_data "$n"; convert "$n"; done
fi

if has_phase run; then
  for net in $NETS; do
    n=${net%x*}; l=${net#*x}
    d=$(run_dir "$n")
    [[ -f $d/.converted ]] || die "no converted data for $net (run with PHASES including data)"
    truth="$(data_dir "$n")/neuron$n-l$l-categories.tsv"
    [[ -f $truth ]] && grep -qx "$l" "$d/.converted" \
      || die "no converted truth for $net: NETS changed since the data phase? (rm $d/.converted and rerun data)"
    expected=$(grep -c . "$truth" || true)
    bias=$(bias_for "$n")
    for batch in $BATCHES; do
      for rep in $(seq 1 "$REPEAT"); do
        log="$OUT/snig_${MODE}_${net}_b${batch}_r$rep.log"
        t0=$(now)
        rc=0
        # shellcheck disable=SC2086
        (cd "$d/bin" && timeout "$LIMIT" "$B/snig" -m "$MODE" -w "../dataset/weight/neuron$n/" \
          -i "../dataset/MNIST/sparse-images-$n.b" -g "../dataset/MNIST/neuron$n-l$l-categories.b" \
          -n "$n" -l "$l" -b "$bias" --num_gpus 1 --input_batch_size "$batch" \
          --num_weight_buffers "$BUFFERS" -t $THREADS) > "$log" 2>&1 || rc=$?
        wall=$(elapsed "$t0")
        ms=$(awk '/Finish inference with/ { s = $0; sub(/.*Finish inference with /, "", s); sub(/ ms.*/, "", s); v = s } END { print (v == "" ? "NA" : v) }' "$log")
        wrong=$(awk -F': ' '/Number of different categories/ { print $2 }' "$log" | tail -n 1)
        pass=0; [[ $rc == 0 && $wrong == 0 ]] && grep -q 'CHALLENGE PASSED' "$log" && pass=1
        record "PEER snig mode=$MODE net=$net batch=$batch rep=$rep ms=$ms wrong=${wrong:-NA} expected=$expected check=exact pass=$pass rc=$rc wall_s=$wall log=$(basename "$log")"
      done
    done
  done
fi
summarize
