#!/usr/bin/env bash
# A Debian bookworm base image made from Debian's packages with debootstrap, for building hangar's images
# where no image registry is reachable. It plays debian:bookworm-slim: the minbase variant, no docs, no
# apt lists. Stored in the given buildah storage as localhost/hangar/debian:bookworm-local.
#
#   images/base.sh STORAGE_ARGS...      (build.sh calls it with its --root/--runroot/--storage-driver)
set -euo pipefail
IMAGE=localhost/hangar/debian:bookworm-local
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# Bumped when what the base holds changes: a stored base of another revision is built again.
REVISION=2
if buildah "$@" inspect --type image "$IMAGE" >/dev/null 2>&1; then
  if [ "$(buildah "$@" inspect --type image --format '{{index .OCIv1.Config.Labels "dev.hangar.base-revision"}}' "$IMAGE")" = "$REVISION" ]; then
    echo "base: $IMAGE already built" >&2
    exit 0
  fi
  echo "base: $IMAGE is of an earlier revision; building it again" >&2
  buildah "$@" rmi "$IMAGE" >/dev/null
fi
ctr=$(buildah "$@" from scratch)
trap 'buildah "$@" rm "$ctr" >/dev/null 2>&1 || true' EXIT
mnt=$(buildah "$@" mount "$ctr")
echo "base: debootstrap bookworm from $MIRROR (a few minutes)" >&2
debootstrap --variant=minbase --include=ca-certificates bookworm "$mnt" "$MIRROR" >&2
# What debian:bookworm-slim leaves out: apt lists, docs, man pages, logs, caches.
cat >"$mnt/etc/dpkg/dpkg.cfg.d/docker-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
CFG
# And, like it, apt drops the packages it downloaded once they are installed.
cat >"$mnt/etc/apt/apt.conf.d/docker-clean" <<'CFG'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CFG
printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\nTypes: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$MIRROR" \
  >"$mnt/etc/apt/sources.list.d/debian.sources"
rm -f "$mnt/etc/apt/sources.list"
rm -rf "$mnt"/var/lib/apt/lists/* "$mnt"/var/cache/apt/*.bin "$mnt"/var/cache/apt/archives/*.deb \
  "$mnt"/usr/share/doc/* "$mnt"/usr/share/man/* "$mnt"/usr/share/info/* "$mnt"/var/log/* "$mnt"/tmp/*
# The dpkg excludes above apply from now on; what debootstrap installed before them goes here. The message
# catalogues were 33 MB of each image (revision 1 kept them).
find "$mnt"/usr/share/locale -mindepth 1 ! -name locale.alias -delete
buildah "$@" unmount "$ctr" >/dev/null
buildah "$@" config --cmd /bin/bash --label org.opencontainers.image.description="Debian bookworm (debootstrap minbase), local base" \
  --label dev.hangar.base-revision="$REVISION" "$ctr"
buildah "$@" commit --quiet "$ctr" "$IMAGE" >/dev/null
echo "base: $IMAGE" >&2
