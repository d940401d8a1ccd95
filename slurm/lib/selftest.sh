# `slurm/cluster.sh selftest`: the end-to-end check of the test cluster (sourced). Brings a
# cluster up in $DIR, runs a 7g.80gb job, re-registers the first node as 4 x 3g.40gb, runs a
# 3g.40gb job that must land there, checks the Epilog ran in the node's namespace, and takes
# the cluster down, checking that no daemon or namespace is left. Exit 1 on any failure.

# wait_job JOBID TIMEOUT_S: until the job is COMPLETED (fails on another end state).
selftest_wait_job() {
    local state deadline=$(($(date +%s) + $2))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        state=$(scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
        case "$state" in
        COMPLETED) return 0 ;;
        FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) die "job $1 ended $state" ;;
        esac
        sleep 0.2
    done
    die "job $1 not completed after $2 s (state $state)"
}

cmd_selftest() {
    need_root
    local first t work j host
    first=$(echo $NODES | awk '{print $1}')
    work="$DIR/selftest"
    rm -rf "$work" "$DIR/nodes/$first/etc/gres.conf"
    mkdir -p "$work"
    cat >"$work/epilog.sh" <<EOT
#!/bin/sh
echo "\$SLURM_JOB_ID \$(hostname) \$(readlink /proc/self/ns/net) \$SLURM_JOB_GPUS" >>"$work/epilog.log"
EOT
    chmod +x "$work/epilog.sh"
    DYNMIG_EPILOG="$work/epilog.sh" cmd_up >/dev/null
    load_env
    trap 'log "selftest failed"; cmd_down' EXIT

    t=$(date +%s.%N)
    j=$(cd "$work" && sbatch --parsable -p gpu --gres=gpu:7g.80gb:1 -o "$work/%j.out" \
        --wrap 'echo "$(hostname) $CUDA_VISIBLE_DEVICES"; sleep 1')
    selftest_wait_job "$j" 30
    log "selftest: 7g.80gb job $j completed $(elapsed "$t") s after sbatch: $(cat "$work/$j.out")"

    cmd_restart_node "$first" gpu:3g.40gb:4 --write-gres-conf
    j=$(cd "$work" && sbatch --parsable -p gpu --gres=gpu:3g.40gb:1 -o "$work/%j.out" \
        --wrap 'echo "$(hostname) $CUDA_VISIBLE_DEVICES"')
    selftest_wait_job "$j" 30
    host=$(awk '{print $1}' "$work/$j.out")
    [ "$host" = "$first" ] || die "3g.40gb job ran on '$host', not on $first"
    log "selftest: 3g.40gb job $j ran on $first: $(cat "$work/$j.out")"

    sleep 1
    grep -q "^$j $first net:" "$work/epilog.log" || die "no epilog record of job $j on $first"
    [ "$(awk -v j="$j" '$1==j {print $3}' "$work/epilog.log")" != "$(readlink /proc/self/ns/net)" ] ||
        die "the epilog ran in the root network namespace"
    log "selftest: epilog ran on $first in its own network namespace"

    trap - EXIT
    cmd_down
    sleep 0.5
    ! ip netns list | grep -q '^dynmig-' || die "namespaces left: $(ip netns list)"
    ! ip link show "$BRIDGE" >/dev/null 2>&1 || die "bridge $BRIDGE left"
    for node in $NODES; do
        ! pid_alive "$DIR/nodes/$node/slurmd.pid" slurmd || die "slurmd $node still runs"
    done
    if pgrep -f -- "-f $DIR/" | grep -q .; then
        die "processes left: $(pgrep -a -f -- "-f $DIR/")"
    fi
    log "selftest: passed"
}

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }
