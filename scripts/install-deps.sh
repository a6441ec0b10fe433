#!/usr/bin/env bash
# Installs the real peers the tests run against, on Debian, when they are missing:
# memcached (differential peer), memccapable, nutcracker (twemproxy), pylibmc, nbdkit, fio,
# libnbd tools (nbdinfo, nbdcopy, nbdfuse: the fault tests' erroring flash file) and Python
# bindings, qemu-img, netcat; the tools that write the on-disk formats
# flashtier must refuse to format (e2fsprogs, xfsprogs, btrfs-progs, fdisk, cryptsetup,
# bcache-tools); promtool (package prometheus: checks both faces' /metrics);
# systemd-analyze, man and readelf (the .deb test); pymemcache + pytest from PyPI;
# matplotlib (the benchmarks' plots; scripts/bench/mysql.sh installs MariaDB and sysbench itself);
# cargo-fuzz and cargo-deb from crates.io.
set -euo pipefail
need_apt=()
for pair in memcached:memcached memccapable:libmemcached-tools nutcracker:nutcracker \
            nbdkit:nbdkit fio:fio nbdinfo:libnbd-bin nbdcopy:libnbd-bin nbdfuse:libnbd-bin \
            qemu-img:qemu-utils \
            qemu-io:qemu-utils nc:netcat-openbsd mkfs.ext4:e2fsprogs mkfs.xfs:xfsprogs \
            mkfs.btrfs:btrfs-progs sfdisk:fdisk cryptsetup:cryptsetup-bin \
            make-bcache:bcache-tools mkswap:util-linux promtool:prometheus \
            systemd-analyze:systemd man:man-db readelf:binutils dpkg-deb:dpkg; do
  bin=${pair%%:*}; pkg=${pair#*:}
  command -v "$bin" >/dev/null 2>&1 || need_apt+=("$pkg")
done
/usr/bin/python3 -c 'import nbd' 2>/dev/null || need_apt+=(python3-libnbd)
/usr/bin/python3 -c 'import pylibmc' 2>/dev/null || need_apt+=(python3-pylibmc)
if ((${#need_apt[@]})); then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_apt[@]}"
fi
python3 -c 'import pymemcache, pytest' 2>/dev/null || python3 -m pip install -q pymemcache pytest
# Benchmark plots (scripts/bench/*.sh write PNGs).
python3 -c 'import matplotlib' 2>/dev/null || python3 -m pip install -q matplotlib
command -v cargo-fuzz >/dev/null 2>&1 || cargo install -q cargo-fuzz --locked
command -v cargo-deb >/dev/null 2>&1 || cargo install -q cargo-deb --locked
