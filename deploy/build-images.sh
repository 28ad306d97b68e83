#!/usr/bin/env bash
# Builds delayq's container images without any registry:
#
#   delayq:dev        deploy/Dockerfile: FROM scratch + the static, multi-call
#                     dq binary built with -tags dqslim (/daemon, /event,
#                     /work are symlinks to /dq): the production image
#   delayq-dev:dev    the same Dockerfile with a full dq, which adds the
#                     development stand-ins dq dev etcd (embedded etcd) and
#                     dq dev kafka (kfake) that replace the etcd and Kafka
#                     images where no registry is reachable
#   delayq-redis:dev  deploy/redis/Dockerfile: FROM scratch + this machine's
#                     redis-server and redis-cli with the shared libraries
#                     ldd lists (only when redis-server is installed, or
#                     with --redis)
#
# Usage: deploy/build-images.sh [--tag TAG] [--no-redis] [--redis] [--no-dev]
# Prints the size of each image (docker image inspect).
set -euo pipefail

tag=dev
redis=auto
dev=yes
while (($#)); do
  case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --no-redis) redis=no; shift ;;
    --redis) redis=yes; shift ;;
    --no-dev) dev=no; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "build-images.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
go="${GO:-go}"
# Build contexts live in a cache directory: go build skips the link when
# the binary there is up to date, and an image whose context did not change
# is not rebuilt (its label dev.delayq.context holds the context's hash).
work="${DQ_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/delayq/images}"
mkdir -p "$work"

# Files every image needs: a non-root user and CA certificates.
base_rootfs() {
  local dir="$1"
  mkdir -p "$dir/etc/ssl/certs" "$dir/tmp"
  chmod 1777 "$dir/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$dir/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$dir/etc/group"
  if [ -r /etc/ssl/certs/ca-certificates.crt ]; then
    cp /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/"
  else
    echo "build-images.sh: warning: /etc/ssl/certs/ca-certificates.crt missing (apt-get install ca-certificates); the image has no CA certificates" >&2
  fi
}

# context_hash DIR DOCKERFILE: a hash of every file's path, mode and content.
context_hash() {
  (cd "$1" && find . \( -type f -o -type l \) -printf '%p %m %l\n' | LC_ALL=C sort && \
    find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum && sha256sum <"$2") | sha256sum | cut -c1-32
}

# docker_build IMAGE DOCKERFILE DIR: builds unless the image is up to date.
docker_build() {
  local image="$1" dockerfile="$2" dir="$3" sum have
  sum="$(context_hash "$dir" "$dockerfile")"
  have="$(docker image inspect --format '{{index .Config.Labels "dev.delayq.context"}}' "$image" 2>/dev/null || true)"
  if [ "$have" = "$sum" ]; then
    echo "$image: up to date"
    return
  fi
  docker build -q --label "dev.delayq.context=$sum" -f "$dockerfile" -t "$image" "$dir" >/dev/null
}

size() {
  docker image inspect --format '{{.Size}}' "$1" | awk -v img="$1" '{printf "%s: %.1f MB (%d bytes)\n", img, $1/1e6, $1}'
}

# --- delayq and delayq-dev ------------------------------------------------
# build_app IMAGE [go build flags...]
build_app() {
  local image="$1"; shift
  local ctx="$work/$image"
  base_rootfs "$ctx/rootfs"
  mkdir -p "$ctx/data/journal" "$ctx/data/etcd" "$ctx/data/kafka"
  chmod 700 "$ctx/data/journal" "$ctx/data/etcd" "$ctx/data/kafka"
  (cd "$root" && CGO_ENABLED=0 GOOS=linux "$go" build "$@" -trimpath -ldflags '-s -w' -o "$ctx/rootfs/dq" ./cmd/dq)
  for app in daemon event work; do ln -sfn dq "$ctx/rootfs/$app"; done
  docker_build "$image:$tag" "$root/deploy/Dockerfile" "$ctx"
  size "$image:$tag"
}
build_app delayq -tags dqslim
if [ "$dev" = yes ]; then build_app delayq-dev; fi

# --- delayq-redis ---------------------------------------------------------
if [ "$redis" = auto ]; then
  if command -v redis-server >/dev/null 2>&1; then redis=yes; else redis=no; fi
fi
if [ "$redis" = yes ]; then
  server="$(command -v redis-server || true)"
  cli="$(command -v redis-cli || true)"
  if [ -z "$server" ] || [ -z "$cli" ]; then
    echo "build-images.sh: redis-server and redis-cli are needed for delayq-redis (apt-get install redis-server)" >&2
    exit 1
  fi
  ctx="$work/redis"
  rm -rf "$ctx"
  base_rootfs "$ctx/rootfs"
  mkdir -p "$ctx/rootfs/usr/bin" "$ctx/data"
  # redis-server is often a symlink to redis-check-rdb (one multi-call
  # binary); copied under its own name it runs as the server.
  cp -L "$server" "$ctx/rootfs/usr/bin/redis-server"
  cp -L "$cli" "$ctx/rootfs/usr/bin/redis-cli"
  # Every shared library either binary needs, at the path ldd resolved,
  # plus the dynamic loader.
  for lib in $( (ldd "$server"; ldd "$cli") | awk '/=> \//{print $3} /^\t\//{print $1}' | sort -u); do
    mkdir -p "$ctx/rootfs$(dirname "$lib")"
    cp -L "$lib" "$ctx/rootfs$lib"
  done
  docker_build "delayq-redis:$tag" "$root/deploy/redis/Dockerfile" "$ctx"
  size "delayq-redis:$tag"
fi
