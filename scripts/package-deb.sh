#!/usr/bin/env bash
# `npm run package`: builds platform_<version>_amd64.deb with dpkg-deb (docs/debian-package.md).
# The package holds the built program and its production dependencies under /usr/lib/platform,
# /usr/bin/platform, the systemd units rendered for /usr/bin/platform, /etc/platform/platform.env as
# a conffile, and the maintainer scripts of deploy/debian/. It runs on Debian 13's own nodejs
# (20.19), which it depends on; nothing else is fetched at install time.
#
#   scripts/package-deb.sh [--out DIR] [--no-build] [--version VERSION]
#
# --out: where the .deb goes (default: the repository). --no-build: package dist/ as it is (the
# tests, which build first). --version: another version than package.json's, stamped into the
# packaged package.json too (`platform version` says it), to make a newer package for upgrades.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
out="$repo"
build=yes
version=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --no-build) build=no; shift ;;
    --version) version="$2"; shift 2 ;;
    *) echo "package-deb.sh: unknown argument $1 (--out DIR, --no-build, --version VERSION)" >&2; exit 2 ;;
  esac
done
version="${version:-$(node -p "require('$repo/package.json').version")}"
if ! [[ "$version" =~ ^[0-9][A-Za-z0-9.+~-]*$ ]]; then
  echo "package-deb.sh: --version must be a Debian version (digits first), got $version" >&2
  exit 2
fi
out="$(mkdir -p "$out" && cd "$out" && pwd)"

# npm and the staged program run without the caller's Node options (a test runner's loaders, say).
unset NODE_OPTIONS
# The package's Depends says nodejs (>= 20): the Node that installs and renders here must be one too.
if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
  echo "package-deb.sh: Node.js 20 or later builds the package (this is $(node --version))" >&2
  exit 1
fi
started=$SECONDS
cd "$repo"
# A fresh dist/src: tsc never removes the output of a source moved or deleted since, and the
# package takes all of dist/src.
if [ "$build" = yes ]; then rm -rf dist/src && npm run build; fi
if [ ! -f dist/src/cli.js ] || [ ! -f dist/src/web/index.html ]; then
  echo "package-deb.sh: dist/ is incomplete; run npm run build" >&2
  exit 1
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/platform-deb.XXXXXX")"
trap 'rm -rf "$work"' EXIT
root="$work/root"
lib="$root/usr/lib/platform"
doc="$root/usr/share/doc/platform"
mkdir -p "$lib" "$doc" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/platform" "$root/DEBIAN"

# The program: dist/src (not the tests, benchmarks or source maps) and package.json, which the
# program reads its version from.
mkdir -p "$lib/dist"
cp -r dist/src "$lib/dist/src"
find "$lib/dist" -name '*.map' -delete
cp package.json package-lock.json "$lib/"

# Its production dependencies, as the lock file pins them. No install scripts: the only
# ones build optional native speed-ups (ssh2's, and cpu-features', omitted) with fallbacks in
# JavaScript, so the package holds no compiled code besides Node itself.
(cd "$lib" && npm ci --omit=dev --omit=optional --ignore-scripts --no-audit --no-fund --prefer-offline --loglevel=warn)
rm -f "$lib/package-lock.json"
# What npm packages carry for their own development, never loaded at run time: dotfiles (lint and
# VCS settings, .bin links), tests, source maps, TypeScript sources and declarations, C headers,
# shell scripts. A third of node_modules; the integration test loads every module of the program
# from the package to show nothing needed went.
find "$lib/node_modules" -mindepth 1 -name '.*' -prune -exec rm -rf {} +
find "$lib/node_modules" -type d \( -name test -o -name tests -o -name __tests__ \) -prune -exec rm -rf {} +
find "$lib/node_modules" -type f \( -name '*.map' -o -name '*.ts' -o -name '*.mts' -o -name '*.cts' -o -name '*.h' -o -name '*.sh' \) -delete
if [ "$version" != "$(node -p "require('$repo/package.json').version")" ]; then
  node -e 'const f = process.argv[1], p = JSON.parse(require("fs").readFileSync(f, "utf8")); p.version = process.argv[2]; require("fs").writeFileSync(f, JSON.stringify(p, null, 2) + "\n");' "$lib/package.json" "$version"
fi

# The units and the environment file, rendered by the packaged program itself for /usr/bin/platform
# (which also proves the staged tree runs).
node "$lib/dist/src/cli.js" systemd render --out "$work/units" --bin /usr/bin/platform >/dev/null
install -m 644 "$work"/units/*.service "$root/lib/systemd/system/"
install -m 600 "$work/units/platform.env" "$root/etc/platform/platform.env"
units="$(cd "$root/lib/systemd/system" && ls -- *.service | tr '\n' ' ' | sed 's/ $//')"

install -m 755 deploy/debian/platform "$root/usr/bin/platform"
install -m 644 deploy/debian/copyright "$doc/copyright"
mkdir -p "$root/usr/share/man/man1"
gzip -9n <deploy/debian/platform.1 >"$root/usr/share/man/man1/platform.1.gz"
install -D -m 644 deploy/debian/lintian-overrides "$root/usr/share/lintian/overrides/platform"
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
changed="$(date -R -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")"
printf 'platform (%s) unstable; urgency=medium\n\n  * platform %s, built from commit %s by npm run package.\n\n -- %s  %s\n' \
  "$version" "$version" "$commit" "$(sed -n 's/^Maintainer: //p' deploy/debian/control)" "$changed" | gzip -9n >"$doc/changelog.gz"

# Files read-only for all, directories searchable; executable only the command (npm packages'
# scripts are loaded by node, never executed).
find "$root" -type d -exec chmod 755 {} +
find "$lib" -type f -exec chmod 644 {} +

install -m 755 deploy/debian/postinst "$root/DEBIAN/postinst"
for script in prerm postrm; do
  sed "s/@UNITS@/$units/" "deploy/debian/$script" >"$root/DEBIAN/$script"
  chmod 755 "$root/DEBIAN/$script"
done
install -m 644 deploy/debian/conffiles "$root/DEBIAN/conffiles"
installed_size="$(du -sk --exclude=DEBIAN "$root" | cut -f1)"
sed -e "s/@VERSION@/$version/" -e "s/@INSTALLED_SIZE@/$installed_size/" deploy/debian/control >"$root/DEBIAN/control"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 644 "$root/DEBIAN/md5sums"

deb="$out/platform_${version}_amd64.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "built $deb: $(du -h "$deb" | cut -f1), installed $((installed_size / 1024)) MB, in $((SECONDS - started)) s"
