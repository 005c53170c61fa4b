#!/usr/bin/env bash
# Make the local base image pykraft-base:local from Debian packages, for machines with no registry.
#
#   DOCKER_HOST=unix://... scripts/docker-base-image.sh [IMAGE]     (IMAGE default pykraft-base:local)
#
# The Dockerfile's default base is python:3.11-slim; where no registry can be pulled from, build with
# `--build-arg BASE=pykraft-base:local` instead. This image is Debian bookworm (minbase) with
# python3 (3.11), python3-venv, python3-pip and ca-certificates, made by debootstrap from the
# machine's Debian mirror (about a minute), with the machine's CA bundle copied in so that pip
# trusts the same registry proxy the host does. Java is not included: the Dockerfile's spark stage
# installs it with apt.
#
# Cached: nothing is done when `docker image inspect IMAGE` succeeds. Needs root (debootstrap).
set -euo pipefail

IMAGE="${1:-pykraft-base:local}"
SUITE="${PYKRAFT_DEBIAN_SUITE:-bookworm}"
PACKAGES="python3,python3-venv,python3-pip,ca-certificates"

say() { echo "[docker-base-image] $*" >&2; }

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  say "$IMAGE exists (cached)"
  exit 0
fi
[[ "$(id -u)" == 0 ]] || { say "debootstrap needs root (uid $(id -u))"; exit 3; }
command -v debootstrap >/dev/null 2>&1 || { say "debootstrap is missing (scripts/docker-engine.sh installs it)"; exit 3; }

mirror="${PYKRAFT_DEBIAN_MIRROR:-}"
if [[ -z "$mirror" && -f /etc/apt/sources.list.d/debian.sources ]]; then
  mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)"
fi
mirror="${mirror:-http://deb.debian.org/debian}"

work="$(mktemp -d "${TMPDIR:-/tmp}/pykraft-rootfs.XXXXXX")"
trap 'rm -rf "$work"' EXIT
say "debootstrap $SUITE from $mirror (about a minute; log $work/debootstrap.log)"
if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$work/rootfs" "$mirror" \
    >"$work/debootstrap.log" 2>&1; then
  tail -n 20 "$work/debootstrap.log" >&2
  say "debootstrap failed"
  exit 1
fi
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
  cp /etc/ssl/certs/ca-certificates.crt "$work/rootfs/etc/ssl/certs/ca-certificates.crt"
fi
# Point apt inside the image at the same mirror (the Dockerfile's spark stage installs Java with it).
echo "deb $mirror $SUITE main" > "$work/rootfs/etc/apt/sources.list"
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
say "importing $IMAGE"
tar -C "$work/rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["python3"]' - "$IMAGE" >/dev/null
say "built $IMAGE"
