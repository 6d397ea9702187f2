#!/usr/bin/env bash
# test_fresh.sh - the README's commands on a fresh minimal Debian 12, as a new
# user would run them (issue 30). Needs root (debootstrap, chroot, mounts).
#
#   test_fresh.sh          `make test` in the fresh root (make test-fresh)
#   test_fresh.sh --run    `make run` in the fresh root, in the background; from
#                          the host, GET /healthz and / on the URL its "serving
#                          on" line names, then SIGTERM to moshid, which must
#                          exit 0 (make run-fresh)
#
# The root: debootstrap --variant=minbase --include=git,make,ca-certificates
# bookworm, from the Debian mirror this machine's apt sources name (the entry
# for suite bookworm in /etc/apt/sources.list{,.d/*.list,.d/*.sources}; the
# root's sources.list gets this machine's bookworm, bookworm-updates and
# bookworm-security entries). Built once and cached in $FRESH_CACHE (default
# /var/cache/moshid-fresh, outside the clone: `make clean` keeps it; remove
# the directory to rebuild). The cached root is never used itself: each run
# copies it (cp -a) to a work directory under $FRESH_TMP (default /var/tmp)
# and removes the copy afterwards (FRESH_KEEP=1 keeps it). Downloaded .deb
# files are kept in $FRESH_CACHE/apt-archives, bind-mounted as the root's
# /var/cache/apt/archives (apt verifies them; only the downloads are saved).
#
# Into the copy: a git clone of this clone's HEAD (committed work only: a
# warning names uncommitted changes) as /src/moshid, and ../shared beside it
# as /src/shared (as CI has it). Mounted for the run, in the copy: /proc,
# /sys, /dev, /dev/pts, a tmpfs on /dev/shm, the apt archive. Copied from
# this machine: /etc/resolv.conf, and its network trust where it has one (the
# CA certificates added in /usr/local/share/ca-certificates, e.g. an HTTPS
# proxy's, and /etc/pip.conf; a line names what was copied). Whatever happens
# (failure, Ctrl-C, SIGTERM), the exit trap ends the processes still running
# in the root, unmounts everything under the work directory and checks with
# findmnt that nothing is left mounted; the work directory is only removed
# when nothing is.
#
# The command runs as root in the chroot with a bare environment (HOME, PATH,
# TERM; http_proxy, https_proxy, no_proxy when set). Output is shown and kept
# in $FRESH_CACHE/logs/. The closing lines say the Debian version, the number
# of packages in the fresh root and after the run, the command's exit status
# and the time taken; the script exits with the command's status.
#
#   FRESH_CACHE        cache directory (default /var/cache/moshid-fresh)
#   FRESH_TMP          where the per-run copy goes (default /var/tmp)
#   FRESH_KEEP=1       keep the per-run copy (its path is printed)
#   FRESH_RUN_WAIT_S   --run: deadline for the "serving on" line, seconds
#                      (default 3600: it installs the packages and builds first)
set -euo pipefail

mode="test"
case "${1:-}" in
"") ;;
--run) mode=run ;;
-h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
*) echo "usage: $0 [--run]" >&2; exit 2 ;;
esac

me="test-fresh"; [ "$mode" = run ] && me="run-fresh"
say() { echo "$me: $*"; }
die() { echo "$me: $*" >&2; exit 1; }

repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${FRESH_CACHE:-/var/cache/moshid-fresh}
tmpbase=${FRESH_TMP:-/var/tmp}
suite=bookworm
base=$cache/$suite-minbase

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot and mounts); run it as root, e.g. sudo make $me"
for c in chroot mount umount findmnt flock git cp; do
    command -v "$c" >/dev/null || die "$c not found on this machine"
done
[ "$mode" = run ] && { command -v python3 >/dev/null || die "python3 not found on this machine (it fetches the pages)"; }

# ---- the mirror: what this machine's apt sources use ----------------------
# Prints "URI SUITE" for every deb entry (one-line .list and deb822 .sources).
apt_entries() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        sed -E 's/#.*//; s/\[[^]]*\]//' "$f" | awk '$1 == "deb" && NF >= 3 { print $2, $3 }'
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk 'BEGIN { RS = ""; FS = "\n" }
        {
            types = ""; uris = ""; suites = ""; enabled = "yes"
            for (i = 1; i <= NF; i++) {
                line = $i; sub(/#.*/, "", line)
                if (line !~ /:/) continue
                key = tolower(substr(line, 1, index(line, ":") - 1)); val = substr(line, index(line, ":") + 1)
                if (key == "types") types = val; else if (key == "uris") uris = val
                else if (key == "suites") suites = val; else if (key == "enabled") enabled = tolower(val)
            }
            gsub(/^[ \t]+|[ \t]+$/, "", enabled)
            if (enabled == "no" || (" " types " ") !~ /[ \t]deb[ \t]/) next
            nu = split(uris, u, /[ \t]+/); ns = split(suites, s, /[ \t]+/)
            for (a = 1; a <= nu; a++) for (b = 1; b <= ns; b++) if (u[a] != "" && s[b] != "") print u[a], s[b]
        }' "$f"
    done
}
entries=$(apt_entries | awk -v s="$suite" '$2 == s || $2 == s "-updates" || $2 == s "-security"' | awk '!seen[$0]++')
mirror=$(awk -v s="$suite" '$2 == s { print $1; exit }' <<<"$entries")

# ---- cleanup: processes in the root, mounts, the work directory -----------
work=""; building=""
procs_in() { # DIR -> pids of processes whose root is DIR or below
    local p r
    for p in /proc/[0-9]*; do
        r=$(readlink "$p/root" 2>/dev/null) || continue
        case "$r" in "$1" | "$1"/*) echo "${p#/proc/}" ;; esac
    done
}
mounts_under() { findmnt -rn -o TARGET | awk -v p="$1/" 'index($0 "/", p) == 1' | sort -r; }
release() { # DIR: end its processes, unmount everything under it; 0 when nothing is left mounted
    local dir=$1 pids p m left
    pids=$(procs_in "$dir")
    if [ -n "$pids" ]; then
        say "ending processes still running in $dir: $(tr '\n' ' ' <<<"$pids")"
        # shellcheck disable=SC2086
        kill -TERM $pids 2>/dev/null || true
        for p in $pids; do timeout 20 tail --pid="$p" -f /dev/null 2>/dev/null || kill -KILL "$p" 2>/dev/null || true; done
    fi
    for m in $(mounts_under "$dir"); do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || say "cannot unmount $m"
    done
    left=$(mounts_under "$dir")
    if [ -n "$left" ]; then
        echo "$me: still mounted under $dir:" >&2; echo "$left" >&2
        return 1
    fi
    return 0
}
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    local rc=$? ok=1
    trap - EXIT
    trap '' INT TERM HUP # a second Ctrl-C must not cut the unmounting short
    set +e
    if [ -n "$building" ] && [ -d "$building" ]; then
        release "$building" || ok=0
        [ "$ok" = 1 ] && rm -rf --one-file-system "$building"
    fi
    if [ -n "$work" ] && [ -d "$work" ]; then
        release "$work" || ok=0
        if [ "$ok" = 1 ]; then
            say "nothing left mounted under $work (findmnt)"
            if [ "${FRESH_KEEP:-0}" = 1 ]; then say "kept the root: $work/root"
            else rm -rf --one-file-system "$work"; fi
        fi
    fi
    if [ "$ok" != 1 ]; then
        echo "$me: FAILED to unmount everything; nothing was removed (see the list above)" >&2
        [ "$rc" -eq 0 ] && rc=1
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'echo; say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM
trap 'exit 129' HUP

# ---- the cached minimal root ----------------------------------------------
mkdir -p "$cache" "$cache/apt-archives/partial" "$cache/logs"
exec 9>"$cache/lock"
flock -n 9 || { say "waiting for another test-fresh/run-fresh to finish with $cache"; flock 9; }
if [ ! -f "$base.ok" ]; then
    [ -n "$mirror" ] || die "no 'deb URI $suite' entry in /etc/apt/sources.list or /etc/apt/sources.list.d/; cannot pick a mirror"
    if ! command -v debootstrap >/dev/null; then
        say "installing debootstrap (apt-get)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null ||
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; } ||
            die "cannot install debootstrap"
    fi
    rm -rf --one-file-system "$base.new"
    building=$base.new
    say "building the minimal Debian root (debootstrap --variant=minbase $suite, mirror $mirror) in $base; once, cached"
    t0=$SECONDS
    debootstrap --variant=minbase --include=git,make,ca-certificates "$suite" "$building" "$mirror" \
        > "$cache/logs/debootstrap.log" 2>&1 || { tail -n 30 "$cache/logs/debootstrap.log" >&2; die "debootstrap failed (log: $cache/logs/debootstrap.log)"; }
    release "$building" || die "debootstrap left mounts in $building"
    awk '{ print "deb", $1, $2, "main" }' <<<"$entries" > "$building/etc/apt/sources.list"
    rm -f "$building"/var/cache/apt/archives/*.deb
    rm -rf "$base"
    mv "$building" "$base"; building=""
    { echo "suite=$suite"; echo "mirror=$mirror"; echo "built=$(date -u +%FT%TZ)"; } > "$base.ok"
    say "root built in $((SECONDS - t0)) s"
fi

# ---- a fresh copy with the clone ------------------------------------------
head=$(git -C "$repo" rev-parse HEAD)
branch=$(git -C "$repo" symbolic-ref -q --short HEAD || echo fresh)
dirty=$(git -C "$repo" status --porcelain --untracked-files=no)
[ -z "$dirty" ] || say "WARNING: uncommitted changes in $repo are not part of the run (it tests commit ${head:0:12})"
mkdir -p "$tmpbase"
work=$(mktemp -d "$tmpbase/moshid-fresh.XXXXXX")
root=$work/root
say "copying the cached root to $root"
cp -a "$base" "$root"
mkdir -p "$root/src"
git init -q "$root/src/moshid"
git -C "$root/src/moshid" fetch -q "$repo" HEAD
git -C "$root/src/moshid" checkout -q -b "$branch" FETCH_HEAD
if [ -d "$repo/../shared" ]; then cp -a "$repo/../shared" "$root/src/shared"
else say "no $repo/../shared: the root gets no /src/shared"; fi
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
# An installed Debian has /etc/hosts (the installer writes it, as container
# runtimes do); a debootstrap root has none, and without it "localhost" does
# not resolve. The installer's lines:
if [ ! -e "$root/etc/hosts" ]; then
    printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\nff02::1\t\tip6-allnodes\nff02::2\t\tip6-allrouters\n' \
        > "$root/etc/hosts"
    say "wrote /etc/hosts as the Debian installer does (localhost, ip6-localhost)"
fi
# This machine's network trust, as its administrator set it up (an HTTPS
# proxy's CA, pip told to use the system's CA bundle): without it a root on
# such a network cannot reach PyPI. Only what is there is copied, and said.
carried=""
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp -L /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null 2>&1 || die "update-ca-certificates failed in the root"
    carried="$carried $(cd /usr/local/share/ca-certificates && echo ./*.crt | sed 's#\./#/usr/local/share/ca-certificates/#g')"
fi
if [ -f /etc/pip.conf ]; then cp -L /etc/pip.conf "$root/etc/pip.conf"; carried="$carried /etc/pip.conf"; fi
[ -z "$carried" ] || say "carried this machine's network trust into the root:$carried"

mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys" 2>/dev/null || { mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys"; }
mount --bind /dev "$root/dev" && mount --make-private "$root/dev"
mount --bind /dev/pts "$root/dev/pts" && mount --make-private "$root/dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm"
mount --bind "$cache/apt-archives" "$root/var/cache/apt/archives"

version=$(cat "$root/etc/debian_version")
npkg0=$(chroot "$root" dpkg-query -W -f '.\n' | wc -l)
say "Debian $version (minbase + git, make, ca-certificates; $npkg0 packages), mirror $(sed -n 's/^mirror=//p' "$base.ok"), commit ${head:0:12}"
# Run in the background (so that the traps run at once on SIGTERM, not after
# it), with SIGINT and SIGQUIT back to their defaults: a background command
# of a script starts with them ignored, which the tests' processes inherit.
proxy_env=()
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do [ -z "${!v:-}" ] || proxy_env+=("$v=${!v}"); done
in_root() { chroot "$root" /usr/bin/env -i --default-signal=INT,QUIT HOME=/root TERM="${TERM:-dumb}" "${proxy_env[@]}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c "cd /src/moshid && $1"; }
log=$cache/logs/$me-$(date +%Y%m%d-%H%M%S).log
t0=$SECONDS

if [ "$mode" = test ]; then
    say "running 'make test' in the root (log: $log)"
    mkfifo "$work/test.out"
    in_root "make test" > "$work/test.out" 2>&1 &
    runpid=$!
    tee "$log" < "$work/test.out" &
    teepid=$!
    wait "$runpid" && rc=0 || rc=$?
    wait "$teepid" || true
    npkg1=$(chroot "$root" dpkg-query -W -f '.\n' | wc -l)
    say "Debian $version: $npkg0 packages in the fresh root, $npkg1 after make test"
    say "make test exited $rc after $(( (SECONDS - t0) / 60 )) min $(( (SECONDS - t0) % 60 )) s (commit ${head:0:12})"
    if [ "$rc" -eq 0 ]; then say "PASSED"; else say "FAILED"; fi
    exit "$rc"
fi

# ---- --run: make run in the background, the pages from the host -----------
wait_s=${FRESH_RUN_WAIT_S:-3600}
fifo=$work/run.out
mkfifo "$fifo"
say "starting 'make run PORT=0' in the root (the kernel picks a free port; log: $log)"
in_root "make run PORT=0" > "$fifo" 2>&1 &
runpid=$!
exec 8<"$fifo"
url=""
deadline=$((SECONDS + wait_s))
while [ -z "$url" ]; do
    left=$((deadline - SECONDS))
    [ "$left" -gt 0 ] || break
    if IFS= read -r -t "$left" -u 8 line; then
        printf '%s\n' "$line" | tee -a "$log"
        if [[ $line =~ ^moshid:\ serving\ on\ (http://127\.0\.0\.1:[0-9]+/) ]]; then url=${BASH_REMATCH[1]}; fi
    else
        st=$?
        [ "$st" -gt 128 ] && break # the deadline
        wait "$runpid" && runrc=0 || runrc=$?
        die "make run exited ($runrc) before it printed 'moshid: serving on http://127.0.0.1:PORT/'"
    fi
done
[ -n "$url" ] || die "no 'serving on' line within ${wait_s} s"
# The rest of the output goes on to the log (and the screen) while the pages are fetched.
tee -a "$log" <&8 &
drain=$!
exec 8<&-
say "serving after $((SECONDS - t0)) s: $url; fetching /healthz and / from the host"
fetch_rc=0
python3 - "$url" <<'PY' || fetch_rc=$?
import json, sys, urllib.error, urllib.request
url = sys.argv[1]
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1, never a proxy


def get(path):
    try:
        with direct.open(url + path, timeout=30) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode(errors="replace")


bad = 0
status, ctype, body = get("healthz")
print(f"run-fresh: GET /healthz -> {status} {ctype}: {body.strip()}")
try:
    h = json.loads(body)
except ValueError:
    h = {}
if status != 200 or h.get("ready") is not True or h.get("accepting") is not True:
    print("run-fresh: /healthz does not say ready and accepting"); bad = 1
status, ctype, body = get("")
title = body.split("<title>", 1)[1].split("</title>", 1)[0] if "<title>" in body else ""
print(f"run-fresh: GET / -> {status} {ctype}, {len(body)} bytes, title {title!r}")
if status != 200 or not ctype.startswith("text/html") or "<html" not in body.lower():
    print("run-fresh: / is not the HTML page"); bad = 1
sys.exit(bad)
PY
pids=""
for p in $(procs_in "$root"); do [ "$(cat "/proc/$p/comm" 2>/dev/null)" = moshid ] && pids="$pids $p"; done
[ -n "$pids" ] || die "no moshid process found in the root"
say "stopping moshid (SIGTERM to$pids)"
# shellcheck disable=SC2086
kill -TERM $pids
timeout 120 tail --pid="$runpid" -f /dev/null || die "make run did not end within 120 s of SIGTERM"
wait "$runpid" && runrc=0 || runrc=$?
wait "$drain" || true
say "make run exited $runrc after SIGTERM"
[ "$runrc" -eq 0 ] || fetch_rc=1
npkg1=$(chroot "$root" dpkg-query -W -f '.\n' | wc -l)
say "Debian $version: $npkg0 packages in the fresh root, $npkg1 after make run"
if [ "$fetch_rc" -eq 0 ]; then say "PASSED: /healthz and / served, moshid stopped cleanly"; else say "FAILED"; fi
exit "$fetch_rc"
