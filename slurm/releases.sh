#!/usr/bin/env bash
# The Slurm release matrix: Debian trixie (Slurm 24.11) and sid (Slurm 26.05) in chroots next
# to the machine's own bookworm (Slurm 22.05). See slurm/README.md, "Release matrix".
#
#   slurm/releases.sh chroot SUITE      build (once per machine, then cached) SUITE's chroot
#   slurm/releases.sh plugins SUITE     build the plugins against SUITE's Slurm headers
#   slurm/releases.sh env SUITE         print the exports that point the cluster at SUITE
#   slurm/releases.sh run SUITE CMD...  mount the chroot, run CMD with SUITE's Slurm, unmount
#   slurm/releases.sh unit SUITE        plugin tests and clippy with SUITE's headers and libslurm
#   slurm/releases.sh test SUITE        run the cluster test suite on SUITE (via run)
#   slurm/releases.sh bench SUITE       run slurm/bench/submit_cost.sh on SUITE (via run)
#   slurm/releases.sh demo SUITE        run slurm/demo.sh on SUITE (debug build; via run)
#   slurm/releases.sh load SUITE [JOBS] run slurm/bench/load.sh on SUITE (release plugins; via run)
#   slurm/releases.sh queue SUITE [JOBS] run slurm/bench/queue.sh on SUITE (the same way)
#   slurm/releases.sh version [SUITE]   Slurm version of SUITE (host: no SUITE)
#
# SUITE is bookworm (the host itself, nothing mounted), trixie or sid.
# Environment: DYNMIG_CHROOT_CACHE (default /var/cache/dynmig/chroots),
# DYNMIG_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF=$ROOT/slurm/releases.sh
CACHE=${DYNMIG_CHROOT_CACHE:-/var/cache/dynmig/chroots}
MIRROR=${DYNMIG_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What a chroot holds. Changing this list (or the format version) rebuilds the chroots.
PKGS="slurmctld slurmd slurm-client munge libslurm-dev passwd slurmdbd mariadb-server"
CHROOT_KEY="v1 $PKGS"
# The Slurm commands the cluster, the agents and the tests run, wrapped per release.
COMMANDS="slurmctld slurmd slurmstepd slurmdbd scontrol sbatch squeue sinfo scancel srun salloc sacct sacctmgr sprio sdiag munged munge unmunge mariadbd mariadb-install-db"
export PATH=$HOME/.cargo/bin:$PATH

log() { echo "releases.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

chroot_dir() { echo "$CACHE/$1"; }

# Builds SUITE's chroot unless the cache has one with the same key. Built in a temporary
# directory and renamed when complete, so an interrupted build is never taken for a ready one.
# A cached chroot of an older package list (same format version) gets the missing packages
# installed in place instead (its key is rewritten only when apt succeeded); a rebuild if that
# fails.
cmd_chroot() {
    local suite=${1:?usage: chroot SUITE} dir tmp t0
    case "$suite" in trixie | sid) ;; *) die "no chroot for suite '$suite' (trixie or sid)" ;; esac
    dir=$(chroot_dir "$suite")
    if [ -f "$dir/etc/dynmig-chroot" ] && [ "$(cat "$dir/etc/dynmig-chroot")" = "$CHROOT_KEY" ]; then
        echo "$dir"
        return 0
    fi
    if [ -f "$dir/etc/dynmig-chroot" ] && [ "$(cut -d' ' -f1 "$dir/etc/dynmig-chroot")" = "${CHROOT_KEY%% *}" ]; then
        t0=$(date +%s)
        log "adding packages to the cached $suite chroot: $PKGS"
        if unshare --mount --propagation slave bash "$SELF" _apt "$dir" >"$CACHE/.$suite.apt.log" 2>&1; then
            echo "$CHROOT_KEY" >"$dir/etc/dynmig-chroot"
            log "$suite chroot updated in $(($(date +%s) - t0)) s"
            echo "$dir"
            return 0
        fi
        log "apt-get in the cached $suite chroot failed (see $CACHE/.$suite.apt.log): rebuilding it"
    fi
    command -v debootstrap >/dev/null || {
        log "installing debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    }
    t0=$(date +%s)
    mkdir -p "$CACHE"
    tmp="$CACHE/.$suite.tmp"
    unmount_all "$tmp"
    rm -rf "$tmp"
    log "debootstrap $suite into $tmp"
    debootstrap --variant=minbase "$suite" "$tmp" "$MIRROR" >"$CACHE/.$suite.debootstrap.log" 2>&1 ||
        die "debootstrap $suite failed: see $CACHE/.$suite.debootstrap.log"
    # Package scripts must not start daemons inside the chroot.
    printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
    chmod +x "$tmp/usr/sbin/policy-rc.d"
    cp /etc/hosts "$tmp/etc/hosts"
    unshare --mount --propagation slave bash "$SELF" _apt "$tmp" >"$CACHE/.$suite.apt.log" 2>&1 ||
        die "apt-get in the $suite chroot failed: see $CACHE/.$suite.apt.log"
    echo "$CHROOT_KEY" >"$tmp/etc/dynmig-chroot"
    unmount_all "$dir"
    rm -rf "$dir"
    mv "$tmp" "$dir"
    log "$suite chroot ready in $(($(date +%s) - t0)) s: Slurm $(slurm_version_of "$dir")"
    echo "$dir"
}

# Inside a mount namespace of its own: apt-get in the new chroot DIR.
cmd_apt() {
    mount_std "$1"
    chroot "$1" env DEBIAN_FRONTEND=noninteractive sh -c \
        "apt-get -o Acquire::Check-Valid-Until=false update -qq && apt-get install -y -qq --no-install-recommends $PKGS && apt-get clean"
}

# mount_std DIR: /proc, /sys and /dev of the host, recursively, without propagation back.
mount_std() {
    local d
    for d in proc sys dev; do
        mountpoint -q "$1/$d" && continue
        mkdir -p "$1/$d"
        mount --rbind "/$d" "$1/$d"
        mount --make-rslave "$1/$d"
    done
}

# unmount_all DIR: every mount below DIR, deepest first.
unmount_all() {
    local m
    [ -d "$1" ] || return 0
    for m in $(awk -v d="$(realpath -m "$1")/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r); do
        umount -l "$m" 2>/dev/null || true
    done
}

# The version Slurm's headers in ROOT declare, e.g. 24.11.5.
slurm_version_of() {
    local n
    n=$(awk '$2 == "SLURM_VERSION_NUMBER" {print $3}' "$1/usr/include/slurm/slurm_version.h")
    printf '%d.%02d.%d\n' "$((n >> 16 & 255))" "$((n >> 8 & 255))" "$((n & 255))"
}

sysroot() {
    case "$1" in
    bookworm | host) echo "" ;;
    *) cmd_chroot "$1" ;;
    esac
}

# The directory of SUITE's versioned plugins: target/slurm/<version>/ holding
# job_submit_dynmig.so and spank_dynmig.so built against that release's headers.
plugin_dir() { echo "${CARGO_TARGET_DIR:-$ROOT/target}/slurm/$(cmd_version "$1")"; }

# Builds job_submit/dynmig and the SPANK plugin against SUITE's headers (SLURM_INCLUDE_DIR
# into the chroot), in a target directory of their own (the host's build stays untouched),
# and installs them under target/slurm/<version>/. bookworm: the host's headers.
cmd_plugins() {
    local suite=${1:?usage: plugins SUITE} sys inc tdir out ver
    sys=$(sysroot "$suite")
    inc=${sys:-}/usr/include
    ver=$(slurm_version_of "${sys:-/}")
    tdir="${CARGO_TARGET_DIR:-$ROOT/target}/slurm-build/$ver"
    out=$(plugin_dir "$suite")
    mkdir -p "$out"
    # The host's plugins are those of the workspace build (slurm/setup.sh).
    [ -n "$sys" ] || tdir="${CARGO_TARGET_DIR:-$ROOT/target}"
    [ -n "$sys" ] || inc=${SLURM_INCLUDE_DIR:-}
    # The host's: the workspace build (a no-op after slurm/setup.sh; building only the two
    # plugin packages would resolve other features and rebuild their dependencies).
    local pkgs="-p job-submit-dynmig -p spank-dynmig"
    [ -n "$sys" ] || pkgs=--workspace
    # shellcheck disable=SC2086
    # SLURM_LIB_DIR as cmd_unit sets it, so that the two do not rebuild each other's crates.
    (cd "$ROOT" && env ${inc:+SLURM_INCLUDE_DIR=$inc} ${sys:+SLURM_LIB_DIR=$sys/usr/lib/x86_64-linux-gnu} \
        CARGO_TARGET_DIR="$tdir" cargo build --quiet $pkgs) ||
        die "building the plugins against Slurm $ver ($inc) failed"
    cp "$tdir/debug/libjob_submit_dynmig.so" "$out/job_submit_dynmig.so.tmp"
    cp "$tdir/debug/libspank_dynmig.so" "$out/spank_dynmig.so.tmp"
    mv "$out/job_submit_dynmig.so.tmp" "$out/job_submit_dynmig.so"
    mv "$out/spank_dynmig.so.tmp" "$out/spank_dynmig.so"
    echo "$ver" >"$out/SLURM_VERSION"
    log "plugins for Slurm $ver in $out"
    echo "$out"
}

# Wrappers, one per Slurm command, that run SUITE's command in its chroot (the working
# directory kept: the repository and /tmp are at the same paths inside). Inside the chroot
# (slurmd's Prolog calling scontrol) they run the command directly. They live in the
# repository, so that their paths (written into dynmig.toml) are valid inside and outside.
write_wrappers() {
    local suite=$1 sys=$2 bin=$3 c path
    rm -rf "$bin"
    mkdir -p "$bin"
    for c in $COMMANDS; do
        path=""
        [ -x "$sys/usr/sbin/$c" ] && path=/usr/sbin/$c
        [ -x "$sys/usr/bin/$c" ] && path=/usr/bin/$c
        [ -n "$path" ] || continue
        cat >"$bin/$c" <<SH
#!/bin/sh
# $c of Slurm $(slurm_version_of "$sys") ($suite chroot $sys), written by slurm/releases.sh.
[ -f /etc/dynmig-chroot ] && exec $path "\$@"
exec chroot $sys /bin/sh -c 'cd "\$0" 2>/dev/null || cd /; exec "\$@"' "\$PWD" $path "\$@"
SH
        chmod +x "$bin/$c"
    done
}

# The exports that make slurm/cluster.sh, slurm/local-dynmig.sh and the tests use SUITE.
cmd_env() {
    local suite=${1:?usage: env SUITE} sys bin
    sys=$(sysroot "$suite")
    echo "export DYNMIG_PLUGIN_DIR=$(plugin_dir "$suite")"
    [ -n "$sys" ] || return 0
    bin="$ROOT/.run/releases/$suite/bin"
    write_wrappers "$suite" "$sys" "$bin"
    echo "export DYNMIG_SLURM_ROOT=$sys"
    echo "export PATH=$bin:\$PATH"
}

# Paths the daemons, hooks and jobs use that must be the same inside the chroot.
bind_paths() {
    local t=${CARGO_TARGET_DIR:-$ROOT/target}
    echo "$ROOT" /tmp
    case "$(realpath -m "$t")/" in "$ROOT"/*) ;; *) echo "$t" ;; esac
}

# run SUITE CMD...: CMD with SUITE's Slurm, in a mount namespace of its own (every mount made
# for the chroot goes away with it, however CMD ends).
cmd_run() {
    local suite=${1:?usage: run SUITE CMD...}
    shift
    [ $# -gt 0 ] || die "usage: run SUITE CMD..."
    local sys
    sys=$(sysroot "$suite")
    eval "$(cmd_env "$suite")"
    if [ -z "$sys" ]; then
        "$@"
        return
    fi
    exec unshare --mount --propagation slave bash "$SELF" _inner "$sys" "$@"
}

# Inside the mount namespace of cmd_run: bind what is needed, then run the command.
cmd_inner() {
    local sys=$1 p
    shift
    mount_std "$sys"
    # The same users, groups and host names inside (copied, not bound: useradd renames
    # /etc/passwd, and slurm/cluster.sh user adds to both).
    cp /etc/passwd /etc/group /etc/hosts "$sys/etc/"
    # No DNS inside (for this run only: apt in the chroot needs it): the cluster names its
    # hosts by address, and from 24.11 slurmctld reverse-resolves the addresses of every
    # connection it accepts on its connection manager's thread. One query the nameserver never
    # answered stalled every RPC for the resolver's 5 s timeout (sbatch in bursts of ~10 jobs
    # every 5 s); without DNS a lookup fails at once and Slurm logs the address instead.
    sed 's/^hosts:.*/hosts: files/' "$sys/etc/nsswitch.conf" >"$sys/etc/nsswitch.conf.dynmig"
    mount --bind "$sys/etc/nsswitch.conf.dynmig" "$sys/etc/nsswitch.conf"
    for p in $(bind_paths); do
        if [ -d "$p" ]; then mkdir -p "$sys$p"; else mkdir -p "$(dirname "$sys$p")" && touch "$sys$p"; fi
        mount --bind "$p" "$sys$p"
    done
    "$@"
}

# With SUITE's headers and libslurm: the bindings (bindgen's layout checks of job_desc_msg_t
# against C's are compile-time asserts), clippy on the plugins' code for this release (its
# cfgs), and the job_submit plugin's own tests (linked against the chroot's libslurm, run
# inside the chroot). bookworm: cargo test --workspace covers it.
cmd_unit() {
    local suite=${1:?usage: unit SUITE} sys ver exe
    sys=$(sysroot "$suite")
    [ -n "$sys" ] || return 0
    ver=$(slurm_version_of "$sys")
    cd "$ROOT"
    export SLURM_INCLUDE_DIR=$sys/usr/include SLURM_LIB_DIR=$sys/usr/lib/x86_64-linux-gnu
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}/slurm-build/$ver
    cargo clippy --quiet -p slurm-sys -p job-submit-dynmig -p spank-dynmig --lib -- -D warnings
    local t
    for t in "--lib" "--test entry"; do
        # shellcheck disable=SC2086
        exe=$(cargo test -p job-submit-dynmig $t --no-run 2>&1 | tee "$CARGO_TARGET_DIR/unit-build.log" |
            sed -n 's/^ *Executable .* (\(.*\))$/\1/p' | tail -1) || true
        [ -n "$exe" ] || die "building job-submit-dynmig's tests ($t) against Slurm $ver failed: $(grep -m3 '^error' "$CARGO_TARGET_DIR/unit-build.log")"
        (cmd_run "$suite" chroot "$sys" "$(realpath "$exe")") || die "job-submit-dynmig's tests ($t) failed on Slurm $ver"
    done
}

cmd_test() {
    local suite=${1:?usage: test SUITE}
    shift
    cmd_plugins "$suite" >/dev/null
    cmd_run "$suite" cargo test -p dynmig --test cluster -- --include-ignored --test-threads=1 "$@"
}

cmd_bench() {
    local suite=${1:?usage: bench SUITE}
    shift
    cmd_plugins "$suite" >/dev/null
    cmd_run "$suite" bash "$ROOT/slurm/bench/submit_cost.sh" "$@"
}

# slurm/bench/load.sh on SUITE with release builds of the plugins, as a site runs them (`plugins`
# builds debug ones, for the tests): bookworm's are the workspace's target/release, another
# suite's are built against its headers into target/slurm/<version>-release/.
cmd_load() {
    cmd_bench load "$@"
}

# slurm/bench/queue.sh on SUITE, with release plugins as for `load`.
cmd_queue() {
    cmd_bench queue "$@"
}

# cmd_bench NAME SUITE [ARGS]: slurm/bench/NAME.sh on SUITE with release plugins.
cmd_bench() {
    local bench=$1 suite=${2:?usage: $1 SUITE [JOBS]} sys ver tdir out
    shift 2
    sys=$(sysroot "$suite")
    if [ -z "$sys" ]; then
        cmd_run "$suite" env -u DYNMIG_PLUGIN_DIR bash "$ROOT/slurm/bench/$bench.sh" "$@"
        return
    fi
    ver=$(slurm_version_of "$sys")
    tdir="${CARGO_TARGET_DIR:-$ROOT/target}/slurm-build/$ver"
    out="${CARGO_TARGET_DIR:-$ROOT/target}/slurm/$ver-release"
    (cd "$ROOT" && SLURM_INCLUDE_DIR=$sys/usr/include SLURM_LIB_DIR=$sys/usr/lib/x86_64-linux-gnu \
        CARGO_TARGET_DIR="$tdir" cargo build --quiet --release -p job-submit-dynmig -p spank-dynmig) ||
        die "building the release plugins against Slurm $ver failed"
    mkdir -p "$out"
    cp "$tdir/release/libjob_submit_dynmig.so" "$out/job_submit_dynmig.so"
    cp "$tdir/release/libspank_dynmig.so" "$out/spank_dynmig.so"
    echo "$ver" >"$out/SLURM_VERSION"
    cmd_run "$suite" env DYNMIG_PLUGIN_DIR="$out" bash "$ROOT/slurm/bench/$bench.sh" "$@"
}

# slurm/demo.sh on SUITE (the debug build unless DYNMIG_PROFILE=release).
cmd_demo() {
    local suite=${1:?usage: demo SUITE}
    shift
    cmd_plugins "$suite" >/dev/null
    DYNMIG_PROFILE=${DYNMIG_PROFILE:-dev} cmd_run "$suite" bash "$ROOT/slurm/demo.sh" "$@"
}

cmd_version() {
    local r
    r=$(sysroot "${1:-bookworm}")
    slurm_version_of "${r:-/}"
}

main() {
    local cmd=${1:-}
    shift || true
    case "$cmd" in
    chroot) cmd_chroot "$@" ;;
    version) cmd_version "$@" ;;
    plugins) cmd_plugins "$@" ;;
    env) cmd_env "$@" ;;
    run) cmd_run "$@" ;;
    _inner) cmd_inner "$@" ;;
    _apt) cmd_apt "$@" ;;
    test) cmd_test "$@" ;;
    unit) cmd_unit "$@" ;;
    bench) cmd_bench "$@" ;;
    load) cmd_load "$@" ;;
    queue) cmd_queue "$@" ;;
    demo) cmd_demo "$@" ;;
    *)
        sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        [ -z "$cmd" ] || [ "$cmd" = help ] || exit 2
        ;;
    esac
}

main "$@"
