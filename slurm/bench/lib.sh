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
