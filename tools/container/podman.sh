#!/usr/bin/env bash
# podman with this folder's settings (containers.conf: why each one). Every podman call of
# `make image`, `make test-cluster` and tests/cluster goes through here.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export CONTAINERS_CONF="$here/containers.conf"
exec podman "$@"
