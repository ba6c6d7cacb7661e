# Shared by run_snicit.sh and run_snig.sh (sourced, not run). Our code only; the peers' sources
# come from .peers/ (benches/peers/fetch_sources.sh) and are built under $WORK, never in the repo.
#
# Settings (environment):
#   OUT      folder for logs and the results table (required; the device tool's $OUT)
#   BIN      spartac binary that writes the networks/images/truth (default ./target/release/spartac)
#   WORK     scratch folder for builds and data sets (default .peers-work in the repository root:
#            ignored by git, so a warm GPU machine keeps it between calls; never carry it)
#   NETS     networks, NxL (default "1024x120 1024x480 1024x1920")
#   SEED     generator seed (default 0: spartac's default, so `spartac hpec run --neurons N --layers L`
#            runs the same network; for N = 1024 the first 120 layers are the real challenge layers)
#   LIMIT    seconds per peer run (default 300); BUILD_LIMIT for a build (default 480)
#   NVCC     nvcc (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc); ARCH (default sm_90);
#            NVCC_FLAGS_EXTRA is appended to every nvcc command (e.g. -I/-L of a CUDA wheel install)
#   PHASES   any of "build data run" (default all three); a later call on a warm machine can skip
#            what $WORK already holds (the build and data steps also skip work that is up to date)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PEERS_DIR="$ROOT/benches/peers"
: "${OUT:?set OUT to the folder for logs and results}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BIN=${BIN:-./target/release/spartac}
[[ $BIN == /* ]] || BIN="$ROOT/$BIN"
WORK=${WORK:-$ROOT/.peers-work}
NETS=${NETS:-1024x120 1024x480 1024x1920}
SEED=${SEED:-0}
LIMIT=${LIMIT:-300}
BUILD_LIMIT=${BUILD_LIMIT:-480}
ARCH=${ARCH:-sm_90}
PHASES=${PHASES:-build data run}
IMAGES=60000            # both peers hard-code 60,000 inputs
GEN_LAYERS=1920         # SNICIT's preprocessing reads all 1920 layer files whatever -l says
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}

if [[ -z ${NVCC:-} ]]; then
  NVCC=$(command -v nvcc || true)
  [[ -n $NVCC ]] || NVCC=/usr/local/cuda/bin/nvcc
fi

has_phase() { [[ " $PHASES " == *" $1 "* ]]; }
die() { echo "PEER error: $*" >&2; exit 2; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

bias_for() {
  case $1 in
    1024) echo -0.3 ;; 4096) echo -0.35 ;; 16384) echo -0.4 ;; 65536) echo -0.45 ;;
    *) die "no challenge bias for $1 neurons" ;;
  esac
}

# Checks and splits NETS into "N L" pairs; prints the distinct neuron counts.
net_neurons() {
  local net
  for net in $NETS; do
    [[ $net =~ ^([0-9]+)x([0-9]+)$ ]] || die "bad network '$net' in NETS (want NxL, e.g. 1024x120)"
    (( BASH_REMATCH[2] <= GEN_LAYERS )) || die "$net: at most $GEN_LAYERS layers"
    echo "${BASH_REMATCH[1]}"
  done | sort -nu
}
net_layers_for() { # N -> the layer counts NETS asks for N
  local net
  for net in $NETS; do if [[ ${net%x*} == "$1" ]]; then echo "${net#*x}"; fi; done | sort -nu
}

# The build: nvcc on the main .cu of a peer tree copied to $WORK (edits go to the copy only).
# CUDA 13 removed cudaDeviceProp fields that the bundled Taskflow's device-dump helper prints
# (never called by the peers); the copy prints 0 instead. Everything else is handled by the
# force-included shim cuda13_compat.h (our code).
copy_peer_tree() { # src dest
  local src=$1 dest=$2
  [[ -f $src/PEER_COMMIT ]] || die "$src is missing: run benches/peers/fetch_sources.sh here and carry .peers"
  rm -rf "$dest"
  mkdir -p "$(dirname "$dest")"
  cp -r "$src" "$dest"
  local dev="$dest/3rd-party/taskflow/cuda/cuda_device.hpp"
  if [[ -f $dev ]]; then
    sed -i -E 's/\bp\.(clockRate|deviceOverlap|kernelExecTimeoutEnabled)\b/0/g' "$dev"
  fi
}

stdcxxfs_flag() { # -lstdc++fs where the host compiler still ships it (GCC < 9 needs it)
  local lib
  lib=$(g++ -print-file-name=libstdc++fs.a 2>/dev/null || true)
  [[ $lib == /* && -f $lib ]] && echo -lstdc++fs || true
}

# build NAME LOG OUTPUT nvcc-args...  (fails the script, with the log's tail, when nvcc fails)
nvcc_build() {
  local name=$1 log=$2 output=$3
  shift 3
  [[ -x $NVCC ]] || command -v "$NVCC" >/dev/null || die "$name: no nvcc ($NVCC)"
  local t0; t0=$(now)
  # shellcheck disable=SC2206
  local extra=(${NVCC_FLAGS_EXTRA:-})
  echo "+ $NVCC $* ${extra[*]} -o $output" > "$log"
  if ! timeout "$BUILD_LIMIT" "$NVCC" "$@" "${extra[@]}" -o "$output" >> "$log" 2>&1; then
    echo "PEER $name build=FAIL seconds=$(elapsed "$t0") log=$log" | tee -a "$OUT/peers.txt"
    tail -n 30 "$log" >&2
    die "$name: nvcc failed (full log: $log)"
  fi
  echo "PEER $name build=ok seconds=$(elapsed "$t0") nvcc=\"$("$NVCC" --version | tail -n 1)\" arch=$ARCH" | tee -a "$OUT/peers.txt"
}

# Data for N neurons under $WORK/data/n$N-s$SEED: the GEN_LAYERS layer files n{N}-l{k}.tsv,
# sparse-images-N.tsv (IMAGES images) and neuron{N}-l{L}-categories.tsv for every L of NETS,
# all from spartac (truth: its f64 reference on the distinct images, tiled with them).
data_dir() { echo "$WORK/data/n$1-s$SEED"; }
prepare_data() {
  local n=$1 dir base l t0
  dir=$(data_dir "$n")
  # 1,200 real images for 1024 neurons (repeated to 60,000, as spartac's --repeat-images does);
  # the 60,000 MNIST-derived ones otherwise (spartac hpec run's default images for other sizes).
  if (( n == 1024 )); then base=1200; else base=$IMAGES; fi
  [[ -x $BIN ]] || die "no spartac binary at $BIN (set BIN, and carry it)"
  mkdir -p "$dir"
  if [[ ! -f $dir/.network.done ]]; then
    t0=$(now)
    timeout "$BUILD_LIMIT" "$BIN" hpec generate --neurons "$n" --layers "$GEN_LAYERS" --seed "$SEED" \
      --images "$base" --out "$dir/gen" > "$OUT/data_n$n.log" 2>&1 || die "spartac hpec generate failed (see $OUT/data_n$n.log)"
    mv "$dir"/gen/n"$n"-l*.tsv "$dir"/
    python3 "$PEERS_DIR/hpec_inputs.py" images --src "$dir/gen/sparse-images-$n.tsv" --base "$base" \
      --count "$IMAGES" --out "$dir/sparse-images-$n.tsv" >> "$OUT/data_n$n.log"
    cp "$dir/gen/neuron$n-l$GEN_LAYERS-categories.tsv" "$dir/base-l$GEN_LAYERS-categories.tsv"
    rm -rf "$dir/gen"
    echo "$base" > "$dir/base_images"
    touch "$dir/.network.done"
    echo "PEER data n=$n layers=$GEN_LAYERS seconds=$(elapsed "$t0") dir=$dir" | tee -a "$OUT/peers.txt"
  fi
  for l in $(net_layers_for "$n"); do
    if [[ ! -f $dir/base-l$l-categories.tsv ]]; then
      # The truth of the first L layers: spartac generates the same first L layers (same seed).
      t0=$(now)
      timeout "$BUILD_LIMIT" "$BIN" hpec generate --neurons "$n" --layers "$l" --seed "$SEED" \
        --images "$base" --out "$dir/gen-l$l" >> "$OUT/data_n$n.log" 2>&1 || die "spartac truth for ${n}x$l failed"
      cp "$dir/gen-l$l/neuron$n-l$l-categories.tsv" "$dir/base-l$l-categories.tsv"
      rm -rf "$dir/gen-l$l"
      echo "PEER data n=$n truth_layers=$l seconds=$(elapsed "$t0")" | tee -a "$OUT/peers.txt"
    fi
    if [[ ! -f $dir/neuron$n-l$l-categories.tsv ]]; then
      python3 "$PEERS_DIR/hpec_inputs.py" truth --src "$dir/base-l$l-categories.tsv" --base "$base" \
        --count "$IMAGES" --out "$dir/neuron$n-l$l-categories.tsv" >> "$OUT/data_n$n.log"
    fi
  done
}

gpu_line() {
  echo "PEER gpu=\"$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)\" host_cores=$(nproc)" | tee -a "$OUT/peers.txt"
}

# Per-invocation record of the run lines, and the summary at the end: the median of each
# (tool, mode, net, batch) over its passing runs. Returns non-zero when any run failed, so a
# caller that measures spartac in the same call can go on (`|| true`) and still see it.
RUNS_FILE=$(mktemp "${TMPDIR:-/tmp}/peer-runs.XXXXXX")
record() { echo "$*" | tee -a "$OUT/peers.txt" >> "$RUNS_FILE"; echo "$*"; }
summarize() {
  awk '
    { key = ""; ms = ""; pass = 0
      for (i = 1; i <= NF; i++) {
        split($i, kv, "=")
        if (kv[1] == "mode" || kv[1] == "net" || kv[1] == "batch") key = key " " $i
        if (kv[1] == "ms") ms = kv[2]
        if (kv[1] == "pass") pass = kv[2]
      }
      key = $2 key; runs[key]++
      if (pass == 1 && ms != "NA") { n[key]++; v[key, n[key]] = ms + 0 } else bad[key]++ }
    END {
      for (k in runs) {
        m = n[k] + 0; med = "NA"
        if (m > 0) {
          for (i = 1; i <= m; i++) a[i] = v[k, i]
          for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
          med = (m % 2) ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
        }
        printf "PEER summary %s median_ms=%s runs=%d passed=%d\n", k, med, runs[k], m
      }
    }' "$RUNS_FILE" | sort | tee -a "$OUT/peers.txt"
  local failed; failed=$(grep -c 'pass=0' "$RUNS_FILE" || true)
  rm -f "$RUNS_FILE"
  if (( failed > 0 )); then
    echo "PEER error: $failed run(s) failed or did not match the truth (logs under $OUT)" >&2
    return 3
  fi
}
