#!/usr/bin/env bash
# Builds .pack/pack.txz from the current working tree: everything the device
# run (bench/offline/run.sh) needs on a machine with no Go toolchain, no
# redis-server and no network. Run from the repository root:
#
#   bash bench/offline/build-pack.sh
#
# Contents (pack/ inside the archive):
#   bin/dq                cmd/dq, static; bin/daemon, event, work -> dq
#                         (dq runs the application its argv[0] names)
#   bin/scale, compare    bench/cmd/scale, bench/cmd/compare (bench module)
#   bin/w.test            go test -c ./worker       (BenchmarkThroughput)
#   bin/integration.test  go test -c ./integration  (BenchmarkLag)
#   bin/go                a shim answering `go build -o DIR/ ./cmd/X...` (what
#                         testenv.GoBuild runs for bench/cmd/scale and the
#                         integration tests) by copying bin/dq to DIR/X
#   bin/redis-server, redis-cli   wrappers running redis/*.bin through the
#                         bundled loader and libraries (redis/lib)
#   BUILDINFO             commit, dirty files, go version, build flags
#
# Env: XZ_OPTS (default "-T1 --lzma2=preset=6,dict=256MiB": one window
# over all binaries, which share most of their code: ~29 MB instead of ~60
# MB with per-file compression); DQ_TAGS (default: dqslim if cmd/dq builds
# with it, else none); KEEP_STAGE=1 keeps the staging directory.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
[ -f go.mod ] && head -1 go.mod | grep -q '^module github.com/delayq/delayq$' || { echo "build-pack: $root is not the delayq checkout" >&2; exit 1; }
command -v go >/dev/null || { echo "build-pack: no go on PATH" >&2; exit 1; }
command -v redis-server >/dev/null && command -v redis-cli >/dev/null || { echo "build-pack: redis-server/redis-cli not on PATH" >&2; exit 1; }

stage=$(mktemp -d "${TMPDIR:-/tmp}/delayq-pack.XXXXXX")
[ "${KEEP_STAGE:-0}" = 1 ] || trap 'rm -rf "$stage"' EXIT
p=$stage/pack
mkdir -p "$p/bin" "$p/redis/lib"

export CGO_ENABLED=0
flags=(-trimpath -ldflags '-s -w')
t0=$SECONDS
say() { echo "build-pack: [$((SECONDS - t0))s] $*"; }

# cmd/dq, slim if it builds that way (the container image's build: the
# applications and the API client, without the embedded dev infrastructure)
tags=${DQ_TAGS-auto}
if [ "$tags" = auto ]; then
	say "go build -tags dqslim ./cmd/dq"
	if go build "${flags[@]}" -tags dqslim -o "$p/bin/dq" ./cmd/dq; then
		tags=dqslim
	else
		say "cmd/dq does not build with -tags dqslim; building it without"
		tags=
	fi
fi
if [ ! -x "$p/bin/dq" ]; then
	say "go build ${tags:+-tags $tags }./cmd/dq"
	go build "${flags[@]}" ${tags:+-tags "$tags"} -o "$p/bin/dq" ./cmd/dq
fi
for a in daemon event work; do ln -s dq "$p/bin/$a"; done

say "go test -c ./worker"
go test -c "${flags[@]}" -o "$p/bin/w.test" ./worker
say "go test -c ./integration"
go test -c "${flags[@]}" -o "$p/bin/integration.test" ./integration
say "go -C bench build ./cmd/scale ./cmd/compare"
go -C bench build "${flags[@]}" -o "$p/bin/" ./cmd/scale ./cmd/compare

# The go shim. testenv.GoBuild runs `go build -trimpath [-tags T] -o DIR/
# ./cmd/dq` (bench/cmd/scale) or `... ./cmd/daemon ./cmd/event ./cmd/work`
# (integration, then each alone if that fails), CGO_ENABLED=0, in the repo.
cat >"$p/bin/go" <<'EOF'
#!/bin/sh
# go shim of the delayq device pack: answers `go build ... -o OUT PKG...`
# for PKG in ./cmd/{dq,daemon,event,work} by copying the prebuilt dq (which
# runs the application its file name says). Anything else fails.
bin=$(dirname "$(readlink -f "$0")")
case "$1" in
version) echo "go version (delayq pack shim: prebuilt binaries, see $bin/../BUILDINFO)"; exit 0 ;;
build) shift ;;
*) echo "go shim: only 'go build -o OUT ./cmd/...' is available here (got: go $*)" >&2; exit 2 ;;
esac
out=""; pkgs=""
while [ $# -gt 0 ]; do
	case "$1" in
	-o) out=$2; shift 2 ;;
	-o=*) out=${1#-o=}; shift ;;
	-tags|-ldflags|-gcflags|-asmflags|-p|-mod|-C) shift 2 ;;
	-*) shift ;;
	*) pkgs="$pkgs $1"; shift ;;
	esac
done
[ -n "$pkgs" ] || { echo "go shim: no package" >&2; exit 2; }
n=0
for pkg in $pkgs; do n=$((n + 1)); done
for pkg in $pkgs; do
	name=$(basename "$pkg")
	case "$name" in
	dq|daemon|event|work) ;;
	*) echo "go shim: no prebuilt binary for $pkg" >&2; exit 1 ;;
	esac
	case "$out" in
	"") dest=./$name ;;
	*/) dest=$out$name ;;
	*) if [ -d "$out" ]; then dest=$out/$name; elif [ "$n" -eq 1 ]; then dest=$out; else echo "go shim: -o $out is not a directory" >&2; exit 1; fi ;;
	esac
	cp "$bin/dq" "$dest" && chmod 755 "$dest" || exit 1
	echo "go shim: $pkg -> $dest (prebuilt dq)" >&2
done
EOF
chmod 755 "$p/bin/go"

# redis-server and redis-cli with their libraries and loader. On Debian
# /usr/bin/redis-server links to redis-check-rdb, which picks its mode by
# argv[0]: hence --argv0.
for prog in redis-server redis-cli; do
	src=$(readlink -f "$(command -v $prog)")
	cp "$src" "$p/redis/$prog.bin"
	ldd "$src" | awk '/=> \//{print $3} /^[ \t]*\/.*ld-linux/{print $1}' | while read -r lib; do
		[ -e "$p/redis/lib/$(basename "$lib")" ] || cp -L "$lib" "$p/redis/lib/"
	done
	cat >"$p/bin/$prog" <<EOF
#!/bin/sh
d=\$(dirname "\$(readlink -f "\$0")")/../redis
exec "\$d/lib/ld-linux-x86-64.so.2" --library-path "\$d/lib" --argv0 $prog "\$d/$prog.bin" "\$@"
EOF
	chmod 755 "$p/bin/$prog"
done
[ -e "$p/redis/lib/ld-linux-x86-64.so.2" ] || { echo "build-pack: no ld-linux-x86-64.so.2 among redis-server's libraries" >&2; exit 1; }
"$p/bin/redis-server" --version
"$p/bin/redis-cli" --version

{
	echo "built:     $(date -u +%FT%TZ) on $(hostname)"
	echo "commit:    $(git rev-parse HEAD 2>/dev/null || echo unknown)"
	echo "go:        $(go version)"
	echo "flags:     CGO_ENABLED=0 -trimpath -ldflags '-s -w'; cmd/dq tags: ${tags:-none}"
	echo "redis:     $("$p/bin/redis-server" --version)"
	echo "working tree changes (git status --short):"
	git status --short --untracked-files=normal | sed 's/^/  /'
	echo "diff stat against HEAD:"
	git diff --stat HEAD | sed 's/^/  /'
} >"$p/BUILDINFO"

ls -la "$p/bin" "$p/redis" "$p/redis/lib"
say "compressing (xz ${XZ_OPTS:=-T1 --lzma2=preset=6,dict=256MiB})"
mkdir -p .pack
# the binaries next to each other, so that one xz window covers them all
tar cf - -C "$stage" pack | xz $XZ_OPTS >.pack/pack.txz.tmp
mv .pack/pack.txz.tmp .pack/pack.txz
size=$(stat -c %s .pack/pack.txz)
say "wrote .pack/pack.txz: $size bytes ($((size / 1048576)) MiB)"
if [ "$size" -gt $((55 * 1048576)) ]; then
	echo "build-pack: WARNING: the pack is over 55 MiB; carry allows 64 MiB in all" >&2
fi
