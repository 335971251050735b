#!/usr/bin/env bash
# Regenerates go.mod/go.sum for a Kubernetes version: replaces every staging module k8s replaces with
# ./staging/..., at the matching v0.MINOR.PATCH, so `go build` of k8s main packages works outside k8s.
set -euo pipefail
cd "$(dirname "$0")"
KV="${1:-v1.34.4}"; SV="v0.${KV#v1.}"; KWOK="${2:-v0.7.0}"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
rm -f go.mod go.sum
go mod init hangar.local/k8s-testbin
go mod edit -go=1.24.0 -godebug=default=go1.24
GOMOD=$(go mod download -json "k8s.io/kubernetes@$KV" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
for m in $(awk '$2=="=>" && $3 ~ /^\.\/staging\// {print $1}' "$GOMOD"); do
  go mod edit -replace="$m=$m@$SV"
done
# etcd at exactly the version k8s pins, so shared dependencies (grpc, otel) are not raised for the apiserver
ETCD=$(awk '$1=="go.etcd.io/etcd/server/v3" {print $2}' "$GOMOD")
go get "k8s.io/kubernetes@$KV" "go.etcd.io/etcd/server/v3@$ETCD"
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$KV" "k8s.io/kubernetes/cmd/kube-controller-manager@$KV" \
             "k8s.io/kubernetes/cmd/kube-scheduler@$KV" "k8s.io/kubernetes/cmd/kubectl@$KV" "go.etcd.io/etcd/server/v3@$ETCD"
go mod tidy
