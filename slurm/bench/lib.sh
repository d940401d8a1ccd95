# Shared by the submit benchmarks (slurm/bench/submit_cost.sh, slurm/bench/load.sh): sourced.

# rpc_submit_usec: reads slurmctld log lines, prints "JOBID USEC" for each submit RPC,
# from slurmctld's own timing of it ("_slurm_rpc_submit_batch_job: JobId=.. InitPrio=..
# usec=N", logged at info level on 22.05 to 26.05). The time covers the whole RPC, the
# job_submit plugins included.
rpc_submit_usec() {
	sed -n 's/.*_slurm_rpc_submit_batch_job: JobId=\([0-9]*\) .*usec=\([0-9]*\).*/\1 \2/p'
}

# sdiag_submit: "COUNT AVE_USEC TOTAL_USEC" of REQUEST_SUBMIT_BATCH_JOB since the last
# `sdiag -r` (or slurmctld's start); "0 0 0" when none was counted.
sdiag_submit() {
	sdiag 2>/dev/null | sed -n 's/.*REQUEST_SUBMIT_BATCH_JOB .*count:\([0-9]*\) *ave_time:\([0-9]*\) *total_time:\([0-9]*\).*/\1 \2 \3/p' |
		head -1 | grep . || echo "0 0 0"
}

# copy_binaries SRC BIN: the binaries a benchmark's cluster runs, copied from SRC (a target
# folder) to BIN, so that other builds in this checkout cannot replace them mid-run: dynmig,
# 22.05's one-job reader beside it (dynmig-slurm-job, where SlurmCommands looks for it), the
# NVML stand-in the nodes run on (slurm/local-dynmig.sh installs it with this program), and
# the plugins (of DYNMIG_PLUGIN_DIR when set, a release's, then pointed at the copy). Exports
# DYNMIG_BIN_DIR=BIN.
copy_binaries() {
	local src=$1 bin=$2 f
	rm -rf "$bin"
	mkdir -p "$bin"
	cp "$src/dynmig" "$bin/"
	for f in dynmig-slurm-job nvml-standin libnvml_standin.so; do
		[ ! -e "$src/$f" ] || cp "$src/$f" "$bin/"
	done
	if [ -z "${DYNMIG_PLUGIN_DIR:-}" ]; then
		cp "$src/libjob_submit_dynmig.so" "$src/libspank_dynmig.so" "$bin/"
	else
		mkdir -p "$bin/plugins"
		cp "$DYNMIG_PLUGIN_DIR"/* "$bin/plugins/"
		export DYNMIG_PLUGIN_DIR=$bin/plugins
	fi
	export DYNMIG_BIN_DIR=$bin
}
