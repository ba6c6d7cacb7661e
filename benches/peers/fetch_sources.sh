#!/usr/bin/env bash
# Export the HPEC peers' public source trees into .peers/<name>/ (ignored by git; their code
# never enters this repository). Run HERE (the developer machine), from the repository root;
# then carry `.peers` to the GPU machine (benches/peers/README.md).
#
# Sources: bare mirrors under $MIRROR (default /work/.mirror, filled by the agent `fetch` tool:
# github:IDEA-CUHK/SNICIT, github:dian-lun-lin/SNIG), or, with PEERS_CLONE=1, a shallow clone
# from GitHub (needs network). Each tree is pinned to the commit below and stripped of datasets,
# binaries, papers and pictures, so that it stays far under the device tool's 64 MiB carry limit.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
MIRROR=${MIRROR:-/work/.mirror}
DEST=${DEST:-.peers}
PEERS=${PEERS:-SNICIT SNIG}

# name | GitHub owner/repo | pinned commit | paths left out
declare -A REPO COMMIT EXCLUDE
REPO[SNICIT]=IDEA-CUHK/SNICIT
COMMIT[SNICIT]=0ce20079674a3c6903c0d1bebedce07df8cbcc5c   # 2023-07-17, MIT license
EXCLUDE[SNICIT]="dataset bin/SDGC bin/beyond SNICIT-paper.pdf README_tmp.html plot main/beyond.cu src/beyond"
REPO[SNIG]=dian-lun-lin/SNIG
COMMIT[SNIG]=4944672316c543d5c4c6dc1361cb47a3d1e137da     # 2021-11-11, no license file upstream
EXCLUDE[SNIG]="sample_data .others unittests SNIG_HPEC_present.pdf 3rd-party/doctest"

mkdir -p "$DEST"
for name in $PEERS; do
  repo=${REPO[$name]:?unknown peer $name (known: ${!REPO[*]})}
  commit=${COMMIT[$name]}
  gitdir="$MIRROR/${repo/\//+}/repo"
  if [[ ! -d $gitdir ]]; then
    if [[ ${PEERS_CLONE:-0} == 1 ]]; then
      gitdir=$(mktemp -d /tmp/peer-$name.XXXXXX)
      git clone --quiet --bare --filter=blob:none "https://github.com/$repo" "$gitdir"
    else
      echo "fetch_sources: no mirror of $repo at $gitdir (fetch github:$repo first, or set PEERS_CLONE=1)" >&2
      exit 1
    fi
  fi
  if ! git --git-dir="$gitdir" cat-file -e "$commit^{commit}" 2>/dev/null; then
    echo "fetch_sources: $gitdir lacks the pinned commit $commit of $repo" >&2
    exit 1
  fi
  pathspec=(.)
  for p in ${EXCLUDE[$name]}; do pathspec+=(":(exclude)$p"); done
  rm -rf "${DEST:?}/$name"
  mkdir -p "$DEST/$name"
  # (a mirror may lack the blobs of the left-out datasets: git archive names them, yet succeeds)
  git --git-dir="$gitdir" archive --format=tar "$commit" -- "${pathspec[@]}" \
    2> >(grep -v 'invalid object' >&2 || true) | tar -x -C "$DEST/$name"
  printf '%s %s\n' "$repo" "$commit" > "$DEST/$name/PEER_COMMIT"
  echo "$name: $repo@${commit:0:12} -> $DEST/$name ($(du -sh "$DEST/$name" | cut -f1), $(find "$DEST/$name" -type f | wc -l) files)"
done
echo "total: $(du -sh "$DEST" | cut -f1) in $DEST (carry it as \"$DEST\")"
