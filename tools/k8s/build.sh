#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok from the Go module
# proxy into $1 (default: the user cache dir keyed by version). Idempotent: a binary already there is kept.
set -euo pipefail
cd "$(dirname "$0")"
KV=$(awk '$1=="k8s.io/kubernetes" {print $2}' go.mod)
KWOK=v0.7.0
BIN="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/hangar/k8s-$KV}"
mkdir -p "$BIN"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--mod=mod}"
MAJ=1; MIN=$(echo "$KV" | cut -d. -f2)
V="-X k8s.io/component-base/version.gitVersion=$KV -X k8s.io/component-base/version.gitMajor=$MAJ \
 -X k8s.io/component-base/version.gitMinor=$MIN -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitVersion=$KV -X k8s.io/client-go/pkg/version.gitMajor=$MAJ \
 -X k8s.io/client-go/pkg/version.gitMinor=$MIN"
build() { # name package [ldflags]
  [ -x "$BIN/$1" ] && return 0
  echo "building $1 ($2)" >&2
  go build -trimpath -ldflags "-s -w ${3:-}" -o "$BIN/$1.tmp" "$2"
  mv "$BIN/$1.tmp" "$BIN/$1"
}
build etcd go.etcd.io/etcd/server/v3
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$V"
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$V"
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$V"
build kubectl k8s.io/kubernetes/cmd/kubectl "$V"
if [ ! -x "$BIN/kwok" ]; then
  echo "building kwok $KWOK" >&2
  GOBIN="$BIN" GOFLAGS= go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK"
fi
# kwok's stage definitions ship in its module; record where they are so nothing is copied into the repo.
GOFLAGS= go mod download -json "sigs.k8s.io/kwok@$KWOK" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])' > "$BIN/kwok-dir"
echo "$BIN"
