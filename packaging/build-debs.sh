#!/usr/bin/env bash
# Builds dynmig's Debian packages with cargo-deb (docs/install.md installs them):
#   dynmig_<version>_amd64.deb                      the binary, systemd units, example
#                                                   /etc/slurm/dynmig.toml, Prolog/Epilog,
#                                                   man page, learned models
#   dynmig-slurm-plugins-<MM>_<version>_amd64.deb   job_submit/dynmig and the SPANK plugin for
#                                                   Slurm <MM> (e.g. 22.05), depending on
#                                                   exactly that Slurm release
#
#   packaging/build-debs.sh [SUITE...]    SUITE: bookworm (the host's Slurm, the default),
#                                         trixie, sid (slurm/releases.sh's chroots)
#
# Output: target/debian/ (the paths are printed, one per line, on stdout). The dynmig package
# is the same for every suite (a bookworm build runs on trixie and sid); the plugins are built
# per release, with the release profile: the host's by `cargo build --release --workspace` (as
# slurm/setup.sh), the chroots' against the headers and libslurm of slurm/releases.sh's chroot
# (as `releases.sh plugins SUITE` builds its debug ones).
# Needs cargo-deb (cargo install cargo-deb) and help2man (apt-get install help2man).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export PATH=$HOME/.cargo/bin:$PATH
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
OUT=$TARGET/debian
WORK=$TARGET/packaging
# The Debian revision of every package built here.
DEB_REVISION=1

log() { echo "build-debs: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

need_tools() {
    cargo deb --version >/dev/null 2>&1 ||
        die "cargo-deb is missing: cargo install cargo-deb --locked"
    if ! command -v help2man >/dev/null; then
        [ "$(id -u)" = 0 ] || die "help2man is missing: apt-get install help2man"
        log "installing help2man"
        DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq help2man >/dev/null ||
            die "apt-get install help2man failed"
    fi
}

# The version of the dynmig crate, from cargo metadata (the workspace's version).
crate_version() {
    timeout 120 cargo metadata --no-deps --format-version 1 --offline 2>/dev/null |
        sed -n 's/.*"name":"dynmig","version":"\([^"]*\)".*/\1/p' | head -1
}

# The host build: the binary and the host's plugins, as slurm/setup.sh builds them (the same
# command, so nothing is rebuilt when setup.sh ran).
build_host() {
    local sv
    sv=$(bash slurm/releases.sh version) || die "cannot read the host's Slurm version (libslurm-dev installed?)"
    log "cargo build --release --workspace"
    cargo build --release --workspace --quiet || die "cargo build --release --workspace failed"
    # `dynmig --version` names the Slurm headers of the build (build.rs). A build made before
    # libslurm-dev was installed keeps saying "no Slurm headers": the header's mtime (from
    # the .deb) is older than that build, so cargo does not rerun build.rs. Touching build.rs
    # reruns it once (the dynmig crate alone is rebuilt).
    if ! "$TARGET/release/dynmig" --version | grep -q "headers: $sv)"; then
        log "dynmig --version does not name Slurm $sv's headers: rerunning build.rs"
        touch build.rs
        cargo build --release --workspace --quiet || die "cargo build --release --workspace failed"
        "$TARGET/release/dynmig" --version | grep -q "headers: $sv)" ||
            die "dynmig --version says '$("$TARGET/release/dynmig" --version)', not Slurm $sv's headers"
    fi
}

build_dynmig_deb() {
    local version=$1 deb
    mkdir -p "$WORK" "$OUT"
    # The manifest names it target/release/packaging/dynmig.1.gz: cargo-deb resolves
    # target/release/ to the build's target directory.
    packaging/man.sh "$TARGET/release/dynmig" "$TARGET/release/packaging/dynmig.1" || die "generating the man page failed"
    gzip -9nf "$TARGET/release/packaging/dynmig.1"
    deb=$(timeout 600 cargo deb -p dynmig --no-build --deb-revision "$DEB_REVISION" --output "$OUT" 2>"$WORK/cargo-deb-dynmig.log" | tail -1) ||
        die "cargo deb -p dynmig failed: see $WORK/cargo-deb-dynmig.log"
    [ -f "$deb" ] || die "cargo deb -p dynmig wrote no package (see $WORK/cargo-deb-dynmig.log)"
    echo "$deb"
}

# build_plugins_deb VERSION SLURM_VERSION JOB_SUBMIT_SO SPANK_SO: the plugin package of one
# Slurm release, from packaging/slurm-plugins/Cargo.toml.in.
build_plugins_deb() {
    local version=$1 sv=$2 js=$3 sp=$4 reader=${5:-} mm next dir deb a b c reader_asset=""
    IFS=. read -r a b c <<<"$sv"
    [ -n "$c" ] || die "Slurm version '$sv' is not major.minor.micro"
    mm=$a.$b
    next=$a.$b.$((c + 1))
    dir=$WORK/slurm-plugins-$sv
    rm -rf "$dir"
    mkdir -p "$dir"
    echo "$sv" >"$dir/SLURM_VERSION"
    : >"$dir/lib.rs"
    # Stripped copies (cargo-deb strips only what it builds itself). Slurm and `dynmig doctor`
    # need only the dynamic symbol table, which stays.
    cp "$js" "$dir/job_submit_dynmig.so"
    cp "$sp" "$dir/spank_dynmig.so"
    strip --strip-unneeded "$dir/job_submit_dynmig.so" "$dir/spank_dynmig.so" || die "strip failed on $js, $sp"
    js=$dir/job_submit_dynmig.so
    sp=$dir/spank_dynmig.so
    # 22.05 only: one job's JSON through libslurm (crates/slurm-job-reader), beside
    # /usr/bin/dynmig where SlurmCommands looks for it; later releases read one job with squeue.
    if [ -n "$reader" ]; then
        cp "$reader" "$dir/dynmig-slurm-job"
        strip "$dir/dynmig-slurm-job" || die "strip failed on $reader"
        reader_asset="    [\"$dir/dynmig-slurm-job\", \"usr/bin/dynmig-slurm-job\", \"755\"],"
    fi
    sed -e "s|@VERSION@|$version|g" -e "s|@SLURM_MM@|$mm|g" -e "s|@SLURM_VERSION@|$sv|g" \
        -e "s|@SLURM_NEXT@|$next|g" -e "s|@DEB_VERSION@|$version-$DEB_REVISION|g" \
        -e "s|@JOB_SUBMIT_SO@|$js|g" -e "s|@SPANK_SO@|$sp|g" \
        -e "s|@SLURM_VERSION_FILE@|$dir/SLURM_VERSION|g" -e "s|@READER_ASSET@|$reader_asset|" \
        packaging/slurm-plugins/Cargo.toml.in >"$dir/Cargo.toml"
    # Its own target directory: cargo-deb looks for built files there (none: --no-build).
    deb=$(CARGO_TARGET_DIR=$dir/target timeout 600 cargo deb --manifest-path "$dir/Cargo.toml" --no-build \
        --deb-revision "$DEB_REVISION" --output "$OUT" 2>"$dir/cargo-deb.log" | tail -1) ||
        die "cargo deb for the Slurm $sv plugins failed: see $dir/cargo-deb.log"
    [ -f "$deb" ] || die "cargo deb for the Slurm $sv plugins wrote no package (see $dir/cargo-deb.log)"
    echo "$deb"
}

# build_chroot_plugins SUITE: release builds of the two plugins against SUITE's Slurm headers
# and libslurm (the chroot of slurm/releases.sh), in that release's own target directory
# (target/slurm-build/<version>, where `releases.sh plugins` keeps its debug builds, with the
# same environment, so the two share the dependencies' builds). Sets PLUGIN_SV, PLUGIN_OUT.
build_chroot_plugins() {
    local suite=$1 sys
    sys=$(bash slurm/releases.sh chroot "$suite" | tail -1) || die "slurm/releases.sh chroot $suite failed"
    [ -f "$sys/usr/include/slurm/slurm_version.h" ] || die "no Slurm headers in the $suite chroot ($sys)"
    PLUGIN_SV=$(bash slurm/releases.sh version "$suite") || die "cannot read Slurm's version in the $suite chroot"
    log "building the plugins for Slurm $PLUGIN_SV ($suite, release profile)"
    SLURM_INCLUDE_DIR=$sys/usr/include SLURM_LIB_DIR=$sys/usr/lib/x86_64-linux-gnu \
        CARGO_TARGET_DIR=$TARGET/slurm-build/$PLUGIN_SV \
        cargo build --release --quiet -p job-submit-dynmig -p spank-dynmig ||
        die "building the plugins against Slurm $PLUGIN_SV ($suite) failed"
    PLUGIN_OUT=$TARGET/slurm-build/$PLUGIN_SV/release
}

# A plugin file must exist and be a shared object (its plugin_version is the release's: it
# was built against that release's headers; `dynmig doctor` checks it on a running cluster).
check_so() {
    local so=$1
    [ -f "$so" ] || die "$so is missing"
    file -b "$so" 2>/dev/null | grep -q 'ELF 64-bit LSB shared object' || die "$so is not a 64-bit shared object"
}

main() {
    local suites=("$@") version sv s dir reader
    [ ${#suites[@]} -gt 0 ] || suites=(bookworm)
    for s in "${suites[@]}"; do
        case "$s" in bookworm | trixie | sid) ;; *) die "unknown suite '$s' (bookworm, trixie or sid)" ;; esac
    done
    need_tools
    version=$(crate_version)
    [ -n "$version" ] || die "cannot read the dynmig crate's version (cargo metadata)"
    build_host
    build_dynmig_deb "$version"
    for s in "${suites[@]}"; do
        if [ "$s" = bookworm ]; then
            sv=$(bash slurm/releases.sh version) || die "cannot read the host's Slurm version"
            check_so "$TARGET/release/libjob_submit_dynmig.so"
            reader=""
            case $sv in 22.05.*) reader=$TARGET/release/dynmig-slurm-job ;; esac
            build_plugins_deb "$version" "$sv" "$TARGET/release/libjob_submit_dynmig.so" "$TARGET/release/libspank_dynmig.so" "$reader"
        else
            build_chroot_plugins "$s"
            check_so "$PLUGIN_OUT/libjob_submit_dynmig.so"
            build_plugins_deb "$version" "$PLUGIN_SV" "$PLUGIN_OUT/libjob_submit_dynmig.so" "$PLUGIN_OUT/libspank_dynmig.so"
        fi
    done
}

main "$@"
