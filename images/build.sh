#!/usr/bin/env bash
# Builds hangar's images without a Docker engine (buildah, --isolation chroot, as root), saves each as an
# OCI archive under build/images/, and smoke-tests each inside the built image (buildah run).
#
#   images/build.sh                  BASE: the registry's debian:bookworm-slim (pinned in the Containerfiles)
#                                    if it is reachable, else a local debootstrap base (images/base.sh)
#   HANGAR_IMAGE_BASE=local images/build.sh      force the local base
#   HANGAR_IMAGE_BASE=registry images/build.sh   force the registry's (no fallback: the release workflow)
#   HANGAR_IMAGE_BASE=<ref> images/build.sh      any other base reference
#   HANGAR_IMAGE_ARCH=arm64 ...                  another architecture (needs binfmt/qemu for RUN steps)
#
# `make images` runs this. The release workflow (.github/workflows/release.yml) runs the same Containerfiles.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/build/images
CTX=$ROOT/images/context
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ARCH=${HANGAR_IMAGE_ARCH:-amd64}
NODE_VERSION=${HANGAR_NODE_VERSION:-22.23.5}
NPM_VERSION=${HANGAR_NPM_VERSION:-10.9.9}
REGISTRY=${HANGAR_IMAGE_REGISTRY:-ghcr.io/hangar-dev}
# A storage of its own (vfs: works in any container, no fuse or overlay needed), kept between runs.
STORE=${HANGAR_IMAGE_STORE:-/var/tmp/hangar-images-$(id -u)}
S=(--root "$STORE/storage" --runroot "$STORE/run" --storage-driver vfs)

[ "$(id -u)" = 0 ] || { echo "images: buildah --isolation chroot needs root" >&2; exit 1; }
for t in buildah npm; do command -v $t >/dev/null || { echo "images: $t is needed (apt-get install buildah)" >&2; exit 1; }; done
mkdir -p "$OUT" "$CTX"
t0=$(date +%s)

# The same CLI pins as tools/install-clis.sh (the one list).
CLI_PACKAGES=$(grep -oE '^\s+"@[^"]+@[0-9][^"]*"' tools/install-clis.sh | tr -d ' "' | tr '\n' ' ')
[ -n "$CLI_PACKAGES" ] || { echo "images: no CLI pins found in tools/install-clis.sh" >&2; exit 1; }

# Node.js and npm for the sandbox image, as npm tarballs (npm checks their integrity).
fetch() { # name@version -> images/context/$2.tgz
  if [ ! -s "$CTX/$2.tgz" ] || [ "$(cat "$CTX/$2.version" 2>/dev/null)" != "$1" ]; then
    (cd "$CTX" && rm -f ./*.tmp.tgz && f=$(npm pack --silent "$1" | tail -1) && mv "$f" "$2.tgz" && echo "$1" >"$2.version")
  fi
}
case "$ARCH" in amd64) NODE_ARCH=x64 ;; *) NODE_ARCH=$ARCH ;; esac  # npm's names: x64, arm64
fetch "node-linux-$NODE_ARCH@$NODE_VERSION" "node-linux-$ARCH"
fetch "npm@$NPM_VERSION" npm

# Behind a TLS-intercepting proxy (this development machine has one), pip and npm in the build stages must
# trust its CA: the CAs this machine adds to Debian's (/usr/local/share/ca-certificates/*.crt, or
# HANGAR_IMAGE_EXTRA_CA) go into the build stages only; the final images keep Debian's own. Empty elsewhere.
: >"$CTX/extra-ca.crt"
for f in ${HANGAR_IMAGE_EXTRA_CA:-/usr/local/share/ca-certificates/*.crt}; do
  if [ -f "$f" ]; then cat "$f" >>"$CTX/extra-ca.crt"; fi
done

BASE_ARG=()
case "${HANGAR_IMAGE_BASE:-auto}" in
  auto)
    if timeout 60 buildah "${S[@]}" pull --quiet --arch "$ARCH" "$(sed -n 's/^ARG BASE=//p' images/hangar/Containerfile)" >/dev/null 2>&1; then
      echo "images: base from the registry" >&2
    else
      echo "images: no registry reachable; building a local Debian base with debootstrap" >&2
      bash images/base.sh "${S[@]}"
      BASE_ARG=(--build-arg BASE=localhost/hangar/debian:bookworm-local)
    fi ;;
  registry) ;;  # the Containerfiles' pinned default (the release workflow)
  local) bash images/base.sh "${S[@]}"; BASE_ARG=(--build-arg BASE=localhost/hangar/debian:bookworm-local) ;;
  *) BASE_ARG=(--build-arg "BASE=$HANGAR_IMAGE_BASE") ;;
esac

build() { # name containerfile
  local ref=$REGISTRY/$1:$VERSION s=$(date +%s)
  echo "images: building $ref" >&2
  buildah "${S[@]}" bud --isolation chroot --layers=false --arch "$ARCH" -f "$2" -t "$ref" \
    "${BASE_ARG[@]}" --build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION" --build-arg CREATED="$CREATED" \
    --build-arg TARGETARCH="$ARCH" --build-arg CLI_PACKAGES="$CLI_PACKAGES" . >&2
  rm -f "$OUT/$1.oci.tar"
  buildah "${S[@]}" push --quiet "$ref" "oci-archive:$OUT/$1.oci.tar:$ref" >&2
  echo "images: $1 built in $(( $(date +%s) - s ))s" >&2
}
build hangar images/hangar/Containerfile
build hangar-sandbox images/sandbox/Containerfile

smoke=0
bash images/smoke.sh "$REGISTRY" "$VERSION" "${S[@]}" | tee "$OUT/smoke.log" || smoke=1

# Sizes: the smoke test's root-filesystem sizes (uncompressed) and the OCI archives.
{
  echo "image,uncompressed_mb,archive_mb"
  for n in hangar hangar-sandbox; do
    u=$(sed -n "s|^smoke size $REGISTRY/$n:$VERSION \([0-9]*\) MB|\1|p" "$OUT/smoke.log")
    echo "$n,${u:-?},$(( $(stat -c %s "$OUT/$n.oci.tar") / 1000000 ))"
  done
} | tee "$OUT/sizes.csv"
# The budgets (images/README.md), uncompressed and archive MB: over one fails the build.
over=$(awk -F, 'BEGIN { b["hangar"]="300 140"; b["hangar-sandbox"]="1500 650" }
  NR > 1 { split(b[$1], m, " "); if ($2 == "?" || $2 > m[1] || $3 > m[2]) print $1 " " $2 "/" m[1] " MB, archive " $3 "/" m[2] " MB" }' "$OUT/sizes.csv")
[ -z "$over" ] || { echo "images: over budget: $over" >&2; smoke=1; }
echo "images: done in $(( $(date +%s) - t0 ))s; archives in build/images/" >&2
[ "$smoke" = 0 ] || { echo "images: smoke tests failed (build/images/smoke.log)" >&2; exit 1; }
