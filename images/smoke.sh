#!/usr/bin/env bash
# Smoke tests inside the built images (buildah run --isolation chroot): hangar --version, the driver's
# self-check with each image's own python3, each agent CLI's --version, and the uid split (hangar runs as
# 10001; in the sandbox the driver is 1000 and the agent 1001, which can't write the driver's files).
#
#   images/smoke.sh REGISTRY VERSION STORAGE_ARGS...      (build.sh calls it)
set -euo pipefail
REGISTRY=$1 VERSION=$2
shift 2
fail=0
check() { # what, then the command; prints its output
  local what=$1; shift
  if out=$("$@" 2>&1); then echo "smoke ok   $what: $(echo "$out" | tail -1)"; else echo "smoke FAIL $what: $out"; fail=1; fi
}
run() { local c=$1; shift; buildah "${S[@]}" run --isolation chroot "$c" -- "$@"; }
S=("$@")

h=$(buildah "${S[@]}" from --pull-never "$REGISTRY/hangar:$VERSION")
s=$(buildah "${S[@]}" from --pull-never "$REGISTRY/hangar-sandbox:$VERSION")
trap 'buildah "${S[@]}" rm "$h" "$s" >/dev/null 2>&1 || true' EXIT

check "hangar --version" run "$h" hangar --version
check "hangar runs as 10001" sh -c "[ \"\$(buildah ${S[*]} run --isolation chroot $h -- id -u)\" = 10001 ] && echo 10001"
check "hangar imports operator and api" run "$h" python3 -c "import hangar_operator.main, hangar_api.app; print('imports')"
check "hangar CRDs" run "$h" hangar crds --help
check "driver self-check (hangar image)" run "$h" env PYTHONPATH=/opt/hangar/lib python3 -m hangar_driver --self-check
check "driver self-check + CLIs (sandbox)" run "$s" python3 -m hangar_driver --self-check
for cli in claude codex pi; do check "$cli --version" run "$s" "$cli" --version; done
check "git" run "$s" git --version
check "node" run "$s" node --version
check "hangar-agent on PATH" run "$s" sh -c 'command -v hangar-agent'
check "driver uid 1000" sh -c "[ \"\$(buildah ${S[*]} run --isolation chroot $s -- id -u hangar-driver)\" = 1000 ] && echo 1000"
check "agent uid 1001" sh -c "[ \"\$(buildah ${S[*]} run --isolation chroot --user 1001:1001 $s -- id -u)\" = 1001 ] && echo 1001"
# Refused for the right reason: the write itself is denied (not, say, the container failing to start).
check "agent cannot write the driver" sh -c "buildah ${S[*]} run --isolation chroot --user 1001:1001 $s -- sh -c 'echo x > /opt/hangar/lib/hangar_driver/x.py' 2>&1 | grep -q 'Permission denied' && echo refused"
check "agent runs claude" run "$s" setpriv --reuid 1001 --regid 1001 --clear-groups env HOME=/home/agent claude --version

# Uncompressed size of each image's root filesystem.
for c in "$h" "$s"; do
  m=$(buildah "${S[@]}" mount "$c")
  echo "smoke size $(buildah "${S[@]}" inspect --format '{{.FromImage}}' "$c") $(du -sm "$m" | cut -f1) MB"
  buildah "${S[@]}" unmount "$c" >/dev/null
done
exit $fail
