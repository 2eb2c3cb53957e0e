#!/usr/bin/env bash
# Local base images for the Dockerfile, from Debian's own repository, for a machine that cannot pull
# the digest-pinned python/maven images (no container registry is reachable): the Dockerfile's
# PYTHON_IMAGE and MAVEN_IMAGE build arguments name them instead.
#
#   kappa-base/debian:bookworm   debootstrap --variant=minbase bookworm, imported (podman import)
#   kappa-base/python:3.11       + Debian's python3 (3.11), venv, ca-certificates (Debian's bundle)
#   kappa-base/maven:3-jdk17     + Debian's openjdk-17-jdk-headless and maven
#
# Each is skipped when the image is already there (`make image-bases-clean` removes them). Packages
# come over http from deb.debian.org (apt checks them against Debian's signed Release files).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
podman=("$here/podman.sh")
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
have() { "${podman[@]}" image exists "$1"; }

if ! have kappa-base/debian:bookworm; then
  root=$(mktemp -d /var/tmp/kappa-debootstrap.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
  # the same sources as the official debian image (security updates included), no apt caches
  printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb http://deb.debian.org/debian-security bookworm-security main\n' \
    "$mirror" "$mirror" > "$root/etc/apt/sources.list"
  rm -rf "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* "$root"/var/log/*.log
  tar -C "$root" -c . | "${podman[@]}" import --change 'CMD ["/bin/bash"]' - kappa-base/debian:bookworm >/dev/null
  rm -rf "$root"; trap - EXIT
fi
have kappa-base/python:3.11 || "${podman[@]}" build -q -t kappa-base/python:3.11 -f "$here/python.Containerfile" "$here" >/dev/null
have kappa-base/maven:3-jdk17 || "${podman[@]}" build -q -t kappa-base/maven:3-jdk17 -f "$here/maven.Containerfile" "$here" >/dev/null
"${podman[@]}" images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep '^localhost/kappa-base/' || true
