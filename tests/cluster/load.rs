//! A bounded run of the load benchmark (slurm/bench/load.sh): 200 jobs with mixed requests
//! from 4 parallel submitters, in blocks of 50 that switch slurmctld between
//! `JobSubmitPlugins=dynmig` and no plugin (`scontrol reconfigure`), with the controller, the
//! agents and the history server running. The script itself checks what must hold and exits
//! 1 otherwise: every sbatch returned a job id, every job is still known to slurmctld with the
//! GRES it should have (typed by dynmig in dynmig blocks), slurmctld answered after every
//! block. The timings are printed, not asserted (this machine's load moves them).

use crate::harness::bin_dir;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

#[test]
#[ignore = "needs root and Slurm: run slurm/test.sh"]
fn two_hundred_jobs_in_blocks_with_and_without_the_plugin_are_all_accepted_and_none_is_lost() {
    // The machine-wide lock of the cluster tests (Cluster::up takes the same one): held
    // here, so the script is told not to take it again.
    let lock = std::fs::File::create("/run/dynmig-cluster-tests.lock").expect("create the test lock");
    fs4::FileExt::lock(&lock).expect("take the test lock");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join(".run/test-cluster");
    let started = Instant::now();
    let out = Command::new("bash")
        .arg(root.join("slurm/bench/load.sh"))
        .arg("200")
        .env("LOAD_LOCKED", "1")
        .env("LOAD_BLOCK", "50")
        .env("LOAD_OUT", root.join(".run/test-load"))
        .env("DYNMIG_CLUSTER_DIR", &dir)
        .env("DYNMIG_BIN_DIR", bin_dir())
        .output()
        .expect("run slurm/bench/load.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    println!("load.sh: {:.0} s", started.elapsed().as_secs_f64());
    assert!(
        out.status.success(),
        "load.sh failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("submitted 200, accepted 200, refused 0"), "{stdout}");
    assert!(
        stdout.contains("accepted and not known to slurmctld afterwards (lost): 0"),
        "{stdout}"
    );
    drop(lock);
}
