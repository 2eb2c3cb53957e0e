#!/usr/bin/env bash
# `make image`: build the repo's Dockerfile with podman, here, without a container registry.
#
#   1. Debian's podman, buildah, runc and debootstrap are installed when missing (apt-get).
#   2. The Dockerfile's digest-pinned base images are pulled; when that fails (no registry is
#      reachable from this kind of machine), tools/container/bases.sh builds local ones from Debian
#      (debootstrap) and they are passed as the PYTHON_IMAGE / MAVEN_IMAGE build arguments.
#   3. The machine's CA certificates (/etc/ssl/certs, KAPPA_BUILD_CA to change it) are mounted
#      read-only at /run/kappa-build-ca for the build's RUN steps only: HTTPS to PyPI and Maven
#      Central passes a TLS-intercepting proxy whose CA this machine trusts. Never copied into a layer.
#
# Env: KAPPA_IMAGE (the tag, default localhost/kappa/kappa:<chart appVersion>), KAPPA_BASES=local to
# skip the pull attempt. Prints the image, its id and size, and each step's time.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
podman=("$here/podman.sh")
app_version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$root/helm/kappa/Chart.yaml")
image=${KAPPA_IMAGE:-localhost/kappa/kappa:${app_version:-dev}}
ca=${KAPPA_BUILD_CA:-/etc/ssl/certs}
step() { local t0=$SECONDS; "$@"; echo "image: $1 ${2:-}: $((SECONDS - t0)) s" >&2; }

install_tools() {
  local missing=()
  for cmd in podman buildah runc debootstrap; do command -v "$cmd" >/dev/null || missing+=("$cmd"); done
  [[ ${#missing[@]} -eq 0 ]] && return
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    podman buildah runc debootstrap uidmap fuse-overlayfs slirp4netns containernetworking-plugins >/dev/null
}

# The pinned base images, or local stand-ins: prints --build-arg options.
bases() {
  local df="$root/Dockerfile" ref args=() ok=1
  if [[ ${KAPPA_BASES:-} != local ]]; then
    for arg in PYTHON_IMAGE MAVEN_IMAGE; do
      ref=$(sed -n "s/^ARG $arg=//p" "$df")
      timeout 120 "${podman[@]}" pull -q "docker.io/library/$ref" >/dev/null 2>&1 || { ok=0; break; }
    done
  else
    ok=0
  fi
  if [[ $ok -eq 0 ]]; then
    echo "image: the pinned base images cannot be pulled; building local ones from Debian (tools/container/bases.sh)" >&2
    "$here/bases.sh" >&2
    args=(--build-arg PYTHON_IMAGE=localhost/kappa-base/python:3.11 --build-arg MAVEN_IMAGE=localhost/kappa-base/maven:3-jdk17)
  fi
  printf '%s\n' "${args[@]}"
}

build() {
  local args=() mount=() out
  out=$(bases)
  [[ -z $out ]] || mapfile -t args <<<"$out"
  [[ -d $ca ]] && mount=(--volume "$ca:/run/kappa-build-ca:ro")
  "${podman[@]}" build --layers -t "$image" "${args[@]}" "${mount[@]}" -f "$root/Dockerfile" "$root"
}

step install_tools
step build
"${podman[@]}" image inspect "$image" --format 'image: {{index .RepoTags 0}} {{.Id}} {{.Size}} bytes'
