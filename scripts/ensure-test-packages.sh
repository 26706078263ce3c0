#!/usr/bin/env bash
# Installs the real components the test suite runs (etcd, Docker Engine, the Distribution registry,
# a static busybox for test images, Chromium for browser tests, openssl for etcd's test certificates,
# Prometheus' promtool to check every role's /metrics, systemd-analyze to verify the unit files,
# docker-compose to check compose.yaml, ip and nsenter for the test hosts, pebble and pebble-challtestsrv as the ACME server of the HTTPS tests, HAProxy for the gateway's HAProxy data plane, systemd-nspawn and debootstrap for the test machines booted with systemd) when they are missing.
set -euo pipefail
declare -A packages=(
  [etcd]=etcd-server
  [dockerd]=docker.io
  [docker-registry]=docker-registry
  [chromium]=chromium
  [openssl]=openssl
  # To build the Debian package and check it (test/integration/debian-package.test.ts).
  [dpkg-deb]=dpkg
  [lintian]=lintian
  [strip]=binutils
  [promtool]=prometheus
  [systemd-analyze]=systemd
  [docker-compose]=docker-compose
  [ip]=iproute2
  [nsenter]=util-linux
  [pebble]=pebble
  [pebble-challtestsrv]=pebble
  [haproxy]=haproxy
  [systemd-nspawn]=systemd-container
  [debootstrap]=debootstrap
)
missing=()
for command in "${!packages[@]}"; do
  command -v "$command" >/dev/null 2>&1 || missing+=("${packages[$command]}")
done
dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "The test suite needs these Debian packages: ${missing[*]}" >&2
  echo "Install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
  apt-get update >/dev/null
  apt-get install -y --no-install-recommends "${missing[@]}"
}
