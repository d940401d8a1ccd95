#!/usr/bin/env bash
# Writes dynmig(1) from the binary's own clap help (help2man over `dynmig --help`, and one
# section with the --help of every subcommand), so the man page cannot drift from the CLI.
#
#   packaging/man.sh BIN OUT      e.g. packaging/man.sh target/release/dynmig target/packaging/dynmig.1
set -euo pipefail
bin=${1:?usage: man.sh BIN OUT}
out=${2:?usage: man.sh BIN OUT}
command -v help2man >/dev/null || { echo "man.sh: help2man is missing (apt-get install help2man)" >&2; exit 1; }
[ -x "$bin" ] || { echo "man.sh: $bin is not an executable" >&2; exit 1; }
bin=$(realpath "$bin")
inc=$(mktemp)
trap 'rm -f "$inc"' EXIT
# The subcommands, as clap lists them under "Commands:" (two-space indent, name first).
subs=$(timeout 10 "$bin" --help | awk '/^Commands:/ {on=1; next} /^[^ ]/ {on=0} on && /^  [a-z]/ {print $1}' | grep -vx help)
[ -n "$subs" ] || { echo "man.sh: no subcommands found in '$bin --help'" >&2; exit 1; }
{
    echo "[COMMANDS]"
    for s in $subs; do
        echo ".SS \"dynmig $s\""
        echo ".nf"
        # Lines starting with . or ' are roff requests: escape them.
        timeout 10 "$bin" "$s" --help | sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
        echo ".fi"
    done
    cat <<'ROFF'
[FILES]
.TP
.I /etc/slurm/dynmig.toml
dynmig's configuration (\fBdynmig config check\fR checks it; every key: /usr/share/doc/dynmig/config.md).
.TP
.I /etc/default/dynmig
environment of the daemons and of the Prolog/Epilog (SLURM_CONF, DYNMIG_CONFIG).
.TP
.I /usr/libexec/dynmig/prolog, /usr/libexec/dynmig/epilog
Slurm's Prolog= and Epilog= entries.
.TP
.I dynmig-controller.service, dynmig-agent.service, dynmig-history.service
the controller (one per cluster), the node agent (each GPU node), the job history service.
.TP
.I /var/lib/dynmig
state: plans, journals, events, history.
[ENVIRONMENT]
.TP
.B DYNMIG_CONFIG
the config file when \-\-config is not given.
.TP
.B SLURM_CONF
Slurm's configuration, for the Slurm commands dynmig runs.
[SEE ALSO]
/usr/share/doc/dynmig/install.md,
.BR slurm.conf (5),
.BR gres.conf (5),
.BR spank (8)
ROFF
} >"$inc"
mkdir -p "$(dirname "$out")"
# The version alone: help2man would put all of `dynmig --version` into the page's footer.
version=$(timeout 10 "$bin" --version | awk 'NR == 1 {print $2}')
timeout 30 help2man --no-info --version-string="$version" --section=1 --name="dynamic NVIDIA MIG partitioning for Slurm" \
    --include="$inc" --output="$out" "$bin"
