# Starting and stopping the daemons of the test cluster (sourced by slurm/cluster.sh).

# munged with its own key, socket, pid, log and seed files under $DIR/munge. Slurm finds the
# socket through AuthInfo=socket=... in slurm.conf.
start_munged() {
    local m="$DIR/munge" i
    # 0755 like /run/munge: ordinary users (sbatch as a normal user) must reach the socket;
    # the key itself stays 0400.
    chmod 0755 "$m"
    if [ ! -s "$m/munge.key" ]; then
        dd if=/dev/urandom of="$m/munge.key" bs=1024 count=1 status=none
    fi
    chmod 0400 "$m/munge.key"
    rm -f "$m/munge.socket" "$m/munge.socket.lock"
    munged --force --num-threads=10 9>&- --socket="$m/munge.socket" --key-file="$m/munge.key" \
        --pid-file="$m/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$m/munged.seed" ||
        die "munged failed to start: see $DIR/log/munged.log"
    for i in $(seq 50); do
        if munge -n -S "$m/munge.socket" 2>/dev/null | unmunge -S "$m/munge.socket" >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.1
    done
    die "munged does not answer on $m/munge.socket"
}

start_slurmctld() {
    local i
    env DYNMIG_CONFIG="${DYNMIG_CONFIG:-}" slurmctld -f "$DIR/etc/slurm.conf" 9>&- ||
        die "slurmctld failed to start: see $DIR/log/slurmctld.log"
    for i in $(seq 100); do
        if SLURM_CONF="$DIR/etc/slurm.conf" scontrol ping 2>/dev/null | grep -q 'is UP'; then
            return 0
        fi
        sleep 0.1
    done
    die "slurmctld does not answer: see $DIR/log/slurmctld.log"
}

# start_slurmd NODE GRES: a dynamic slurmd in the node's namespace and own UTS namespace
# (hostname = NODE), with the node's config dir (its gres.conf is read from there).
start_slurmd() {
    local node=$1 gres=$2 nd="$DIR/nodes/$1" i
    rm -f "$nd/slurmd.pid"
    echo "$NODE_CONF Gres=$gres" >"$nd/slurmd.conf-line"
    nsenter --net="/run/netns/$(ns_name "$node")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$node" \
        slurmd -Z -N "$node" -f "$nd/etc/slurm.conf" --conf "$NODE_CONF Gres=$gres" 9>&- ||
        die "slurmd $node failed to start: see $DIR/log/slurmd-$node.log"
    for i in $(seq 100); do
        pid_alive "$nd/slurmd.pid" slurmd && return 0
        sleep 0.1
    done
    die "slurmd $node wrote no pid file: see $DIR/log/slurmd-$node.log"
}

stop_slurmd() { stop_pidfile "$DIR/nodes/$1/slurmd.pid" slurmd; }

# delete_node NODE: scontrol delete (retried for 2 s while slurmctld finishes a job there).
# Fails when the node stays busy.
delete_node() {
    local i out
    for i in $(seq 5); do
        if out=$(scontrol delete nodename="$1" 2>&1); then return 0; fi
        case "$out" in
        *"Invalid node name"* | *"not found"*) return 0 ;;
        esac
        sleep 0.5
    done
    log "scontrol delete nodename=$1 failed: $out"
    return 1
}

# node_busy_reason NODE: jobs and state that keep NODE from being re-registered (empty: none).
node_busy_reason() {
    local jobs state
    jobs=$(squeue -h -w "$1" -o %i 2>/dev/null | paste -sd, -)
    state=$(sinfo -h -N -n "$1" -o %t 2>/dev/null | head -1)
    case "$state" in
    idle* | drain | down* | inval* | "") state="" ;;
    esac
    echo "${jobs:+jobs $jobs }${state:+state $state}"
}

# node_quiet NODE: true when no job runs or completes on NODE.
node_quiet() { [ -z "$(node_busy_reason "$1")" ]; }

# Canonical, sorted GRES list without socket annotations: "gpu:3g.40gb:2(S:0)" -> "gpu:3g.40gb:2".
canon_gres() { echo "$1" | sed 's/([^)]*)//g' | tr ',' '\n' | sed '/^$/d' | sort | paste -sd, -; }

# wait_node_idle NODE GRES TIMEOUT_S: until sinfo shows NODE idle with GRES.
wait_node_idle() {
    local node=$1 want deadline line
    want=$(canon_gres "$2")
    deadline=$(($(date +%s) + $3))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        line=$(SLURM_CONF="$DIR/etc/slurm.conf" sinfo -h -N -n "$node" -o '%t %G' 2>/dev/null | head -1)
        if [ "${line%% *}" = idle ] && [ "$(canon_gres "${line#* }")" = "$want" ]; then
            return 0
        fi
        case "${line%% *}" in
        inval* | drain*)
            if [ "$(canon_gres "${line#* }")" = "$want" ]; then
                die "node $node is ${line%% *}: $(SLURM_CONF="$DIR/etc/slurm.conf" sinfo -h -n "$node" -o %E); check $DIR/nodes/$node/etc/gres.conf (one kept from an earlier run? delete it)"
            fi
            ;;
        esac
        sleep 0.2
    done
    die "node $node not idle with $want after $3 s (sinfo: '${line:-}'); see $DIR/log/slurmd-$node.log"
}

# ---- Accounting: MariaDB and slurmdbd (DYNMIG_ACCOUNTING=1, the default) ----
# MariaDB runs with its own datadir under $DIR/mysql, on a unix socket only
# (--skip-networking), as root (SlurmUser=root; root logs in by unix_socket auth, no password).
# slurmdbd finds the socket through MYSQL_UNIX_PORT (MariaDB's client library reads it).
# The datadir is a copy of a template that mariadb-install-db made once per MariaDB version
# and cluster directory ($DIR/mysql/template, ~4 s), so every up starts on an empty database.
MYSQL_OPTS=(--no-defaults --skip-networking --skip-name-resolve --user=root
    --innodb-log-file-size=8M --innodb-buffer-pool-size=32M --performance-schema=off
    --innodb-lock-wait-timeout=900 --loose-innodb-snapshot-isolation=OFF)

accounting_on() { [ "${DYNMIG_ACCOUNTING:-1}" != 0 ]; }

# start_mariadb: a fresh database from the template, mariadbd up and answering on its socket.
start_mariadb() {
    local m="$DIR/mysql" key i
    mkdir -p "$m"
    chmod 0700 "$m"
    key="v2 $(timeout 10 mariadbd --version 2>/dev/null)" || die "mariadbd --version failed (is mariadb-server installed?)"
    if [ ! -f "$m/template/KEY" ] || [ "$(cat "$m/template/KEY")" != "$key" ]; then
        rm -rf "$m/template" "$m/template.tmp"
        mkdir -p "$m/template.tmp"
        timeout 60 mariadb-install-db "${MYSQL_OPTS[@]}" --datadir="$m/template.tmp/data" \
            --auth-root-authentication-method=socket --skip-test-db </dev/null >"$DIR/log/mariadb-install-db.log" 2>&1 ||
            die "mariadb-install-db failed: see $DIR/log/mariadb-install-db.log"
        # slurmdbd's database exists from the start: slurmdbd 24.11 and 26.05 with MariaDB
        # 11.8's client library fail the first query after creating it themselves (they reuse
        # the connection handle of the failed connect: "5027 Number of columns in result (=1)
        # set execeeds maxmimum allowed number of columns (=0)", then fatal). A database is a
        # directory to MariaDB.
        mkdir -m 0700 "$m/template.tmp/data/slurm_acct_db"
        echo "$key" >"$m/template.tmp/KEY"
        mv "$m/template.tmp" "$m/template"
    fi
    rm -rf "$m/data" "$m/mysqld.sock" "$m/mariadbd.pid"
    cp -a "$m/template/data" "$m/data"
    setsid mariadbd "${MYSQL_OPTS[@]}" --datadir="$m/data" --socket="$m/mysqld.sock" \
        --pid-file="$m/mariadbd.pid" --log-error="$DIR/log/mariadbd.log" </dev/null >/dev/null 2>&1 9>&- &
    for i in $(seq 150); do
        if [ -S "$m/mysqld.sock" ] && pid_alive "$m/mariadbd.pid" mariadbd; then return 0; fi
        sleep 0.1
    done
    die "mariadbd not ready after 15 s: see $DIR/log/mariadbd.log"
}

# start_slurmdbd: slurmdbd (daemonizes) on its slurmdbd.conf (next to slurm.conf, found through
# SLURM_CONF), then the cluster and the account "dynmig" in the database.
start_slurmdbd() {
    local deadline=$(($(date +%s) + 15))
    SLURM_CONF="$DIR/etc/slurm.conf" MYSQL_UNIX_PORT="$DIR/mysql/mysqld.sock" slurmdbd 9>&- ||
        die "slurmdbd failed to start: see $DIR/log/slurmdbd.log"
    while [ "$(date +%s)" -lt "$deadline" ]; do
        if pid_alive "$DIR/run/slurmdbd.pid" slurmdbd &&
            SLURM_CONF="$DIR/etc/slurm.conf" timeout 5 sacctmgr -n -P show cluster >/dev/null 2>&1; then
            SLURM_CONF="$DIR/etc/slurm.conf" timeout 20 sacctmgr -i -Q add cluster dynmig >/dev/null &&
                SLURM_CONF="$DIR/etc/slurm.conf" timeout 20 sacctmgr -i -Q add account dynmig \
                    cluster=dynmig description=dynmig-tests organization=dynmig >/dev/null ||
                die "sacctmgr could not add the cluster and account: see $DIR/log/slurmdbd.log"
            return 0
        fi
        sleep 0.1
    done
    die "slurmdbd does not answer after 15 s: see $DIR/log/slurmdbd.log"
}

start_accounting() {
    accounting_on || return 0
    start_mariadb
    start_slurmdbd
}

# accounting_user NAME [ADMINLEVEL]: NAME in the account dynmig with AdminLevel (None,
# Operator, Administrator); waits until slurmctld's cache has it (up to 10 s).
accounting_user() {
    local name=$1 level=${2:-None} deadline=$(($(date +%s) + 10))
    export SLURM_CONF="$DIR/etc/slurm.conf"
    if timeout 20 sacctmgr -n -P show user "$name" format=user | grep -qx "$name"; then
        timeout 20 sacctmgr -i -Q modify user "$name" set adminlevel="$level" >/dev/null || true
    else
        timeout 20 sacctmgr -i -Q add user "$name" account=dynmig adminlevel="$level" >/dev/null ||
            die "sacctmgr add user $name failed"
    fi
    while [ "$(date +%s)" -lt "$deadline" ]; do
        if timeout 5 scontrol show assoc_mgr users="$name" flags=users 2>/dev/null |
            grep -qi "UserName=$name(.*AdminLevel=$level"; then
            return 0
        fi
        sleep 0.2
    done
    die "slurmctld does not know user $name with AdminLevel=$level after 10 s"
}
