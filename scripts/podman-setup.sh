#!/usr/bin/env bash
# Makes Podman serve the Docker Engine API on unix:///tmp/podman.sock with a local image
# localhost/busybox:test, for the container target's tests (the services scripts/services.sh
# starts). Idempotent: installs podman only when missing, writes the engine
# config only when it differs, imports the image only when missing, starts the API service
# only when the socket does not answer. No image is pulled from a registry.
#
# Environment: PODMAN_SOCK (default /tmp/podman.sock). Exits non-zero when any step fails.
set -euo pipefail

SOCK="${PODMAN_SOCK:-/tmp/podman.sock}"
IMAGE="localhost/busybox:test"

log() { echo "podman-setup: $*" >&2; }

if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1 \
  || ! [ -x /bin/busybox ]; then
  log "installing podman, runc and busybox-static"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq podman runc busybox-static >/dev/null
fi

conf="/etc/containers/containers.conf"
want='[containers]
default_ulimits = []

[engine]
runtime = "runc"'
if [ "$(cat "$conf" 2>/dev/null || true)" != "$want" ]; then
  log "writing $conf"
  mkdir -p /etc/containers
  printf '%s\n' "$want" >"$conf"
fi

if ! podman image exists "$IMAGE"; then
  log "importing $IMAGE from busybox-static"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/rootfs/bin" "$work/rootfs/tmp" "$work/rootfs/etc"
  cp /bin/busybox "$work/rootfs/bin/busybox"
  for applet in $("$work/rootfs/bin/busybox" --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$work/rootfs/bin/$applet"
  done
  tar -C "$work/rootfs" -cf "$work/rootfs.tar" .
  podman import --change 'CMD ["/bin/sh"]' "$work/rootfs.tar" "$IMAGE" >/dev/null
fi

answering() {
  curl -sf --max-time 2 --unix-socket "$SOCK" http://d/_ping >/dev/null 2>&1
}

if ! answering; then
  log "starting podman system service on unix://$SOCK"
  rm -f "$SOCK"
  # Started from / so that its working directory outlives the checkout that started it:
  # conmon, which the service runs for each container, fails with "Failed to get working
  # directory" once that directory is gone (a CI clone removed after its run).
  (cd / && nohup podman system service --time=0 "unix://$SOCK" >/tmp/podman-service.log 2>&1 &)
  for _ in $(seq 1 100); do
    answering && break
    sleep 0.1
  done
  if ! answering; then
    log "the API on $SOCK does not answer; see /tmp/podman-service.log"
    tail -n 20 /tmp/podman-service.log >&2 || true
    exit 1
  fi
fi
log "ready: unix://$SOCK, image $IMAGE"
