#!/usr/bin/env bash
# What a user of nbdfuse sees when flashtier block restarts: ext4 on `losetup --direct-io=on`
# over nbdfuse over flashtier (over an nbdkit file backing). A writer appends 4 KiB O_DIRECT
# + O_SYNC blocks every 0.1 s and logs each outcome; flashtier is stopped (SIGTERM, then in a
# second round SIGKILL) and started again on the same socket; then the stack is checked
# (reads through nbdfuse, ext4 state), re-attached (nbdfuse + loop + fsck + mount) and every
# acknowledged block is verified. Prints a timeline; exits non-zero only if the script breaks
# or an acknowledged block is lost.
#
# Usage: scripts/block-restart-nbdfuse.sh [OUTFILE]   Env: FLASHTIER, DOWN (s down, 3).
set -euo pipefail
FT=$(realpath "${FLASHTIER:-target/release/flashtier}")
DOWN=${DOWN:-3}
LOG=${1:-/dev/stdout}
W=$(mktemp -d /var/tmp/ftrestart.XXXXXX)
PIDS=(); FTPID=""; LOOP=""; WRITER=""
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
say() { printf '%7s %s\n' "$(since "$T0")" "$*" | tee -a "$W/timeline"; }
cleanup() {
    local -; set +e
    [ -n "$WRITER" ] && kill "$WRITER" 2>/dev/null
    mountpoint -q "$W/mnt" && umount -l "$W/mnt"
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    mountpoint -q "$W/fuse" && umount "$W/fuse"
    [ -n "$FTPID" ] && kill "$FTPID" 2>/dev/null
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
}
trap 'cleanup; [ "$LOG" = /dev/stdout ] || cp "$W/timeline" "$LOG"; rm -rf "$W"' EXIT
mkdir -p "$W/fuse" "$W/mnt" "$W/run"
T0=$(date +%s.%N)

truncate -s 1G "$W/backing.img"
nbdkit -f -U "$W/back.sock" file "$W/backing.img" & PIDS+=($!)
for _ in $(seq 100); do nbdinfo --size "nbd+unix:///?socket=$W/back.sock" >/dev/null 2>&1 && break; sleep 0.1; done
URI="nbd+unix:///block?socket=$W/ft.sock"
start_ft() {
    local t=$(date +%s.%N)
    "$FT" block --backing "nbd+unix:///?socket=$W/back.sock" --cache "$W/cache.img:256M" \
        --listen "unix:$W/ft.sock" --admin none --run-dir "$W/run" 2>>"$W/flashtier.log" &
    FTPID=$!
    for _ in $(seq 300); do nbdinfo --size "$URI" >/dev/null 2>&1 && break; sleep 0.05; done
    say "flashtier pid $FTPID serving after $(since "$t") s"
}
attach() {
    nbdfuse "$W/fuse/disk" "$URI" 2>>"$W/nbdfuse.err" &
    for _ in $(seq 100); do [ -e "$W/fuse/disk" ] && break; sleep 0.1; done
    LOOP=$(losetup -f --show --direct-io=on "$W/fuse/disk")
}
start_ft
attach
mkfs.ext4 -q "$LOOP"
mount "$LOOP" "$W/mnt"
say "ext4 on $LOOP (direct-io) over nbdfuse over flashtier mounted"
head -c 32M /dev/urandom >"$W/mnt/a.bin"; sync
SUM_A=$(md5sum <"$W/mnt/a.bin" | cut -d' ' -f1)

# Writer: block i holds the 4 KiB pattern for i; a line per attempt, "ok i" only once the
# write with O_DIRECT|O_SYNC returned success.
( i=0; while :; do
    if python3 -c '
import os, sys
i = int(sys.argv[2]); buf = (b"%08d" % i) * 512
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_DIRECT | os.O_SYNC, 0o644)
import mmap; m = mmap.mmap(-1, 4096); m.write(buf)
os.pwrite(fd, m, i * 4096); os.close(fd)' "$W/mnt/b.bin" "$i" 2>>"$W/writer.err"; then
        echo "$(date +%s.%N) ok $i"; i=$((i + 1))
    else
        echo "$(date +%s.%N) fail $i"
    fi
    sleep 0.1
  done ) >"$W/writer.log" &
WRITER=$!

round() { # signal
    sleep 2
    say "--- round $1: $(grep -c ' ok ' "$W/writer.log") writes acknowledged so far; kill -$1 flashtier"
    kill "-$1" "$FTPID"; wait "$FTPID" 2>/dev/null || true
    say "flashtier gone (exit); nbdfuse alive: $(pgrep -f "nbdfuse $W/fuse" >/dev/null && echo yes || echo no)"
    sleep "$DOWN"
    local last; last=$(tail -1 "$W/writer.log")
    say "while down: writer's last line: ${last#* }; failures so far $(grep -c ' fail ' "$W/writer.log")"
    start_ft
    sleep 2
    say "after restart: writer's last line: $(tail -1 "$W/writer.log" | cut -d' ' -f2-); failures $(grep -c ' fail ' "$W/writer.log")"
    if timeout 20 dd if="$W/fuse/disk" of=/dev/null bs=4k count=1 iflag=direct 2>"$W/dd.err"; then
        say "read through nbdfuse after restart: ok"
    else
        say "read through nbdfuse after restart: $(tail -1 "$W/dd.err")"
    fi
    say "ext4 mount options now: $(findmnt -no OPTIONS "$W/mnt" | cut -d, -f1)"
    say "nbdfuse stderr: $(tail -2 "$W/nbdfuse.err" | tr '\n' ' ')"
}
round TERM
# Re-attach: the only way back for nbdfuse (it does not reconnect).
recover() {
    kill "$WRITER" 2>/dev/null; wait "$WRITER" 2>/dev/null || true; WRITER=""
    timeout 30 umount "$W/mnt" 2>/dev/null || { say "umount ext4 failed; lazy"; umount -l "$W/mnt"; }
    timeout 30 losetup -d "$LOOP" || say "losetup -d failed"; LOOP=""
    timeout 30 umount "$W/fuse" || say "umount nbdfuse failed"
    sleep 0.5
    say "nbdfuse after umount alive: $(pgrep -f "nbdfuse $W/fuse" >/dev/null && echo yes || echo no)"
    attach
    if fsck.ext4 -fn "$LOOP" >"$W/fsck.out" 2>&1; then say "fsck -fn: clean"; else say "fsck -fn: rc $? $(tail -3 "$W/fsck.out" | tr '\n' ' ')"; fi
    mount "$LOOP" "$W/mnt"
    [ "$(md5sum <"$W/mnt/a.bin" | cut -d' ' -f1)" = "$SUM_A" ] && say "a.bin intact" || { say "a.bin CHANGED"; LOST=1; }
    local n bad=0 i
    n=$(grep ' ok ' "$W/writer.log" | tail -1 | awk '{print $3}')
    for i in $(seq 0 "${n:--1}"); do
        [ "$(dd if="$W/mnt/b.bin" bs=8 count=1 skip=$((i * 512)) 2>/dev/null)" = "$(printf '%08d' "$i")" ] || bad=$((bad + 1))
    done
    say "acknowledged blocks 0..${n:-none}: $bad lost"
    [ "$bad" = 0 ] || LOST=1
}
LOST=0
recover
# Round 2: SIGKILL with the writer restarted on the re-attached stack.
( i=$(($(grep ' ok ' "$W/writer.log" | tail -1 | awk '{print $3}') + 1)); while :; do
    if python3 -c '
import os, sys, mmap
i = int(sys.argv[2]); m = mmap.mmap(-1, 4096); m.write((b"%08d" % i) * 512)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_DIRECT | os.O_SYNC)
os.pwrite(fd, m, i * 4096); os.close(fd)' "$W/mnt/b.bin" "$i" 2>>"$W/writer.err"; then
        echo "$(date +%s.%N) ok $i"; i=$((i + 1))
    else
        echo "$(date +%s.%N) fail $i"
    fi
    sleep 0.1
  done ) >>"$W/writer.log" &
WRITER=$!
round KILL
recover
say "flashtier log (restarts): $(grep -ci 'recover\|listening\|serving' "$W/flashtier.log") lines about recovery/listening"
grep -i 'recover\|warm\|snapshot' "$W/flashtier.log" | tail -4 | sed 's/^/    /' | tee -a "$W/timeline"
exit "$LOST"
